//! Kueue v0.17.0 in the benchmark (issue 22): its manager (`cmd/kueue`,
//! built by `bench/provision/kueue.sh` into the cache) as a process against
//! the same control plane build as Koord-Queue's phases, with its batch/v1
//! Job integration and its own webhooks (registered by URL with a serving
//! certificate of the runner's CA, as ours are), configured as the closest
//! equivalent of our quota tree — one ClusterQueue per leaf quota (nominal
//! 20 CPU, borrowing limit 100) in one cohort per parent, a LocalQueue in
//! each leaf's namespace, the three classes as WorkloadPriorityClasses,
//! preemption as in Kueue's own performance test (reclaimWithinCohort Any,
//! withinClusterQueue LowerPriority). The job stream, the job runtime
//! stand-in and the running-jobs quota check are the `run` phase's; the
//! [`workloads`] watch checks what Kueue's Workloads hold as the QueueUnit
//! checker does ours.

pub mod report;
mod setup;
pub mod workloads;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use koord_queue_tests::ControlPlane;
use koord_queue_tests::process::{Process, free_port};

use crate::shape::{QueueLabels, Shape};

/// Kueue's API group.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The version Kueue v0.17.0 stores (no conversion webhook needed).
pub const VERSION: &str = "v1beta2";
/// The Kueue release compared.
pub const KUEUE_VERSION: &str = "v0.17.0";
/// The LocalQueue of every leaf's namespace.
pub const LOCAL_QUEUE: &str = "bench";
/// Where Kueue's manager reads its metrics certificate (not configurable).
const METRICS_CERT_DIR: &str = "/etc/kueue/metrics/certs";
/// Kueue's own namespace.
pub const NAMESPACE: &str = "kueue-system";
/// The job label that names the LocalQueue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The job label that names the WorkloadPriorityClass.
pub const PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// The labels that queue a job in Kueue: its LocalQueue, and its class's
/// WorkloadPriorityClass (one per class, of the class's name).
pub const JOB_LABELS: QueueLabels = QueueLabels {
    queue: (QUEUE_LABEL, LOCAL_QUEUE),
    priority_class: PRIORITY_LABEL,
};

/// Kueue manager's client rate limit (`clientConnection`), the one setting
/// a platform team raises first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientRate {
    /// Requests a second.
    pub qps: u32,
    /// Burst.
    pub burst: u32,
}

impl ClientRate {
    /// The shipped manager configuration's
    /// (`config/components/manager/controller_manager_config.yaml`), which
    /// Kueue's performance test's minimalkueue uses too.
    pub const SHIPPED: Self = Self {
        qps: 50,
        burst: 100,
    };
}

impl std::str::FromStr for ClientRate {
    type Err = String;

    /// `QPS/BURST`, e.g. `500/1000`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected QPS/BURST such as 500/1000, got {text:?}");
        let (qps, burst) = text.split_once('/').ok_or_else(bad)?;
        let number = |n: &str| n.trim().parse::<u32>().ok().filter(|n| *n > 0);
        match (number(qps), number(burst)) {
            (Some(qps), Some(burst)) if burst >= qps => Ok(Self { qps, burst }),
            (Some(_), Some(_)) => Err(format!("the burst must be at least the QPS: {text:?}")),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for ClientRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.qps, self.burst)
    }
}

/// How Kueue runs in the comparison, for its JSON's `settings.kueue`.
pub fn settings_json(rate: ClientRate) -> serde_json::Value {
    serde_json::json!({
        "version": KUEUE_VERSION,
        "process": "cmd/kueue built with go install (CGO off, -trimpath -s -w), admin credentials, --zap-log-level=2, VisibilityOnDemand off, leader election off",
        "client_qps": rate.qps,
        "client_burst": rate.burst,
        "client_rate": if rate == ClientRate::SHIPPED { "shipped" } else { "raised (--kueue-client-rate)" },
        "integrations": ["batch/job"],
        "webhooks": "its own (Job, Workload, ClusterQueue, Cohort, ResourceFlavor, LocalQueue, WorkloadPriorityClass), by URL, the runner's certificates",
        "cluster_queues": "one per leaf quota: nominal 20 CPU, borrowingLimit 100, cohort per parent, BestEffortFIFO, preemption reclaimWithinCohort Any, withinClusterQueue LowerPriority",
        "priorities": "WorkloadPriorityClasses small 50, medium 100, large 200",
    })
}

/// Where `bench/provision/kueue.sh` put Kueue: `<cache>/kueue` (CRDs,
/// webhook manifests) and the manager in `<cache>/bin/kueue`.
#[derive(Clone, Debug)]
pub struct Install {
    /// The manager binary.
    pub manager: PathBuf,
    /// `<cache>/kueue`.
    pub dir: PathBuf,
}

impl Install {
    /// The provisioned Kueue, or an error that says how to provision it.
    pub fn find() -> Result<Self> {
        let bin = koord_queue_tests::tools::bin_dir();
        let manager = bin.join("kueue");
        let dir = bin
            .parent()
            .map(|cache| cache.join("kueue"))
            .context("the cache's bin directory has no parent")?;
        for path in [&manager, &dir.join("crds"), &dir.join("webhooks.yaml")] {
            if !path.exists() {
                bail!(
                    "{} is missing: run `make provision-kueue` (bench/provision/kueue.sh) first",
                    path.display()
                );
            }
        }
        Ok(Self { manager, dir })
    }
}

/// The running Kueue manager.
#[derive(Debug)]
pub struct Kueue {
    process: Process,
    /// Its health probe endpoint (`/readyz`).
    pub health: SocketAddr,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The manager's configuration: the shipped one with every listener on
/// loopback, no leader election (one replica), certificates from
/// `cert_dir` instead of its internal certificate management, metrics off
/// (nothing scrapes them), only the batch/v1 Job integration.
fn configuration(
    health: SocketAddr,
    webhook_port: u16,
    cert_dir: &Path,
    rate: ClientRate,
) -> String {
    format!(
        r#"apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: {NAMESPACE}
health:
  healthProbeBindAddress: "{health}"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: {webhook_port}
  certDir: "{cert_dir}"
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
controller:
  groupKindConcurrency:
    Job.batch: 5
    Pod: 5
    Workload.kueue.x-k8s.io: 5
    LocalQueue.kueue.x-k8s.io: 1
    Cohort.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 1
    ResourceFlavor.kueue.x-k8s.io: 1
clientConnection:
  qps: {qps}
  burst: {burst}
integrations:
  frameworks:
  - "batch/job"
"#,
        cert_dir = cert_dir.display(),
        qps = rate.qps,
        burst = rate.burst,
    )
}

impl Kueue {
    /// Applies Kueue's CRDs, starts the manager with admin credentials,
    /// waits until it is ready, registers its webhooks and sees them
    /// answer, then creates the queues of `shape` and waits until every
    /// ClusterQueue is active.
    pub async fn start(
        cp: &ControlPlane,
        admin: &kube::Client,
        shape: &Shape,
        install: &Install,
        rate: ClientRate,
    ) -> Result<Self> {
        setup::apply_crds(admin, install).await?;
        koord_queue_tests::fixtures::ensure_namespace(admin, NAMESPACE).await?;
        let cert_dir = cp.dir().join("kueue-webhook-tls");
        koord_queue_tests::webhook::write_serving_cert(cp, &cert_dir)?;
        // Without its internal certificate management, Kueue v0.17.0 reads
        // a metrics certificate from a fixed path at start and exits when it
        // is missing (cmd/kueue/main.go), even with the metrics server off.
        // It is never served (metrics bindAddress "0"): any pair will do.
        koord_queue_tests::webhook::write_serving_cert(cp, Path::new(METRICS_CERT_DIR))
            .with_context(|| {
                format!(
                    "Kueue needs a certificate pair in {METRICS_CERT_DIR} (writable by this user)"
                )
            })?;
        let health = loopback(free_port()?);
        let webhook_port = free_port()?;
        let config_path = cp.dir().join("kueue-config.yaml");
        std::fs::write(
            &config_path,
            configuration(health, webhook_port, &cert_dir, rate),
        )
        .with_context(|| format!("writing {}", config_path.display()))?;
        let args = [
            format!("--config={}", config_path.display()),
            // Shipped manager flag (config/components/manager/manager.yaml).
            "--zap-log-level=2".to_string(),
            // The on-demand visibility API server listens on every
            // interface and is no part of admission.
            "--feature-gates=VisibilityOnDemand=false".to_string(),
        ];
        let mut process = Process::start_with_env(
            "kueue",
            &install.manager,
            &args,
            &[("KUBECONFIG", cp.kubeconfig().as_os_str())],
            cp.dir().join("kueue.log"),
        )?;
        wait_ready(&mut process, health, Duration::from_secs(120)).await?;
        let url = format!("https://127.0.0.1:{webhook_port}");
        setup::register_webhooks(admin, install, &url, cp.pki().ca.cert_pem()).await?;
        setup::wait_for_job_webhook(admin, &mut process).await?;
        setup::create_queues(admin, shape).await?;
        setup::wait_for_active_queues(admin, shape, &mut process, Duration::from_secs(120)).await?;
        Ok(Self { process, health })
    }

    /// Process id (for its CPU time and peak RSS).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Fails when the manager has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.process.check_alive()
    }

    /// Stops the manager (SIGTERM, then SIGKILL).
    pub fn stop(mut self) {
        self.process.terminate(Duration::from_secs(10));
    }
}

async fn wait_ready(process: &mut Process, health: SocketAddr, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        process.check_alive()?;
        if crate::admin_scrape::answers_ok(health, "/readyz").await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "Kueue not ready within {within:?}:\n{}",
                process.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_client_rate_reads_as_qps_slash_burst() {
        assert_eq!(
            "500/1000".parse::<ClientRate>(),
            Ok(ClientRate {
                qps: 500,
                burst: 1000
            })
        );
        assert_eq!(
            ClientRate::SHIPPED.to_string().parse(),
            Ok(ClientRate::SHIPPED)
        );
        for bad in ["500", "0/10", "x/10", "100/50", ""] {
            assert!(bad.parse::<ClientRate>().is_err(), "{bad}");
        }
        let config = configuration(
            "127.0.0.1:1".parse().unwrap(),
            2,
            Path::new("/c"),
            "500/1000".parse().unwrap(),
        );
        assert!(config.contains("  qps: 500\n  burst: 1000\n"), "{config}");
    }
}
