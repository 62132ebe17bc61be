//! API writes of the controller, run asynchronously with bounded concurrency.
//! Every write first checks that this replica still leads: a replica that
//! lost the Lease stops writing at once. Results return to the controller
//! as [`Written`] so it can confirm or roll back its bookkeeping.
//!
//! Writes wait in lanes by urgency and a free slot always takes the most
//! urgent one: a burst of new jobs (adoptions) or of position updates and
//! Events must not delay releases and the phases that free quota, or the
//! cluster idles while the API server works through bookkeeping. Events
//! are best effort: beyond [`EVENT_BACKLOG`] waiting, new ones are dropped.
//!
//! Some writes can be withdrawn while they wait ([`Claim`]): a unit's
//! Enqueued status that a release makes moot, a Running phase that the job's
//! end makes moot. Under load they wait longest, so the busier the API
//! server, the more of them are never sent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, QueueUnitPhase};
use koord_queue_api::{Queue, QueueStatus, QueueUnit, WriteAck};
use koord_queue_runtime::Leadership;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

pub use super::job_ref::JobRef;
use super::metrics::Metrics;
use super::records::{Key, hold_release_patches};

/// A write the controller wants.
#[derive(Debug, Clone)]
pub enum Write {
    /// Adopt a unit: owner reference to its job (architecture §4.6).
    Adopt {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
    },
    /// Phase Enqueued for an adopted unit that was not released at once.
    Enqueue {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
        /// Status message.
        message: String,
    },
    /// Release: unit status Dequeued with admissions, then lift the job's hold.
    Release {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
        /// What is held, per pod set (`None`: keep what the unit holds, for a
        /// Reserved unit whose checks passed).
        admissions: Option<Vec<Admission>>,
        /// `status.attempts` after this release (`None`: keep).
        attempts: Option<i64>,
        /// Reserved (quota only, checks pending), Dequeued or SchedReady.
        phase: QueueUnitPhase,
        /// The admission checks to start (`Some` with Reserved).
        checks: Option<Vec<AdmissionCheckState>>,
        /// Status message.
        message: String,
    },
    /// Send the unit back: (optionally) hold its job again, free its quota,
    /// TimeoutBackoff until `requeue_at`.
    Backoff {
        /// The unit.
        unit: Key,
        /// The job to hold again, when it was released.
        job: Option<JobRef>,
        /// A phase to pass through first (SchedFailed).
        via: Option<QueueUnitPhase>,
        /// Condition reason: Reclaimed, AdmissionCheck, SchedulingTimeout, RunningTimeout.
        reason: &'static str,
        /// Status message.
        message: String,
        /// `requeueState.count` after this backoff.
        count: i32,
        /// When the unit may wait again.
        requeue_at: Time,
    },
    /// Set the unit's phase (and clear or keep its admissions).
    Phase {
        /// The unit.
        unit: Key,
        /// The new phase.
        phase: QueueUnitPhase,
        /// `Some(vec![])` clears the admissions (quota freed).
        admissions: Option<Vec<Admission>>,
        /// Status message.
        message: String,
    },
    /// Hold the job again (it runs without holding quota).
    HoldJob {
        /// The unit, for the result.
        unit: Key,
        /// The job.
        job: JobRef,
    },
    /// Create the unit of a held job whose unit never appeared (the webhook
    /// answered but did not create it).
    RecreateUnit {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
    },
    /// Publish a waiting unit's place and reason.
    Visibility {
        /// The unit.
        unit: Key,
        /// Position in its queue.
        position: Option<i64>,
        /// Reason.
        message: String,
    },
    /// Delete a unit (its job is gone, or it is an orphan).
    DeleteUnit {
        /// The unit.
        unit: Key,
    },
    /// Create (or update the policy of) the Queue kept for an ElasticQuota.
    EnsureQueue {
        /// Queue name.
        name: String,
        /// Its body.
        queue: Box<Queue>,
        /// Whether it exists already (patch instead of create).
        exists: bool,
    },
    /// Delete a Queue.
    DeleteQueue {
        /// Queue name.
        name: String,
    },
    /// Write a Queue's status.
    QueueStatus {
        /// Queue name.
        name: String,
        /// The status.
        status: Box<QueueStatus>,
    },
    /// An Event on a job (or a quota).
    Event {
        /// The object it is about.
        regarding: ObjectReference,
        /// Normal or Warning.
        warning: bool,
        /// PascalCase reason.
        reason: &'static str,
        /// Message.
        note: String,
    },
}

/// How a write ended.
#[derive(Debug)]
pub enum Outcome {
    /// Done; the unit's new resourceVersion when the unit was written.
    Done(Option<u64>),
    /// The object is gone.
    Gone,
    /// Not written: this replica does not lead.
    NotLeader,
    /// Failed.
    Failed(String),
}

/// A finished write.
#[derive(Debug)]
pub struct Written {
    /// What was asked.
    pub write: Write,
    /// How it ended.
    pub outcome: Outcome,
}

/// How urgent a write is; lower is served first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// Releases, phases that free quota, holds, deletions, Queues.
    Lifecycle = 0,
    /// Adoptions: a new unit joins its queue.
    Adoption = 1,
    /// Positions, reasons, Queue status, and the phases that change
    /// nothing held (Enqueued before a release, Running).
    Visibility = 2,
    /// Events on jobs (best effort, see [`EVENT_BACKLOG`]).
    Events = 3,
}

const LANES: usize = 4;

/// Events waiting at most; more are dropped (and counted), as client-go's
/// event broadcaster does: Events are a courtesy to people, and an API
/// server already behind must not be made to fall further behind for them.
pub const EVENT_BACKLOG: usize = 1000;

/// Capacity a lane of the backlog keeps however empty it gets.
const LANE_KEPT_CAPACITY: usize = 1024;

/// Who gets a withdrawable write: the slot that would perform it or the
/// controller that withdraws it, whichever takes it first; the other learns
/// that it lost.
#[derive(Clone, Debug, Default)]
pub struct Claim(Arc<AtomicBool>);

impl Claim {
    /// Takes the write; false when the other side took it already.
    pub fn take(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }
}

/// How long recent writes took (ms, exponentially weighted): while the API
/// server is slow, the controller holds back the writes it can do without.
#[derive(Clone, Debug, Default)]
pub struct WriteLatency(Arc<AtomicU64>);

impl WriteLatency {
    fn observe(&self, took: Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        // Slots race here; a lost update only delays the average a little.
        let old = self.0.load(Ordering::Relaxed);
        let new = old.saturating_mul(7).saturating_add(ms) / 8;
        self.0.store(new, Ordering::Relaxed);
    }

    /// The current average, in milliseconds.
    pub fn millis(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A write waiting for a slot.
#[derive(Debug)]
struct Queued {
    write: Write,
    /// Set for a withdrawable write.
    claim: Option<Claim>,
}

/// How long a unit's next write waits at most for the watch to show the
/// unit's previous write (see [`Backlog::settling`]): a watch that lags or
/// restarts delays writes by this much, never stops them.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often an idle slot looks again while writes wait only for units to
/// settle (a settle that times out sends no notification).
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// Writes waiting for a slot, one FIFO per lane. A withdrawn write stays
/// in its lane until a slot pops and skips it.
#[derive(Debug, Default)]
struct Backlog {
    lanes: [VecDeque<Queued>; LANES],
    /// Units with a write in flight: their next write waits for it.
    in_flight: HashSet<Key>,
    /// Units written whose watch event of that write the controller has not
    /// seen yet, with the time their next write goes anyway. The API server
    /// checks an update against its watch cache first: a write that follows
    /// the previous one before the cache holds it fails that check and is
    /// done a second time against etcd (an adoption and the release right
    /// after it did so for a fifth of all releases). The scheduler's own watch
    /// is served from that cache, so once it shows the write, the cache
    /// holds it.
    settling: HashMap<Key, Instant>,
    /// `settling`'s size after its last purge of timed-out units.
    settling_purged_at: usize,
}

impl Backlog {
    /// Queues `write` in its lane; false when it is an Event and too many
    /// are waiting already (it is dropped).
    fn push(&mut self, write: Write, claim: Option<Claim>) -> bool {
        let lane = write.lane();
        let queue = &mut self.lanes[lane as usize];
        if lane == Lane::Events && queue.len() >= EVENT_BACKLOG {
            return false;
        }
        queue.push_back(Queued { write, claim });
        true
    }

    /// The most urgent write still wanted whose unit has no write in
    /// flight and has settled (or timed out settling) by `now`. Two writes
    /// to one unit at once (say, its adoption and its release) make the API
    /// server retry one of them after a resourceVersion conflict: a second
    /// full update for nothing.
    fn pop(&mut self, now: Instant) -> Option<Write> {
        let Self {
            lanes,
            in_flight,
            settling,
            ..
        } = self;
        for lane in lanes.iter_mut() {
            let mut at = 0;
            while let Some(queued) = lane.get(at) {
                let busy = |unit: &Key| {
                    in_flight.contains(unit) || settling.get(unit).is_some_and(|until| now < *until)
                };
                if queued.write.unit().is_some_and(busy) {
                    at += 1;
                    continue;
                }
                let Some(Queued { write, claim }) = lane.remove(at) else {
                    break;
                };
                // A lane keeps its largest size otherwise: the adoptions of
                // 100,000 units found at start take 26 MB (200 bytes a write),
                // held for good once they are done.
                if lane.capacity() > LANE_KEPT_CAPACITY && lane.len() < lane.capacity() / 4 {
                    lane.shrink_to(lane.len() * 2);
                }
                if claim.is_none_or(|c| c.take()) {
                    if let Some(unit) = write.unit() {
                        settling.remove(unit);
                        in_flight.insert(unit.clone());
                    }
                    return Some(write);
                }
            }
        }
        None
    }

    /// `write` is done: its unit's next write may go once the unit has
    /// settled, when the write changed it (`outcome`), else at once.
    fn finish(&mut self, write: &Write, outcome: &Outcome, now: Instant) {
        let Some(unit) = write.unit() else {
            return;
        };
        self.in_flight.remove(unit);
        if let Outcome::Done(Some(_)) = outcome {
            self.settling.insert(unit.clone(), now + SETTLE_TIMEOUT);
            // Units that never settle (deleted, or their watch restarted)
            // time out; their entries go here, amortized over the inserts.
            if self.settling.len() > 2 * self.settling_purged_at.max(512) {
                self.settling.retain(|_, until| now < *until);
                self.settling_purged_at = self.settling.len();
            }
        }
    }

    /// The controller's watch shows `unit`'s last write: its next write
    /// may go. True when a write may have waited for this.
    fn settled(&mut self, unit: &Key) -> bool {
        self.settling.remove(unit).is_some()
    }

    /// Writes wait and some unit is settling: a settle that times out may
    /// let one go without a notification, so an idle slot looks again.
    fn only_settling_waits(&self) -> bool {
        self.len() > 0 && !self.settling.is_empty()
    }

    fn len(&self) -> i64 {
        self.lanes
            .iter()
            .map(|l| i64::try_from(l.len()).unwrap_or(i64::MAX))
            .sum()
    }
}

/// Runs writes.
#[derive(Clone)]
pub struct Writer {
    client: kube::Client,
    leader: Leadership,
    backlog: Arc<Mutex<Backlog>>,
    ready: Arc<Notify>,
    done: mpsc::UnboundedSender<Written>,
    metrics: Metrics,
    identity: String,
    namespace: String,
    latency: WriteLatency,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

const FIELD_MANAGER: &str = "koord-queue-scheduler";

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn split(unit: &Key) -> (&str, &str) {
    unit.split_once('/').unwrap_or(("", unit))
}

fn outcome_of(error: kube::Error) -> Outcome {
    match error {
        kube::Error::Api(e) if e.code == 404 => Outcome::Gone,
        e => Outcome::Failed(e.to_string()),
    }
}

impl Writer {
    /// A writer sending results to `done`, at most `concurrency` writes at
    /// once (that many workers, which stop when `done` is closed). Must be
    /// called on a tokio runtime.
    pub fn new(
        client: kube::Client,
        leader: Leadership,
        concurrency: usize,
        done: mpsc::UnboundedSender<Written>,
        metrics: Metrics,
        identity: String,
        namespace: String,
    ) -> Self {
        let this = Self {
            client,
            leader,
            backlog: Arc::default(),
            ready: Arc::new(Notify::new()),
            done,
            metrics,
            identity,
            namespace,
            latency: WriteLatency::default(),
        };
        for _ in 0..concurrency.max(1) {
            tokio::spawn(this.clone().work());
        }
        this
    }

    /// How long recent writes took, in milliseconds.
    pub fn latency_ms(&self) -> u64 {
        self.latency.millis()
    }

    /// Queues `write`; its result arrives on the done channel.
    pub fn submit(&self, write: Write) {
        self.enqueue(write, None);
    }

    /// Queues `write` so that it can be withdrawn until a slot takes it:
    /// `claim.take()` true means it will never be performed (and no result
    /// arrives for it).
    pub fn submit_withdrawable(&self, write: Write) -> Claim {
        let claim = Claim::default();
        self.enqueue(write, Some(claim.clone()));
        claim
    }

    fn enqueue(&self, write: Write, claim: Option<Claim>) {
        if let Ok(mut backlog) = self.backlog.lock() {
            if !backlog.push(write, claim) {
                self.metrics.events_dropped.inc();
                return;
            }
            self.metrics.write_backlog.set(backlog.len());
        }
        self.ready.notify_one();
    }

    /// The controller's watch shows `unit`'s last write (its
    /// resourceVersion at least the one that write returned).
    pub fn settled(&self, unit: &Key) {
        let waiting = self
            .backlog
            .lock()
            .is_ok_and(|mut backlog| backlog.settled(unit) && backlog.len() > 0);
        if waiting {
            self.ready.notify_one();
        }
    }

    /// The next write, or, when none may go yet, whether a settle timing
    /// out could let one go.
    fn next(&self) -> Result<Write, bool> {
        let Ok(mut backlog) = self.backlog.lock() else {
            return Err(false);
        };
        let write = backlog.pop(Instant::now());
        self.metrics.write_backlog.set(backlog.len());
        write.ok_or_else(|| backlog.only_settling_waits())
    }

    /// One slot: performs the most urgent waiting write, again and again,
    /// until the controller is gone.
    async fn work(self) {
        loop {
            let write = loop {
                // Registered before looking, so a submit in between is not missed.
                let ready = self.ready.notified();
                let settling = match self.next() {
                    Ok(write) => break write,
                    Err(settling) => settling,
                };
                tokio::select! {
                    () = ready => {}
                    () = self.done.closed() => return,
                    () = tokio::time::sleep(SETTLE_POLL), if settling => {}
                }
            };
            let outcome = if self.leader.is_leader() {
                let started = Instant::now();
                let outcome = self.perform(&write).await;
                self.latency.observe(started.elapsed());
                outcome
            } else {
                Outcome::NotLeader
            };
            if let Ok(mut backlog) = self.backlog.lock() {
                backlog.finish(&write, &outcome, Instant::now());
                if backlog.len() > 0 {
                    // A write of the same unit may have waited for this one.
                    self.ready.notify_one();
                }
            }
            if let Outcome::Failed(error) = &outcome {
                self.metrics
                    .write_errors
                    .get_or_create(&super::metrics::WriteLabels {
                        operation: write.operation(),
                    })
                    .inc();
                tracing::warn!(operation = write.operation(), %error, "write failed");
            }
            if self.done.send(Written { write, outcome }).is_err() {
                return;
            }
        }
    }

    fn units(&self, namespace: &str) -> Api<QueueUnit> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The units of `namespace`, for writes whose answer is read for its
    /// resourceVersion alone.
    fn unit_acks(&self, namespace: &str) -> Api<WriteAck> {
        WriteAck::api::<QueueUnit>(&self.client, namespace)
    }

    async fn patch_unit_status(
        &self,
        unit: &Key,
        status: Value,
    ) -> Result<Option<u64>, kube::Error> {
        let (ns, name) = split(unit);
        let patched = self
            .unit_acks(ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await?;
        Ok(super::records::rv_number(patched.resource_version()))
    }

    async fn patch_job(&self, job: &JobRef, patch: &Value) -> Result<(), kube::Error> {
        job.api::<WriteAck>(&self.client)
            .patch(&job.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    async fn perform(&self, write: &Write) -> Outcome {
        match self.try_perform(write).await {
            Ok(rv) => Outcome::Done(rv),
            Err(e) => outcome_of(e),
        }
    }

    async fn try_perform(&self, write: &Write) -> Result<Option<u64>, kube::Error> {
        match write {
            Write::Adopt { unit, job } => {
                let (ns, name) = split(unit);
                let kind = job.adapter.kind();
                let owner = json!({
                    "metadata": { "ownerReferences": [{
                        "apiVersion": kind.api_version(), "kind": kind.kind,
                        "name": job.name, "uid": job.uid,
                        "controller": false, "blockOwnerDeletion": false,
                    }]},
                    "spec": { "consumerRef": { "uid": job.uid } },
                });
                let patched = self
                    .unit_acks(ns)
                    .patch(name, &PatchParams::default(), &Patch::Merge(&owner))
                    .await?;
                Ok(super::records::rv_number(patched.resource_version()))
            }
            Write::Enqueue { unit, message, .. } => {
                self.patch_unit_status(
                    unit,
                    json!({
                        "phase": "Enqueued", "message": message, "lastUpdateTime": now(),
                    }),
                )
                .await
            }
            Write::Release {
                unit,
                job,
                admissions,
                attempts,
                phase,
                checks,
                message,
            } => {
                let mut status = json!({
                    "phase": phase, "message": message, "lastUpdateTime": now(), "position": null,
                    "conditions": phase.standard_conditions(None, message, &now()),
                });
                if let Some(admissions) = admissions {
                    status["admissions"] = json!(admissions);
                }
                if admissions.is_some() || *phase != QueueUnitPhase::Reserved {
                    status["lastAllocateTime"] = json!(now());
                }
                if let Some(attempts) = attempts {
                    status["attempts"] = json!(attempts);
                }
                if let Some(checks) = checks {
                    status["admissionChecks"] = json!(checks);
                }
                let rv = self.patch_unit_status(unit, status).await?;
                if *phase == QueueUnitPhase::Reserved {
                    return Ok(rv); // the job stays held until every check is Ready
                }
                let (release, _) = hold_release_patches(job.adapter);
                let mut last = None;
                for attempt in 0..3u32 {
                    match self.patch_job(job, &release).await {
                        Ok(()) => return Ok(rv),
                        Err(kube::Error::Api(e)) if e.code == 404 => {
                            last = Some(kube::Error::Api(e));
                            break;
                        }
                        Err(e) => {
                            last = Some(e);
                            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                        }
                    }
                }
                // The job could not be released: give the reservation back so
                // the unit waits again instead of holding quota for nothing.
                let revert = self
                    .patch_unit_status(
                        unit,
                        json!({
                            "phase": "Enqueued", "admissions": [], "admissionChecks": [],
                            "message": "release failed; waiting to be retried",
                            "conditions": QueueUnitPhase::Enqueued.standard_conditions(None, "", &now()),
                        }),
                    )
                    .await;
                if let Err(e) = revert {
                    tracing::warn!(%unit, error = %e, "cannot revert a failed release");
                }
                Err(last.unwrap_or_else(|| kube::Error::Service("job release failed".into())))
            }
            Write::Backoff {
                unit,
                job,
                via,
                reason,
                message,
                count,
                requeue_at,
            } => {
                if let Some(via) = via {
                    self.patch_unit_status(
                        unit,
                        json!({
                            "phase": via, "message": message, "lastUpdateTime": now(),
                            "conditions": via.standard_conditions(Some(reason), message, &now()),
                        }),
                    )
                    .await?;
                }
                if let Some(job) = job {
                    let (_, hold) = hold_release_patches(job.adapter);
                    match self.patch_job(job, &hold).await {
                        Ok(()) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e),
                    }
                }
                self.patch_unit_status(unit, json!({
                    "phase": "TimeoutBackoff", "message": message, "admissions": [], "admissionChecks": [],
                    "position": null, "lastUpdateTime": now(),
                    "requeueState": { "count": count, "requeueAt": requeue_at },
                    "conditions": QueueUnitPhase::TimeoutBackoff.standard_conditions(Some(reason), message, &now()),
                }))
                .await
            }
            Write::Phase {
                unit,
                phase,
                admissions,
                message,
            } => {
                // The conditions follow the phase: a finished unit reads
                // Finished, not still QuotaReserved and Admitted.
                let mut status = json!({
                    "phase": phase, "message": message, "lastUpdateTime": now(),
                    "conditions": phase.standard_conditions(None, message, &now()),
                });
                if let Some(admissions) = admissions {
                    status["admissions"] = json!(admissions);
                }
                if !phase.holds_quota() && *phase != QueueUnitPhase::Enqueued {
                    status["position"] = Value::Null;
                }
                self.patch_unit_status(unit, status).await
            }
            Write::HoldJob { job, .. } => {
                let (_, hold) = hold_release_patches(job.adapter);
                self.patch_job(job, &hold).await.map(|()| None)
            }
            Write::RecreateUnit { unit, job } => {
                let (_, name) = split(unit);
                match super::unit_repair::recreate(&self.client, job, name).await {
                    Ok(created) => {
                        if created {
                            tracing::info!(%unit, job = %job.name, "re-created the missing QueueUnit of a held job");
                        }
                        Ok(None)
                    }
                    Err(super::unit_repair::RepairError::Api(e)) => Err(e),
                    Err(super::unit_repair::RepairError::Job(message)) => {
                        tracing::warn!(%unit, job = %job.name, %message, "cannot re-create the missing QueueUnit");
                        Ok(None)
                    }
                }
            }
            Write::Visibility {
                unit,
                position,
                message,
            } => {
                self.patch_unit_status(unit, json!({ "position": position, "message": message }))
                    .await
            }
            Write::DeleteUnit { unit } => {
                let (ns, name) = split(unit);
                match self
                    .units(ns)
                    .delete(name, &DeleteParams::background())
                    .await
                {
                    Ok(_) => Ok(None),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Write::EnsureQueue {
                name,
                queue,
                exists,
            } => {
                let api: Api<Queue> = Api::namespaced(
                    self.client.clone(),
                    queue.metadata.namespace.as_deref().unwrap_or_default(),
                );
                if *exists {
                    api.patch(
                        name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(queue.as_ref()),
                    )
                    .await?;
                } else {
                    match api.create(&PostParams::default(), queue).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(None)
            }
            Write::DeleteQueue { name } => {
                let api: Api<Queue> = Api::namespaced(self.client.clone(), &self.queue_namespace());
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => Ok(None),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Write::QueueStatus { name, status } => {
                let api: Api<Queue> = Api::namespaced(self.client.clone(), &self.queue_namespace());
                let mut body = serde_json::to_value(status.as_ref()).unwrap_or(Value::Null);
                // Merge patch: an emptied list must be written as empty, not omitted.
                if body.get("queueItemDetails").is_none() {
                    body["queueItemDetails"] = json!({ "active": [] });
                }
                api.patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": body })),
                )
                .await?;
                Ok(None)
            }
            Write::Event {
                regarding,
                warning,
                reason,
                note,
            } => {
                let namespace = regarding.namespace.clone().unwrap_or_default();
                let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
                let event = KubeEvent {
                    metadata: kube::api::ObjectMeta {
                        generate_name: Some(format!(
                            "{}-",
                            regarding.name.as_deref().unwrap_or("koord-queue")
                        )),
                        namespace: Some(namespace),
                        ..Default::default()
                    },
                    action: Some((*reason).to_string()),
                    reason: Some((*reason).to_string()),
                    note: Some(note.chars().take(1000).collect()),
                    type_: Some(if *warning { "Warning" } else { "Normal" }.to_string()),
                    event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                    regarding: Some(regarding.clone()),
                    reporting_controller: Some("koord-queue.x-k8s.io/scheduler".into()),
                    reporting_instance: Some(self.identity.clone()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &event).await?;
                Ok(None)
            }
        }
    }

    fn queue_namespace(&self) -> String {
        self.namespace.clone()
    }
}

impl Write {
    fn lane(&self) -> Lane {
        match self {
            // Phases that change nothing held say where a unit is, as
            // positions do; the longer they wait, the likelier a later write
            // makes them moot.
            w if w.withdrawable() => Lane::Visibility,
            Self::Adopt { .. } => Lane::Adoption,
            Self::Enqueue { .. } | Self::Visibility { .. } | Self::QueueStatus { .. } => {
                Lane::Visibility
            }
            Self::Event { .. } => Lane::Events,
            Self::Release { .. }
            | Self::Backoff { .. }
            | Self::Phase { .. }
            | Self::HoldJob { .. }
            | Self::RecreateUnit { .. }
            | Self::DeleteUnit { .. }
            | Self::EnsureQueue { .. }
            | Self::DeleteQueue { .. } => Lane::Lifecycle,
        }
    }

    /// Whether a later write makes this one moot while it waits: phase
    /// Enqueued (a release follows) and phase Running (the job's end follows).
    pub(super) fn withdrawable(&self) -> bool {
        matches!(
            self,
            Self::Enqueue { .. }
                | Self::Phase {
                    phase: QueueUnitPhase::Running,
                    ..
                }
        )
    }

    /// Short name of the operation, for logs and metrics.
    pub fn operation(&self) -> &'static str {
        match self {
            Self::Adopt { .. } => "adopt",
            Self::Enqueue { .. } => "enqueue",
            Self::Release { .. } => "release",
            Self::Backoff { .. } => "backoff",
            Self::Phase { .. } => "phase",
            Self::HoldJob { .. } => "hold_job",
            Self::RecreateUnit { .. } => "recreate_unit",
            Self::Visibility { .. } => "visibility",
            Self::DeleteUnit { .. } => "delete_unit",
            Self::EnsureQueue { .. } => "ensure_queue",
            Self::DeleteQueue { .. } => "delete_queue",
            Self::QueueStatus { .. } => "queue_status",
            Self::Event { .. } => "event",
        }
    }

    /// The unit the write concerns, if any.
    pub fn unit(&self) -> Option<&Key> {
        match self {
            Self::Adopt { unit, .. }
            | Self::Enqueue { unit, .. }
            | Self::Release { unit, .. }
            | Self::Backoff { unit, .. }
            | Self::Phase { unit, .. }
            | Self::HoldJob { unit, .. }
            | Self::Visibility { unit, .. }
            | Self::DeleteUnit { unit } => Some(unit),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobRef {
        JobRef {
            adapter: koord_queue_api::jobs::all()[0],
            namespace: "ns".into(),
            name: "j".into(),
            uid: "u".into(),
        }
    }

    pub(super) fn event(note: &str) -> Write {
        Write::Event {
            regarding: job().object_ref(),
            warning: false,
            reason: "Queued",
            note: note.into(),
        }
    }

    #[test]
    fn a_units_next_write_waits_for_the_one_in_flight() {
        let mut backlog = Backlog::default();
        let adopt = Write::Adopt {
            unit: "ns/u".into(),
            job: job(),
        };
        let phase = Write::Phase {
            unit: "ns/u".into(),
            phase: QueueUnitPhase::Succeed,
            admissions: None,
            message: String::new(),
        };
        let other = Write::Adopt {
            unit: "ns/other".into(),
            job: job(),
        };
        for w in [phase, adopt, other] {
            assert!(backlog.push(w, None));
        }
        // The phase (more urgent lane) goes first; the adoption of the same
        // unit waits, the other unit's does not.
        let first = backlog.pop(Instant::now()).map(|w| w.operation());
        assert_eq!(first, Some("phase"));
        let second = backlog.pop(Instant::now());
        assert_eq!(
            second.as_ref().and_then(|w| w.unit()).map(|u| &**u),
            Some("ns/other")
        );
        assert!(
            backlog.pop(Instant::now()).is_none(),
            "ns/u has a write in flight"
        );
        backlog.finish(
            &Write::DeleteUnit {
                unit: "ns/u".into(),
            },
            &Outcome::Done(None),
            Instant::now(),
        );
        assert_eq!(
            backlog.pop(Instant::now()).map(|w| w.operation()),
            Some("adopt")
        );
    }

    #[test]
    fn a_units_next_write_waits_until_the_watch_shows_its_last_one() {
        let mut backlog = Backlog::default();
        let unit: Key = "ns/u".into();
        let phase = || Write::Phase {
            unit: unit.clone(),
            phase: QueueUnitPhase::Succeed,
            admissions: None,
            message: String::new(),
        };
        let t0 = Instant::now();
        assert!(backlog.push(phase(), None));
        assert!(backlog.push(phase(), None));
        let first = backlog.pop(t0).expect("nothing holds the unit yet");
        backlog.finish(&first, &Outcome::Done(Some(7)), t0);
        assert!(backlog.pop(t0).is_none(), "written, not yet seen");
        assert!(backlog.only_settling_waits());
        // Seen by the watch: the next write goes.
        assert!(backlog.settled(&unit));
        let second = backlog.pop(t0).expect("settled");
        // A failed write changed nothing: nothing to wait for.
        assert!(backlog.push(phase(), None));
        backlog.finish(&second, &Outcome::Failed("conflict".into()), t0);
        let third = backlog
            .pop(t0)
            .expect("the failed write left nothing to see");
        // A watch that never shows the write delays the next one, no more.
        assert!(backlog.push(phase(), None));
        backlog.finish(&third, &Outcome::Done(Some(9)), t0);
        assert!(backlog.pop(t0 + SETTLE_TIMEOUT / 2).is_none());
        assert!(backlog.pop(t0 + SETTLE_TIMEOUT).is_some());
        assert!(!backlog.settled(&unit), "taken by the write that went");
    }

    #[test]
    fn the_most_urgent_lane_is_served_first_and_each_lane_in_order() {
        let mut backlog = Backlog::default();
        let writes = [
            event("e1"),
            Write::Visibility {
                unit: "ns/v".into(),
                position: Some(1),
                message: String::new(),
            },
            Write::Adopt {
                unit: "ns/a".into(),
                job: job(),
            },
            Write::DeleteUnit {
                unit: "ns/d1".into(),
            },
            event("e2"),
            Write::DeleteUnit {
                unit: "ns/d2".into(),
            },
        ];
        for w in writes {
            assert!(backlog.push(w, None));
        }
        assert_eq!(backlog.len(), 6);
        let order: Vec<String> = std::iter::from_fn(|| backlog.pop(Instant::now()))
            .map(|w| match w {
                Write::Event { note, .. } => note,
                w => w.unit().map(ToString::to_string).unwrap_or_default(),
            })
            .collect();
        assert_eq!(order, ["ns/d1", "ns/d2", "ns/a", "ns/v", "e1", "e2"]);
        assert_eq!(backlog.len(), 0);
    }

    #[test]
    fn events_beyond_the_backlog_are_dropped_other_writes_never() {
        let mut backlog = Backlog::default();
        for i in 0..EVENT_BACKLOG {
            assert!(backlog.push(event(&i.to_string()), None));
        }
        assert!(!backlog.push(event("one too many"), None));
        for i in 0..3 * EVENT_BACKLOG {
            assert!(backlog.push(
                Write::DeleteUnit {
                    unit: format!("ns/{i}").into(),
                },
                None
            ));
        }
        assert_eq!(backlog.len(), 4 * EVENT_BACKLOG as i64);
    }

    #[test]
    fn a_drained_lane_gives_its_memory_back() {
        let mut backlog = Backlog::default();
        for i in 0..100_000 {
            backlog.push(
                Write::DeleteUnit {
                    unit: format!("ns/{i}").into(),
                },
                None,
            );
        }
        let lane = Lane::Lifecycle as usize;
        assert!(backlog.lanes[lane].capacity() >= 100_000);
        let mut popped = 0;
        while backlog.pop(Instant::now()).is_some() {
            popped += 1;
        }
        assert_eq!(popped, 100_000);
        assert!(backlog.lanes[lane].capacity() <= 2 * LANE_KEPT_CAPACITY);
    }

    #[test]
    fn write_latency_follows_recent_writes() {
        let latency = WriteLatency::default();
        for _ in 0..40 {
            latency.observe(Duration::from_millis(300));
        }
        assert!(
            (250..=300).contains(&latency.millis()),
            "{}",
            latency.millis()
        );
        for _ in 0..40 {
            latency.observe(Duration::from_millis(4));
        }
        assert!(latency.millis() <= 10, "{}", latency.millis());
    }

    #[test]
    fn a_withdrawn_write_is_skipped_and_a_taken_one_cannot_be_withdrawn() {
        let mut backlog = Backlog::default();
        let enqueue = |unit: &str| Write::Enqueue {
            unit: unit.into(),
            job: job(),
            message: String::new(),
        };
        let withdrawn = Claim::default();
        let kept = Claim::default();
        backlog.push(enqueue("ns/withdrawn"), Some(withdrawn.clone()));
        backlog.push(enqueue("ns/kept"), Some(kept.clone()));
        backlog.push(enqueue("ns/plain"), None);
        assert!(
            withdrawn.take(),
            "still waiting: the controller withdraws it"
        );
        let order: Vec<String> = std::iter::from_fn(|| backlog.pop(Instant::now()))
            .map(|w| w.unit().map(ToString::to_string).unwrap_or_default())
            .collect();
        assert_eq!(order, ["ns/kept", "ns/plain"]);
        assert!(!kept.take(), "a slot took it: too late to withdraw");
    }
}
