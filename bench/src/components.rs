//! The webhook and the scheduler the phases measure: in this process, each
//! on its own tokio runtime whose threads carry its name (so their CPU time
//! can be told apart in `/proc/self/task`), each with a request-counting
//! client; or as processes of their own ([`Placement::Processes`], the
//! Kueue comparison's), whose CPU time and peak RSS are theirs alone.

mod processes;

pub use processes::wait_leading;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use koord_queue_api::{Queue, keys};
use kube::api::Api;
use tokio::runtime::Runtime;

use super::api_stats::{self, ApiStats, Component};
use super::member::Member;
use super::scheduler_settings::{SchedulerOptions, scheduler_config};
use super::shape::Shape;
use koord_queue_tests::ControlPlane;
use koord_queue_tests::kubeconfig::Credentials;

/// The scheduler process's name in a phase's CPU and RSS figures.
pub const SCHEDULER_PROCESS: &str = "koord-queue-scheduler";
/// The webhook process's name in a phase's CPU and RSS figures.
pub const WEBHOOK_PROCESS: &str = "koord-queue-webhook";

/// Where the phases run the webhook and the scheduler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// In the benchmark's process: CPU time by thread, API requests by
    /// client; the peak RSS is only the whole process's.
    #[default]
    InProcess,
    /// `koord-queue-webhook` and `koord-queue-scheduler` as processes of
    /// their own, from this directory (`None`: next to the benchmark's
    /// binary): CPU time and peak RSS per process, API requests counted by
    /// the API server only.
    Processes(Option<PathBuf>),
}

impl Placement {
    /// The placement `--components` names (`in-process`, `processes`,
    /// `None`: processes when `processes_by_default`), the binaries from
    /// `bin_dir`.
    pub fn from_flag(
        flag: Option<&str>,
        bin_dir: Option<PathBuf>,
        processes_by_default: bool,
    ) -> Self {
        match flag {
            Some("processes") => Self::Processes(bin_dir),
            Some(_) => Self::InProcess,
            None if processes_by_default => Self::Processes(bin_dir),
            None => Self::InProcess,
        }
    }

    /// How the components ran, for a result's settings.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::InProcess => "in the benchmark's process, each on its own 2-thread runtime",
            Self::Processes(_) => {
                "processes of their own (release binaries; the scheduler with --enabled-kinds batchjob), one replica each"
            }
        }
    }
}

/// Registers the webhook serving at `url` with the API server, with the
/// control plane's CA, and waits until a probe job goes through it.
async fn register_webhook(cp: &ControlPlane, admin: &kube::Client, url: &str) -> Result<()> {
    let config = koord_queue_tests::webhook::configuration(url, cp.pki().ca.cert_pem())?;
    let probe_ns = koord_queue_tests::fixtures::create_namespace(admin, true).await?;
    koord_queue_tests::fixtures::register_mutating_webhook(admin, &config, || {
        koord_queue_tests::webhook::probe(admin, &probe_ns)
    })
    .await
}

/// The scheduler's kubeconfig (the identity the webhook trusts, by
/// certificate) and its plugin configuration file, in the control plane's
/// directory.
fn scheduler_files(cp: &ControlPlane, options: &SchedulerOptions) -> Result<(PathBuf, PathBuf)> {
    let user = koord_queue_tests::webhook::SCHEDULER_USER;
    let cert = cp.pki().client_cert(user, &["system:masters"])?;
    let kubeconfig = cp.write_kubeconfig(
        "bench-scheduler",
        user,
        &Credentials::Certificate {
            cert_pem: cert.cert_pem,
            key_pem: cert.key_pem,
        },
    )?;
    let config_path = cp.dir().join("bench-scheduler-config.yaml");
    std::fs::write(&config_path, scheduler_config(options.root_cpu))?;
    Ok((kubeconfig, config_path))
}

fn runtime(name: &str) -> Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        // Blocking threads stay, so their CPU time is still in /proc at the end.
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()
        .with_context(|| format!("building the {name} runtime"))
}

/// The running components.
pub struct Components {
    webhook_rt: Option<Runtime>,
    scheduler_rt: Option<Runtime>,
    webhook: Option<koord_queue_webhook::Running>,
    scheduler: Option<koord_queue_scheduler::Running>,
    /// The webhook and the scheduler when they run as processes.
    members: Vec<Member>,
    /// The scheduler's admin endpoint (`/metrics`).
    pub scheduler_admin: SocketAddr,
    /// The webhook's admin endpoint (`/metrics`).
    pub webhook_admin: SocketAddr,
}

impl std::fmt::Debug for Components {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Components")
            .field("scheduler_admin", &self.scheduler_admin)
            .field("webhook_admin", &self.webhook_admin)
            .finish_non_exhaustive()
    }
}

impl Components {
    /// Starts the webhook (registered with the API server) and the scheduler
    /// (as the identity the webhook trusts) where `placement` says and waits
    /// until the scheduler leads, is ready and has created a Queue for every
    /// leaf quota.
    pub async fn start_placed(
        placement: &Placement,
        cp: &ControlPlane,
        shape: &Shape,
        options: &SchedulerOptions,
        stats: Arc<ApiStats>,
    ) -> Result<Self> {
        match placement {
            Placement::InProcess => Self::start(cp, shape, options, stats).await,
            Placement::Processes(dir) => processes::start(cp, shape, options, dir.as_deref()).await,
        }
    }

    /// The component processes by name (`koord-queue-webhook`,
    /// `koord-queue-scheduler`) and pid; none when they run in this process.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.members
            .iter()
            .filter_map(|m| Some((m.name.clone(), m.pid()?)))
            .collect()
    }

    /// An error if a component process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.members.iter_mut().try_for_each(Member::check_alive)
    }

    /// Starts both in this process ([`Placement::InProcess`]).
    pub async fn start(
        cp: &ControlPlane,
        shape: &Shape,
        options: &SchedulerOptions,
        stats: Arc<ApiStats>,
    ) -> Result<Self> {
        let admin = cp.client().await?;

        // Webhook.
        let webhook_rt = runtime("kq-webhook")?;
        let tls_dir = cp.dir().join("bench-webhook-tls");
        koord_queue_tests::webhook::write_serving_cert(cp, &tls_dir)?;
        let mut args = koord_queue_tests::webhook::test_args(&tls_dir);
        args.cert_reload_interval = Duration::from_secs(10);
        let kubeconfig = cp.kubeconfig().to_path_buf();
        let webhook_stats = stats.clone();
        let webhook = webhook_rt
            .spawn(async move {
                let client =
                    api_stats::client(&kubeconfig, webhook_stats, Component::Webhook).await?;
                koord_queue_webhook::start(args, client).await
            })
            .await
            .context("the webhook start task failed")??;
        wait_for("the webhook to be ready", Duration::from_secs(60), || {
            webhook.readiness.check().is_ok()
        })
        .await?;
        register_webhook(
            cp,
            &admin,
            &format!("https://{}/mutate", webhook.listen_addr),
        )
        .await?;

        // Scheduler.
        let scheduler_rt = runtime("kq-scheduler")?;
        let (kubeconfig, config_path) = scheduler_files(cp, options)?;
        let mut args = {
            use clap::Parser;
            koord_queue_scheduler::Args::parse_from(["koord-queue-scheduler"])
        };
        args.config = Some(config_path);
        args.admin_addr = SocketAddr::from(([127, 0, 0, 1], 0));
        args.lease_name = "bench-scheduler".into();
        args.identity = Some("bench-scheduler-0".into());
        args.write_concurrency = options.write_concurrency;
        args.status_interval = options.status_interval;
        args.job_events = options.job_events;
        args.cycle_batch = options.cycle_batch;
        if options.visibility {
            args = koord_queue_tests::visibility::with_visibility(args, cp)?;
        }
        let scheduler_stats = stats.clone();
        let scheduler = scheduler_rt
            .spawn(async move {
                let client =
                    api_stats::client(&kubeconfig, scheduler_stats, Component::Scheduler).await?;
                koord_queue_scheduler::start(args, client).await
            })
            .await
            .context("the scheduler start task failed")??;
        wait_for(
            "the scheduler to lead and be ready",
            Duration::from_secs(60),
            || scheduler.is_leader() && scheduler.readiness.check().is_ok(),
        )
        .await?;
        wait_for_queues(&admin, shape, Duration::from_secs(120)).await?;
        if let Some(addr) = scheduler.visibility_addr {
            koord_queue_tests::visibility::register(cp, addr.port()).await?;
        }
        Ok(Self {
            scheduler_admin: scheduler.admin_addr,
            webhook_admin: webhook.admin_addr,
            webhook_rt: Some(webhook_rt),
            scheduler_rt: Some(scheduler_rt),
            webhook: Some(webhook),
            scheduler: Some(scheduler),
            members: Vec::new(),
        })
    }

    /// Stops both gracefully (bounded), then their runtimes; component
    /// processes are killed (the phase has measured them by then).
    pub async fn stop(mut self) {
        for m in &mut self.members {
            m.kill();
        }
        if let (Some(rt), Some(s)) = (&self.scheduler_rt, self.scheduler.take()) {
            let _ = tokio::time::timeout(Duration::from_secs(15), rt.spawn(s.shutdown())).await;
        }
        if let (Some(rt), Some(w)) = (&self.webhook_rt, self.webhook.take()) {
            let _ = tokio::time::timeout(Duration::from_secs(15), rt.spawn(w.shutdown())).await;
        }
        self.shutdown_runtimes();
    }

    fn shutdown_runtimes(&mut self) {
        // Not dropped in place: dropping a runtime inside another one panics.
        if let Some(rt) = self.scheduler_rt.take() {
            rt.shutdown_background();
        }
        if let Some(rt) = self.webhook_rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Components {
    fn drop(&mut self) {
        // `Running` values hold tasks of the runtimes: drop them first.
        self.scheduler.take();
        self.webhook.take();
        self.shutdown_runtimes();
        for m in &mut self.members {
            m.kill();
        }
    }
}

/// Waits until the scheduler has created a Queue for every leaf quota.
pub async fn wait_for_queues(admin: &kube::Client, shape: &Shape, timeout: Duration) -> Result<()> {
    let queues: Api<Queue> = Api::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE);
    let deadline = Instant::now() + timeout;
    loop {
        let names: std::collections::HashSet<String> = queues
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|q| q.metadata.name)
            .collect();
        let missing = shape
            .leaves
            .iter()
            .filter(|l| !names.contains(&l.name))
            .count();
        if missing == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the scheduler has not created the Queues of {missing} leaf quotas");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `ready` every 50 ms.
pub async fn wait_for(what: &str, timeout: Duration, ready: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
