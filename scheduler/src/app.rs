//! Wiring of the scheduler process: configuration, watches, leader election,
//! the controller task, the admin server and shutdown.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koord_queue_runtime::{
    AdminServer, LeaderElector, LeaderHandle, LeaseConfig, Readiness, admin_router,
};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::Args;
use crate::controller::estimate::EstimateSettings;
use crate::controller::metrics::Metrics;
use crate::controller::writes::Writer;
use crate::controller::{Controller, Settings, sources};
use crate::core::{Core, SchedulerConfig};
use koord_queue_visibility::Queries;
use koord_queue_visibility::serve::Server as VisibilityServer;

/// The configuration used without `--config`: priority ordering and elastic
/// quotas with the root capacity taken from the root quota or the nodes.
pub const DEFAULT_CONFIG: &str =
    "plugins:\n- name: Priority\n- name: ElasticQuota\n  args:\n    rootCapacity: auto\n";

/// Visibility questions waiting for the controller at most; more are
/// answered 503 at once.
const QUERY_DEPTH: usize = 64;
/// How long a question may wait for the controller (it answers between two
/// inputs; a cycle over 100,000 units takes tens of milliseconds).
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// A started scheduler.
#[derive(Debug)]
pub struct Running {
    /// Bound admin address.
    pub admin_addr: SocketAddr,
    /// Readiness as `/readyz` reports it.
    pub readiness: Readiness,
    /// Bound address of the visibility API, when served.
    pub visibility_addr: Option<SocketAddr>,
    visibility: Option<VisibilityServer>,
    leader: LeaderHandle,
    stop: Option<oneshot::Sender<()>>,
    controller: tokio::task::JoinHandle<()>,
    drain: Duration,
}

impl Running {
    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    /// Becomes unready, stops the controller, lets in-flight writes settle
    /// briefly and gives the Lease up so a standby takes over at once.
    pub async fn shutdown(mut self) {
        self.readiness.start_draining();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(visibility) = self.visibility.take() {
            visibility.stop(self.drain);
        }
        let _ = tokio::time::timeout(self.drain, &mut self.controller).await;
        self.leader.release().await;
        tracing::info!("stopped");
    }

    /// Stops without releasing the Lease, as a crash would (tests).
    pub fn abort(self) {
        if let Some(visibility) = &self.visibility {
            visibility.stop(Duration::ZERO);
        }
        self.controller.abort();
        drop(self.leader);
    }
}

/// Starts the scheduler on the current runtime with `client`. Invalid
/// configuration stops it here, with the reason.
/// The core configured by the file at `config` (the default plugins without
/// one), and that configuration (the estimates build cores of their own).
fn load_core(config: Option<&std::path::Path>) -> anyhow::Result<(Core, SchedulerConfig)> {
    let config_text = match config {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read the configuration {}: {e}", path.display())
        })?,
        None => DEFAULT_CONFIG.to_string(),
    };
    let invalid = |e| anyhow::anyhow!("invalid configuration: {e}");
    let config = SchedulerConfig::from_yaml(&config_text).map_err(invalid)?;
    let core = Core::new(&config, &crate::core::Registry::with_builtins()).map_err(invalid)?;
    Ok((core, config))
}

/// The adapters of the `--enabled-kinds` extensions; an unknown one is an error.
fn enabled_adapters(
    enabled_kinds: &[String],
) -> anyhow::Result<Vec<&'static dyn koord_queue_api::jobs::JobAdapter>> {
    let per_kind = enabled_kinds
        .iter()
        .map(|k| {
            let found: Vec<_> = koord_queue_api::jobs::for_extension(k).collect();
            if found.is_empty() {
                Err(anyhow::anyhow!(
                    "--enabled-kinds: unknown kind {k:?} (known: {})",
                    koord_queue_api::jobs::extensions().join(", ")
                ))
            } else {
                Ok(found)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    // `pod` and `lws` both queue through the Pod kind: watched once.
    let mut adapters: Vec<&'static dyn koord_queue_api::jobs::JobAdapter> = Vec::new();
    for adapter in per_kind.into_iter().flatten() {
        if !adapters.iter().any(|a| a.kind() == adapter.kind()) {
            adapters.push(adapter);
        }
    }
    Ok(adapters)
}

pub async fn start(args: Args, client: kube::Client) -> anyhow::Result<Running> {
    let Args {
        config,
        admin_addr,
        enabled_kinds,
        namespace,
        lease_name,
        identity,
        lease_duration,
        renew_deadline,
        retry_period,
        orphan_grace,
        cycle_batch,
        write_concurrency,
        status_interval,
        job_events,
        strict_dequeue,
        strict_timeout,
        drain_timeout,
        estimates,
        estimate_cpu_share,
        estimate_interval,
        visibility_addr,
        visibility_cert_dir,
        log_format: _,
        log_level: _,
    } = args;
    let (core, config) = load_core(config.as_deref())?;
    tracing::info!(plugins = ?core.plugin_names(), "plugins");
    let adapters = enabled_adapters(&enabled_kinds)?;
    let identity = identity
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("koord-queue-scheduler-{}", std::process::id()));
    let lease = LeaseConfig {
        namespace: namespace.clone(),
        name: lease_name,
        identity: identity.clone(),
        lease_duration,
        renew_deadline,
        retry_period,
    };
    lease
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid leader election settings: {e}"))?;

    let admin = AdminServer::bind(admin_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the admin address {admin_addr}: {e}"))?;
    let admin_addr = admin.local_addr()?;
    let readiness = Readiness::new(&[
        crate::controller::CACHES_SYNCED,
        crate::controller::FIRST_CYCLE,
    ]);
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    tokio::spawn(admin.serve(admin_router(
        readiness.clone(),
        Arc::new(Mutex::new(registry)),
    )));

    let (input_tx, input_rx) = mpsc::channel(4096);
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let resource_quotas = core.plugin_names().contains(&"ResourceQuota");
    let source_names = sources::start(&client, &namespace, &adapters, resource_quotas, input_tx);
    let leader = LeaderElector::spawn(client.clone(), lease);
    let client_for_visibility = client.clone();
    let system_namespace = namespace.clone();
    let writer = Writer::new(
        client,
        leader.leadership(),
        write_concurrency,
        done_tx,
        metrics.clone(),
        identity,
        namespace.clone(),
    );
    let settings = Settings {
        namespace,
        orphan_grace,
        cycle_batch,
        status_interval,
        job_events,
        strict_default: strict_dequeue.then_some(strict_timeout),
        // Random per process, so that replicas' backoffs are not in step.
        jitter_salt: {
            use std::hash::BuildHasher as _;
            std::collections::hash_map::RandomState::new().hash_one(std::process::id())
        },
        estimates: estimates.then(|| {
            let mut settings = EstimateSettings::new(config);
            settings.cpu_share = estimate_cpu_share;
            settings.min_interval = estimate_interval;
            settings
        }),
    };
    let controller = Controller::new(
        core,
        settings,
        source_names,
        writer,
        leader.leadership(),
        metrics,
        readiness.clone(),
    );
    let (queries, query_rx) = Queries::channel(QUERY_DEPTH, QUERY_TIMEOUT);
    let visibility = match visibility_addr {
        Some(addr) => Some(
            VisibilityServer::start(
                addr,
                visibility_cert_dir,
                client_for_visibility,
                queries,
                &system_namespace,
            )
            .await?,
        ),
        None => None,
    };
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let leadership = leader.subscribe();
    let task = tokio::spawn(
        controller.run(input_rx, done_rx, leadership, query_rx, async move {
            let _ = stop_rx.await;
        }),
    );
    Ok(Running {
        visibility_addr: visibility.as_ref().map(|v| v.addr),
        visibility,
        admin_addr,
        readiness,
        leader,
        stop: Some(stop_tx),
        controller: task,
        drain: drain_timeout,
    })
}
