//! Command-line flags; every flag can also be set through its environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use koord_queue_runtime::{LogFormat, parse_duration};

/// Flags of `koord-queue-scheduler`.
#[derive(Clone, Debug, clap::Parser)]
#[command(
    name = "koord-queue-scheduler",
    version = env!("KOORD_QUEUE_VERSION"),
    about = "Koord-Queue scheduler"
)]
pub struct Args {
    /// Plugin configuration (YAML: `plugins: [{name, args}]`, in order).
    /// Unset: Priority, ElasticQuota (root capacity from the root quota or
    /// the Ready nodes) and DefaultQueue-free mapping by quota.
    #[arg(long, env = "KQ_SCHEDULER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address of the admin endpoint (`/livez`, `/readyz`, `/metrics`).
    #[arg(long, env = "KQ_SCHEDULER_ADMIN_ADDR", default_value = "0.0.0.0:9091")]
    pub admin_addr: SocketAddr,

    /// Job kinds to follow, by chart extension key (comma-separated).
    #[arg(
        long,
        env = "KQ_SCHEDULER_ENABLED_KINDS",
        value_delimiter = ',',
        default_value = "batchjob,tf,pytorch,mpi,ray,spark,argo,jobset,trainjob"
    )]
    pub enabled_kinds: Vec<String>,

    /// Namespace of the Queues and of the leader-election Lease.
    #[arg(long, env = "KQ_SCHEDULER_NAMESPACE", default_value = "koord-queue")]
    pub namespace: String,

    /// Name of the leader-election Lease: name it after the Helm release so
    /// two installations never share one.
    #[arg(
        long,
        env = "KQ_SCHEDULER_LEASE_NAME",
        default_value = "koord-queue-scheduler"
    )]
    pub lease_name: String,

    /// This replica's identity in the Lease (defaults to the host name).
    #[arg(long, env = "KQ_SCHEDULER_IDENTITY")]
    pub identity: Option<String>,

    /// Lease duration: how long a standby waits for a silent leader.
    #[arg(long, env = "KQ_SCHEDULER_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// A leader that cannot renew within this gives up at once.
    #[arg(long, env = "KQ_SCHEDULER_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,

    /// Interval of lease renewals and acquisition attempts.
    #[arg(long, env = "KQ_SCHEDULER_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,

    /// A QueueUnit whose job does not appear within this is deleted (the
    /// job's create was refused after the webhook ran, or it was a retry).
    #[arg(long, env = "KQ_SCHEDULER_ORPHAN_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub orphan_grace: Duration,

    /// Events arriving within this window share one scheduling cycle.
    #[arg(long, env = "KQ_SCHEDULER_CYCLE_BATCH", default_value = "20ms", value_parser = parse_duration)]
    pub cycle_batch: Duration,

    /// API writes in flight at most.
    #[arg(long, env = "KQ_SCHEDULER_WRITE_CONCURRENCY", default_value_t = 48)]
    pub write_concurrency: usize,

    /// Minimum interval between two position/reason updates of one waiting
    /// unit, and between two status updates of one Queue.
    #[arg(long, env = "KQ_SCHEDULER_STATUS_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub status_interval: Duration,

    /// Strict dequeue for queues that do not set `spec.strictDequeue`: a
    /// released job counts as started only once all its pods are bound.
    #[arg(long, env = "KQ_SCHEDULER_STRICT_DEQUEUE", default_value_t = false, action = clap::ArgAction::Set)]
    pub strict_dequeue: bool,

    /// Time every pod of a strictly dequeued job has to be bound.
    #[arg(long, env = "KQ_SCHEDULER_STRICT_TIMEOUT", default_value = "300s", value_parser = parse_duration)]
    pub strict_timeout: Duration,

    /// Emit Events on jobs (queued, released, finished, requeued).
    #[arg(long, env = "KQ_SCHEDULER_JOB_EVENTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub job_events: bool,

    /// Serve the visibility API (visibility.koord-queue.io, an APIService)
    /// over HTTPS on this address; off without it.
    #[arg(long, env = "KQ_SCHEDULER_VISIBILITY_ADDR")]
    pub visibility_addr: Option<SocketAddr>,

    /// Directory of the visibility API's serving certificate (`tls.crt`,
    /// `tls.key`; re-read when they change). Required with `--visibility-addr`.
    #[arg(
        long,
        env = "KQ_SCHEDULER_VISIBILITY_CERT_DIR",
        requires = "visibility_addr"
    )]
    pub visibility_cert_dir: Option<PathBuf>,

    /// Estimate when each waiting unit starts (a forward simulation of the
    /// state, off the decision path), for the visibility API and the units'
    /// status.
    #[arg(long, env = "KQ_SCHEDULER_ESTIMATES", default_value_t = true, action = clap::ArgAction::Set)]
    pub estimates: bool,

    /// Most of one core the estimates take over time (0.1: 10 %): after an
    /// estimate that took t, the next waits t × (1 − share) / share.
    #[arg(long, env = "KQ_SCHEDULER_ESTIMATE_CPU_SHARE", default_value_t = 0.1, value_parser = parse_share)]
    pub estimate_cpu_share: f64,

    /// Least time between two estimates.
    #[arg(long, env = "KQ_SCHEDULER_ESTIMATE_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub estimate_interval: Duration,

    /// How long in-flight writes may take to finish after SIGTERM.
    #[arg(long, env = "KQ_SCHEDULER_DRAIN_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// Log format.
    #[arg(
        long,
        env = "KQ_SCHEDULER_LOG_FORMAT",
        value_enum,
        default_value = "plain"
    )]
    pub log_format: LogFormat,

    /// Log filter (`RUST_LOG` syntax; `RUST_LOG` wins when set).
    #[arg(long, env = "KQ_SCHEDULER_LOG_LEVEL", default_value = "info,kube=warn")]
    pub log_level: String,
}

/// A share of one core: a number in (0, 1].
fn parse_share(text: &str) -> Result<f64, String> {
    let share: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if share > 0.0 && share <= 1.0 {
        Ok(share)
    } else {
        Err(format!(
            "{text}: a share of one core is more than 0 and at most 1"
        ))
    }
}
