//! The webhook's limits with the chart's settings (issue 37, docs/security.md
//! "Limits of the webhook"):
//! - the real `koord-queue-webhook` binary, run as a process with the flags
//!   of the chart's Deployment, answers a flood of concurrent reviews of
//!   ~1.5 MB objects (and of updates with their ~1.5 MB old copies) — each
//!   decided, or refused 429 with "retry", none dropped — and its peak
//!   resident memory stays under the chart's memory limit;
//! - one namespace holding its share of the unit backlog does not make
//!   another namespace's create fail, with the share set by its flag;
//! - the chart passes both settings from its values, and the byte budget ×
//!   the parse overhead stays well under the memory limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use koord_queue_api::keys;
use koord_queue_tests::install::{self, chart_dir, parse_manifest};
use koord_queue_tests::process::{Process, free_port};
use koord_queue_tests::{ControlPlane, e2e, fixtures, metrics, proc_stats, shared, webhook};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

/// The chart's webhook container, rendered with the default values.
async fn chart_webhook_container() -> Value {
    let home = tempfile::tempdir().unwrap();
    let chart = chart_dir();
    let (ok, out) = install::helm(
        home.path(),
        None,
        &[
            "template",
            "koord-queue",
            chart.to_str().unwrap(),
            "-n",
            "koord-queue",
        ],
    )
    .await
    .unwrap();
    assert!(ok, "helm template failed:\n{out}");
    let docs = parse_manifest(&out).unwrap();
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "koord-queue-webhook")
        .expect("the webhook Deployment");
    deployment["spec"]["template"]["spec"]["containers"][0].clone()
}

fn args_of(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Bytes of a Kubernetes memory quantity (`256Mi`, `1Gi`, `500M`, `1000`).
fn quantity_bytes(quantity: &str) -> u64 {
    let units: [(&str, u64); 6] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return number.parse::<u64>().unwrap() * factor;
        }
    }
    quantity.parse().unwrap()
}

/// The chart's memory limit of the webhook container, in bytes.
fn memory_limit(container: &Value) -> u64 {
    let limit = container["resources"]["limits"]["memory"]
        .as_str()
        .expect("the chart sets a memory limit for the webhook");
    quantity_bytes(limit)
}

/// The chart's values file.
fn chart_values() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

#[tokio::test]
async fn the_chart_passes_both_limits_and_its_byte_budget_fits_its_memory_limit() {
    let container = chart_webhook_container().await;
    let values = chart_values();
    let flags = install::webhook_args(
        &args_of(&container),
        "127.0.0.1:0".parse().unwrap(),
        Path::new("/tls"),
    )
    .unwrap();
    assert_eq!(
        flags.max_review_bytes as u64,
        values["webhook"]["maxReviewBytes"].as_u64().unwrap()
    );
    assert_eq!(
        flags.unit_backlog_per_namespace.map(|n| n as u64),
        values["webhook"]["unitBacklogPerNamespace"].as_u64()
    );
    // The flags' own defaults are the chart's.
    let defaults = {
        use clap::Parser;
        koord_queue_webhook::Args::parse_from(["koord-queue-webhook"])
    };
    assert_eq!(flags.max_review_bytes, defaults.max_review_bytes);
    assert_eq!(
        flags.unit_backlog_per_namespace,
        Some(defaults.unit_backlog / 10),
        "the chart's share is the default: a tenth of the backlog"
    );
    // The arithmetic of docs/security.md: budget × overhead ≤ half the limit.
    let limit = memory_limit(&container);
    let bound = flags.max_review_bytes as u64 * koord_queue_webhook::PARSE_OVERHEAD as u64;
    assert!(
        bound <= limit / 2,
        "{} MiB x {} = {} MiB of reviews, over half the {} MiB limit",
        flags.max_review_bytes >> 20,
        koord_queue_webhook::PARSE_OVERHEAD,
        bound >> 20,
        limit >> 20
    );
    assert!(flags.max_review_bytes >= flags.max_body_bytes);
}

/// The `koord-queue-webhook` binary of this build profile, built by cargo
/// into this test binary's target directory (a no-op when up to date).
fn webhook_binary() -> Result<PathBuf> {
    // <target>/<profile>/deps/webhook_limits-<hash>
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("cannot find the profile directory")?;
    let target_dir = profile_dir
        .parent()
        .context("cannot find the target directory")?;
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "-q", "-p", "koord-queue-webhook"])
        .args(["--bin", "koord-queue-webhook", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    if release {
        command.arg("--release");
    }
    let status = command.status().context("running cargo")?;
    if !status.success() {
        bail!("cargo build of koord-queue-webhook failed ({status})");
    }
    Ok(profile_dir.join("koord-queue-webhook"))
}

/// The real webhook as a process, with the chart's flags (addresses on
/// loopback, the certificate from a directory).
struct WebhookProcess {
    process: Process,
    listen: SocketAddr,
    admin: SocketAddr,
}

async fn start_webhook_process(cp: &ControlPlane, chart_args: &[String]) -> WebhookProcess {
    let tls_dir = cp.dir().join("webhook-limits-tls");
    webhook::write_serving_cert(cp, &tls_dir).unwrap();
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let mut args: Vec<String> = chart_args
        .iter()
        .filter(|a| {
            !["--listen-addr=", "--admin-addr=", "--tls-dir="]
                .iter()
                .any(|p| a.starts_with(p))
        })
        .cloned()
        .collect();
    args.extend([
        format!("--listen-addr={listen}"),
        format!("--admin-addr={admin}"),
        format!("--tls-dir={}", tls_dir.display()),
    ]);
    let binary = tokio::task::spawn_blocking(webhook_binary)
        .await
        .unwrap()
        .unwrap();
    let mut process = Process::start_with_env(
        "koord-queue-webhook",
        &binary,
        &args,
        &[("KUBECONFIG", cp.kubeconfig().as_os_str())],
        cp.dir().join("webhook-limits.log"),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ready(admin).await {
        process.check_alive().unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "the webhook did not become ready:\n{}",
            process.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    WebhookProcess {
        process,
        listen,
        admin,
    }
}

async fn ready(admin: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(admin).await else {
        return false;
    };
    if stream
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response).await;
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

/// A kept-alive HTTPS/1.1 connection to the webhook that waits as long as
/// an answer may take (the harness's own client gives up after 10 s, which
/// a review that waits 8 s for its bytes on two busy cores can pass).
struct Client {
    stream: BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>,
}

impl Client {
    fn open(addr: SocketAddr, ca_pem: &str) -> Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let conn =
            rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("127.0.0.1")?)?;
        let sock = TcpStream::connect(addr)?;
        sock.set_read_timeout(Some(Duration::from_secs(120)))?;
        sock.set_nodelay(true)?;
        Ok(Self {
            stream: BufReader::new(rustls::StreamOwned::new(conn, sock)),
        })
    }

    /// POSTs `body` to `/mutate`: status, `Retry-After`, body. An error is
    /// a dropped connection or a malformed answer.
    fn post(&mut self, body: &[u8]) -> Result<(u16, Option<String>, String)> {
        let head = format!(
            "POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let writer = self.stream.get_mut();
        writer.write_all(head.as_bytes())?;
        writer.write_all(body)?;
        writer.flush()?;
        let mut status_line = String::new();
        if self.stream.read_line(&mut status_line)? == 0 {
            bail!("connection closed before the answer");
        }
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {status_line:?}"))?;
        let (mut length, mut retry_after) = (None, None);
        loop {
            let mut line = String::new();
            if self.stream.read_line(&mut line)? == 0 {
                bail!("connection closed in the headers");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse::<usize>().ok();
                } else if k.eq_ignore_ascii_case("retry-after") {
                    retry_after = Some(v.trim().to_string());
                }
            }
        }
        let mut body = vec![0; length.context("no content-length")?];
        self.stream.read_exact(&mut body)?;
        Ok((
            status,
            retry_after,
            String::from_utf8_lossy(&body).into_owned(),
        ))
    }
}

/// A Job of about `bytes` in `namespace` naming `quota`, shaped as large
/// objects are: a long annotation (a third) and thousands of env entries of
/// ~100 bytes (the rest).
fn large_job(name: &str, namespace: &str, quota: &str, bytes: usize) -> Value {
    let entry =
        |i: usize| json!({ "name": format!("SETTING_{i:06}"), "value": format!("{i:0>96}") });
    let entries = (bytes * 2 / 3) / 130;
    json!({ "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "namespace": namespace,
                "labels": { keys::QUOTA_NAME_LABEL: quota },
                "annotations": { "example.com/config": "c".repeat(bytes / 3) } },
            "spec": { "parallelism": 1, "template": { "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox",
                    "env": (0..entries).map(entry).collect::<Vec<_>>(),
                    "resources": { "requests": { "cpu": "1" } } }] } } } })
}

/// An AdmissionReview as the API server sends it: `object`, and `old` for
/// an UPDATE.
fn admission_review(uid: &str, operation: &str, object: &Value, old: Option<&Value>) -> Vec<u8> {
    json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": { "uid": uid,
                "kind": { "group": "batch", "version": "v1", "kind": "Job" },
                "resource": { "group": "batch", "version": "v1", "resource": "jobs" },
                "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
                "operation": operation,
                "userInfo": { "username": "alice", "groups": ["system:authenticated"] },
                "object": object, "oldObject": old, "dryRun": false } })
    .to_string()
    .into_bytes()
}

/// Connections posting at once, and reviews each posts in turn: enough
/// bytes offered at once (32 × 1.5–3 MB, ~1 GB once parsed) that without a
/// byte budget the process would pass the chart's limit several times.
const CONNECTIONS: usize = 96;
const REVIEWS_PER_CONNECTION: usize = 2;

#[tokio::test]
async fn the_webhook_answers_a_flood_of_large_reviews_within_the_charts_memory_limit() {
    let cp = shared::tier1().await.unwrap();
    let admin = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    e2e::create_quota_in(&admin, &ns, "large-q", "0", "100")
        .await
        .unwrap();
    let container = chart_webhook_container().await;
    let limit = memory_limit(&container);
    let running = start_webhook_process(cp, &args_of(&container)).await;
    let pid = running.process.pid();

    let object = large_job("large", &ns, "large-q", 1_500_000);
    let mut changed = object.clone();
    changed["metadata"]["labels"]["example.com/touched"] = json!("yes");
    let create = Arc::new(admission_review("create-1", "CREATE", &object, None));
    let update = Arc::new(admission_review(
        "update-1",
        "UPDATE",
        &changed,
        Some(&object),
    ));
    println!(
        "bodies: CREATE {} KiB, UPDATE {} KiB; {CONNECTIONS} connections x {REVIEWS_PER_CONNECTION} reviews",
        create.len() >> 10,
        update.len() >> 10
    );
    let rest_kib = proc_stats::status_kib(pid, "VmRSS").unwrap();

    // Resident memory sampled while the flood lasts (VmHWM is read too).
    let done = Arc::new(AtomicBool::new(false));
    let peak_sampled = Arc::new(AtomicU64::new(0));
    let sampler = std::thread::spawn({
        let (done, peak) = (done.clone(), peak_sampled.clone());
        move || {
            while !done.load(Ordering::Acquire) {
                if let Some(kib) = proc_stats::status_kib(pid, "VmRSS") {
                    peak.fetch_max(kib, Ordering::AcqRel);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    });

    let ca = cp.pki().ca.cert_pem().to_string();
    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let (create, update, ca, addr) =
                (create.clone(), update.clone(), ca.clone(), running.listen);
            std::thread::spawn(move || -> Result<Vec<(bool, u16, String)>> {
                let mut client = Client::open(addr, &ca)?;
                let mut answers = Vec::new();
                for r in 0..REVIEWS_PER_CONNECTION {
                    let is_update = (c + r) % 2 == 1;
                    let body = if is_update { &update } else { &create };
                    let (status, retry_after, text) = client
                        .post(body)
                        .with_context(|| format!("connection {c}, review {r}"))?;
                    if status == 429 {
                        assert_eq!(retry_after.as_deref(), Some("1"), "{text}");
                    }
                    answers.push((is_update, status, text));
                }
                Ok(answers)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for sender in senders {
        answers.extend(sender.join().unwrap().expect("every review is answered"));
    }
    done.store(true, Ordering::Release);
    sampler.join().unwrap();
    let peak_kib = proc_stats::status_kib(pid, "VmHWM").unwrap();
    let text = metrics::scrape(running.admin).await.unwrap();

    let mut decided = [0usize; 2];
    let mut shed = 0;
    for (is_update, status, body) in &answers {
        match status {
            200 => {
                let review: Value = serde_json::from_str(body).unwrap();
                let response = &review["response"];
                assert!(response["uid"].is_string(), "{body:.300}");
                if !is_update {
                    assert!(
                        response["allowed"] == true && response["patch"].is_string(),
                        "a CREATE is held: {body:.300}"
                    );
                }
                decided[usize::from(*is_update)] += 1;
            }
            429 => {
                assert!(body.contains("retry"), "{body}");
                shed += 1;
            }
            other => panic!("answered {other}: {body:.300}"),
        }
    }
    println!(
        "{} reviews: {} CREATEs and {} UPDATEs decided, {shed} answered 429 (retry); \
         reviews_shed_bytes {}, reviews_shed {}; RSS at rest {} MiB, peak {} MiB \
         (sampled {} MiB), chart limit {} MiB",
        answers.len(),
        decided[0],
        decided[1],
        metrics::sum_of(&text, "koord_queue_webhook_reviews_shed_bytes_total"),
        metrics::sum_of(&text, "koord_queue_webhook_reviews_shed_total"),
        rest_kib >> 10,
        peak_kib >> 10,
        peak_sampled.load(Ordering::Acquire) >> 10,
        limit >> 20
    );
    assert_eq!(answers.len(), CONNECTIONS * REVIEWS_PER_CONNECTION);
    assert!(
        decided[0] > 0 && decided[1] > 0,
        "reviews of both kinds were decided: {decided:?}"
    );
    assert!(
        peak_kib * 1024 < limit,
        "peak RSS {} MiB is over the chart's limit of {} MiB",
        peak_kib >> 10,
        limit >> 20
    );
    assert_eq!(
        metrics::sum_of(&text, "koord_queue_webhook_review_bytes_in_flight"),
        0.0,
        "every charge was given back"
    );
}

#[tokio::test]
async fn one_namespace_holding_its_backlog_share_does_not_refuse_another_namespaces_create() {
    let cp = shared::tier1().await.unwrap();
    let admin = cp.client().await.unwrap();
    // The share set by its flag; forged CREATEs of jobs that never appear
    // stay in the backlog for --job-wait.
    let hook = webhook::start_and_register_with(cp, |args| {
        args.unit_backlog_per_namespace = Some(2);
        args.job_wait = Duration::from_secs(60);
    })
    .await
    .unwrap();
    let (greedy, other) = (
        fixtures::create_namespace(&admin, true).await.unwrap(),
        fixtures::create_namespace(&admin, true).await.unwrap(),
    );
    for ns in [&greedy, &other] {
        e2e::create_quota_in(&admin, ns, "share-q", "0", "10")
            .await
            .unwrap();
    }
    let review = |ns: &str, name: &str| {
        let object = json!({ "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "namespace": ns, "labels": { keys::QUOTA_NAME_LABEL: "share-q" } },
            "spec": { "template": { "spec": { "restartPolicy": "Never",
                "containers": [{ "name": "c", "image": "busybox",
                    "resources": { "requests": { "cpu": "1" } } }] } } } });
        admission_review(&format!("{name}-0000"), "CREATE", &object, None)
    };
    let ca = cp.pki().ca.cert_pem().to_string();
    let addr = hook.listen_addr;
    let answers = tokio::task::spawn_blocking(move || {
        let mut client = Client::open(addr, &ca).unwrap();
        let mut answer = |ns: &str, name: &str| {
            let (status, _, body) = client.post(&review(ns, name)).unwrap();
            assert_eq!(status, 200, "{body}");
            serde_json::from_str::<Value>(&body).unwrap()["response"].clone()
        };
        let mut answers = Vec::new();
        for name in ["g1", "g2", "g3"] {
            answers.push(answer(&greedy, name));
        }
        answers.push(answer(&other, "o1"));
        (greedy, answers)
    })
    .await
    .unwrap();
    let (greedy, answers) = answers;
    assert_eq!(answers[0]["allowed"], true, "{}", answers[0]);
    assert_eq!(answers[1]["allowed"], true, "{}", answers[1]);
    let refused = answers[2]["status"]["message"].as_str().unwrap_or_default();
    assert_eq!(answers[2]["allowed"], false, "{}", answers[2]);
    assert!(
        refused.contains(&format!("namespace {greedy}"))
            && refused.ends_with("retry once they are created"),
        "{refused}"
    );
    assert_eq!(
        answers[3]["allowed"], true,
        "another namespace's create: {}",
        answers[3]
    );
    let text = metrics::scrape(hook.admin_addr).await.unwrap();
    assert_eq!(
        metrics::sample(
            &text,
            "koord_queue_webhook_unit_backlog_refusals_total",
            &[("reason", "namespace-share")]
        ),
        Some(1.0),
        "{text}"
    );
    assert!(metrics::sum_of(&text, "koord_queue_webhook_unit_backlog_namespaces") >= 2.0);
}
