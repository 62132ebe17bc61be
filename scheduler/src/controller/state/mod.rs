//! The controller's state machine. One task owns it: every input (watch
//! change, write result, timer, leadership change) is handled in turn, so the
//! core and the records never race.

mod backoff;
mod decide;
mod failing;
mod groups;
mod inputs;
mod lifecycle;
mod pods;
mod quotas;
mod release;
mod relist;
mod repair;
mod results;
mod visibility;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use koord_queue_api::ResourceListExt as _;
use koord_queue_api::Resources;
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, QueueUnitPhase};
use koord_queue_runtime::{Leadership, Readiness};
use tokio::sync::{mpsc, watch};

use decide::{Intent, OnSubmit};
use pods::{PodGroup, Pods};
use repair::Repair;
use visibility::Visibility;

use super::clock::Now;
use super::metrics::Metrics;
use super::quota_names::QuotaNames;
use super::records::{
    Grouping, JobKey, JobRecord, Key, NamespaceQuotaRecord, NodeRecord, QueueRecord, QuotaRecord,
    UnitRecord,
};
use super::sources::{Input, SourceName};
use super::writes::{Claim, GroupTarget, JobRef, Write, WriteSink, Written};
use crate::core::{Core, RootCapacity, UnitDef};

/// Readiness condition: every watch has its initial list.
pub const CACHES_SYNCED: &str = "caches synced";
/// Readiness condition: the leader ran its first cycle (standbys: at once).
pub const FIRST_CYCLE: &str = "first cycle";

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
    /// Salt of the backoff jitter (see [`UnitView::jitter_salt`]): random
    /// per process, so that replicas do not send units back in step; fixed
    /// in tests, so that a backoff's end is known.
    pub jitter_salt: u64,
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
    /// A lifecycle write (adopt, release, phase, backoff, hold, delete) was
    /// submitted and its result has not come back: the unit's next step is
    /// not decided until it does. This is the controller's one record of a
    /// write in flight; the writer's backlog only keeps a unit's writes in
    /// order while it sends them (`writes/backlog.rs`).
    awaiting: bool,
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
    /// The last release of the unit by this process has an unknown outcome
    /// (`Outcome::Unknown`) and no watch event of the unit came since: it is
    /// sent again, whole, while its job is held.
    unconfirmed: bool,
    /// Why it waits, as last computed (boxed: a rendered String keeps the
    /// spare capacity of its growth, for each of 100,000 waiting units).
    reason: Option<Box<str>>,
    last_published: Option<Instant>,
    last_waiting_event: Option<Instant>,
    released_at: Option<Instant>,
    /// Its pod group's (gated, released) members when more of them were
    /// last released (see `decide::members_to_release`).
    members_released_at: Option<(usize, usize)>,
    /// Its job's pod group, as last seen (a RayJob's cluster): its pods
    /// still run on the unit's quota after the job is deleted.
    pod_group: Option<PodGroup>,
}

impl UnitState {
    fn new(rec: UnitRecord) -> Self {
        Self {
            rec,
            member: Membership::Absent,
            given: None,
            awaiting: false,
            claim: None,
            publishing: false,
            expect_rv: None,
            released_here: false,
            release_ack: false,
            unconfirmed: false,
            reason: None,
            last_published: None,
            last_waiting_event: None,
            released_at: None,
            members_released_at: None,
            pod_group: None,
        }
    }

    /// Withdraws the pending write, if it is withdrawable and no slot took
    /// it yet: the unit is then free for another write.
    fn withdraw(&mut self) -> bool {
        if self.awaiting && self.claim.take().is_some_and(|c| c.take()) {
            self.awaiting = false;
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
        now_ms: i64,
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
            self.rec.allocated_ms = Some(now_ms);
        }
        self.unconfirmed = false;
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
            max_run_ms: r.max_run_ms,
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
    writer: Box<dyn WriteSink>,
    /// Whether this replica leads, as the last leadership input said (the
    /// writer fences every write on the live Lease: this only decides what
    /// the controller does).
    leading: bool,
    /// The time of the input being handled (see [`Controller::set_now`]).
    now: Now,
    metrics: Metrics,
    readiness: Readiness,
    capacity: Option<RootCapacity>,
    cycle_due: Option<Instant>,
    ran_first_cycle: bool,
    /// What the visibility passes keep (see `visibility.rs`).
    visibility: Visibility,
    /// What the repairs of missing units and jobs keep (see `repair.rs`).
    repair: Repair,
    retry: HashSet<Key>,
    /// Adopted units whose phase Enqueued is not written yet: written after
    /// the next cycle unless it released them (then the release says it all).
    to_enqueue: HashSet<Key>,
    /// Units whose next step depends on the clock (backoff, timeouts).
    timed: HashSet<Key>,
    /// Pods of queued jobs and the indexes that find their units (see
    /// `pods.rs`).
    pods: Pods,
    /// Job kinds whose API fails now (see `failing.rs`).
    failing_kinds: HashSet<&'static str>,
    /// Pod groups' members (see `groups.rs`).
    groups: groups::Groups,
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
        writer: impl WriteSink + 'static,
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
            writer: Box::new(writer),
            leading: leader.is_leader(),
            // Until the run loop's first input.
            now: Now::read(),
            metrics,
            readiness,
            capacity: None,
            cycle_due: None,
            ran_first_cycle: false,
            visibility: Visibility::default(),
            repair: Repair::default(),
            retry: HashSet::new(),
            to_enqueue: HashSet::new(),
            timed: HashSet::new(),
            pods: Pods::default(),
            failing_kinds: HashSet::new(),
            groups: groups::Groups::default(),
        }
    }

    fn synced(&self) -> bool {
        self.unsynced.is_empty()
    }

    /// Whether this replica leads: set by leadership inputs only, so that
    /// one input is handled under one leadership.
    fn leads(&self) -> bool {
        self.leading
    }

    /// The time the next input is handled at: the clock the controller's
    /// decisions read (as the core's `Core::set_now`).
    fn set_now(&mut self, now: Now) {
        self.now = now;
    }

    /// Runs until `stop` resolves.
    pub async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut written: mpsc::UnboundedReceiver<Written>,
        mut leadership: watch::Receiver<bool>,
        stop: impl Future<Output = ()>,
    ) {
        self.set_now(Now::read());
        if !self.leads() {
            // Standbys are ready once synced; the leader after its first cycle.
            self.readiness.set(FIRST_CYCLE, true);
        }
        // A change between the construction and the subscription is not
        // signalled by the receiver: its current value is taken as an input.
        let leads_now = *leadership.borrow_and_update();
        if leads_now != self.leads() {
            self.on_leadership(leads_now);
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
                    self.set_now(Now::read());
                    self.visibility.changed();
                    self.on_written(w);
                }
                Some(input) = inputs.recv() => {
                    self.set_now(Now::read());
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
                    self.set_now(Now::read());
                    self.on_leadership(leads);
                }
                _ = cycle => {
                    self.visibility.changed();
                    self.cycle_due = None;
                    self.set_now(Now::read());
                    self.cycle();
                }
                _ = housekeeping.tick() => {
                    self.set_now(Now::read());
                    self.housekeeping();
                }
            }
        }
    }

    fn request_cycle(&mut self) {
        if self.cycle_due.is_none() {
            self.cycle_due = Some(self.now.at + self.settings.cycle_batch);
        }
    }

    // ---- inputs -------------------------------------------------------------
}

fn job_ref(job: &JobRecord) -> JobRef {
    if let Some(Grouping::Group {
        selector,
        size,
        member: (member, member_uid),
        ..
    }) = job.grouping.as_deref()
    {
        return JobRef {
            adapter: job.adapter,
            namespace: job.namespace.to_string(),
            name: member.clone(),
            uid: member_uid.clone(),
            group: Some(GroupTarget {
                name: job.name.clone(),
                selector: selector.clone(),
                uid: job.uid.clone(),
                size: *size,
            }),
        };
    }
    JobRef {
        adapter: job.adapter,
        namespace: job.namespace.to_string(),
        name: job.name.clone(),
        uid: job.uid.clone(),
        group: None,
    }
}

// ---- reconciliation -----------------------------------------------------------

impl Controller {
    /// Submits a lifecycle write of unit `k`; its quota is freed now when the
    /// intent says so (see [`OnSubmit`]).
    fn submit_unit_write(&mut self, k: &Key, intent: Intent) {
        let Intent { write, on_submit } = intent;
        let group_counts = match &write {
            Write::ReleaseMembers { .. } => self
                .units
                .get(k)
                .and_then(|st| self.jobs.get(&st.rec.job_key()))
                .and_then(|j| match j.grouping.as_deref() {
                    Some(Grouping::Group {
                        gated, released, ..
                    }) => Some((*gated, *released)),
                    _ => None,
                }),
            _ => None,
        };
        if let Some(st) = self.units.get_mut(k) {
            st.awaiting = true;
            if group_counts.is_some() {
                st.members_released_at = group_counts;
            }
            if on_submit == OnSubmit::Free && st.member != Membership::Absent {
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

/// The queue a unit is served in: its quota's queue (the ElasticQuota
/// mapping), else the queue named in its spec.
fn queue_of(rec: &UnitRecord) -> &str {
    rec.quota.as_deref().unwrap_or(&rec.queue)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The outcome of a book-keeping step of the core: nothing to do (a
/// repeated step) is fine, anything else is logged — it means the records
/// and the core disagree.
fn core_step(step: &'static str, unit: &str, result: Result<(), crate::core::CoreError>) {
    if let Err(error) = result
        && !error.is_nothing_to_do()
    {
        tracing::warn!(step, unit, %error, "the core refused a book-keeping step");
    }
}

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;
