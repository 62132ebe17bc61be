//! docs/install.md, run: every `sh` block of the guide, section by section
//! in the order the guide gives, with bash against a local tier 2 control
//! plane; each `text` block after a command block must appear in that
//! block's output. The guide's own comments `<!-- install-test: … -->` say
//! where the test stands in for what the local control plane lacks:
//!
//! - `pods`: run the chart's Deployments' containers from the pushed images
//!   and join the webhook's Service to them (`koord_queue_tests::pods`: no
//!   kubelet and no Service network here; the API server reaches Services
//!   through the test's CONNECT proxy, `--egress-selector-config-file`);
//! - `pods-gone`: stop them (the Deployments were deleted);
//! - `instead cert-manager …`: the next block is not run; cert-manager's
//!   CRDs, controller and cainjector come from the cache (no download);
//! - `section N`: run section N again (the guide says "as in section N").
//!
//! A `sh settings` block sets the reader's variables; the test gives each
//! one its local value, and fails on a variable it does not know, so the
//! guide cannot grow a setting the test ignores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use koord_queue_tests::cert_manager::{self, CertManager};
use koord_queue_tests::pods::{self, Pods, ServiceNetwork};
use koord_queue_tests::process::{Process, free_port};
use koord_queue_tests::tools::{self, Tool};
use koord_queue_tests::{ControlPlane, Nodes, Tier};

const RELEASE: &str = "koord-queue";
const NS: &str = "koord-queue";

#[derive(Debug, Clone, PartialEq)]
enum Item {
    /// A fenced block: its info string and body.
    Block { info: String, body: String },
    /// `<!-- install-test: … -->`.
    Marker(String),
}

#[derive(Debug)]
struct Section {
    title: String,
    items: Vec<Item>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The guide's `## ` sections with their fenced blocks and markers.
fn parse(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(title) = line.strip_prefix("## ") {
            sections.push(Section {
                title: title.trim().to_string(),
                items: Vec::new(),
            });
        } else if let Some(info) = line.strip_prefix("```") {
            let mut body = String::new();
            for l in lines.by_ref() {
                if l.starts_with("```") {
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            if let Some(s) = sections.last_mut() {
                s.items.push(Item::Block {
                    info: info.trim().to_string(),
                    body,
                });
            }
        } else if let Some(marker) = line
            .trim()
            .strip_prefix("<!-- install-test:")
            .and_then(|m| m.strip_suffix("-->"))
            && let Some(s) = sections.last_mut()
        {
            s.items.push(Item::Marker(marker.trim().to_string()));
        }
    }
    sections
}

/// What the guide's commands run against, and what stands in for the rest.
struct Context<'a> {
    cp: &'a ControlPlane,
    env: Vec<(String, String)>,
    registry: SocketAddr,
    network: ServiceNetwork,
    pods: Option<Pods>,
    cert_manager: Option<CertManager>,
    log: Vec<String>,
}

impl Context<'_> {
    /// Runs `body` with bash in the repository; its stdout.
    async fn sh(&mut self, section: &str, body: &str) -> String {
        println!("── {section}\n{body}");
        let mut command = tokio::process::Command::new("bash");
        command
            .arg("-c")
            .arg(format!("set -euo pipefail\n{body}"))
            .current_dir(root())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(30 * 60), command.output())
            .await
            .expect("a block of the guide took over 30 minutes")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        print!("{stdout}");
        if !output.status.success() {
            let pods = self
                .pods
                .as_ref()
                .map(|p| {
                    p.processes
                        .values()
                        .map(|p| format!("--- {}\n{}", p.name(), p.log_tail(20)))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            panic!(
                "section {section:?}: the block failed ({}):\n{body}\nstdout:\n{stdout}\nstderr:\n{stderr}\n{pods}",
                output.status
            );
        }
        stdout
    }

    /// The local value of each variable of a settings block.
    fn settings(&mut self, body: &str) {
        for line in body.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let name = line
                .strip_prefix("export ")
                .and_then(|l| l.split_once('='))
                .map(|(n, _)| n)
                .unwrap_or_else(|| panic!("a settings line is not `export NAME=value`: {line}"));
            let value = match name {
                "REGISTRY" => format!("{}/platform", self.registry),
                "TLS_VERIFY" => "false".into(),
                other => panic!("the guide sets {other}, which the test does not know"),
            };
            self.env.push((name.to_string(), value));
        }
    }

    async fn marker(&mut self, sections: &[Section], marker: &str, depth: usize) {
        self.log.push(marker.to_string());
        match marker.split_whitespace().next() {
            Some("pods") if marker == "pods" => {
                let pods = pods::run_release(self.cp, NS, RELEASE, self.registry, &self.network)
                    .await
                    .unwrap_or_else(|e| panic!("running the pods: {e:#}"));
                self.pods = Some(pods);
            }
            Some("pods-gone") => {
                if let Some(p) = self.pods.take() {
                    p.stop();
                }
            }
            Some("instead") => {
                assert!(
                    marker.starts_with("instead cert-manager"),
                    "unknown stand-in: {marker}"
                );
                let client = self.cp.client().await.unwrap();
                cert_manager::apply_crds(&client).await.unwrap();
                self.cert_manager = Some(CertManager::start(self.cp, "kube-system").unwrap());
            }
            Some("section") => {
                let n = marker.trim_start_matches("section").trim();
                let section = sections
                    .iter()
                    .find(|s| s.title.starts_with(&format!("{n}.")))
                    .unwrap_or_else(|| panic!("no section {n}"));
                Box::pin(self.run(sections, section, depth + 1)).await;
            }
            _ => panic!("unknown install-test marker: {marker}"),
        }
    }

    async fn run(&mut self, sections: &[Section], section: &Section, depth: usize) {
        assert!(depth < 3, "sections refer to each other in a loop");
        let mut skip_next = false;
        let mut last_output: Option<String> = None;
        for item in &section.items {
            match item {
                Item::Marker(m) => {
                    skip_next = m.starts_with("instead");
                    Box::pin(self.marker(sections, m, depth)).await;
                }
                Item::Block { info, body } if info == "sh settings" => self.settings(body),
                Item::Block { info, body } if info == "sh" => {
                    if std::mem::take(&mut skip_next) {
                        println!("── {} (not run: a stand-in does it)\n{body}", section.title);
                        last_output = None;
                        continue;
                    }
                    last_output = Some(self.sh(&section.title, body).await);
                }
                Item::Block { info, body } if info == "text" => {
                    let output = last_output
                        .as_deref()
                        .unwrap_or_else(|| panic!("a text block without a command before it"));
                    for want in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
                        assert!(
                            output.contains(want),
                            "section {:?}: {want:?} not in the output:\n{output}",
                            section.title
                        );
                    }
                }
                Item::Block { info, .. } if info == "yaml" || info.is_empty() => {}
                Item::Block { info, .. } => panic!("a block of unknown kind {info:?}"),
            }
        }
    }
}

#[test]
fn the_guide_parses_into_its_sections() {
    let text = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    let sections = parse(&text);
    let titles: Vec<&str> = sections.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "1. Build and push the images",
            "2. Install without cert-manager",
            "3. Hold and release a job",
            "4. Uninstall",
            "5. Install with cert-manager",
            "6. Upgrade",
        ]
    );
    let commands = sections
        .iter()
        .flat_map(|s| &s.items)
        .filter(|i| matches!(i, Item::Block { info, .. } if info == "sh"))
        .count();
    assert!(commands >= 9, "{commands} command blocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_of_the_install_guide_works() {
    koord_queue_tests::init_tracing();
    let text = std::fs::read_to_string(root().join("docs/install.md")).unwrap();
    let sections = parse(&text);
    // The Service network: the API server reaches Services through it.
    let egress = tempfile::tempdir().unwrap();
    let network = ServiceNetwork::start(&egress.path().join("services.sock"))
        .await
        .unwrap();
    let egress_file = egress.path().join("egress.yaml");
    std::fs::write(&egress_file, network.egress_config()).unwrap();
    let cp = ControlPlane::start_with(
        Tier::Two(Nodes::default()),
        &[(
            "egress-selector-config-file",
            egress_file.display().to_string(),
        )],
    )
    .await
    .unwrap();

    // The reader's registry: an in-memory one on loopback.
    let port = free_port().unwrap();
    let _registry = Process::start(
        "oci-registry",
        &tools::path(Tool::OciRegistry).unwrap(),
        &[format!("-port={port}")],
        cp.dir().join("oci-registry.log"),
    )
    .unwrap();
    let registry = SocketAddr::from(([127, 0, 0, 1], port));
    koord_queue_tests::fixtures::eventually(Duration::from_secs(10), || async move {
        Ok(std::net::TcpStream::connect(registry).is_ok())
    })
    .await
    .unwrap();

    let path = format!(
        "{}:{}",
        tools::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let helm_home = cp.dir().join("guide-helm");
    let env = vec![
        ("PATH".to_string(), path),
        (
            "KUBECONFIG".to_string(),
            cp.kubeconfig().display().to_string(),
        ),
        (
            "HELM_CACHE_HOME".to_string(),
            helm_home.join("cache").display().to_string(),
        ),
        (
            "HELM_CONFIG_HOME".to_string(),
            helm_home.join("config").display().to_string(),
        ),
        (
            "HELM_DATA_HOME".to_string(),
            helm_home.join("data").display().to_string(),
        ),
    ];
    let mut ctx = Context {
        cp: &cp,
        env,
        registry,
        network,
        pods: None,
        cert_manager: None,
        log: Vec::new(),
    };
    let started = std::time::Instant::now();
    for section in &sections {
        let at = started.elapsed();
        ctx.run(&sections, section, 0).await;
        println!(
            "── {}: {:.0?}",
            section.title,
            started.elapsed().saturating_sub(at)
        );
    }
    assert_eq!(
        ctx.log,
        [
            "pods",
            "pods-gone",
            "instead cert-manager (no download: cert-manager v1.11.5's CRDs, controller and cainjector from the test's cache)",
            "pods",
            "section 3",
            "section 4",
            "pods-gone",
        ],
        "the stand-ins the guide asks for"
    );
    if let Some(mut cm) = ctx.cert_manager.take() {
        cm.check_alive().unwrap();
    }
}
