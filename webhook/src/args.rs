//! Command-line flags; every flag can also be set through its environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use koord_queue_runtime::{LogFormat, parse_duration};

/// Flags of `koord-queue-webhook`.
#[derive(Clone, Debug, clap::Parser)]
#[command(
    name = "koord-queue-webhook",
    version = env!("KOORD_QUEUE_VERSION"),
    about = "Koord-Queue admission webhook"
)]
pub struct Args {
    /// Address of the HTTPS admission endpoint (`POST /mutate`).
    #[arg(long, env = "KQ_WEBHOOK_LISTEN_ADDR", default_value = "0.0.0.0:9443")]
    pub listen_addr: SocketAddr,

    /// Address of the admin endpoint (`/livez`, `/readyz`, `/metrics`, plain HTTP).
    #[arg(long, env = "KQ_WEBHOOK_ADMIN_ADDR", default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,

    /// Directory holding the serving certificate as `tls.crt` and `tls.key`
    /// (a mounted `kubernetes.io/tls` Secret).
    #[arg(
        long,
        env = "KQ_WEBHOOK_TLS_DIR",
        default_value = "/etc/koord-queue/tls"
    )]
    pub tls_dir: PathBuf,

    /// How often the serving certificate files are re-read to pick up a rotation.
    #[arg(long, env = "KQ_WEBHOOK_CERT_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub cert_reload_interval: Duration,

    /// Job kinds to queue, by their chart extension key
    /// (batchjob, tf, pytorch, mpi, ray, spark, argo). Comma-separated.
    #[arg(
        long,
        env = "KQ_WEBHOOK_ENABLED_KINDS",
        value_delimiter = ',',
        default_value = "batchjob,tf,pytorch,mpi,ray,spark,argo,jobset,trainjob"
    )]
    pub enabled_kinds: Vec<String>,

    /// Queue of jobs that name no quota in a namespace without a
    /// `koord-queue/default-queue` annotation. Unset: such jobs are refused.
    #[arg(long, env = "KQ_WEBHOOK_DEFAULT_QUEUE")]
    pub default_queue: Option<String>,

    /// User name of the scheduler: the only identity allowed to lift the hold
    /// of a queued job.
    #[arg(
        long,
        env = "KQ_WEBHOOK_SCHEDULER_USER",
        default_value = "system:serviceaccount:koord-queue:koord-queue-scheduler"
    )]
    pub scheduler_user: String,

    /// Groups whose members may also lift holds (comma-separated; e.g. for a
    /// scheduler authenticating by client certificate).
    #[arg(long, env = "KQ_WEBHOOK_SCHEDULER_GROUPS", value_delimiter = ',')]
    pub scheduler_groups: Vec<String>,

    /// Koordinator's looser rule: a job may name an ElasticQuota of any
    /// namespace. Off: a quota serves its own namespace and those its
    /// annotation `quota.scheduling.koordinator.sh/namespaces` lists.
    #[arg(long, env = "KQ_WEBHOOK_ALLOW_CROSS_NAMESPACE_QUOTA")]
    pub allow_cross_namespace_quota: bool,

    /// Let queued jobs (and their pods) name the cluster's own
    /// PriorityClasses, those named `system-…` (system-cluster-critical,
    /// system-node-critical). Off: such a job is refused, as it would
    /// preempt other tenants' work. A namespace's or quota's
    /// `koord-queue/priority-classes` annotation narrows the classes further.
    #[arg(long, env = "KQ_WEBHOOK_ALLOW_SYSTEM_PRIORITY_CLASSES")]
    pub allow_system_priority_classes: bool,

    /// The pod hooks send the pods of every opted-in namespace, not only of
    /// those that queue pods (the chart's `webhook.reviewPods`): a queued
    /// job's child passes when proven and counted, a pod is queued where the
    /// namespace queues pods (`koord-queue/queue-pods=true` and the `pod`
    /// kind enabled), and any other pod is refused unless the namespace is
    /// labelled `koord-queue/unqueued-pods=allow`.
    #[arg(long, env = "KQ_WEBHOOK_REVIEW_PODS")]
    pub review_pods: bool,

    /// CA bundle (PEM) the API server's client certificate must be signed
    /// by (AdmissionConfiguration `kubeConfigFile`). Set: connections without
    /// such a certificate are refused in the TLS handshake. Re-read with the
    /// serving certificate.
    #[arg(long, env = "KQ_WEBHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Reviews in flight at most; further ones are answered 429 at once.
    #[arg(long, env = "KQ_WEBHOOK_MAX_CONCURRENT_REVIEWS", default_value_t = 512)]
    pub max_concurrent_reviews: usize,

    /// Largest accepted request body.
    #[arg(long, env = "KQ_WEBHOOK_MAX_BODY_BYTES", default_value_t = 6 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Bytes of request bodies being read or decided at most: a body is
    /// charged before it is read and given back when its answer is sent;
    /// one that cannot get its bytes within the review timeout is answered
    /// 429. A review takes up to 16× its charge in memory (a body made of
    /// many tiny JSON values is charged more than its length), so the
    /// default bounds reviews to 8 MiB × 16 = 128 MiB, half the chart's
    /// memory limit. At least --max-body-bytes.
    #[arg(long, env = "KQ_WEBHOOK_MAX_REVIEW_BYTES", default_value_t = crate::review_budget::DEFAULT_MAX_REVIEW_BYTES)]
    pub max_review_bytes: usize,

    /// Time budget of one review, including the QueueUnit create. Keep it
    /// well under the webhook configuration's `timeoutSeconds`.
    #[arg(long, env = "KQ_WEBHOOK_REVIEW_TIMEOUT", default_value = "8s", value_parser = parse_duration)]
    pub review_timeout: Duration,

    /// Time allowed for a client to send the request headers.
    #[arg(long, env = "KQ_WEBHOOK_HEADER_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// QueueUnit creates in flight at most; further creates wait for a slot.
    /// Bounds the calls the webhook makes to the API server, in particular
    /// the nested ones it makes while it holds a user's request open.
    #[arg(long, env = "KQ_WEBHOOK_MAX_CONCURRENT_CREATES", default_value_t = 32)]
    pub max_concurrent_creates: usize,

    /// API calls in flight at most after the answers: reading each held job
    /// back and creating its QueueUnit (two calls a unit, no request held
    /// open by them).
    #[arg(long, env = "KQ_WEBHOOK_MAX_BACKGROUND_CALLS", default_value_t = 128)]
    pub max_background_calls: usize,

    /// QueueUnits of answered jobs waiting to be created at most (each is
    /// created once its job is stored); with a full backlog jobs are refused
    /// until it drains.
    #[arg(long, env = "KQ_WEBHOOK_UNIT_BACKLOG", default_value_t = 10_000)]
    pub unit_backlog: usize,

    /// QueueUnits of one namespace in the backlog at most (its fair share
    /// of --unit-backlog): beyond it that namespace's jobs are refused
    /// ("retry"), so one tenant cannot fill the backlog and make every
    /// other tenant's create fail. Unset: a tenth of --unit-backlog.
    #[arg(long, env = "KQ_WEBHOOK_UNIT_BACKLOG_PER_NAMESPACE")]
    pub unit_backlog_per_namespace: Option<usize>,

    /// How long a held job may take to appear in the API after its answer
    /// before its QueueUnit is given up (a later admission step refused it,
    /// or the review was forged; a real job's unit is then created by the
    /// scheduler's repair).
    #[arg(long, env = "KQ_WEBHOOK_JOB_WAIT", default_value = "10s", value_parser = parse_duration)]
    pub job_wait: Duration,

    /// How long in-flight reviews, then the QueueUnit backlog, may take to
    /// finish after SIGTERM (each).
    #[arg(long, env = "KQ_WEBHOOK_DRAIN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// Log format.
    #[arg(
        long,
        env = "KQ_WEBHOOK_LOG_FORMAT",
        value_enum,
        default_value = "plain"
    )]
    pub log_format: LogFormat,

    /// Log filter (`RUST_LOG` syntax; `RUST_LOG` wins when set).
    #[arg(long, env = "KQ_WEBHOOK_LOG_LEVEL", default_value = "info,kube=warn")]
    pub log_level: String,
}
