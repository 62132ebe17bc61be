//! Creating a held job's QueueUnit, after the review is answered when that
//! is safe (design §6).
//!
//! Creating the unit inside the review puts a second API write — a request
//! nested inside the user's open job create — on the path of every job:
//! measured, job creates took 2.5× as long as without the webhook. The hold
//! patch alone already keeps the job from running unqueued; what must never
//! happen is a held job that nobody queues, or a job admitted although its
//! unit cannot be created. So:
//! - **Healthy:** the unit goes to a bounded backlog and is created right
//!   after the answer, by at most `max_in_flight` concurrent calls, retried
//!   with backoff on errors.
//! - **Degraded** (the last create failed, or the backlog is full): the unit
//!   is created inside the review and the job is refused with the API's
//!   reason if that fails — fail closed. The first success makes it healthy
//!   again.
//! - **Lost backlog** (the process killed before its backlog was created;
//!   on SIGTERM it is drained): the scheduler creates the unit of a held job
//!   whose unit does not appear (design §4.6).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_queue_api::QueueUnit;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use crate::api_access::{ApiAccess, Created};
use crate::metrics::{CreateErrorLabels, Metrics};

/// Tuning of a [`UnitCreator`].
#[derive(Clone, Copy, Debug)]
pub struct CreatorConfig {
    /// Creates in flight at most (inside reviews and after them together).
    pub max_in_flight: usize,
    /// Units waiting to be created after their answer at most; beyond it,
    /// reviews create their unit themselves (back-pressure on job creates).
    pub backlog: usize,
    /// First retry delay of a failed create after the answer; it doubles.
    pub first_retry: Duration,
    /// Longest retry delay.
    pub max_retry: Duration,
    /// How long a create after the answer is retried before it is left to
    /// the scheduler's repair.
    pub give_up_after: Duration,
    /// How long after the answer a create starts at the earliest. The
    /// answered job is still being validated and stored by the API server;
    /// a unit create started at once competes with it for the same API
    /// server and etcd, and the job create a user waits for gets slower.
    pub linger: Duration,
}

impl CreatorConfig {
    /// Defaults for `max_in_flight` concurrent creates.
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            max_in_flight: max_in_flight.max(1),
            backlog: 10_000,
            first_retry: Duration::from_millis(100),
            max_retry: Duration::from_secs(5),
            give_up_after: Duration::from_secs(120),
            linger: Duration::from_millis(10),
        }
    }
}

/// Why a create failed.
#[derive(Debug)]
struct CreateError {
    /// Metric label: `api` or `conflict`.
    reason: &'static str,
    /// What the user (or the log) is told.
    message: String,
    /// Whether trying again can help.
    retryable: bool,
}

/// State shared by the reviews and the background creates.
struct Shared {
    api: Arc<dyn ApiAccess>,
    metrics: Metrics,
    slots: Semaphore,
    /// False after a failed create, until one succeeds.
    healthy: AtomicBool,
    config: CreatorConfig,
}

/// Creates QueueUnits for the reviews that hold jobs.
pub struct UnitCreator {
    shared: Arc<Shared>,
    /// The backlog; `None` once draining.
    backlog: Mutex<Option<mpsc::Sender<(Instant, QueueUnit)>>>,
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
    pub fn start(api: Arc<dyn ApiAccess>, metrics: Metrics, config: CreatorConfig) -> Self {
        let shared = Arc::new(Shared {
            api,
            metrics,
            slots: Semaphore::new(config.max_in_flight.max(1)),
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

    /// Sees that `unit` gets created: handed to the backlog when creates
    /// are succeeding (`Ok` at once), else created now (`Err` with the
    /// reason to refuse the job with when that fails).
    pub async fn create(&self, unit: QueueUnit) -> Result<(), String> {
        let mut unit = unit;
        if self.shared.healthy.load(Ordering::Acquire) {
            let sender = self.backlog.lock().ok().and_then(|tx| tx.clone());
            if let Some(sender) = sender {
                match sender.try_send((Instant::now(), unit)) {
                    Ok(()) => {
                        self.shared.metrics.unit_backlog.inc();
                        return Ok(());
                    }
                    Err(
                        mpsc::error::TrySendError::Full((_, u))
                        | mpsc::error::TrySendError::Closed((_, u)),
                    ) => {
                        unit = u;
                    }
                }
            }
        }
        let Ok(_slot) = self.shared.slots.acquire().await else {
            return Err("the webhook is shutting down; retry".into());
        };
        match self.shared.create_once(&unit).await {
            Ok(()) => Ok(()),
            Err(error) => Err(error.message),
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
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Takes units from the backlog and creates each in its own task, at most
/// `max_in_flight` at a time; returns once the backlog is closed and done.
async fn dispatch(shared: Arc<Shared>, mut rx: mpsc::Receiver<(Instant, QueueUnit)>) {
    let mut tasks = tokio::task::JoinSet::new();
    while let Some((answered, unit)) = rx.recv().await {
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
        let shared = shared.clone();
        tasks.spawn(async move {
            tokio::time::sleep_until((answered + shared.config.linger).into()).await;
            shared.create_with_retries(unit).await;
            shared.metrics.unit_backlog.dec();
        });
    }
    while tasks.join_next().await.is_some() {}
}

impl Shared {
    /// One create; success makes the creator healthy, failure degraded.
    async fn create_once(&self, unit: &QueueUnit) -> Result<(), CreateError> {
        let result = self.try_create(unit).await;
        match &result {
            Ok(()) => self.healthy.store(true, Ordering::Release),
            Err(error) => {
                self.healthy.store(false, Ordering::Release);
                self.metrics
                    .unit_create_errors
                    .get_or_create(&CreateErrorLabels {
                        reason: error.reason.to_string(),
                    })
                    .inc();
            }
        }
        result
    }

    async fn try_create(&self, unit: &QueueUnit) -> Result<(), CreateError> {
        let name = format!(
            "{}/{}",
            unit.metadata.namespace.as_deref().unwrap_or(""),
            unit.metadata.name.as_deref().unwrap_or("")
        );
        match self.api.create_unit(unit).await {
            Ok(Created::New) => Ok(()),
            // A retried admission call, or our own earlier attempt.
            Ok(Created::Existing(existing))
                if existing.spec.consumer_ref == unit.spec.consumer_ref =>
            {
                Ok(())
            }
            Ok(Created::Existing(_)) => Err(CreateError {
                reason: "conflict",
                message: format!(
                    "cannot queue the job: QueueUnit {name} exists and belongs to another job"
                ),
                retryable: false,
            }),
            Err(e) => Err(CreateError {
                reason: "api",
                retryable: retryable(&e),
                message: format!("cannot queue the job: creating QueueUnit {name} failed: {e}"),
            }),
        }
    }

    /// Creates a unit whose job has been answered already: retried with
    /// backoff until it succeeds, fails for good, or `give_up_after` passes.
    async fn create_with_retries(&self, unit: QueueUnit) {
        let started = Instant::now();
        let mut delay = self.config.first_retry;
        loop {
            let result = {
                let Ok(_slot) = self.slots.acquire().await else {
                    return;
                };
                self.create_once(&unit).await
            };
            let error = match result {
                Ok(()) => return,
                Err(error) => error,
            };
            if !error.retryable || started.elapsed() + delay > self.config.give_up_after {
                tracing::error!(
                    error = %error.message,
                    "QueueUnit not created; its job stays held until the scheduler creates it"
                );
                return;
            }
            tracing::warn!(error = %error.message, retry_in = ?delay, "QueueUnit create failed; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(self.config.max_retry);
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
    use kube::core::Status;
    use tokio::sync::Notify;

    use super::*;

    /// An API whose creates wait for `gate` (when set) and fail while
    /// `failing` is nonzero (that many times).
    #[derive(Default)]
    struct ScriptedApi {
        units: Mutex<BTreeMap<String, QueueUnit>>,
        gate: Option<Arc<Notify>>,
        failing: AtomicU32,
        status: u16,
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
                if self
                    .failing
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
                {
                    return Err(kube::Error::Api(
                        Status::failure("etcd is down", "InternalError")
                            .with_code(self.status)
                            .boxed(),
                    ));
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
        fn get_unit<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Option<QueueUnit>, kube::Error>> {
            Box::pin(async { Ok(None) })
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
        ) -> BoxFuture<'a, Result<Option<crate::view::QuotaInfo>, kube::Error>> {
            Box::pin(async { Ok(None) })
        }
    }

    fn unit(name: &str) -> QueueUnit {
        let mut unit = QueueUnit::new(name, Default::default());
        unit.metadata.namespace = Some("ns".into());
        unit.spec.consumer_ref.name = Some(name.into());
        unit
    }

    fn creator(api: Arc<ScriptedApi>, backlog: usize) -> (UnitCreator, Metrics) {
        let metrics = Metrics::register(&mut Default::default());
        let config = CreatorConfig {
            backlog,
            first_retry: Duration::from_millis(1),
            max_retry: Duration::from_millis(5),
            give_up_after: Duration::from_secs(5),
            ..CreatorConfig::new(4)
        };
        (UnitCreator::start(api, metrics.clone(), config), metrics)
    }

    #[tokio::test]
    async fn healthy_creates_happen_after_the_answer() {
        let gate = Arc::new(Notify::new());
        let api = Arc::new(ScriptedApi {
            gate: Some(gate.clone()),
            ..Default::default()
        });
        let (creator, _) = creator(api.clone(), 16);
        // Answered while the API call has not even completed.
        creator.create(unit("a")).await.unwrap();
        assert!(api.units.lock().unwrap().is_empty());
        gate.notify_one();
        creator.idle().await;
        assert!(api.units.lock().unwrap().contains_key("a"));
    }

    #[tokio::test]
    async fn after_a_failure_reviews_create_themselves_and_refuse_with_the_reason() {
        let api = Arc::new(ScriptedApi {
            failing: AtomicU32::new(u32::MAX),
            status: 500,
            ..Default::default()
        });
        let (creator, metrics) = creator(api.clone(), 16);
        // Accepted into the backlog; its first attempt fails: degraded.
        creator.create(unit("a")).await.unwrap();
        while creator.shared.healthy.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Degraded: the review creates the unit itself and is refused with
        // the API's reason.
        let message = creator.create(unit("b")).await.unwrap_err();
        assert!(message.contains("etcd is down"), "{message}");
        assert!(message.contains("QueueUnit ns/b"), "{message}");
        // The API recovers: the next review's own create succeeds, which
        // makes the creator healthy again; the backlog unit is retried.
        api.failing.store(0, Ordering::Release);
        creator.create(unit("c")).await.unwrap();
        assert!(api.units.lock().unwrap().contains_key("c"));
        assert!(creator.shared.healthy.load(Ordering::Acquire));
        creator.create(unit("d")).await.unwrap();
        creator.idle().await;
        let units = api.units.lock().unwrap();
        assert_eq!(
            units.keys().cloned().collect::<Vec<_>>(),
            ["a", "c", "d"],
            "the refused job's unit is not created"
        );
        let failures = metrics
            .unit_create_errors
            .get_or_create(&CreateErrorLabels {
                reason: "api".into(),
            })
            .get();
        assert!(failures >= 2, "{failures}");
    }

    #[tokio::test]
    async fn a_full_backlog_makes_reviews_create_themselves() {
        let gate = Arc::new(Notify::new());
        let api = Arc::new(ScriptedApi {
            gate: Some(gate.clone()),
            ..Default::default()
        });
        let (creator, metrics) = creator(api.clone(), 1);
        creator.create(unit("a")).await.unwrap();
        // Let the dispatcher take "a" (its create then waits at the gate).
        tokio::time::sleep(Duration::from_millis(20)).await;
        creator.create(unit("b")).await.unwrap();
        // The backlog (1) holds at most one waiting unit; a third review
        // must wait for its own create instead of piling up.
        let third = creator.create(unit("c"));
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut third)
                .await
                .is_err(),
            "a review with a full backlog waits for its own create"
        );
        for _ in 0..3 {
            gate.notify_one();
        }
        third.await.unwrap();
        for _ in 0..3 {
            gate.notify_one();
        }
        creator.idle().await;
        assert_eq!(api.units.lock().unwrap().len(), 3);
        assert_eq!(metrics.unit_backlog.get(), 0);
    }

    #[tokio::test]
    async fn refusals_of_the_object_are_not_retried() {
        let api = Arc::new(ScriptedApi {
            failing: AtomicU32::new(100),
            status: 422,
            ..Default::default()
        });
        let (creator, _) = creator(api.clone(), 16);
        creator.create(unit("a")).await.unwrap();
        creator.idle().await;
        assert_eq!(api.failing.load(Ordering::Acquire), 99, "one attempt only");
    }

    #[tokio::test]
    async fn drain_creates_the_backlog_before_returning() {
        let api = Arc::new(ScriptedApi::default());
        let (creator, _) = creator(api.clone(), 1000);
        for i in 0..200 {
            creator.create(unit(&format!("u{i}"))).await.unwrap();
        }
        creator.drain(Duration::from_secs(10)).await;
        assert_eq!(api.units.lock().unwrap().len(), 200);
        // Draining: reviews now create their unit themselves.
        creator.create(unit("late")).await.unwrap();
        assert!(api.units.lock().unwrap().contains_key("late"));
    }
}
