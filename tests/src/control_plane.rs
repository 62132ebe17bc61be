//! A real local Kubernetes control plane on loopback.
//!
//! Tier 1: etcd + kube-apiserver. Tier 2 adds kube-controller-manager,
//! kube-scheduler and kwok managing fake nodes, so Jobs create pods that are
//! bound, "run" and complete by themselves. Everything listens on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, PostParams};
use tokio::sync::Mutex;

use crate::kubeconfig::{self, Credentials};
use crate::pki::{ADMIN_USER, Pki};
use crate::process::{Process, free_port};
use crate::tools::{self, Tool};

/// Fake nodes of a tier 2 control plane.
#[derive(Clone, Debug)]
pub struct Nodes {
    /// How many nodes.
    pub count: usize,
    /// Allocatable CPU of each node (a Kubernetes quantity, e.g. `"8"`).
    pub cpu: String,
    /// Allocatable memory of each node (e.g. `"32Gi"`).
    pub memory: String,
    /// Pods per node.
    pub pods: u32,
}

impl Default for Nodes {
    fn default() -> Self {
        Self {
            count: 3,
            cpu: "32".into(),
            memory: "256Gi".into(),
            pods: 110,
        }
    }
}

/// Which components to start.
#[derive(Clone, Debug)]
pub enum Tier {
    /// etcd + kube-apiserver.
    One,
    /// Tier 1 + kube-controller-manager, kube-scheduler and kwok with fake nodes.
    Two(Nodes),
}

/// A running control plane; every process and the temporary directory are
/// removed when it is dropped.
#[derive(Debug)]
pub struct ControlPlane {
    server: String,
    etcd_url: String,
    /// kube-apiserver's program and arguments, to start it again.
    apiserver: (PathBuf, Vec<String>),
    /// How many times kube-apiserver was restarted (names its next log).
    apiserver_restarts: std::sync::atomic::AtomicU32,
    kubeconfig: PathBuf,
    pki: Pki,
    nodes: Vec<String>,
    // Started in order; stopped in reverse order on drop.
    processes: Mutex<Vec<Process>>,
    pids: Vec<u32>,
    // Last, so the directory goes after the processes that write into it.
    dir: tempfile::TempDir,
}

/// kwok configuration: node and pod lifecycle stages of the fake nodes.
const KWOK_STAGES: &str = include_str!("kwok-stages.yaml");

/// Pod annotation: how long a Job's pod "runs" on a kwok node before it
/// succeeds (a Go duration such as `"30s"`; default: at once).
pub const RUN_FOR_ANNOTATION: &str = "koord-queue.test/run-for";

/// Label set on the harness's fake nodes.
pub const FAKE_NODE_LABEL: &str = "koord-queue.test/fake-node";

fn root_dir() -> PathBuf {
    std::env::temp_dir().join("koord-queue-tests")
}

/// Removes directories of control planes whose test process is gone (a
/// control plane kept in a static is never dropped; its processes die with
/// the test binary, its directory is swept here by the next run).
fn sweep_stale_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("cp-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !crate::process::is_running(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn args(list: &[(&str, String)]) -> Vec<String> {
    list.iter().map(|(k, v)| format!("--{k}={v}")).collect()
}

impl ControlPlane {
    /// Starts a control plane of the given tier and waits until it serves.
    pub async fn start(tier: Tier) -> Result<Self> {
        Self::start_with(tier, &[]).await
    }

    /// [`ControlPlane::start`] with more kube-apiserver flags (`name`,
    /// `value`), e.g. an `admission-control-config-file`.
    pub async fn start_with(tier: Tier, apiserver_flags: &[(&str, String)]) -> Result<Self> {
        // Ports are picked free and then bound by the child processes: another
        // process can take one in between. Such a start is retried on new ports.
        let mut attempt = 1;
        loop {
            match Self::start_once(tier.clone(), apiserver_flags).await {
                Err(error)
                    if attempt < 3 && format!("{error:#}").contains("address already in use") =>
                {
                    tracing::warn!(attempt, %error, "a port was taken meanwhile; starting again");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(tier: Tier, apiserver_flags: &[(&str, String)]) -> Result<Self> {
        let started = Instant::now();
        let root = root_dir();
        std::fs::create_dir_all(&root)?;
        sweep_stale_dirs(&root);
        let dir = tempfile::Builder::new()
            .prefix(&format!("cp-{}-", std::process::id()))
            .tempdir_in(&root)?;
        let pki = Pki::create(dir.path())?;
        let mut processes = Vec::new();

        // etcd
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        processes.push(Process::start(
            "etcd",
            &tools::path(Tool::Etcd)?,
            &args(&[
                ("name", "default".into()),
                ("data-dir", dir.path().join("etcd").display().to_string()),
                ("listen-client-urls", etcd_url.clone()),
                ("advertise-client-urls", etcd_url.clone()),
                ("listen-peer-urls", peer_url.clone()),
                ("initial-advertise-peer-urls", peer_url.clone()),
                ("initial-cluster", format!("default={peer_url}")),
                // Test data is thrown away: skip fsync, keep the log small.
                ("unsafe-no-fsync", "true".into()),
                ("snapshot-count", "10000".into()),
                ("quota-backend-bytes", (8u64 << 30).to_string()),
                ("log-level", "warn".into()),
            ]),
            dir.path().join("etcd.log"),
        )?);

        // kube-apiserver
        let api_port = free_port()?;
        let server = format!("https://127.0.0.1:{api_port}");
        let sa_key = pki.service_account_key.display().to_string();
        let extra: Vec<String> = apiserver_flags
            .iter()
            .map(|(k, v)| format!("--{k}={v}"))
            .collect();
        let apiserver_program = tools::path(Tool::KubeApiserver)?;
        let apiserver_args = [
            args(&[
                ("etcd-servers", etcd_url.clone()),
                ("bind-address", "127.0.0.1".into()),
                ("advertise-address", "127.0.0.1".into()),
                ("secure-port", api_port.to_string()),
                (
                    "cert-dir",
                    dir.path().join("apiserver-certs").display().to_string(),
                ),
                ("tls-cert-file", pki.apiserver_cert.display().to_string()),
                (
                    "tls-private-key-file",
                    pki.apiserver_key.display().to_string(),
                ),
                ("client-ca-file", pki.ca_file.display().to_string()),
                // The aggregation layer (the visibility API is an APIService).
                (
                    "requestheader-client-ca-file",
                    pki.front_proxy_ca_file.display().to_string(),
                ),
                (
                    "requestheader-allowed-names",
                    crate::pki::FRONT_PROXY_CLIENT.into(),
                ),
                ("requestheader-username-headers", "X-Remote-User".into()),
                ("requestheader-group-headers", "X-Remote-Group".into()),
                (
                    "requestheader-extra-headers-prefix",
                    "X-Remote-Extra-".into(),
                ),
                (
                    "proxy-client-cert-file",
                    pki.front_proxy_cert.display().to_string(),
                ),
                (
                    "proxy-client-key-file",
                    pki.front_proxy_key.display().to_string(),
                ),
                (
                    "service-account-issuer",
                    "https://kubernetes.default.svc.cluster.local".into(),
                ),
                (
                    "service-account-key-file",
                    pki.service_account_pub.display().to_string(),
                ),
                ("service-account-signing-key-file", sa_key.clone()),
                ("service-cluster-ip-range", "10.0.0.0/24".into()),
                ("authorization-mode", "Node,RBAC".into()),
                ("allow-privileged", "true".into()),
                // `/debug/pprof` for admins: how the benchmark's API server
                // time is found (docs/performance.md); no cost until asked.
                ("profiling", "true".into()),
                ("enable-priority-and-fairness", "true".into()),
                ("max-requests-inflight", "800".into()),
                ("max-mutating-requests-inflight", "400".into()),
                ("v", "0".into()),
            ]),
            extra,
        ]
        .concat();
        processes.push(Process::start(
            "kube-apiserver",
            &apiserver_program,
            &apiserver_args,
            dir.path().join("kube-apiserver.log"),
        )?);

        let kubeconfig = dir.path().join("admin.kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig::render(
                &server,
                pki.ca.cert_pem(),
                ADMIN_USER,
                &Credentials::Certificate {
                    cert_pem: pki.admin.cert_pem.clone(),
                    key_pem: pki.admin.key_pem.clone(),
                },
            ),
        )?;

        let mut cp = Self {
            server,
            etcd_url,
            apiserver: (apiserver_program, apiserver_args),
            apiserver_restarts: Default::default(),
            kubeconfig,
            pki,
            nodes: Vec::new(),
            pids: Vec::new(),
            processes: Mutex::new(Vec::new()),
            dir,
        };
        cp.pids = processes.iter().map(Process::pid).collect();
        *cp.processes.get_mut() = processes;
        cp.wait_ready(Duration::from_secs(90)).await?;
        tracing::info!(elapsed = ?started.elapsed(), server = %cp.server, "tier 1 control plane ready");

        if let Tier::Two(nodes) = tier {
            cp.start_tier_two(&nodes).await?;
            tracing::info!(elapsed = ?started.elapsed(), "tier 2 control plane ready");
        }
        Ok(cp)
    }

    async fn start_tier_two(&mut self, nodes: &Nodes) -> Result<()> {
        let kubeconfig = self.kubeconfig.display().to_string();
        let dir = self.dir.path().to_path_buf();
        let sa_key = self.pki.service_account_key.display().to_string();
        let ca = self.pki.ca_file.display().to_string();
        let kcm = Process::start(
            "kube-controller-manager",
            &tools::path(Tool::KubeControllerManager)?,
            &args(&[
                ("kubeconfig", kubeconfig.clone()),
                ("bind-address", "127.0.0.1".into()),
                ("secure-port", "0".into()),
                ("leader-elect", "false".into()),
                ("use-service-account-credentials", "false".into()),
                ("service-account-private-key-file", sa_key),
                ("root-ca-file", ca),
                (
                    "controllers",
                    "*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle".into(),
                ),
                ("kube-api-qps", "500".into()),
                ("kube-api-burst", "1000".into()),
                ("concurrent-job-syncs", "20".into()),
                ("concurrent-gc-syncs", "20".into()),
                ("profiling", "false".into()),
            ]),
            dir.join("kube-controller-manager.log"),
        )?;
        let scheduler = Process::start(
            "kube-scheduler",
            &tools::path(Tool::KubeScheduler)?,
            &args(&[
                ("kubeconfig", kubeconfig.clone()),
                ("bind-address", "127.0.0.1".into()),
                ("secure-port", "0".into()),
                ("leader-elect", "false".into()),
                ("profiling", "false".into()),
            ]),
            dir.join("kube-scheduler.log"),
        )?;
        let kwok_config = dir.join("kwok.yaml");
        std::fs::write(&kwok_config, KWOK_STAGES)?;
        let kwok_port = free_port()?;
        let kwok = Process::start(
            "kwok",
            &tools::path(Tool::Kwok)?,
            &args(&[
                ("kubeconfig", kubeconfig),
                ("config", kwok_config.display().to_string()),
                (
                    "manage-nodes-with-label-selector",
                    format!("{FAKE_NODE_LABEL}=true"),
                ),
                ("server-address", format!("127.0.0.1:{kwok_port}")),
                ("node-ip", "127.0.0.1".into()),
                ("cidr", "10.244.0.0/16".into()),
            ]),
            dir.join("kwok.log"),
        )?;
        {
            let processes = self.processes.get_mut();
            for p in [kcm, scheduler, kwok] {
                self.pids.push(p.pid());
                processes.push(p);
            }
        }

        let client = self.client().await?;
        let node_api: Api<Node> = Api::all(client.clone());
        for i in 0..nodes.count {
            let name = format!("kwok-node-{i}");
            let node: Node = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        FAKE_NODE_LABEL: "true",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                    "annotations": { "kwok.x-k8s.io/node": "fake" },
                },
                "status": {
                    "allocatable": { "cpu": nodes.cpu, "memory": nodes.memory, "pods": nodes.pods.to_string() },
                    "capacity": { "cpu": nodes.cpu, "memory": nodes.memory, "pods": nodes.pods.to_string() },
                },
            }))?;
            node_api.create(&PostParams::default(), &node).await?;
            self.nodes.push(name);
        }

        // Ready when every node reports Ready and the default ServiceAccount
        // exists (pods cannot be admitted before it).
        let deadline = Instant::now() + Duration::from_secs(90);
        let sa_api: Api<ServiceAccount> = Api::namespaced(client, "default");
        loop {
            self.check_alive().await?;
            let ready = node_api
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter(|n| crate::fixtures::node_is_ready(n))
                .count();
            let sa = sa_api.get_opt("default").await?.is_some();
            if ready >= nodes.count && sa {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "tier 2 not ready after 90s: {ready}/{} nodes ready, default service account: {sa}",
                    nodes.count
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let client = self.client().await?;
        loop {
            self.check_alive().await?;
            let request = http::Request::get("/readyz").body(Vec::new())?;
            let last_error = match client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => body,
                Err(error) => error.to_string(),
            };
            if Instant::now() > deadline {
                bail!("kube-apiserver not ready after {timeout:?}: {last_error}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An error naming the process (and its last log lines) if one has exited.
    pub async fn check_alive(&self) -> Result<()> {
        for process in self.processes.lock().await.iter_mut() {
            process.check_alive()?;
        }
        Ok(())
    }

    /// URL of the API server.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Admin kubeconfig (user in `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The cluster's PKI (to mint client certificates for other identities).
    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// Names of the fake nodes (tier 2).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Process ids of every component.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// The working directory (logs, certificates, kubeconfigs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A new admin client. Create one per test: a client is tied to the
    /// async runtime it first runs on.
    pub async fn client(&self) -> Result<kube::Client> {
        kubeconfig::client_from_file(&self.kubeconfig).await
    }

    /// Writes a kubeconfig for `user` with `credentials` and returns its path.
    pub fn write_kubeconfig(
        &self,
        name: &str,
        user: &str,
        credentials: &Credentials,
    ) -> Result<PathBuf> {
        self.write_kubeconfig_via(name, &self.server, user, credentials)
    }

    /// A client authenticated by a client certificate for `user` in `groups`.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<kube::Client> {
        let cert = self.pki.client_cert(user, groups)?;
        let safe: String = user
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = self.write_kubeconfig(
            &format!("user-{safe}"),
            user,
            &Credentials::Certificate {
                cert_pem: cert.cert_pem,
                key_pem: cert.key_pem,
            },
        )?;
        kubeconfig::client_from_file(&path).await
    }

    /// Runs kubectl against this control plane as admin.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        crate::fixtures::run_tool(Tool::Kubectl, &self.kubeconfig, args).await
    }

    /// Kills kube-apiserver (SIGKILL: no graceful shutdown, every watch and
    /// request cut mid-way) and starts it again on the same port and etcd;
    /// returns once it serves. Its watch cache starts empty: clients whose
    /// watch was behind get 410 Gone and relist.
    pub async fn restart_apiserver(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let n = self.apiserver_restarts.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut processes = self.processes.lock().await;
            let at = processes
                .iter()
                .position(|p| p.name() == "kube-apiserver")
                .context("no kube-apiserver process")?;
            processes[at].kill();
            let (program, args) = &self.apiserver;
            // The port is free once the process is gone; bind can still
            // race with a kernel that has not released it: retry briefly.
            let deadline = Instant::now() + Duration::from_secs(10);
            let log = self.dir.path().join(format!("kube-apiserver.{n}.log"));
            loop {
                let mut p = Process::start("kube-apiserver", program, args, log.clone())?;
                tokio::time::sleep(Duration::from_millis(300)).await;
                match p.check_alive() {
                    Ok(()) => {
                        processes[at] = p;
                        break;
                    }
                    Err(error) if Instant::now() < deadline => {
                        tracing::warn!(%error, "kube-apiserver did not start again; retrying");
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        self.wait_ready(Duration::from_secs(90)).await
    }

    /// Compacts etcd's history up to its current revision (as etcd's
    /// auto-compaction would): a watch that resumes from an older revision
    /// gets 410 Gone. Returns the revision compacted to.
    pub async fn compact_etcd(&self) -> Result<i64> {
        let range = etcd_post(
            &self.etcd_url,
            "/v3/kv/range",
            r#"{"key":"Lw==","limit":1}"#,
        )
        .await?;
        let revision: i64 = range["header"]["revision"]
            .as_str()
            .context("etcd range: no header.revision")?
            .parse()?;
        etcd_post(
            &self.etcd_url,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )
        .await?;
        Ok(revision)
    }

    /// A kubeconfig like [`ControlPlane::write_kubeconfig`]'s that reaches
    /// the API server at `server` (say, through a proxy).
    pub fn write_kubeconfig_via(
        &self,
        name: &str,
        server: &str,
        user: &str,
        credentials: &Credentials,
    ) -> Result<PathBuf> {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig::render(server, self.pki.ca.cert_pem(), user, credentials),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Stops every process (reverse start order) now.
    pub async fn stop(&self) {
        let mut processes = self.processes.lock().await;
        while let Some(mut p) = processes.pop() {
            p.kill();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let processes = self.processes.get_mut();
        while let Some(mut p) = processes.pop() {
            p.kill();
        }
    }
}

/// One JSON request to etcd's HTTP gateway (plain HTTP on loopback).
async fn etcd_post(base: &str, path: &str, body: &str) -> Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let (head, payload) = text
        .split_once("\r\n\r\n")
        .context("etcd: malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("etcd {path}: {head}: {payload}");
    }
    // A chunked body: take the JSON object inside it.
    let start = payload.find('{').context("etcd: no JSON in the response")?;
    let end = payload
        .rfind('}')
        .context("etcd: no JSON in the response")?;
    Ok(serde_json::from_str(&payload[start..=end])?)
}
