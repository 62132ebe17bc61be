//! Creating a held job's QueueUnit once the job is stored (architecture §6,
//! docs/security.md "Forged reviews do nothing").
//!
//! A review is only a claim: whatever reaches the webhook port could be
//! forged. So a unit is created only after the job has been read back from
//! the API — it exists, and it names this unit in `koord-queue/queue-unit`
//! (which only the webhook's own patch of a real create sets) — and it is
//! built from that stored job, never from the review's content. It is
//! created owned by the job (its uid is known now), as the scheduler's
//! adoption would make it.
//!
//! Creating the unit inside the review would also put a nested API write on
//! the path of every job create (measured: 2.5× slower creates), so:
//! - **Healthy:** the unit goes to a bounded backlog and is created right
//!   after the answer, by at most `max_in_flight` concurrent calls, retried
//!   with backoff on errors.
//! - **Degraded** (the last create failed): the review asks the API server
//!   whether the unit could be created (`dryRun`) and refuses the job with
//!   the API's reason if not — fail closed. A success makes it healthy again.
//! - **Full backlog:** the job is refused ("busy; retry") rather than queued
//!   without end.
//! - **A namespace's share:** one namespace holds at most `namespace_backlog`
//!   units of the backlog; beyond it its jobs are refused (naming it,
//!   "retry"). Without the share one tenant's burst (or a slow API server
//!   for its jobs) could fill the whole backlog, and every other tenant's
//!   create would be refused as busy.
//! - **Lost backlog** (the process killed before its backlog was created;
//!   on SIGTERM it is drained): the scheduler creates the unit of a held job
//!   whose unit does not appear (architecture §4.6).
//!
//! `mod.rs` takes units into the backlog (or refuses them); `backlog.rs`
//! holds the namespaces' shares and works the backlog off, retrying;
//! `attempt.rs` is one attempt: read the job back, build, create.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_queue_api::QueueUnit;
use koord_queue_api::jobs::{self, JobAdapter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;

use crate::api_access::ApiAccess;
use crate::metrics::{BacklogRefusalLabels, CreateErrorLabels, Metrics, SkipLabels};
use crate::view::ClusterView;

mod attempt;
mod backlog;
#[cfg(test)]
mod tests;

use backlog::{NamespaceShares, Share, dispatch};

/// Tuning of a [`UnitCreator`].
#[derive(Clone, Copy, Debug)]
pub struct CreatorConfig {
    /// API calls in flight at most inside reviews (the nested-call bound:
    /// each holds a user's request open).
    pub max_in_flight: usize,
    /// API calls in flight at most after the answers (reading the job back,
    /// creating its unit): no request is held open for them, and each unit
    /// takes two calls, so a burst of job creates needs more of them than
    /// the nested bound allows.
    pub max_background: usize,
    /// Units waiting to be created after their answer at most; beyond it,
    /// jobs are refused until the backlog drains (back-pressure).
    pub backlog: usize,
    /// Units of one namespace in the backlog at most: its share, so that
    /// one namespace filling it leaves room for the others.
    pub namespace_backlog: usize,
    /// First retry delay of a failed call after the answer; it doubles.
    pub first_retry: Duration,
    /// Longest retry delay.
    pub max_retry: Duration,
    /// How long after the answer a create is retried before it is left to
    /// the scheduler's repair.
    pub give_up_after: Duration,
    /// How long the job may take to appear in the API after the answer; a
    /// job that does not (refused by a later admission step, or a forged
    /// review) gets no unit.
    pub job_wait: Duration,
    /// How long after the answer the first read starts at the earliest. The
    /// answered job is still being validated and stored by the API server;
    /// a call started at once competes with it for the same API server and
    /// etcd, and the job create a user waits for gets slower.
    pub linger: Duration,
}

impl CreatorConfig {
    /// Defaults for `max_in_flight` concurrent calls.
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            max_in_flight: max_in_flight.max(1),
            max_background: 128,
            backlog: 10_000,
            namespace_backlog: 1_000,
            first_retry: Duration::from_millis(50),
            max_retry: Duration::from_secs(2),
            give_up_after: Duration::from_secs(120),
            job_wait: Duration::from_secs(10),
            linger: Duration::from_millis(10),
        }
    }
}

/// The unit a review asked for: only names, the content comes from the
/// stored job.
#[derive(Debug)]
struct Pending {
    adapter: &'static dyn JobAdapter,
    namespace: String,
    job: String,
    unit: String,
    /// The unit is a pod group's, which every member names: the first
    /// member's admission creates it, the others' find it.
    group: Option<String>,
    answered: Instant,
    /// Its place in the backlog, given back once it is done with.
    _room: OwnedSemaphorePermit,
    /// Its place in its namespace's share, likewise.
    _share: Share,
}

/// State shared by the reviews and the background creates.
struct Shared {
    api: Arc<dyn ApiAccess>,
    view: Arc<dyn ClusterView>,
    metrics: Metrics,
    slots: Semaphore,
    /// One permit per call after an answer.
    background: Semaphore,
    /// One permit per unit waiting or being created after its answer.
    room: Arc<Semaphore>,
    /// Each namespace's units in the backlog.
    shares: Arc<NamespaceShares>,
    /// False after a failed call, until one succeeds.
    healthy: AtomicBool,
    config: CreatorConfig,
}

impl Shared {
    fn count_error(&self, reason: &str) {
        self.healthy.store(false, Ordering::Release);
        self.metrics
            .unit_create_errors
            .get_or_create(&CreateErrorLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    fn count_skip(&self, reason: &str) {
        self.metrics
            .units_not_created
            .get_or_create(&SkipLabels {
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// Creates QueueUnits for the reviews that hold jobs.
pub struct UnitCreator {
    shared: Arc<Shared>,
    /// The backlog; `None` once draining.
    backlog: Mutex<Option<mpsc::Sender<Pending>>>,
    dispatcher: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for UnitCreator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnitCreator")
            .field("config", &self.shared.config)
            .field("healthy", &self.shared.healthy.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl UnitCreator {
    /// Starts the background creates on the current runtime.
    pub fn start(
        api: Arc<dyn ApiAccess>,
        view: Arc<dyn ClusterView>,
        metrics: Metrics,
        config: CreatorConfig,
    ) -> Self {
        let shared = Arc::new(Shared {
            api,
            view,
            metrics: metrics.clone(),
            slots: Semaphore::new(config.max_in_flight.max(1)),
            background: Semaphore::new(config.max_background.max(1)),
            room: Arc::new(Semaphore::new(config.backlog.max(1))),
            shares: Arc::new(NamespaceShares {
                counts: Mutex::default(),
                limit: config.namespace_backlog.max(1),
                metrics,
            }),
            healthy: AtomicBool::new(true),
            config,
        });
        let (tx, rx) = mpsc::channel(config.backlog.max(1));
        let dispatcher = tokio::spawn(dispatch(shared.clone(), rx));
        Self {
            shared,
            backlog: Mutex::new(Some(tx)),
            dispatcher: Mutex::new(Some(dispatcher)),
        }
    }

    /// Sees that `unit` (as the review describes it) gets created once its
    /// job is stored. `Err` is the reason to refuse the job with: the API
    /// would not take the unit (degraded), the backlog is full, or the
    /// webhook is shutting down.
    pub async fn create(
        &self,
        adapter: &'static dyn JobAdapter,
        unit: &QueueUnit,
        job: &str,
    ) -> Result<(), String> {
        if !self.shared.healthy.load(Ordering::Acquire) {
            let Ok(_slot) = self.shared.slots.acquire().await else {
                return Err("the webhook is shutting down; retry".into());
            };
            match self.shared.api.check_unit_create(unit).await {
                Ok(()) => self.shared.healthy.store(true, Ordering::Release),
                Err(e) => {
                    self.shared.count_error("api");
                    return Err(format!(
                        "cannot queue the job: the API server would not create QueueUnit {}: {e}",
                        describe(unit)
                    ));
                }
            }
        }
        let refused = |reason: &str| {
            self.shared
                .metrics
                .unit_backlog_refusals
                .get_or_create(&BacklogRefusalLabels {
                    reason: reason.to_string(),
                })
                .inc();
        };
        let busy = || {
            refused("backlog-full");
            format!(
                "Koord-Queue's webhook is busy: {} QueueUnits wait to be created; retry",
                self.shared.config.backlog
            )
        };
        let namespace = unit.metadata.namespace.clone().unwrap_or_default();
        // The namespace's share first: a namespace at its share is refused
        // without taking room another namespace could use.
        let Some(share) = self.shared.shares.take(&namespace) else {
            refused("namespace-share");
            return Err(format!(
                "namespace {namespace} has {} QueueUnits waiting to be created, its share of \
                 Koord-Queue's backlog; retry once they are created",
                self.shared.shares.limit
            ));
        };
        let Ok(room) = self.shared.room.clone().try_acquire_owned() else {
            return Err(busy());
        };
        let pending = Pending {
            _room: room,
            _share: share,
            adapter,
            namespace,
            job: job.to_string(),
            unit: unit.metadata.name.clone().unwrap_or_default(),
            group: (unit.spec.consumer_ref.kind.as_deref() == Some(jobs::pod_group::GROUP_KIND))
                .then(|| unit.spec.consumer_ref.name.clone().unwrap_or_default()),
            answered: Instant::now(),
        };
        let sender = self.backlog.lock().ok().and_then(|tx| tx.clone());
        let Some(sender) = sender else {
            return Err("the webhook is shutting down; retry".into());
        };
        match sender.try_send(pending) {
            Ok(()) => {
                self.shared.metrics.unit_backlog.inc();
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(busy()),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Err("the webhook is shutting down; retry".into())
            }
        }
    }

    /// Stops taking units into the backlog and waits (at most `timeout`)
    /// until the backlog has been created. Units left over are reported;
    /// the scheduler creates them.
    pub async fn drain(&self, timeout: Duration) {
        drop(self.backlog.lock().ok().and_then(|mut tx| tx.take()));
        let dispatcher = self.dispatcher.lock().ok().and_then(|mut d| d.take());
        let Some(mut dispatcher) = dispatcher else {
            return;
        };
        if tokio::time::timeout(timeout, &mut dispatcher)
            .await
            .is_err()
        {
            dispatcher.abort();
            tracing::warn!(
                left = self.shared.metrics.unit_backlog.get(),
                "QueueUnits not created before shutdown; the scheduler creates them for their held jobs"
            );
        }
    }

    /// Waits until the backlog is empty and nothing is in flight.
    #[cfg(test)]
    async fn idle(&self) {
        while self.shared.metrics.unit_backlog.get() > 0
            || self.shared.slots.available_permits() < self.shared.config.max_in_flight
            || self.shared.background.available_permits() < self.shared.config.max_background
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

fn describe(unit: &QueueUnit) -> String {
    format!(
        "{}/{}",
        unit.metadata.namespace.as_deref().unwrap_or(""),
        unit.metadata.name.as_deref().unwrap_or("")
    )
}
