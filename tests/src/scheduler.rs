//! Running Koord-Queue's scheduler in-process against a local control plane,
//! as the scheduler identity the webhook trusts.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::ControlPlane;
use crate::kubeconfig;

/// Settings of a test scheduler.
pub fn test_args(lease_name: &str) -> koord_queue_scheduler::Args {
    use clap::Parser;
    let mut args = koord_queue_scheduler::Args::parse_from(["koord-queue-scheduler"]);
    args.admin_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    args.lease_name = lease_name.to_string();
    args.lease_duration = Duration::from_secs(3);
    args.renew_deadline = Duration::from_secs(2);
    args.retry_period = Duration::from_millis(400);
    args.status_interval = Duration::from_millis(500);
    args.orphan_grace = Duration::from_secs(5);
    // Every kind, as the test webhook queues them.
    args.enabled_kinds = koord_queue_api::jobs::extensions()
        .iter()
        .map(|k| k.to_string())
        .collect();
    args
}

/// `args` with the plugin configuration `yaml` (written into the control
/// plane's directory and passed as `--config`).
pub fn with_config(
    mut args: koord_queue_scheduler::Args,
    cp: &ControlPlane,
    yaml: &str,
) -> Result<koord_queue_scheduler::Args> {
    let path = cp.dir().join(format!(
        "{}.yaml",
        crate::fixtures::unique_name("scheduler-config")
    ));
    std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    args.config = Some(path);
    Ok(args)
}

/// The default plugin configuration plus `ResourceQuota`.
pub fn config_with_resource_quota() -> String {
    format!(
        "{}- name: ResourceQuota\n",
        koord_queue_scheduler::DEFAULT_CONFIG
    )
}

/// A scheduler replica running on the binary-long runtime.
#[derive(Debug, Clone)]
pub struct SchedulerReplica {
    running: Arc<Mutex<Option<koord_queue_scheduler::Running>>>,
    /// Admin address.
    pub admin_addr: SocketAddr,
    /// The visibility API's address, when served.
    pub visibility_addr: Option<SocketAddr>,
}

impl SchedulerReplica {
    /// Whether this replica leads.
    pub fn is_leader(&self) -> bool {
        self.running
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.is_leader()))
            .unwrap_or(false)
    }

    /// Whether `/readyz` would answer ok.
    pub fn is_ready(&self) -> bool {
        self.running
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.readiness.check().is_ok()))
            .unwrap_or(false)
    }

    /// Kills the replica as a crash would: no Lease release, writes in
    /// flight are dropped.
    pub async fn kill(&self) -> Result<()> {
        let running = self.running.lock().ok().and_then(|mut r| r.take());
        crate::background::run(async move {
            if let Some(r) = running {
                r.abort();
            }
        })
        .await
    }

    /// Graceful stop: drain and release the Lease.
    pub async fn stop(&self) -> Result<()> {
        let running = self.running.lock().ok().and_then(|mut r| r.take());
        crate::background::run(async move {
            if let Some(r) = running {
                r.shutdown().await;
            }
        })
        .await
    }
}

/// Starts a scheduler replica with `args`, authenticated as the scheduler
/// identity of [`crate::webhook::SCHEDULER_USER`].
pub async fn start(
    cp: &ControlPlane,
    args: koord_queue_scheduler::Args,
) -> Result<SchedulerReplica> {
    start_via(cp, args, cp.server()).await
}

/// [`start`], the replica reaching the API server at `server` (say,
/// through a [`crate::proxy::Proxy`]).
pub async fn start_via(
    cp: &ControlPlane,
    mut args: koord_queue_scheduler::Args,
    server: &str,
) -> Result<SchedulerReplica> {
    // Replicas in one process need distinct Lease identities (in a cluster
    // the pod name is unique).
    args.identity
        .get_or_insert_with(|| crate::fixtures::unique_name("scheduler"));
    let cert = cp
        .pki()
        .client_cert(crate::webhook::SCHEDULER_USER, &["system:masters"])?;
    let path = cp.write_kubeconfig_via(
        &crate::fixtures::unique_name("scheduler"),
        server,
        crate::webhook::SCHEDULER_USER,
        &kubeconfig::Credentials::Certificate {
            cert_pem: cert.cert_pem,
            key_pem: cert.key_pem,
        },
    )?;
    let running = crate::background::run(async move {
        let client = kubeconfig::client_from_file(&path).await?;
        koord_queue_scheduler::start(args, client).await
    })
    .await?
    .context("starting the scheduler")?;
    let admin_addr = running.admin_addr;
    let visibility_addr = running.visibility_addr;
    Ok(SchedulerReplica {
        running: Arc::new(Mutex::new(Some(running))),
        admin_addr,
        visibility_addr,
    })
}

/// Starts a scheduler and waits until it leads and is ready.
pub async fn start_leader(
    cp: &ControlPlane,
    args: koord_queue_scheduler::Args,
) -> Result<SchedulerReplica> {
    let replica = start(cp, args).await?;
    let r = replica.clone();
    crate::fixtures::eventually(Duration::from_secs(30), move || {
        let ok = r.is_leader() && r.is_ready();
        async move { Ok(ok) }
    })
    .await
    .context("the scheduler did not become a ready leader")?;
    Ok(replica)
}

/// Crashes `replica` (no Lease release, see [`SchedulerReplica::kill`]) and
/// starts a new one with `args`, as a restarted pod: it takes over once the
/// old Lease expires, rebuilding its state from the API alone.
pub async fn crash_and_restart(
    cp: &ControlPlane,
    replica: &SchedulerReplica,
    args: koord_queue_scheduler::Args,
) -> Result<SchedulerReplica> {
    replica.kill().await?;
    start_leader(cp, args).await
}

/// The usual start of an end-to-end suite that queues framework kinds: the
/// frameworks' CRDs first (so the scheduler follows their kinds from its
/// start), the PriorityClasses `classes`, the webhook, and a leader with
/// Lease `lease`.
pub async fn start_with_frameworks(
    cp: &ControlPlane,
    lease: &str,
    classes: &[(&str, i32)],
) -> Result<SchedulerReplica> {
    let client = cp.client().await?;
    crate::fixtures::apply_crds(&client, &crate::job_crds::job_framework_crds()).await?;
    for (class, value) in classes {
        crate::e2e::priority_class(&client, class, *value).await?;
    }
    crate::webhook::start_and_register(cp).await?;
    start_leader(cp, test_args(lease)).await
}
