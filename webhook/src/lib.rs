//! Koord-Queue's mutating admission webhook (architecture §6).
//!
//! On CREATE of an enabled job kind in an opted-in namespace it answers with a
//! JSON Patch that holds the job and names its QueueUnit, and creates that
//! QueueUnit; on UPDATE it refuses to lift the hold of a job whose unit has not
//! been released, unless the scheduler asks. A job in an opted-in namespace is
//! therefore never seen unsuspended, not even for a moment.

mod admit;
mod api_access;
mod args;
mod caches;
mod children;
mod effects;
mod mapping;
mod metrics;
mod ownership;
mod policy;
mod review_budget;
mod review_inputs;
mod server;
mod service;
mod size_inputs;
mod stored_unit;
mod unit_creator;
mod update;
mod verdict;
mod view;

// The tests' shared fake (`tests/support`) names this crate by its name;
// the crate's own unit tests include it too.
#[cfg(test)]
extern crate self as koord_queue_webhook;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use koord_queue_certs::{CertPaths, CertReloader};
use koord_queue_runtime::{AdminServer, Readiness, admin_router, init_logging, shutdown_signal};
use prometheus_client::registry::Registry;

pub use admit::{decide, unit_name};
pub use api_access::{ApiAccess, Created, KubeApi};
pub use args::Args;
pub use caches::Caches;
pub use children::ChildLedger;
pub use metrics::Metrics;
pub use policy::Policy;
pub use review_budget::{DEFAULT_MAX_REVIEW_BYTES, PARSE_OVERHEAD};
pub use server::{Limits, router, router_with_limits, serve_tls};
pub use service::Webhook;
pub use unit_creator::{CreatorConfig, UnitCreator};
pub use verdict::{RequestObjects, Verdict};
pub use view::{ClusterView, QuotaInfo};

/// Readiness condition: informer caches have their initial lists.
const CACHES_SYNCED: &str = "caches synced";
/// Readiness condition: a serving certificate is loaded.
const CERT_LOADED: &str = "serving certificate loaded";

/// Runs the webhook until SIGTERM/SIGINT; the exit code says how it ended.
pub async fn run(args: Args) -> ExitCode {
    init_logging(args.log_format, &args.log_level);
    koord_queue_certs::install_crypto_provider();
    let result = async {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client: {e}"))?;
        let running = start(args, client).await?;
        shutdown_signal().await;
        running.shutdown().await
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("koord-queue-webhook: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// A started webhook.
#[derive(Debug)]
pub struct Running {
    /// Bound address of the admission endpoint.
    pub listen_addr: SocketAddr,
    /// Bound address of the admin endpoint.
    pub admin_addr: SocketAddr,
    /// Readiness as `/readyz` reports it.
    pub readiness: Readiness,
    handle: axum_server::Handle<SocketAddr>,
    webhook: Arc<Webhook>,
    drain_timeout: Duration,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Becomes unready at once, lets in-flight reviews finish, then creates
    /// the QueueUnits of answered jobs still in the backlog (each within the
    /// drain timeout) and stops.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.readiness.start_draining();
        self.handle.graceful_shutdown(Some(self.drain_timeout));
        let result = self.serving.await;
        self.webhook.units.drain(self.drain_timeout).await;
        for task in self.background {
            task.abort();
        }
        result??;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Starts the webhook on the current runtime with `client`: binds both
/// ports (failing fast on a bad certificate or a taken port), starts the
/// caches and serves.
pub async fn start(args: Args, client: kube::Client) -> anyhow::Result<Running> {
    let Args {
        listen_addr,
        admin_addr,
        tls_dir,
        cert_reload_interval,
        enabled_kinds,
        default_queue,
        scheduler_user,
        scheduler_groups,
        allow_cross_namespace_quota,
        allow_system_priority_classes,
        review_pods,
        client_ca_file,
        max_concurrent_reviews,
        max_body_bytes,
        max_review_bytes,
        review_timeout,
        header_timeout,
        max_concurrent_creates,
        unit_backlog,
        unit_backlog_per_namespace,
        max_background_calls,
        job_wait,
        drain_timeout,
        log_format: _,
        log_level: _,
    } = args;
    koord_queue_certs::install_crypto_provider();

    let known = koord_queue_api::jobs::extensions();
    if let Some(bad) = enabled_kinds.iter().find(|k| !known.contains(&k.as_str())) {
        anyhow::bail!(
            "--enabled-kinds: unknown kind {bad:?} (known: {})",
            known.join(", ")
        );
    }

    let limits = Limits {
        max_body_bytes,
        max_concurrent: max_concurrent_reviews,
        max_review_bytes,
    };
    if max_review_bytes < max_body_bytes || max_review_bytes > tokio::sync::Semaphore::MAX_PERMITS {
        anyhow::bail!(
            "--max-review-bytes ({max_review_bytes}) must be at least --max-body-bytes ({max_body_bytes}) and at most {}",
            tokio::sync::Semaphore::MAX_PERMITS
        );
    }
    // A tenth by default: ten namespaces must fill their shares before a
    // create elsewhere finds the backlog full.
    let namespace_backlog = match unit_backlog_per_namespace {
        Some(0) => anyhow::bail!("--unit-backlog-per-namespace must be at least 1"),
        Some(n) => n,
        None => (unit_backlog / 10).max(1),
    };

    let paths = CertPaths::in_dir(&tls_dir).with_client_ca(client_ca_file);
    let (reloader, tls) = CertReloader::load(paths).map_err(|e| {
        anyhow::anyhow!(
            "cannot load the serving certificate from {} (or the client CA): {e}",
            tls_dir.display()
        )
    })?;
    let admin = AdminServer::bind(admin_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the admin address {admin_addr}: {e}"))?;
    let admin_addr = admin.local_addr()?;
    let listener = std::net::TcpListener::bind(listen_addr)
        .map_err(|e| anyhow::anyhow!("cannot bind {listen_addr}: {e}"))?;
    listener.set_nonblocking(true)?;
    let listen_addr = listener.local_addr()?;

    let readiness = Readiness::new(&[CACHES_SYNCED, CERT_LOADED]);
    readiness.set(CERT_LOADED, true);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let registry = Arc::new(Mutex::new(registry));
    let admin_readiness = readiness.clone();
    let mut background = vec![tokio::spawn(async move {
        if let Err(error) = admin.serve(admin_router(admin_readiness, registry)).await {
            tracing::error!(%error, "admin server failed");
        }
    })];

    let caches = Caches::start(client.clone());
    let view: Arc<dyn ClusterView> = Arc::new(caches.clone());
    let api: Arc<dyn ApiAccess> = Arc::new(KubeApi::new(client));
    let units = UnitCreator::start(
        api.clone(),
        view.clone(),
        metrics.clone(),
        CreatorConfig {
            backlog: unit_backlog,
            namespace_backlog,
            max_background: max_background_calls,
            job_wait,
            ..CreatorConfig::new(max_concurrent_creates)
        },
    );
    let webhook = Arc::new(Webhook {
        policy: Policy {
            enabled_kinds: enabled_kinds.into_iter().collect(),
            default_queue,
            scheduler_user,
            scheduler_groups,
            allow_cross_namespace_quota,
            allow_system_priority_classes,
            review_pods,
        },
        view,
        api,
        metrics,
        units,
        review_timeout,
        synced: Default::default(),
        children: Default::default(),
    });
    {
        let (readiness, webhook) = (readiness.clone(), webhook.clone());
        background.push(tokio::spawn(async move {
            caches.synced().await;
            webhook
                .synced
                .store(true, std::sync::atomic::Ordering::Release);
            readiness.set(CACHES_SYNCED, true);
            tracing::info!("caches synced; ready");
        }));
    }

    let rustls = RustlsConfig::from_config(Arc::new(tls));
    background.push(tokio::spawn(server::reload_certificates(
        reloader,
        rustls.clone(),
        cert_reload_interval,
    )));

    let handle = axum_server::Handle::new();
    tracing::info!(%listen_addr, %admin_addr, "serving admission reviews");
    let app = router_with_limits(webhook.clone(), limits).map_err(|e| anyhow::anyhow!(e))?;
    let serving = tokio::spawn(serve_tls(
        listener,
        rustls,
        app,
        header_timeout,
        handle.clone(),
    ));
    Ok(Running {
        listen_addr,
        admin_addr,
        readiness,
        handle,
        webhook,
        drain_timeout,
        serving,
        background,
    })
}
