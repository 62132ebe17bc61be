//! The controller's state machine. One task owns it: every input (watch
//! change, write result, timer, leadership change) is handled in turn, so the
//! core and the records never race.

mod inputs;
mod lifecycle;
mod quotas;
mod release;
mod repair;
mod results;
mod visibility;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::jobs::JobState;
use koord_queue_api::queue::QueueItemDetail;
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, CheckState, QueueUnitPhase};
use koord_queue_api::{Queue, QueueSpec, QueueStatus, Resources, keys};
use koord_queue_runtime::{Leadership, Readiness};
use tokio::sync::{mpsc, watch};

use super::metrics::{AttemptLabels, Metrics, QueueLabels, QuotaLabels};
use super::quota_names::QuotaNames;
use super::records::{
    JobKey, JobRecord, Key, Labels, NamespaceQuotaRecord, NodeRecord, PodRecord,
    QUEUE_FOR_QUOTA_LABEL, QueueRecord, QuotaRecord, UnitRecord, key,
};
use super::sources::{Change, Input, SourceName};
use super::writes::{Claim, JobRef, Outcome, Write, Writer, Written};
use crate::core::{CapacitySource, Core, QueueDef, QuotaDef, RootCapacity, UnitDef};

/// Readiness condition: every watch has its initial list.
pub const CACHES_SYNCED: &str = "caches synced";
/// Readiness condition: the leader ran its first cycle (standbys: at once).
pub const FIRST_CYCLE: &str = "first cycle";

/// Most waiting units listed in `Queue.status.queueItemDetails`.
const QUEUE_DETAILS_LIMIT: usize = 1000;
/// Most position/reason writes per visibility pass.
const VISIBILITY_BUDGET: usize = 200;
/// While the API server is slow ([`SLOW_WRITES_MS`]), a waiting unit's
/// position is refreshed this many status intervals apart at most: its time
/// goes to creates, releases and completions instead.
const SLOW_VISIBILITY_FACTOR: u32 = 10;
/// Average write latency from which the API server counts as slow (a write
/// takes a few milliseconds on an idle one).
const SLOW_WRITES_MS: u64 = 50;
/// Minimum interval between two "Waiting" Events of one job.
const WAITING_EVENT_INTERVAL: Duration = Duration::from_secs(30);
/// Only jobs younger than this get a missing unit re-created: the webhook's
/// create of an answered job is late by seconds at most, while an old held
/// job without its unit had it deleted (architecture §3 rule 3), perhaps while no
/// scheduler was running to see it.
const RECREATE_WINDOW_MS: i64 = 10 * 60 * 1000;

/// How often every unit and job is looked at for a missing counterpart
/// (orphan units, jobs without their unit): these wait out a grace period
/// of seconds anyway, and on every 500 ms tick they were most of the
/// housekeeping's 7 % of the scheduler's CPU in a saturated 15,000-job run.
const MISSING_SCAN_INTERVAL: Duration = Duration::from_secs(2);

/// Tunables of the controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// System namespace (Queues).
    pub namespace: String,
    /// Orphan units are deleted after this.
    pub orphan_grace: Duration,
    /// Batching window of cycles.
    pub cycle_batch: Duration,
    /// Minimum interval between status updates of one unit or queue.
    pub status_interval: Duration,
    /// Emit Events on jobs.
    pub job_events: bool,
    /// Strict dequeue for queues that do not set it: `Some(timeout)` when on.
    pub strict_default: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Membership {
    Absent,
    Waiting,
    Holding,
}

#[derive(Debug)]
struct UnitState {
    rec: UnitRecord,
    member: Membership,
    /// Fingerprint of the definition last given to the core (to skip no-op
    /// upserts without keeping a second copy of every unit's fields).
    given: Option<u64>,
    /// An adopt/release/phase/hold/delete write is in flight.
    busy: bool,
    /// That write can still be withdrawn (see [`Claim`]).
    claim: Option<Claim>,
    /// A position/reason write is in flight.
    publishing: bool,
    /// Ignore watch events older than our last write.
    expect_rv: Option<u64>,
    /// Released by this process (not found released at start).
    released_here: bool,
    /// The job was seen running (unheld) since its release.
    release_ack: bool,
    /// Why it waits, as last computed (boxed: a rendered String keeps the
    /// spare capacity of its growth, for each of 100,000 waiting units).
    reason: Option<Box<str>>,
    last_published: Option<Instant>,
    last_waiting_event: Option<Instant>,
    released_at: Option<Instant>,
}

impl UnitState {
    fn new(rec: UnitRecord) -> Self {
        Self {
            rec,
            member: Membership::Absent,
            given: None,
            busy: false,
            claim: None,
            publishing: false,
            expect_rv: None,
            released_here: false,
            release_ack: false,
            reason: None,
            last_published: None,
            last_waiting_event: None,
            released_at: None,
        }
    }

    /// Withdraws the pending write, if it is withdrawable and no slot took
    /// it yet: the unit is then free for another write.
    fn withdraw(&mut self) -> bool {
        if self.busy && self.claim.take().is_some_and(|c| c.take()) {
            self.busy = false;
            return true;
        }
        false
    }

    /// This process is lifting the job's suspension: until the job is seen
    /// released, a held job means the release has not reached it yet, not
    /// that it was suspended again.
    fn releasing(&mut self) {
        self.released_here = true;
        self.release_ack = false;
    }

    /// Whether a held job of this unit, which holds quota as released, was
    /// suspended again by someone: it was seen released since, or it was
    /// found released at start (this process never released it).
    fn held_job_was_suspended_again(&self) -> bool {
        self.release_ack || !self.released_here
    }

    /// Records a successful release write (see [`Write::Release`]).
    fn release_written(
        &mut self,
        phase: QueueUnitPhase,
        admissions: Option<&[Admission]>,
        attempts: Option<i64>,
        checks: Option<Vec<AdmissionCheckState>>,
    ) {
        let from_reserved = admissions.is_none();
        self.rec.phase = Some(phase);
        if let Some(admissions) = admissions {
            self.rec.held = admissions
                .iter()
                .filter_map(|a| Resources::from_list(&a.resources).ok())
                .fold(Resources::new(), |mut t, r| {
                    t.add(&r);
                    t
                });
        }
        if let Some(attempts) = attempts {
            self.rec.attempts = attempts;
        }
        if let Some(checks) = checks {
            self.rec.checks = checks;
        }
        if !from_reserved || phase != QueueUnitPhase::Reserved {
            // Timers of strict dequeue and of the running timeout
            // start at the release.
            self.rec.allocated_ms = Some(now_ms());
        }
        if phase.is_released() {
            // Also when the quota was reserved by an earlier process (a
            // restart while its checks ran): its job, held until now, must
            // not be taken for suspended again.
            self.releasing();
        }
        self.rec.position = None;
    }

    /// Fingerprint of what [`UnitState::def`] would return.
    fn def_fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let r = &self.rec;
        // Not RandomState: a fingerprint is only compared within this process.
        let mut h = std::hash::DefaultHasher::new();
        (&r.namespace, &r.name, &r.queue, r.priority, r.created_ms).hash(&mut h);
        (&r.request, &r.quota, &r.labels).hash(&mut h);
        h.finish()
    }

    fn def(&self) -> UnitDef {
        let r = &self.rec;
        UnitDef {
            namespace: r.namespace.to_string(),
            name: r.name.clone(),
            queue: r.queue.to_string(),
            priority: r.priority,
            created_ms: r.created_ms,
            request: r.request.clone(),
            quota: r.quota.as_deref().map(str::to_string),
            labels: r.labels.to_map(),
        }
    }
}

/// The controller.
pub struct Controller {
    core: Core,
    settings: Settings,
    /// Boxed: a map's table grows by doubling, so up to about half of its
    /// slots are empty; with the state inline (~550 bytes) 100,000 units
    /// took a 74 MB table, and the old table too while it was rehashed.
    units: HashMap<Key, Box<UnitState>>,
    jobs: HashMap<JobKey, JobRecord>,
    /// The quota of each name (the one that takes precedence).
    quotas: HashMap<String, QuotaRecord>,
    /// Every quota by name, shadowed ones included.
    quota_names: QuotaNames,
    queues: HashMap<String, QueueRecord>,
    nodes: HashMap<String, NodeRecord>,
    namespace_quotas: HashMap<String, HashMap<String, NamespaceQuotaRecord>>,
    unsynced: HashSet<SourceName>,
    writer: Writer,
    leader: Leadership,
    metrics: Metrics,
    readiness: Readiness,
    capacity: Option<RootCapacity>,
    cycle_due: Option<Instant>,
    ran_first_cycle: bool,
    queue_writes: HashSet<String>,
    queue_published: HashMap<String, Instant>,
    /// Quota usage series published non-zero by the last metrics pass.
    quota_used_series: HashSet<QuotaLabels>,
    last_visibility_pass: Option<Instant>,
    last_missing_scan: Option<Instant>,
    /// Whether a visibility pass can find anything to write.
    visibility: VisibilityGate,
    /// Jobs whose unit existed and is gone (deleted, or missing under a
    /// running job): held again once, never re-created (architecture §3 rule 3).
    unit_gone: HashSet<JobKey>,
    /// Held jobs whose unit has not appeared, since when.
    missing_unit_since: HashMap<JobKey, Instant>,
    /// Jobs whose unit is being re-created.
    recreating: HashSet<JobKey>,
    retry: HashSet<Key>,
    /// Adopted units whose phase Enqueued is not written yet: written after
    /// the next cycle unless it released them (then the release says it all).
    to_enqueue: HashSet<Key>,
    /// Units whose next step depends on the clock (backoff, timeouts).
    timed: HashSet<Key>,
    /// Pods of queued jobs by the job's uid (strict dequeue).
    pods: HashMap<String, HashMap<String, PodRecord>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("units", &self.units.len())
            .finish_non_exhaustive()
    }
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

impl Controller {
    /// A controller over `core`, waiting for `sources` to sync.
    pub fn new(
        core: Core,
        settings: Settings,
        sources: Vec<SourceName>,
        writer: Writer,
        leader: Leadership,
        metrics: Metrics,
        readiness: Readiness,
    ) -> Self {
        Self {
            core,
            settings,
            units: HashMap::new(),
            jobs: HashMap::new(),
            quotas: HashMap::new(),
            quota_names: QuotaNames::default(),
            queues: HashMap::new(),
            nodes: HashMap::new(),
            namespace_quotas: HashMap::new(),
            unsynced: sources.into_iter().collect(),
            writer,
            leader,
            metrics,
            readiness,
            capacity: None,
            cycle_due: None,
            ran_first_cycle: false,
            queue_writes: HashSet::new(),
            queue_published: HashMap::new(),
            quota_used_series: HashSet::new(),
            last_visibility_pass: None,
            last_missing_scan: None,
            visibility: VisibilityGate::default(),
            unit_gone: HashSet::new(),
            missing_unit_since: HashMap::new(),
            recreating: HashSet::new(),
            retry: HashSet::new(),
            to_enqueue: HashSet::new(),
            timed: HashSet::new(),
            pods: HashMap::new(),
        }
    }

    fn synced(&self) -> bool {
        self.unsynced.is_empty()
    }

    fn leads(&self) -> bool {
        self.leader.is_leader()
    }

    /// Runs until `stop` resolves.
    pub async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut written: mpsc::UnboundedReceiver<Written>,
        mut leadership: watch::Receiver<bool>,
        stop: impl Future<Output = ()>,
    ) {
        if !self.leads() {
            // Standbys are ready once synced; the leader after its first cycle.
            self.readiness.set(FIRST_CYCLE, true);
        }
        let mut housekeeping = tokio::time::interval(Duration::from_millis(500));
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            let due = self.cycle_due;
            let cycle = async move {
                match due {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = &mut stop => {
                    tracing::info!("controller stopping");
                    return;
                }
                Some(w) = written.recv() => {
                    self.visibility.changed();
                    self.on_written(w);
                }
                Some(input) = inputs.recv() => {
                    self.visibility.changed();
                    self.on_input(input);
                }
                changed = leadership.changed() => {
                    self.visibility.changed();
                    if changed.is_err() {
                        tracing::warn!("leader election ended; controller stopping");
                        return;
                    }
                    let leads = *leadership.borrow();
                    self.on_leadership(leads);
                }
                _ = cycle => {
                    self.visibility.changed();
                    self.cycle_due = None;
                    self.cycle();
                }
                _ = housekeeping.tick() => self.housekeeping(),
            }
        }
    }

    fn request_cycle(&mut self) {
        if self.cycle_due.is_none() {
            self.cycle_due = Some(Instant::now() + self.settings.cycle_batch);
        }
    }

    // ---- inputs -------------------------------------------------------------
}

fn job_ref(job: &JobRecord) -> JobRef {
    JobRef {
        adapter: job.adapter,
        namespace: job.namespace.to_string(),
        name: job.name.clone(),
        uid: job.uid.clone(),
    }
}

// ---- reconciliation -----------------------------------------------------------

impl Controller {
    fn submit_unit_write(&mut self, k: &Key, write: Write) {
        if let Some(st) = self.units.get_mut(k) {
            st.busy = true;
            // Quota of a finished or re-suspended job is freed at once; if the
            // write fails the unit is reconciled (and held) again.
            // A reclaim victim keeps counting until its job is held again:
            // the guaranteed unit waits for the resources to be really free.
            let frees = matches!(
                &write,
                Write::Phase {
                    admissions: Some(_),
                    ..
                }
            ) || matches!(&write, Write::Backoff { reason, .. } if *reason != RECLAIMED);
            if frees && st.member != Membership::Absent {
                self.core.remove_unit(k);
                st.member = Membership::Absent;
                st.given = None;
                self.request_cycle();
            }
        }
        if write.withdrawable() {
            let claim = self.writer.submit_withdrawable(write);
            if let Some(st) = self.units.get_mut(k) {
                st.claim = Some(claim);
            }
            return;
        }
        self.writer.submit(write);
    }

    fn event(&self, job: &JobRef, warning: bool, reason: &'static str, note: String) {
        if self.settings.job_events && self.leads() {
            self.writer.submit(Write::Event {
                regarding: job.object_ref(),
                warning,
                reason,
                note,
            });
        }
    }

    // ---- cycles ---------------------------------------------------------------
}

/// Condition reason (and backoff reason) of a reclaimed unit.
const RECLAIMED: &str = "Reclaimed";

/// Where a backoff message says when the unit returns.
const BACK_IN_QUEUE: &str = "; back in queue ";

/// The reason to repeat when finishing a SchedFailed send-back that was cut
/// short: the message its first write left, without the "back in queue"
/// tail that the new backoff writes afresh.
fn sched_failed_reason(message: Option<&str>) -> String {
    message
        .and_then(|m| m.split(BACK_IN_QUEUE).next())
        .filter(|m| m.starts_with("SchedFailed"))
        .map_or_else(
            || {
                "SchedFailed: the job's pods were not all bound in time; suspended again, quota released"
                    .to_string()
            },
            str::to_string,
        )
}

/// Condition type on the Queue of a quota whose children's guaranteed
/// minimum exceeds its own (they are then scaled down proportionally).
pub const MIN_OVERCOMMITTED: &str = "MinOvercommitted";

/// `conditions` with the [`MIN_OVERCOMMITTED`] condition of queue `name` set
/// from `warnings` (quota name, text); other conditions are kept.
fn min_conditions(
    name: &str,
    warnings: &[(String, String)],
    mut conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let texts: Vec<&str> = warnings
        .iter()
        .filter(|(q, _)| q == name)
        .map(|(_, t)| t.as_str())
        .collect();
    let existing = conditions.iter().position(|c| c.type_ == MIN_OVERCOMMITTED);
    if texts.is_empty() {
        if let Some(i) = existing {
            conditions.remove(i);
        }
        return conditions;
    }
    let message = texts.join("; ");
    match existing {
        Some(i) if conditions[i].message == message => {}
        Some(i) => conditions[i].message = message,
        None => conditions.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: MIN_OVERCOMMITTED.into(),
            status: "True".into(),
            reason: "ChildrenMinExceedsMin".into(),
            message,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ),
            observed_generation: None,
        }),
    }
    conditions
}

fn empty_status() -> QueueStatus {
    let mut status = QueueStatus::default();
    status
        .queue_item_details
        .insert("active".into(), Vec::new());
    status.pending = Some(0);
    status.admitted = Some(0);
    status
}

fn strip_position(message: Option<&str>) -> Option<&str> {
    message.map(|m| m.split_once(": ").map_or(m, |(_, reason)| reason))
}

/// Tells whether a visibility pass can find anything new. The pass compares
/// every waiting unit's rendered position and reason with what it last
/// published; with 100,000 waiting units that took 15-20 % of a core every
/// status interval on an idle scheduler. What is rendered depends only on the
/// core and the controller's records, which change only when an input, a
/// write result, a cycle or a leadership change is handled: each of those
/// bumps the generation, and a complete pass at an unchanged generation has
/// nothing left to find.
#[derive(Debug, Default)]
struct VisibilityGate {
    generation: u64,
    /// The generation at the end of the last complete pass.
    clean_at: Option<u64>,
}

impl VisibilityGate {
    /// Something the pass depends on may have changed.
    fn changed(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Whether a pass may find something to write.
    fn due(&self) -> bool {
        self.clean_at != Some(self.generation)
    }

    /// A pass ran; `complete` when it left nothing for a later pass (no
    /// budget exhausted, no unit or Queue deferred by its status interval).
    fn passed(&mut self, complete: bool) {
        self.clean_at = complete.then_some(self.generation);
    }
}

/// What a visibility pass over the waiting units found.
#[derive(Debug, Default)]
struct PositionScan {
    /// `(unit, position, message)` to write.
    writes: Vec<(Key, Option<i64>, String)>,
    /// Every waiting unit was compared and none was deferred.
    complete: bool,
    /// Messages rendered for the comparison.
    rendered: usize,
}

/// The waiting units whose published position or reason is out of date, at
/// most `budget`, skipping units published less than `interval` ago.
fn scan_positions(
    core: &Core,
    units: &HashMap<Key, Box<UnitState>>,
    now: Instant,
    interval: Duration,
    budget: usize,
) -> PositionScan {
    let mut scan = PositionScan {
        complete: true,
        ..PositionScan::default()
    };
    // Rendered into one buffer, allocated only for a write (100,000 units
    // would otherwise churn 200,000 strings per pass).
    let mut message = String::new();
    for queue in core.queues() {
        for w in core.queue_waiting(queue.name) {
            if scan.writes.len() >= budget {
                scan.complete = false;
                return scan;
            }
            let Some(st) = units.get(w.key) else {
                continue;
            };
            // Busy or publishing units are looked at again when their write
            // result arrives (which reopens the gate).
            if st.busy || st.publishing || st.rec.phase != Some(QueueUnitPhase::Enqueued) {
                continue;
            }
            if st
                .last_published
                .is_some_and(|t| now.duration_since(t) < interval)
            {
                scan.complete = false;
                continue;
            }
            let position = i64::try_from(w.position).ok();
            message.clear();
            let _ = write!(message, "position {} in queue {}", w.position, queue.name);
            let _ = match (w.reason, &st.reason) {
                (Some(r), _) => write!(message, ": {r}"),
                (None, Some(r)) => write!(message, ": {r}"),
                (None, None) => Ok(()),
            };
            scan.rendered += 1;
            if st.rec.position == position && st.rec.message.as_deref() == Some(message.as_str()) {
                continue;
            }
            scan.writes.push((st.rec.key(), position, message.clone()));
        }
    }
    scan
}

fn finished(state: JobState) -> bool {
    matches!(state, JobState::Succeeded | JobState::Failed)
}

/// Whether `published` lists exactly the units of `waiting`, in order.
fn details_match<'a>(
    published: &[QueueItemDetail],
    waiting: impl Iterator<Item = crate::core::WaitingUnit<'a>>,
) -> bool {
    let mut n = 0;
    for w in waiting {
        let Some(p) = published.get(n) else {
            return false;
        };
        let (ns, name) = split_key(w.key);
        if p.name != name
            || p.namespace != ns
            || p.priority != w.priority
            || usize::try_from(p.position).ok() != Some(w.position)
        {
            return false;
        }
        n += 1;
    }
    n == published.len()
}

/// Where unit `rec` belongs in the core given its job.
fn desired_membership(rec: &UnitRecord, job: Option<&JobRecord>) -> Membership {
    if rec.deleting || rec.invalid.is_some() {
        return Membership::Absent;
    }
    match effective_phase(rec, job) {
        Some(QueueUnitPhase::Enqueued) => match job {
            Some(j) if j.held && !j.deleting => Membership::Waiting,
            _ => Membership::Absent,
        },
        // A finished job's pods are done: its quota is free even before the
        // unit's Succeed/Failed phase is written.
        Some(p) if p.holds_quota() => match job {
            Some(j) if finished(j.state) => Membership::Absent,
            _ => Membership::Holding,
        },
        _ => Membership::Absent,
    }
}

/// The unit's phase, where an adopted unit whose phase is not written yet
/// counts as Enqueued (its phase is written after the next cycle, unless
/// that cycle released it).
fn effective_phase(rec: &UnitRecord, job: Option<&JobRecord>) -> Option<QueueUnitPhase> {
    rec.phase.or_else(|| {
        job.filter(|j| rec.owner_uid.as_deref() == Some(j.uid.as_str()))
            .map(|_| QueueUnitPhase::Enqueued)
    })
}

/// Admissions of a release: one per pod set with its resources. When the
/// pod sets' resources do not add up to what is held (e.g. an Argo workflow,
/// sized by annotation), the first set carries the total, so the admissions
/// always sum to exactly what the unit holds.
fn admissions(rec: &UnitRecord, total: &Resources) -> Vec<Admission> {
    let mut sum = Resources::new();
    let mut out: Vec<Admission> = rec
        .pod_sets
        .iter()
        .map(|(name, count, resources)| {
            sum.add(resources);
            Admission {
                name: name.to_string(),
                replicas: *count,
                running: 0,
                resources: resources.to_list(),
            }
        })
        .collect();
    if out.is_empty() {
        out.push(Admission {
            name: "main".into(),
            replicas: 1,
            running: 0,
            resources: Default::default(),
        });
    }
    if &sum != total {
        for a in &mut out {
            a.resources.clear();
        }
        out[0].resources = total.to_list();
    }
    out
}

/// Strict dequeue timeout of `queue` (its own setting, else the default);
/// `None` when strict dequeue is off.
fn strict_timeout(queue: Option<&QueueRecord>, default: Option<Duration>) -> Option<Duration> {
    match queue.and_then(|q| q.strict) {
        Some(setting) => setting,
        None => default,
    }
}

/// The phase a released job enters: SchedReady under strict dequeue.
fn release_phase(queue: Option<&QueueRecord>, strict_default: Option<Duration>) -> QueueUnitPhase {
    if strict_timeout(queue, strict_default).is_some() {
        QueueUnitPhase::SchedReady
    } else {
        QueueUnitPhase::Dequeued
    }
}

/// The queue a unit is served in: its quota's queue (the ElasticQuota
/// mapping), else the queue named in its spec.
fn queue_of(rec: &UnitRecord) -> &str {
    rec.quota.as_deref().unwrap_or(&rec.queue)
}

fn now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Backoff before attempt `count` (1-based): 10 s × 2^(count-1), at most
/// 15 min, scaled by a jitter factor in [0.9, 1.1) drawn from `seed`.
pub fn backoff_delay(count: i32, seed: u64) -> Duration {
    const BASE_MS: u64 = 10_000;
    const CAP_MS: u64 = 15 * 60 * 1000;
    let exp = u32::try_from(count.saturating_sub(1).max(0))
        .unwrap_or(0)
        .min(20);
    let raw = BASE_MS.saturating_mul(1u64 << exp).min(CAP_MS);
    let jitter_permille = 900 + seed % 200; // 0.9 ..< 1.1
    Duration::from_millis(raw.saturating_mul(jitter_permille) / 1000)
}

/// A seed that differs between units and attempts (and between runs).
fn jitter_seed(key: &str, count: i32) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    key.hash(&mut h);
    count.hash(&mut h);
    h.finish()
}

/// Whether `labels` satisfy a Kubernetes label selector; no selector matches all.
pub fn selector_matches(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &Labels,
) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let match_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v.as_str()));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        let listed = |v: &str| values.iter().any(|x| x == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => value.is_none_or(|v| !listed(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    match_labels && expressions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_ten_seconds_up_to_fifteen_minutes_with_jitter() {
        let mid = 100; // jitter factor 1.0
        assert_eq!(backoff_delay(1, mid), Duration::from_secs(10));
        assert_eq!(backoff_delay(2, mid), Duration::from_secs(20));
        assert_eq!(backoff_delay(4, mid), Duration::from_secs(80));
        assert_eq!(backoff_delay(8, mid), Duration::from_secs(900));
        assert_eq!(backoff_delay(50, mid), Duration::from_secs(900));
        assert_eq!(backoff_delay(1, 0), Duration::from_secs(9));
        assert_eq!(backoff_delay(1, 199), Duration::from_millis(10_990));
    }

    /// A core with one queue `q` (quota `q`, 4 cpu of capacity) and ten
    /// waiting 2-cpu units `ns/u0`..`ns/u9`, a cycle run (two released, the
    /// rest waiting with a reason), and the controller's states of the
    /// waiting units, Enqueued.
    fn waiting_units() -> (Core, HashMap<Key, Box<UnitState>>) {
        let mut core = Core::from_yaml(
            "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: \"4\" } }\n",
        )
        .expect("a valid configuration");
        core.upsert_queue(&QueueDef::new("q"));
        core.upsert_quota(&QuotaDef::new("q").max("cpu", 4000))
            .expect("a valid quota");
        let mut units = HashMap::new();
        for i in 0..10 {
            let name = format!("u{i}");
            let def = UnitDef::new("ns", &name)
                .with_quota("q")
                .requesting("cpu", 2000)
                .created_at(i);
            core.upsert_unit(&def).expect("a valid unit");
            let mut st = found_reserved();
            st.rec.name = name;
            st.rec.phase = Some(QueueUnitPhase::Enqueued);
            units.insert(key("ns", &st.rec.name), Box::new(st));
        }
        let out = core.run_cycle();
        for d in &out.decisions {
            units.remove(&d.unit);
        }
        assert_eq!(units.len(), 8, "two released, eight waiting");
        (core, units)
    }

    #[test]
    fn a_visibility_pass_writes_what_changed_and_nothing_when_unchanged() {
        let (core, mut units) = waiting_units();
        let interval = Duration::from_secs(2);
        let now = Instant::now();
        let first = scan_positions(&core, &units, now, interval, 200);
        assert!(first.complete);
        assert_eq!((first.rendered, first.writes.len()), (8, 8));
        let (k, position, message) = &first.writes[0];
        assert_eq!(&**k, "ns/u2");
        assert_eq!(*position, Some(1));
        assert!(message.starts_with("position 1 in queue q: "), "{message}");
        // The writes land (as their watch events or results would record).
        for (k, position, message) in first.writes {
            let st = units.get_mut(&k).expect("a waiting unit");
            st.rec.position = position;
            st.rec.message = Some(message);
        }
        let again = scan_positions(&core, &units, now + interval, interval, 200);
        assert!(again.complete && again.writes.is_empty());

        // Nothing changed since that complete pass: the next pass does not
        // run at all, so it renders and writes nothing.
        let mut gate = VisibilityGate::default();
        assert!(gate.due(), "the first pass runs");
        gate.passed(again.complete);
        assert!(!gate.due());
        assert!(!gate.due(), "still nothing changed");
        // Any input, write result, cycle or leadership change reopens it.
        gate.changed();
        assert!(gate.due());
    }

    #[test]
    fn a_deferred_or_cut_short_visibility_pass_is_run_again() {
        let (core, mut units) = waiting_units();
        let interval = Duration::from_secs(2);
        let now = Instant::now();
        // Over budget: the rest is for the next pass.
        let cut = scan_positions(&core, &units, now, interval, 3);
        assert_eq!(cut.writes.len(), 3);
        assert!(!cut.complete);
        // A unit published within the status interval is deferred.
        for st in units.values_mut() {
            st.last_published = Some(now);
        }
        let deferred = scan_positions(&core, &units, now, interval, 200);
        assert!(deferred.writes.is_empty());
        assert!(!deferred.complete);
        let mut gate = VisibilityGate::default();
        gate.passed(deferred.complete);
        assert!(gate.due(), "an incomplete pass leaves the gate open");
        // Once the interval is over the deferred units are written.
        let later = scan_positions(&core, &units, now + interval, interval, 200);
        assert!(later.complete);
        assert_eq!(later.writes.len(), 8);
    }

    /// A unit as a starting scheduler finds it: Reserved, checks pending.
    fn found_reserved() -> UnitState {
        let unit: koord_queue_api::QueueUnit = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": "u", "namespace": "ns" },
            "spec": {
                "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j" },
                "queue": "q", "resource": { "cpu": "2" },
            },
            "status": {
                "phase": "Reserved",
                "admissions": [{ "name": "main", "replicas": 1, "resources": { "cpu": "2" } }],
                "admissionChecks": [{ "name": "provision", "state": "Pending" }],
            },
        }))
        .expect("a valid unit");
        UnitState::new(UnitRecord::from_unit(unit))
    }

    #[test]
    fn a_job_released_after_a_restart_is_not_taken_for_suspended_again() {
        // Reserved by an earlier process; its checks pass after the restart
        // and this process releases it. Its job is still seen held until
        // the release reaches the watch: that is not a new suspension.
        let mut st = found_reserved();
        st.release_written(QueueUnitPhase::Dequeued, None, None, None);
        assert_eq!(st.rec.phase, Some(QueueUnitPhase::Dequeued));
        assert_eq!(st.rec.held.get("cpu"), 2000, "keeps its reservation");
        assert!(!st.held_job_was_suspended_again());
        // Once the job was seen released, holding it again is a suspension.
        st.release_ack = true;
        assert!(st.held_job_was_suspended_again());
    }

    #[test]
    fn a_unit_found_released_with_its_job_held_was_suspended_again() {
        let mut st = found_reserved();
        st.rec.phase = Some(QueueUnitPhase::Dequeued);
        assert!(st.held_job_was_suspended_again());
        // Reserving (checks start) is no release of the job.
        let mut st = found_reserved();
        st.release_written(QueueUnitPhase::Reserved, Some(&[]), Some(1), None);
        assert!(!st.released_here);
    }

    #[test]
    fn an_adopted_unit_waits_before_its_phase_is_written_and_only_for_its_own_job() {
        let mut st = found_reserved();
        st.rec.phase = None;
        st.rec.held = Resources::new();
        let job = |uid: &str, held: bool| JobRecord {
            adapter: koord_queue_api::jobs::all()[0],
            namespace: "ns".into(),
            name: "j".into(),
            uid: uid.into(),
            unit_name: "u".into(),
            unit: key("ns", "u"),
            held,
            state: JobState::Pending,
            deleting: false,
            created_ms: 0,
        };
        // Not adopted yet: never schedulable.
        assert_eq!(effective_phase(&st.rec, Some(&job("uid-1", true))), None);
        assert_eq!(
            desired_membership(&st.rec, Some(&job("uid-1", true))),
            Membership::Absent
        );
        // Adopted (owner reference to this job): waits as Enqueued.
        st.rec.owner_uid = Some("uid-1".into());
        assert_eq!(
            effective_phase(&st.rec, Some(&job("uid-1", true))),
            Some(QueueUnitPhase::Enqueued)
        );
        assert_eq!(
            desired_membership(&st.rec, Some(&job("uid-1", true))),
            Membership::Waiting
        );
        // A job re-created under the same name is another job.
        assert_eq!(effective_phase(&st.rec, Some(&job("uid-2", true))), None);
        assert_eq!(effective_phase(&st.rec, None), None);
        // A released job does not wait (it is held again, see `lifecycle`).
        assert_eq!(
            desired_membership(&st.rec, Some(&job("uid-1", false))),
            Membership::Absent
        );
    }

    #[test]
    fn an_interrupted_sched_failed_send_back_repeats_its_reason_once() {
        let written =
            "SchedFailed: pod p unschedulable: no node after 8s; suspended again, quota released";
        let left = format!("{written}{BACK_IN_QUEUE}q at 2026-01-01T00:00:00Z (attempt 1)");
        assert_eq!(sched_failed_reason(Some(&left)), written);
        assert_eq!(sched_failed_reason(Some(written)), written);
        for other in [None, Some("position 3 in queue q"), Some("")] {
            let reason = sched_failed_reason(other);
            assert!(reason.starts_with("SchedFailed: "), "{reason}");
            assert!(!reason.contains(BACK_IN_QUEUE), "{reason}");
        }
    }

    #[test]
    fn label_selectors() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            LabelSelector, LabelSelectorRequirement,
        };
        let map: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        let labels = Labels::from_map(&map);
        assert!(selector_matches(None, &labels));
        let sel = |match_labels: Option<BTreeMap<String, String>>,
                   exprs: Vec<(&str, &str, Vec<&str>)>| LabelSelector {
            match_labels,
            match_expressions: Some(
                exprs
                    .into_iter()
                    .map(|(k, op, vs)| LabelSelectorRequirement {
                        key: k.into(),
                        operator: op.into(),
                        values: Some(vs.into_iter().map(String::from).collect()),
                    })
                    .collect(),
            ),
        };
        assert!(selector_matches(
            Some(&sel(Some(map.clone()), vec![])),
            &labels
        ));
        assert!(!selector_matches(
            Some(&sel(Some([("team".into(), "b".into())].into()), vec![])),
            &labels
        ));
        assert!(selector_matches(
            Some(&sel(None, vec![("team", "In", vec!["a", "c"])])),
            &labels
        ));
        assert!(!selector_matches(
            Some(&sel(None, vec![("team", "NotIn", vec!["a"])])),
            &labels
        ));
        assert!(selector_matches(
            Some(&sel(None, vec![("gpu", "DoesNotExist", vec![])])),
            &labels
        ));
        assert!(!selector_matches(
            Some(&sel(None, vec![("gpu", "Exists", vec![])])),
            &labels
        ));
    }
}
