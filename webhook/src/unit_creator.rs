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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use koord_queue_api::QueueUnit;
use koord_queue_api::jobs::{self, JobAdapter};
use koord_queue_api::keys;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;

use crate::api_access::{ApiAccess, Created};
use crate::metrics::{BacklogRefusalLabels, CreateErrorLabels, Metrics, SkipLabels};
use crate::view::ClusterView;

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

/// How many units each namespace has in the backlog. An entry exists only
/// while its namespace has a unit there, so there are never more entries
/// than the backlog holds units, whatever namespaces reviews name.
struct NamespaceShares {
    counts: Mutex<HashMap<String, usize>>,
    limit: usize,
    metrics: Metrics,
}

/// One unit's place in its namespace's share; given back when dropped.
struct Share {
    shares: Arc<NamespaceShares>,
    namespace: String,
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Share").field(&self.namespace).finish()
    }
}

impl NamespaceShares {
    /// A place for one more unit of `namespace`, unless it holds its share.
    fn take(self: &Arc<Self>, namespace: &str) -> Option<Share> {
        // A poisoned lock only means another thread panicked between two
        // plain integer updates; the counts are still whole.
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(namespace.to_string()).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        self.metrics
            .unit_backlog_namespaces
            .set(i64::try_from(counts.len()).unwrap_or(i64::MAX));
        Some(Share {
            shares: self.clone(),
            namespace: namespace.to_string(),
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut counts = self
            .shares
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.namespace) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.namespace);
            }
        }
        self.shares
            .metrics
            .unit_backlog_namespaces
            .set(i64::try_from(counts.len()).unwrap_or(i64::MAX));
    }
}

/// Why a create failed.
#[derive(Debug)]
struct CreateError {
    /// What the user (or the log) is told.
    message: String,
    /// Whether trying again can help.
    retryable: bool,
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

/// Takes units from the backlog and creates each in its own task, at most
/// `max_in_flight` calls at a time; returns once the backlog is closed and done.
async fn dispatch(shared: Arc<Shared>, mut rx: mpsc::Receiver<Pending>) {
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(pending) = rx.recv().await {
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
        let shared = shared.clone();
        tasks.spawn(async move {
            tokio::time::sleep_until((pending.answered + shared.config.linger).into()).await;
            shared.create_for_stored_job(&pending).await;
            shared.metrics.unit_backlog.dec();
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// What one attempt came to.
enum Attempt {
    Done,
    /// The job is not (yet) in the API.
    NoJob,
    /// The job exists and names another unit: a forged or stale review.
    NotNamed,
    Failed(CreateError),
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

    /// Reads the job and creates its unit from what is stored; retried with
    /// backoff while the job has not appeared (up to `job_wait`) or the API
    /// fails (up to `give_up_after`).
    async fn create_for_stored_job(&self, pending: &Pending) {
        let mut delay = self.config.first_retry;
        loop {
            let attempt = {
                let Ok(_slot) = self.background.acquire().await else {
                    return;
                };
                self.attempt(pending).await
            };
            let waited = pending.answered.elapsed() + delay;
            match attempt {
                Attempt::Done => return,
                Attempt::NotNamed => {
                    self.count_skip("job-names-another-unit");
                    tracing::debug!(
                        namespace = %pending.namespace, job = %pending.job, unit = %pending.unit,
                        "the job names another QueueUnit; none created"
                    );
                    return;
                }
                Attempt::NoJob if waited > self.config.job_wait => {
                    self.count_skip("job-missing");
                    tracing::debug!(
                        namespace = %pending.namespace, job = %pending.job,
                        "the job did not appear; no QueueUnit created"
                    );
                    return;
                }
                Attempt::NoJob => {}
                Attempt::Failed(error) => {
                    if !error.retryable || waited > self.config.give_up_after {
                        tracing::error!(
                            error = %error.message,
                            "QueueUnit not created; its job stays held until the scheduler creates it"
                        );
                        return;
                    }
                    tracing::warn!(error = %error.message, retry_in = ?delay, "QueueUnit create failed; retrying");
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(self.config.max_retry);
        }
    }

    async fn attempt(&self, pending: &Pending) -> Attempt {
        let name = format!("{}/{}", pending.namespace, pending.unit);
        let api_error = |e: kube::Error, what: &str| CreateError {
            retryable: retryable(&e),
            message: format!(
                "cannot queue job {}/{}: {what}: {e}",
                pending.namespace, pending.job
            ),
        };
        if let Some(group) = &pending.group {
            // A later member: nothing to create if the group's unit exists
            // (one read instead of reading the pod, its LeaderWorkerSet and
            // a create refused as a conflict). Nothing is built from the
            // review either way.
            match self.api.get_unit(&pending.namespace, &pending.unit).await {
                Ok(Some(existing))
                    if existing.spec.consumer_ref.kind.as_deref()
                        == Some(jobs::pod_group::GROUP_KIND)
                        && existing.spec.consumer_ref.name.as_ref() == Some(group) =>
                {
                    return Attempt::Done;
                }
                Ok(_) => {}
                Err(e) => {
                    self.count_error("api");
                    return Attempt::Failed(api_error(e, "reading the group's unit failed"));
                }
            }
        }
        let mut stored = match self
            .api
            .get_job(pending.adapter.kind(), &pending.namespace, &pending.job)
            .await
        {
            Ok(Some(stored)) => stored,
            Ok(None) => return Attempt::NoJob,
            Err(e) => {
                self.count_error("api");
                return Attempt::Failed(api_error(e, "reading the job failed"));
            }
        };
        if jobs::annotation(&stored, keys::QUEUE_UNIT_ANNOTATION) != Some(pending.unit.as_str()) {
            return Attempt::NotNamed;
        }
        // Sized like at admission: with its runtime (a TrainJob).
        match crate::size_inputs::attach(
            self.api.as_ref(),
            pending.adapter,
            &pending.namespace,
            &mut stored,
        )
        .await
        {
            Ok(()) => {}
            Err(missing) => {
                let retryable = matches!(missing, crate::size_inputs::Missing::Unreadable(_));
                return Attempt::Failed(CreateError {
                    retryable,
                    message: format!(
                        "cannot queue job {}/{}: {}",
                        pending.namespace,
                        pending.job,
                        missing.message()
                    ),
                });
            }
        }
        let unit = match crate::stored_unit::build(
            pending.adapter,
            &stored,
            &pending.unit,
            self.view.as_ref(),
        ) {
            Ok(unit) => unit,
            Err(message) => {
                return Attempt::Failed(CreateError {
                    retryable: false,
                    message: format!(
                        "cannot queue job {}/{}: {message}",
                        pending.namespace, pending.job
                    ),
                });
            }
        };
        match self.api.create_unit(&unit).await {
            Ok(Created::New) => {
                self.healthy.store(true, Ordering::Release);
                Attempt::Done
            }
            // A retried admission call, or our own earlier attempt.
            Ok(Created::Existing(existing))
                if existing.spec.consumer_ref.name == unit.spec.consumer_ref.name
                    && existing.spec.consumer_ref.kind == unit.spec.consumer_ref.kind =>
            {
                Attempt::Done
            }
            Ok(Created::Existing(_)) => {
                self.count_error("conflict");
                Attempt::Failed(CreateError {
                    message: format!(
                        "cannot queue the job: QueueUnit {name} exists and belongs to another job"
                    ),
                    retryable: false,
                })
            }
            Err(e) => {
                self.count_error("api");
                Attempt::Failed(api_error(e, &format!("creating QueueUnit {name} failed")))
            }
        }
    }
}

/// Whether an API error may go away by itself: throttling, server errors,
/// timeouts and transport failures do; a refusal of the object does not.
fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicU32;

    use futures::future::BoxFuture;
    use koord_queue_api::jobs::JobKind;
    use kube::core::Status;
    use serde_json::{Value, json};
    use tokio::sync::Notify;

    use super::*;
    use crate::view::QuotaInfo;

    /// An API whose creates wait for `gate` (when set) and fail while
    /// `failing` is nonzero (that many times); jobs are those in `jobs`.
    #[derive(Default)]
    struct ScriptedApi {
        units: Mutex<BTreeMap<String, QueueUnit>>,
        jobs: Mutex<BTreeMap<String, Value>>,
        gate: Option<Arc<Notify>>,
        failing: AtomicU32,
        status: u16,
        dry_runs: AtomicU32,
    }

    impl ScriptedApi {
        fn fail(&self) -> Option<kube::Error> {
            self.failing
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
                .then(|| {
                    kube::Error::Api(
                        Status::failure("etcd is down", "InternalError")
                            .with_code(self.status)
                            .boxed(),
                    )
                })
        }

        /// Stores job `name` (held, naming unit `name`) as the API server would.
        fn store(&self, name: &str) {
            self.store_naming(name, name);
        }

        fn store_naming(&self, name: &str, unit: &str) {
            self.jobs.lock().unwrap().insert(
                name.into(),
                json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                        "labels": {"quota.scheduling.koordinator.sh/name": "q"},
                        "annotations": {"koord-queue/queue-unit": unit, "koord-queue/queue": "q"}},
                    "spec": {"suspend": true, "parallelism": 2, "template": {"spec": {
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
                }),
            );
        }
    }

    impl ApiAccess for ScriptedApi {
        fn create_unit<'a>(
            &'a self,
            unit: &'a QueueUnit,
        ) -> BoxFuture<'a, Result<Created, kube::Error>> {
            Box::pin(async move {
                if let Some(gate) = &self.gate {
                    gate.notified().await;
                }
                if let Some(e) = self.fail() {
                    return Err(e);
                }
                let name = unit.metadata.name.clone().unwrap_or_default();
                let mut units = self.units.lock().unwrap();
                Ok(match units.get(&name) {
                    Some(existing) => Created::Existing(Box::new(existing.clone())),
                    None => {
                        units.insert(name, unit.clone());
                        Created::New
                    }
                })
            })
        }
        fn check_unit_create<'a>(
            &'a self,
            _: &'a QueueUnit,
        ) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(async move {
                self.dry_runs.fetch_add(1, Ordering::AcqRel);
                match self.fail() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            })
        }
        fn get_unit<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<QueueUnit>, kube::Error>> {
            Box::pin(async { Ok(None) })
        }
        fn get_job<'a>(
            &'a self,
            _: &'static JobKind,
            _: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
            let job = self.jobs.lock().unwrap().get(name).cloned();
            Box::pin(async move { Ok(job) })
        }
        fn namespace_default_queue<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<String>, kube::Error>> {
            Box::pin(async { Ok(None) })
        }
        fn quota<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<QuotaInfo>, kube::Error>> {
            Box::pin(async { Ok(None) })
        }
        fn list_pods<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Vec<Value>, kube::Error>> {
            Box::pin(async { Ok(vec![]) })
        }
    }

    struct NoView;

    impl ClusterView for NoView {
        fn knows_namespace(&self, _: &str) -> bool {
            true
        }
        fn namespace_default_queue(&self, _: &str) -> Option<String> {
            None
        }
        fn quota(&self, _: &str) -> Option<QuotaInfo> {
            None
        }
        fn leaf_quotas(&self) -> Vec<String> {
            vec![]
        }
        fn priority_class_value(&self, _: &str) -> Option<i32> {
            None
        }
        fn global_default_priority(&self) -> Option<(String, i32)> {
            None
        }
    }

    /// The unit a review describes: forged content (no pods, priority 9).
    fn unit(name: &str) -> QueueUnit {
        let mut unit = QueueUnit::new(name, Default::default());
        unit.metadata.namespace = Some("ns".into());
        unit.spec.consumer_ref.name = Some(name.into());
        unit.spec.consumer_ref.kind = Some("Job".into());
        unit.spec.priority = Some(9);
        unit
    }

    fn job_adapter() -> &'static dyn JobAdapter {
        jobs::for_kind("batch", "Job").unwrap()
    }

    fn creator(api: Arc<ScriptedApi>, backlog: usize) -> (UnitCreator, Metrics) {
        let metrics = Metrics::register(&mut Default::default());
        let config = CreatorConfig {
            backlog,
            first_retry: Duration::from_millis(1),
            max_retry: Duration::from_millis(5),
            give_up_after: Duration::from_secs(5),
            job_wait: Duration::from_millis(200),
            ..CreatorConfig::new(4)
        };
        let view: Arc<dyn ClusterView> = Arc::new(NoView);
        (
            UnitCreator::start(api, view, metrics.clone(), config),
            metrics,
        )
    }

    #[tokio::test]
    async fn units_are_created_after_the_answer_from_the_stored_job() {
        let gate = Arc::new(Notify::new());
        let api = Arc::new(ScriptedApi {
            gate: Some(gate.clone()),
            ..Default::default()
        });
        let (creator, _) = creator(api.clone(), 16);
        // Answered before the job is even stored.
        creator
            .create(job_adapter(), &unit("a"), "a")
            .await
            .unwrap();
        api.store("a");
        gate.notify_one();
        creator.idle().await;
        let units = api.units.lock().unwrap();
        let created = &units["a"];
        // The stored job's content, not the review's.
        assert_eq!(created.spec.priority, Some(0));
        assert_eq!(created.spec.resource["cpu"].0, "2");
        assert_eq!(created.spec.queue, "q");
        let owner = &created.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Job", "uid-a"));
        assert_eq!(created.spec.consumer_ref.uid.as_deref(), Some("uid-a"));
    }

    #[tokio::test]
    async fn forged_reviews_create_nothing() {
        let api = Arc::new(ScriptedApi::default());
        let (creator, metrics) = creator(api.clone(), 16);
        // No such job; and a job that names another unit.
        api.store_naming("real", "real-own-unit");
        creator
            .create(job_adapter(), &unit("ghost"), "ghost")
            .await
            .unwrap();
        creator
            .create(job_adapter(), &unit("real"), "real")
            .await
            .unwrap();
        creator.idle().await;
        assert!(api.units.lock().unwrap().is_empty());
        let skipped = |reason: &str| {
            metrics
                .units_not_created
                .get_or_create(&SkipLabels {
                    reason: reason.into(),
                })
                .get()
        };
        assert_eq!(skipped("job-missing"), 1);
        assert_eq!(skipped("job-names-another-unit"), 1);
    }

    #[tokio::test]
    async fn after_a_failure_reviews_check_the_api_and_refuse_with_its_reason() {
        let api = Arc::new(ScriptedApi {
            failing: AtomicU32::new(u32::MAX),
            status: 500,
            ..Default::default()
        });
        api.store("a");
        let (creator, metrics) = creator(api.clone(), 16);
        // Accepted into the backlog; its first attempt fails: degraded.
        creator
            .create(job_adapter(), &unit("a"), "a")
            .await
            .unwrap();
        while creator.shared.healthy.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Degraded: the review asks the API and is refused with its reason.
        let message = creator
            .create(job_adapter(), &unit("b"), "b")
            .await
            .unwrap_err();
        assert!(message.contains("etcd is down"), "{message}");
        assert!(message.contains("QueueUnit ns/b"), "{message}");
        // The API recovers: the next review's check succeeds, which makes
        // the creator healthy again; the backlog unit is retried.
        api.failing.store(0, Ordering::Release);
        api.store("c");
        creator
            .create(job_adapter(), &unit("c"), "c")
            .await
            .unwrap();
        assert!(creator.shared.healthy.load(Ordering::Acquire));
        creator.idle().await;
        let units = api.units.lock().unwrap();
        assert_eq!(
            units.keys().cloned().collect::<Vec<_>>(),
            ["a", "c"],
            "the refused job's unit is not created"
        );
        assert!(api.dry_runs.load(Ordering::Acquire) >= 2);
        let failures = metrics
            .unit_create_errors
            .get_or_create(&CreateErrorLabels {
                reason: "api".into(),
            })
            .get();
        assert!(failures >= 2, "{failures}");
    }

    #[tokio::test]
    async fn a_full_backlog_refuses_jobs_until_it_drains() {
        let gate = Arc::new(Notify::new());
        let api = Arc::new(ScriptedApi {
            gate: Some(gate.clone()),
            ..Default::default()
        });
        for name in ["a", "b", "c"] {
            api.store(name);
        }
        let (creator, metrics) = creator(api.clone(), 2);
        creator
            .create(job_adapter(), &unit("a"), "a")
            .await
            .unwrap();
        creator
            .create(job_adapter(), &unit("b"), "b")
            .await
            .unwrap();
        // Both wait at the gate: the backlog counts units being created too,
        // so a flood of answered reviews cannot pile up tasks without end.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let refused = creator
            .create(job_adapter(), &unit("c"), "c")
            .await
            .unwrap_err();
        assert!(refused.contains("busy"), "{refused}");
        for _ in 0..2 {
            gate.notify_one();
        }
        creator.idle().await;
        // Room again.
        creator
            .create(job_adapter(), &unit("c"), "c")
            .await
            .unwrap();
        gate.notify_one();
        creator.idle().await;
        assert_eq!(api.units.lock().unwrap().len(), 3);
        assert_eq!(metrics.unit_backlog.get(), 0);
    }

    /// The unit of job `name` in namespace `namespace`.
    fn unit_in(namespace: &str, name: &str) -> QueueUnit {
        let mut unit = unit(name);
        unit.metadata.namespace = Some(namespace.into());
        unit
    }

    #[tokio::test]
    async fn one_namespace_filling_its_share_does_not_refuse_another() {
        // Creates never finish (until the gate opens): the backlog only fills.
        let gate = Arc::new(Notify::new());
        let api = Arc::new(ScriptedApi {
            gate: Some(gate.clone()),
            ..Default::default()
        });
        let metrics = Metrics::register(&mut Default::default());
        let config = CreatorConfig {
            backlog: 10,
            namespace_backlog: 3,
            ..CreatorConfig::new(4)
        };
        let view: Arc<dyn ClusterView> = Arc::new(NoView);
        let creator = UnitCreator::start(api.clone(), view, metrics.clone(), config);
        let create = |namespace: &'static str, name: String| {
            api.store(&name);
            let creator = &creator;
            async move {
                creator
                    .create(job_adapter(), &unit_in(namespace, &name), &name)
                    .await
            }
        };
        let refusals = |reason: &str| {
            metrics
                .unit_backlog_refusals
                .get_or_create(&BacklogRefusalLabels {
                    reason: reason.into(),
                })
                .get()
        };
        for i in 0..3 {
            create("greedy", format!("g{i}")).await.unwrap();
        }
        let refused = create("greedy", "g3".into()).await.unwrap_err();
        assert!(
            refused.contains("namespace greedy") && refused.contains("retry"),
            "{refused}"
        );
        // Every other namespace still gets in, up to its own share.
        for namespace in ["a", "b"] {
            for i in 0..3 {
                create(namespace, format!("{namespace}{i}")).await.unwrap();
            }
        }
        assert_eq!(metrics.unit_backlog_namespaces.get(), 3);
        assert_eq!(metrics.unit_backlog.get(), 9);
        assert_eq!(
            (refusals("namespace-share"), refusals("backlog-full")),
            (1, 0)
        );
        // The whole backlog stays the bound across namespaces.
        create("c", "c0".into()).await.unwrap();
        let full = create("d", "d0".into()).await.unwrap_err();
        assert!(full.contains("busy"), "{full}");
        assert_eq!(refusals("backlog-full"), 1);
        // Once the units are created the shares are free again, and no
        // namespace is remembered.
        while metrics.unit_backlog.get() > 0 {
            gate.notify_waiters();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        creator.idle().await;
        assert_eq!(metrics.unit_backlog_namespaces.get(), 0);
        assert!(creator.shared.shares.counts.lock().unwrap().is_empty());
        gate.notify_one();
        create("greedy", "g3".into()).await.unwrap();
    }

    #[tokio::test]
    async fn refusals_of_the_object_are_not_retried() {
        let api = Arc::new(ScriptedApi {
            failing: AtomicU32::new(100),
            status: 422,
            ..Default::default()
        });
        api.store("a");
        let (creator, _) = creator(api.clone(), 16);
        creator
            .create(job_adapter(), &unit("a"), "a")
            .await
            .unwrap();
        creator.idle().await;
        assert_eq!(api.failing.load(Ordering::Acquire), 99, "one attempt only");
    }

    #[tokio::test]
    async fn drain_creates_the_backlog_then_refuses() {
        let api = Arc::new(ScriptedApi::default());
        let (creator, _) = creator(api.clone(), 1000);
        for i in 0..200 {
            let name = format!("u{i}");
            api.store(&name);
            creator
                .create(job_adapter(), &unit(&name), &name)
                .await
                .unwrap();
        }
        creator.drain(Duration::from_secs(10)).await;
        assert_eq!(api.units.lock().unwrap().len(), 200);
        // Draining: no unit could be created after the answer any more.
        let refused = creator
            .create(job_adapter(), &unit("late"), "late")
            .await
            .unwrap_err();
        assert!(refused.contains("shutting down"), "{refused}");
    }
}
