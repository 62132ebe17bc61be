//! The controller's state machine. One task owns it: every input (watch
//! change, write result, timer, leadership change) is handled in turn, so the
//! core and the records never race.

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

    fn on_input(&mut self, input: Input) {
        match input {
            Input::Unit(change) => self.on_unit(change),
            Input::Job(kind, change) => self.on_job(kind, change),
            Input::Quota(change) => self.on_quota(change),
            Input::Queue(change) => self.on_queue(change),
            Input::Node(change) => self.on_node(change),
            Input::NamespaceQuota(change) => self.on_namespace_quota(change),
            Input::Pod(change) => self.on_pod(change),
        }
    }

    fn source_done(&mut self, source: SourceName) {
        if self.unsynced.remove(source) && self.unsynced.is_empty() {
            tracing::info!(
                units = self.units.len(),
                jobs = self.jobs.len(),
                "caches synced; held quota rebuilt from the API"
            );
            self.readiness.set(CACHES_SYNCED, true);
            self.recompute_capacity();
            let keys: Vec<Key> = self.units.keys().cloned().collect();
            for k in keys {
                self.reconcile(&k);
            }
            self.request_cycle();
        }
    }

    fn on_unit(&mut self, change: Change<Box<UnitRecord>>) {
        match change {
            Change::Applied(rec) => {
                let k = rec.key();
                match self.units.get_mut(&k) {
                    Some(st) => {
                        if let (Some(expected), Some(rv)) = (st.expect_rv, rec.resource_version)
                            && rv < expected
                        {
                            return; // older than our own write
                        }
                        if st.expect_rv.take().is_some() {
                            self.writer.settled(&k);
                        }
                        st.rec = *rec;
                    }
                    None => {
                        self.units.insert(k.clone(), Box::new(UnitState::new(*rec)));
                    }
                }
                self.reconcile(&k);
            }
            Change::Deleted(ns, name) => {
                let k = key(&ns, &name);
                if let Some(st) = self.units.remove(&k) {
                    if st.member != Membership::Absent {
                        self.core.remove_unit(&k);
                        self.request_cycle();
                    }
                    self.on_unit_gone(&st);
                }
            }
            Change::Synced | Change::Absent => self.source_done("queueunits"),
        }
    }

    /// A unit was deleted: if its job still lives, it stays held (and is held
    /// again if it ran), and an Event says why (architecture §3 rule 3).
    fn on_unit_gone(&mut self, st: &UnitState) {
        let Some(job) = self
            .jobs
            .get(&st.rec.job_key())
            .filter(|j| j.unit_name == st.rec.name)
        else {
            return;
        };
        self.unit_gone.insert(job.key());
        if job.deleting
            || matches!(job.state, JobState::Succeeded | JobState::Failed)
            || !self.leads()
        {
            return;
        }
        let job_ref = job_ref(job);
        if !job.held {
            self.writer.submit(Write::HoldJob {
                unit: st.rec.key(),
                job: job_ref.clone(),
            });
        }
        self.event(&job_ref, true, "QueueUnitDeleted", format!(
            "QueueUnit {} was deleted: the job stays held and is not queued. Delete and re-create the job to queue it again",
            st.rec.name
        ));
    }

    fn on_job(&mut self, kind: &'static str, change: Change<Box<JobRecord>>) {
        match change {
            Change::Applied(rec) => {
                let unit = rec.unit.clone();
                self.jobs.insert(rec.key(), *rec);
                if self.units.contains_key(&unit) {
                    self.reconcile(&unit);
                }
            }
            Change::Deleted(ns, name) => {
                let job_key = JobKey::new(kind, &ns, &name);
                self.unit_gone.remove(&job_key);
                self.missing_unit_since.remove(&job_key);
                if let Some(rec) = self.jobs.remove(&job_key) {
                    let unit = rec.unit.clone();
                    if self.units.contains_key(&unit) {
                        self.reconcile(&unit);
                    }
                }
            }
            Change::Synced | Change::Absent => self.source_done(kind),
        }
    }

    fn on_quota(&mut self, change: Change<Box<QuotaRecord>>) {
        let resolution = match change {
            Change::Applied(rec) => self.quota_names.apply(*rec),
            Change::Deleted(namespace, name) => {
                let resolution = self.quota_names.delete(&namespace, &name);
                if resolution.winner.is_none() {
                    self.quotas.remove(&name);
                    self.core.remove_quota(&name);
                }
                resolution
            }
            Change::Synced | Change::Absent => return self.source_done("elasticquotas"),
        };
        for shadowed in &resolution.newly_shadowed {
            self.report_shadowed_quota(shadowed);
        }
        self.metrics
            .quota_name_conflicts
            .set(self.quota_names.shadowed() as i64);
        if let Some(winner) = resolution.winner
            && self.quotas.get(&winner.name) != Some(&winner)
        {
            self.apply_quota(winner);
        }
        self.recompute_capacity();
        self.request_cycle();
    }

    /// A quota ignored because an older one holds its name: a log line and
    /// an Event on it (the metric counts them).
    fn report_shadowed_quota(&self, quota: &QuotaRecord) {
        let holder = self.quota_names.holder(&quota.name).unwrap_or("?");
        let note = format!(
            "ElasticQuota {}/{} is ignored: quota names are unique cluster-wide and {holder}/{} \
             is older; rename one of them",
            quota.namespace, quota.name, quota.name
        );
        tracing::warn!(quota = %quota.name, namespace = %quota.namespace, holder, "{note}");
        if self.leads() {
            self.writer.submit(Write::Event {
                regarding: ObjectReference {
                    api_version: Some("scheduling.sigs.k8s.io/v1alpha1".into()),
                    kind: Some("ElasticQuota".into()),
                    namespace: Some(quota.namespace.clone()),
                    name: Some(quota.name.clone()),
                    ..Default::default()
                },
                warning: true,
                reason: "QuotaNameTaken",
                note,
            });
        }
    }

    /// Makes `rec` the quota of its name: the core's tree follows it.
    fn apply_quota(&mut self, rec: QuotaRecord) {
        if let Some(invalid) = &rec.invalid {
            tracing::warn!(quota = %rec.name, %invalid, "ElasticQuota ignored");
        } else if rec.name != keys::ROOT_QUOTA_NAME {
            let parent = Some(rec.parent.clone()).filter(|p| p != keys::ROOT_QUOTA_NAME);
            let def = QuotaDef {
                name: rec.name.clone(),
                parent,
                min: rec.min.clone(),
                max: rec.max.clone(),
                is_parent: rec.is_parent,
            };
            if let Err(error) = self.core.upsert_quota(&def) {
                tracing::warn!(quota = %rec.name, %error, "ElasticQuota ignored");
            }
        }
        self.quotas.insert(rec.name.clone(), rec);
    }

    fn on_queue(&mut self, change: Change<Box<QueueRecord>>) {
        match change {
            Change::Applied(rec) => {
                let mut def = QueueDef::new(rec.name.clone())
                    .with_priority(rec.priority)
                    .with_policy(rec.policy);
                def.reclaim = rec.reclaim;
                self.core.upsert_queue(&def);
                self.queues.insert(rec.name.clone(), *rec);
            }
            Change::Deleted(_, name) => {
                self.queues.remove(&name);
                self.core.remove_queue(&name);
            }
            Change::Synced | Change::Absent => return self.source_done("queues"),
        }
        self.request_cycle();
    }

    fn on_node(&mut self, change: Change<Box<NodeRecord>>) {
        match change {
            Change::Applied(rec) => {
                // Heartbeats arrive often; only allocatable/readiness changes matter.
                if self.nodes.get(&rec.name) == Some(&*rec) {
                    return;
                }
                self.nodes.insert(rec.name.clone(), *rec);
            }
            Change::Deleted(_, name) => {
                if self.nodes.remove(&name).is_none() {
                    return;
                }
            }
            Change::Synced | Change::Absent => return self.source_done("nodes"),
        }
        if self.recompute_capacity() {
            self.request_cycle();
        }
    }

    fn on_pod(&mut self, change: Change<Box<PodRecord>>) {
        let owner = match change {
            Change::Applied(pod) => {
                let owner = pod.owner_uid.clone();
                let pods = self.pods.entry(owner.clone()).or_default();
                if pods.get(&pod.name) == Some(&*pod) {
                    return;
                }
                pods.insert(pod.name.clone(), *pod);
                owner
            }
            Change::Deleted(_, name) => {
                let Some(owner) = self
                    .pods
                    .iter()
                    .find(|(_, p)| p.contains_key(&name))
                    .map(|(o, _)| o.clone())
                else {
                    return;
                };
                if let Some(pods) = self.pods.get_mut(&owner) {
                    pods.remove(&name);
                    if pods.is_empty() {
                        self.pods.remove(&owner);
                    }
                }
                owner
            }
            Change::Synced | Change::Absent => return self.source_done("pods"),
        };
        // Only the strict-dequeue units of that job care.
        if let Some(job) = self.jobs.values().find(|j| j.uid == owner) {
            let unit = job.unit.clone();
            if self
                .units
                .get(&unit)
                .is_some_and(|u| u.rec.phase == Some(QueueUnitPhase::SchedReady))
            {
                self.reconcile(&unit);
            }
        }
    }

    fn on_namespace_quota(&mut self, change: Change<Box<NamespaceQuotaRecord>>) {
        let namespace = match change {
            Change::Applied(rec) => {
                let ns = rec.namespace.clone();
                let quotas = self.namespace_quotas.entry(ns.clone()).or_default();
                if quotas.get(&rec.name) == Some(&*rec) {
                    return;
                }
                quotas.insert(rec.name.clone(), *rec);
                ns
            }
            Change::Deleted(ns, name) => {
                if let Some(quotas) = self.namespace_quotas.get_mut(&ns) {
                    quotas.remove(&name);
                }
                ns
            }
            Change::Synced | Change::Absent => return self.source_done("resourcequotas"),
        };
        // Several ResourceQuotas in one namespace must all admit the unit:
        // hand the core the tightest headroom (hard - used) per resource.
        let quotas = self
            .namespace_quotas
            .get(&namespace)
            .map(|q| q.values().collect::<Vec<_>>())
            .unwrap_or_default();
        if quotas.is_empty() {
            self.namespace_quotas.remove(&namespace);
            self.core.remove_namespace_quota(&namespace);
        } else {
            let mut headroom = Resources::new();
            for q in &quotas {
                for (resource, hard) in q.hard.iter() {
                    let room = hard.saturating_sub(q.used.get(resource));
                    let tightest = if headroom.contains(resource) {
                        headroom.get(resource).min(room)
                    } else {
                        room
                    };
                    headroom.set(resource, tightest);
                }
            }
            self.core
                .set_namespace_quota(&namespace, &headroom, &Resources::new());
        }
        self.request_cycle();
    }

    fn on_leadership(&mut self, leads: bool) {
        self.metrics.leader.set(i64::from(leads));
        if leads {
            tracing::info!("leading: scheduling and writing");
            self.ran_first_cycle = false;
            self.readiness.set(FIRST_CYCLE, false);
            self.core.mark_all_dirty();
            let keys: Vec<Key> = self.units.keys().cloned().collect();
            for k in keys {
                self.reconcile(&k);
            }
            self.request_cycle();
        } else {
            tracing::info!("standing by: no cycles, no writes");
            self.cycle_due = None;
            self.readiness.set(FIRST_CYCLE, true);
        }
    }
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
    /// Brings the core's view of unit `k` in line with the observed unit and
    /// job, then (as leader) issues the lifecycle write the pair calls for.
    fn reconcile(&mut self, k: &Key) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        let job = self
            .jobs
            .get(&st.rec.job_key())
            .filter(|j| j.unit_name == st.rec.name);
        let job_finished = job.is_some_and(|j| finished(j.state));
        // A Running phase still waiting for a slot is moot once the job has
        // finished: withdrawn, the Succeed/Failed write takes its place.
        if st.busy && !(job_finished && st.withdraw()) {
            // Quota is freed the moment the job finishes, even while a write
            // for its unit (say, its Running phase) is in flight; the
            // Succeed/Failed write follows once that one is done.
            if st.member == Membership::Holding && job_finished {
                self.set_membership(k, Membership::Absent);
            }
            return;
        }
        let st = &*st;
        tracing::trace!(unit = %k, phase = ?st.rec.phase, job = ?job.map(|j| (j.held, j.state)), "reconcile");
        let desired = desired_membership(&st.rec, job);
        self.set_membership(k, desired);
        if self.synced() && self.leads() {
            self.lifecycle(k);
        }
    }

    fn set_membership(&mut self, k: &Key, desired: Membership) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        let fingerprint = st.def_fingerprint();
        let mut changed = false;
        match (st.member, desired) {
            (Membership::Absent, Membership::Absent) => {}
            (_, Membership::Absent) => {
                self.core.remove_unit(k);
                st.given = None;
                changed = true;
            }
            (from, to) => {
                if st.given != Some(fingerprint) {
                    if let Err(error) = self.core.upsert_unit(&st.def()) {
                        tracing::warn!(unit = %k, %error, "unit not schedulable");
                        return;
                    }
                    st.given = Some(fingerprint);
                    changed = true;
                }
                match (from, to) {
                    (Membership::Holding, Membership::Waiting) => {
                        let _ = self.core.free(k);
                        changed = true;
                    }
                    (f, Membership::Holding) if f != Membership::Holding => {
                        let held = if st.rec.held.is_zero() {
                            st.rec.request.clone()
                        } else {
                            st.rec.held.clone()
                        };
                        // The release time orders reclaim (most recent first),
                        // also after a restart.
                        let _ = self.core.hold_at(k, &held, st.rec.allocated_ms);
                        changed = true;
                    }
                    _ => {}
                }
            }
        }
        st.member = desired;
        if changed {
            self.visibility.changed();
            self.request_cycle();
        }
    }

    /// The lifecycle write unit `k` needs now, if any (leader only).
    fn lifecycle(&mut self, k: &Key) {
        let Some(st) = self.units.get(k) else { return };
        if st.busy || st.rec.deleting {
            return;
        }
        let rec = &st.rec;
        let job = self
            .jobs
            .get(&rec.job_key())
            .filter(|j| j.unit_name == rec.name);
        let queue = self.queues.get(queue_of(rec));
        let now_ms = now_ms();
        let mut timed = false;
        let phase = effective_phase(rec, job);
        let write = match (phase, job) {
            (None, Some(job)) if !job.deleting => Some(Write::Adopt {
                unit: k.clone(),
                job: job_ref(job),
            }),
            // Adopted units whose job is gone: delete (the garbage collector
            // would too; doing it now frees the quota at once).
            (Some(_), None) => Some(Write::DeleteUnit { unit: k.clone() }),
            (Some(QueueUnitPhase::Enqueued), Some(job)) if !job.held && !finished(job.state) => {
                // Released by someone else (e.g. while the webhook was down):
                // hold it again, it holds no quota.
                let job = job_ref(job);
                self.event(&job, true, "HeldAgain", format!(
                    "the job was released outside Koord-Queue; it is held again and waits in queue {}", queue_of(rec)
                ));
                Some(Write::HoldJob {
                    unit: k.clone(),
                    job,
                })
            }
            (Some(QueueUnitPhase::TimeoutBackoff), Some(_)) => {
                timed = true;
                rec.requeue_at_ms
                    .is_none_or(|t| t <= now_ms)
                    .then(|| Write::Phase {
                        unit: k.clone(),
                        phase: QueueUnitPhase::Enqueued,
                        admissions: Some(Vec::new()),
                        message: format!("backoff over; waiting in queue {}", queue_of(rec)),
                    })
            }
            // A send-back after a strict-dequeue failure takes three writes
            // (SchedFailed, hold the job, TimeoutBackoff). A crash or a failed
            // write between them leaves the unit in SchedFailed, which nothing
            // else moves on from, its job possibly still released while it
            // holds no quota: finish the send-back (holding is idempotent).
            (Some(QueueUnitPhase::SchedFailed), Some(job)) => Some(self.backoff(
                k,
                rec,
                Some(job),
                None,
                "SchedulingTimeout",
                sched_failed_reason(rec.message.as_deref()),
            )),
            (Some(phase), Some(job)) if phase.holds_quota() => {
                if finished(job.state) {
                    let (phase, text) = match job.state {
                        JobState::Succeeded => (QueueUnitPhase::Succeed, "job succeeded"),
                        _ => (QueueUnitPhase::Failed, "job failed"),
                    };
                    Some(Write::Phase {
                        unit: k.clone(),
                        phase,
                        admissions: Some(Vec::new()),
                        message: text.into(),
                    })
                } else if phase == QueueUnitPhase::Reserved {
                    self.checks_outcome(k, rec, job, queue)
                } else if job.held {
                    st.held_job_was_suspended_again().then(|| Write::Phase {
                        unit: k.clone(),
                        phase: QueueUnitPhase::Enqueued,
                        admissions: Some(Vec::new()),
                        message: format!(
                            "the job was suspended again; waiting in queue {}",
                            queue_of(rec)
                        ),
                    })
                } else {
                    let since_ms = now_ms - rec.allocated_ms.unwrap_or(now_ms);
                    match phase {
                        QueueUnitPhase::SchedReady => {
                            timed = true;
                            self.strict_outcome(k, rec, job, queue, since_ms)
                        }
                        QueueUnitPhase::Dequeued | QueueUnitPhase::SchedSucceed
                            if job.state == JobState::Running =>
                        {
                            Some(Write::Phase {
                                unit: k.clone(),
                                phase: QueueUnitPhase::Running,
                                admissions: None,
                                message: "running".into(),
                            })
                        }
                        QueueUnitPhase::Dequeued | QueueUnitPhase::SchedSucceed => {
                            let limit = queue.and_then(|q| q.running_timeout);
                            timed = limit.is_some();
                            limit.filter(|t| since_ms > millis(*t)).map(|t| {
                                self.backoff(k, rec, Some(job), None, "RunningTimeout", format!(
                                    "the job did not start running within {}s of its release; suspended again", t.as_secs()
                                ))
                            })
                        }
                        _ => None,
                    }
                }
            }
            _ => None,
        };
        if timed {
            self.timed.insert(k.clone());
        } else {
            self.timed.remove(k);
        }
        if write.is_none()
            && rec.phase.is_none()
            && phase == Some(QueueUnitPhase::Enqueued)
            && job.is_some_and(|j| j.held && !j.deleting)
        {
            self.to_enqueue.insert(k.clone());
        }
        // The release reached the job: from now on a held job means re-suspended.
        let running = job.is_some_and(|j| j.state == JobState::Running);
        if let Some(job) = job
            && !job.held
            && let Some(st) = self.units.get_mut(k)
            && st.rec.holds_quota()
        {
            st.release_ack = true;
            if running && st.member == Membership::Holding {
                // Its pods exist now: the namespace's ResourceQuota counts them.
                let _ = self.core.mark_started(k);
            }
        }
        if let Some(write) = write {
            tracing::debug!(unit = %k, operation = write.operation(), "lifecycle write");
            self.submit_unit_write(k, write);
        }
    }

    /// A Reserved unit: release once every check is Ready; back off when one
    /// says Retry or Rejected; otherwise keep waiting (quota held).
    fn checks_outcome(
        &self,
        k: &Key,
        rec: &UnitRecord,
        job: &JobRecord,
        queue: Option<&QueueRecord>,
    ) -> Option<Write> {
        if let Some(failed) = rec
            .checks
            .iter()
            .find(|c| matches!(c.state, CheckState::Retry | CheckState::Rejected))
        {
            let message = format!(
                "admission check {} said {:?}{}; quota released, retrying after backoff",
                failed.name,
                failed.state,
                failed
                    .message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            );
            return Some(self.backoff(k, rec, None, None, "AdmissionCheck", message));
        }
        let all_ready =
            !rec.checks.is_empty() && rec.checks.iter().all(|c| c.state == CheckState::Ready);
        all_ready.then(|| Write::Release {
            unit: k.clone(),
            job: job_ref(job),
            admissions: None,
            attempts: None,
            phase: self.release_phase(queue),
            checks: None,
            message: format!(
                "admission checks passed; released from queue {}",
                queue_of(rec)
            ),
        })
    }

    /// A SchedReady unit (strict dequeue): SchedSucceed once every pod is
    /// bound; SchedFailed and back off when pods stay unbound past the timeout.
    fn strict_outcome(
        &self,
        k: &Key,
        rec: &UnitRecord,
        job: &JobRecord,
        queue: Option<&QueueRecord>,
        since_ms: i64,
    ) -> Option<Write> {
        let expected: i64 = rec.pod_sets.iter().map(|(_, c, _)| i64::from(*c)).sum();
        let pods = self.pods.get(&job.uid);
        let scheduled = pods.map_or(0, |p| p.values().filter(|p| p.scheduled).count());
        if i64::try_from(scheduled).unwrap_or(i64::MAX) >= expected.max(1) {
            return Some(Write::Phase {
                unit: k.clone(),
                phase: QueueUnitPhase::SchedSucceed,
                admissions: None,
                message: format!("all {scheduled} pods bound"),
            });
        }
        let timeout = self
            .strict_timeout(queue)
            .unwrap_or(Duration::from_secs(300));
        if since_ms <= millis(timeout) {
            return None;
        }
        let why = pods
            .and_then(|p| {
                p.values().find_map(|p| {
                    p.unschedulable
                        .as_ref()
                        .map(|m| format!("pod {} unschedulable: {m}", p.name))
                })
            })
            .unwrap_or_else(|| format!("{scheduled} of {expected} pods bound"));
        Some(self.backoff(
            k,
            rec,
            Some(job),
            Some(QueueUnitPhase::SchedFailed),
            "SchedulingTimeout",
            format!(
                "SchedFailed: {why} after {}s; suspended again, quota released",
                timeout.as_secs()
            ),
        ))
    }

    /// A backoff write: exponential from 10 s, doubling, capped at 15 min,
    /// with ±10 % jitter so that units sent back together do not return together.
    fn backoff(
        &self,
        k: &Key,
        rec: &UnitRecord,
        job: Option<&JobRecord>,
        via: Option<QueueUnitPhase>,
        reason: &'static str,
        message: String,
    ) -> Write {
        let count = rec.requeue_count.saturating_add(1);
        let delay = backoff_delay(count, jitter_seed(k, count));
        let requeue_at = k8s_openapi::jiff::Timestamp::now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(millis(
                delay,
            )))
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
        let message = format!(
            "{message}{BACK_IN_QUEUE}{} at {requeue_at} (attempt {count})",
            queue_of(rec)
        );
        Write::Backoff {
            unit: k.clone(),
            job: job.map(job_ref),
            via,
            reason,
            message,
            count,
            requeue_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(requeue_at),
        }
    }

    fn strict_timeout(&self, queue: Option<&QueueRecord>) -> Option<Duration> {
        strict_timeout(queue, self.settings.strict_default)
    }

    fn release_phase(&self, queue: Option<&QueueRecord>) -> QueueUnitPhase {
        release_phase(queue, self.settings.strict_default)
    }

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

    /// Phase Enqueued for the adopted units the last cycle did not release.
    fn write_enqueued(&mut self) {
        for k in std::mem::take(&mut self.to_enqueue) {
            let Some(st) = self.units.get(&k) else {
                continue;
            };
            if st.busy || st.rec.phase.is_some() || st.member != Membership::Waiting {
                continue;
            }
            let Some(job) = self
                .jobs
                .get(&st.rec.job_key())
                .filter(|j| j.unit_name == st.rec.name)
            else {
                continue;
            };
            let write = Write::Enqueue {
                unit: k.clone(),
                job: job_ref(job),
                message: format!("waiting in queue {}", queue_of(&st.rec)),
            };
            self.submit_unit_write(&k, write);
        }
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

    fn cycle(&mut self) {
        if !self.synced() || !self.leads() {
            return;
        }
        let started = Instant::now();
        let out = self.core.run_cycle();
        tracing::trace!(decisions = out.decisions.len(), "cycle done");
        self.metrics
            .cycle_duration
            .observe(started.elapsed().as_secs_f64());
        if !self.ran_first_cycle {
            self.ran_first_cycle = true;
            self.readiness.set(FIRST_CYCLE, true);
        }
        for decision in out.decisions {
            let k: Key = decision.unit.clone();
            let Some(st) = self.units.get_mut(&k) else {
                let _ = self.core.unreserve(&k);
                continue;
            };
            let job = self
                .jobs
                .get(&st.rec.job_key())
                .filter(|j| j.unit_name == st.rec.name);
            // Its phase Enqueued, still waiting for a slot, is moot now.
            if job.is_some() {
                st.withdraw();
            }
            let (Some(job), false) = (job, st.busy) else {
                // Cannot release now (job vanished, or a write is pending).
                let _ = self.core.unreserve(&k);
                continue;
            };
            st.member = Membership::Holding;
            st.busy = true;
            st.releasing();
            st.released_at = Some(Instant::now());
            let quota = queue_of(&st.rec).to_string();
            let queue = self.queues.get(&quota);
            let release_phase = release_phase(queue, self.settings.strict_default);
            let checks: Vec<AdmissionCheckState> = queue
                .map(|q| {
                    q.checks
                        .iter()
                        .filter(|c| selector_matches(c.label_selector.as_ref(), &st.rec.labels))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                .map(|c| AdmissionCheckState {
                    name: c.name.clone(),
                    state: CheckState::Pending,
                    last_transition_time: Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::now(),
                        ),
                    ),
                    message: None,
                })
                .collect();
            let how = if decision.guaranteed {
                " (within its guaranteed minimum)"
            } else {
                " (borrowing idle capacity)"
            };
            let (phase, message) = if checks.is_empty() {
                (
                    release_phase,
                    format!(
                        "released: {} reserved in quota {quota}{how}",
                        decision.resources
                    ),
                )
            } else {
                let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
                (
                    QueueUnitPhase::Reserved,
                    format!(
                        "quota reserved ({} in quota {quota}{how}); waiting for admission checks: {}",
                        decision.resources,
                        names.join(", ")
                    ),
                )
            };
            let write = Write::Release {
                unit: k.clone(),
                job: job_ref(job),
                admissions: Some(admissions(&st.rec, &decision.resources)),
                attempts: Some(st.rec.attempts + 1),
                phase,
                checks: (!checks.is_empty()).then_some(checks),
                message,
            };
            self.writer.submit(write);
        }
        for reclaim in out.reclaims {
            self.reclaim(reclaim);
        }
        for (k, reason) in out.waiting {
            if let Some(st) = self.units.get_mut(&k) {
                st.reason = Some(reason.to_string().into_boxed_str());
            }
        }
        self.write_enqueued();
    }

    /// Re-suspends a reclaim victim: its job is held again, it goes to
    /// TimeoutBackoff with the reason "reclaimed", and the core frees its
    /// quota once that is written (or puts it back if it cannot be).
    fn reclaim(&mut self, reclaim: crate::core::Reclaim) {
        let k: Key = reclaim.victim.clone();
        let Some(st) = self.units.get_mut(&k) else {
            let _ = self.core.cancel_reclaim(&k);
            return;
        };
        // A Running phase still waiting is moot: the victim goes to backoff.
        if st.busy && !st.withdraw() {
            let _ = self.core.cancel_reclaim(&k);
            return;
        }
        let Some(st) = self.units.get(&k) else {
            return;
        };
        let job = self
            .jobs
            .get(&st.rec.job_key())
            .filter(|j| j.unit_name == st.rec.name);
        tracing::info!(victim = %k, for_unit = %reclaim.for_unit, resources = %reclaim.resources, "reclaiming");
        let write = self.backoff(&k, &st.rec, job, None, RECLAIMED, reclaim.message());
        self.submit_unit_write(&k, write);
    }

    // ---- write results --------------------------------------------------------

    fn on_written(&mut self, done: Written) {
        let Written { write, outcome } = done;
        tracing::debug!(operation = write.operation(), unit = ?write.unit(), ?outcome, "write done");
        let Some(k) = write.unit().cloned() else {
            match &write {
                Write::RecreateUnit { job, .. } => {
                    self.recreating.remove(&JobKey::new(
                        job.adapter.kind().kind,
                        &job.namespace,
                        &job.name,
                    ));
                }
                Write::EnsureQueue { name, .. }
                | Write::DeleteQueue { name }
                | Write::QueueStatus { name, .. } => {
                    self.queue_writes.remove(name);
                }
                _ => {}
            }
            return;
        };
        let ok_rv = match &outcome {
            Outcome::Done(rv) => Some(*rv),
            _ => None,
        };
        let Some(st) = self.units.get_mut(&k) else {
            return;
        };
        if let Some(Some(rv)) = ok_rv {
            st.expect_rv = Some(st.expect_rv.map_or(rv, |e| e.max(rv)));
            if st.rec.resource_version.is_some_and(|seen| seen >= rv) {
                // The watch showed this write before its answer came back.
                self.writer.settled(&k);
            }
        }
        if !matches!(write, Write::Visibility { .. }) {
            st.claim = None;
        }
        match write {
            Write::Visibility {
                position, message, ..
            } => {
                st.publishing = false;
                if ok_rv.is_some() {
                    st.rec.position = position;
                    st.rec.message = Some(message);
                }
                return;
            }
            Write::Release {
                job,
                admissions,
                attempts,
                phase,
                checks,
                ..
            } => {
                st.busy = false;
                let from_reserved = admissions.is_none();
                if ok_rv.is_some() {
                    st.release_written(phase, admissions.as_deref(), attempts, checks);
                    let waited = (now_ms() - st.rec.created_ms).max(0);
                    let queue = queue_of(&st.rec).to_string();
                    if phase == QueueUnitPhase::Reserved {
                        let names: Vec<String> =
                            st.rec.checks.iter().map(|c| c.name.clone()).collect();
                        self.event(
                            &job,
                            false,
                            "QuotaReserved",
                            format!(
                                "quota reserved in queue {queue}; waiting for admission checks: {}",
                                names.join(", ")
                            ),
                        );
                    } else {
                        self.metrics
                            .attempts
                            .get_or_create(&AttemptLabels {
                                result: "released".into(),
                            })
                            .inc();
                        self.metrics.dequeue_latency.observe(waited as f64 / 1000.0);
                        self.event(
                            &job,
                            false,
                            "Released",
                            format!(
                                "released from queue {queue} after {:.1}s",
                                waited as f64 / 1000.0
                            ),
                        );
                    }
                } else if from_reserved {
                    // The unit still holds its reservation; retried on the next pass.
                    self.retry.insert(k.clone());
                } else {
                    // Roll the reservation back; a later cycle retries.
                    let _ = self.core.unreserve(&k);
                    st.member = Membership::Waiting;
                    st.released_here = false;
                    self.metrics
                        .attempts
                        .get_or_create(&AttemptLabels {
                            result: "failed".into(),
                        })
                        .inc();
                    self.request_cycle();
                }
            }
            Write::Backoff {
                job,
                reason,
                message,
                count,
                requeue_at,
                ..
            } => {
                st.busy = false;
                if ok_rv.is_some() {
                    st.rec.phase = Some(QueueUnitPhase::TimeoutBackoff);
                    st.rec.held = Resources::new();
                    st.rec.checks.clear();
                    st.rec.requeue_count = count;
                    st.rec.requeue_at_ms = Some(requeue_at.0.as_millisecond());
                    st.released_here = false;
                    self.timed.insert(k.clone());
                    let event_reason = match reason {
                        RECLAIMED => "Reclaimed",
                        "AdmissionCheck" => "AdmissionCheckFailed",
                        "SchedulingTimeout" => "SchedulingFailed",
                        _ => "RunningTimeout",
                    };
                    let target = job.or_else(|| {
                        self.jobs
                            .get(&st.rec.job_key())
                            .filter(|j| j.unit_name == st.rec.name)
                            .map(job_ref)
                    });
                    if let Some(job) = target {
                        self.event(&job, true, event_reason, message);
                    }
                } else if reason == RECLAIMED {
                    // The victim keeps its quota; the guaranteed unit plans again.
                    let _ = self.core.cancel_reclaim(&k);
                    self.request_cycle();
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::Adopt { job, .. } => {
                st.busy = false;
                if ok_rv.is_some() {
                    st.rec.owner_uid = Some(job.uid);
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::Enqueue { job, .. } => {
                st.busy = false;
                if ok_rv.is_some() {
                    st.rec.phase = Some(QueueUnitPhase::Enqueued);
                    let queue = st.rec.queue.clone();
                    self.event(
                        &job,
                        false,
                        "Queued",
                        format!(
                            "queued in queue {queue}; the job is held until Koord-Queue releases it"
                        ),
                    );
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::Phase {
                phase, admissions, ..
            } => {
                st.busy = false;
                if ok_rv.is_some() {
                    st.rec.phase = Some(phase);
                    if admissions.is_some() {
                        st.rec.held = Resources::new();
                    }
                    if let Some(job) = self
                        .jobs
                        .get(&st.rec.job_key())
                        .filter(|j| j.unit_name == st.rec.name)
                    {
                        let job = job_ref(job);
                        match phase {
                            QueueUnitPhase::Succeed | QueueUnitPhase::Failed => {
                                self.event(
                                    &job,
                                    false,
                                    "Finished",
                                    format!("{phase}: quota released"),
                                );
                            }
                            QueueUnitPhase::Enqueued => {
                                self.event(&job, true, "Requeued", format!("the job was suspended again: quota released, waiting in queue {}", self.units.get(&k).map(|s| s.rec.queue.clone()).unwrap_or_default()));
                            }
                            _ => {}
                        }
                    }
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::HoldJob { .. } | Write::DeleteUnit { .. } => {
                st.busy = false;
                if ok_rv.is_none() {
                    self.retry.insert(k.clone());
                }
            }
            _ => {}
        }
        self.reconcile(&k);
    }

    // ---- periodic work --------------------------------------------------------

    fn housekeeping(&mut self) {
        if !self.synced() {
            return;
        }
        self.publish_metrics();
        if !self.leads() {
            return;
        }
        for k in std::mem::take(&mut self.retry) {
            self.reconcile(&k);
        }
        let timed: Vec<Key> = self.timed.iter().cloned().collect();
        for k in timed {
            self.reconcile(&k);
        }
        let now = Instant::now();
        if self
            .last_missing_scan
            .is_none_or(|t| now.duration_since(t) >= MISSING_SCAN_INTERVAL)
        {
            self.last_missing_scan = Some(now);
            self.collect_orphans();
            self.jobs_without_unit();
        }
        self.sync_queues_with_quotas();
        if self.visibility.due()
            && self
                .last_visibility_pass
                .is_none_or(|t| now.duration_since(t) >= self.settings.status_interval)
        {
            self.last_visibility_pass = Some(now);
            let positions_done = self.publish_positions(now);
            let queues_done = self.publish_queue_status(now);
            self.visibility.passed(positions_done && queues_done);
        }
    }

    /// Units whose job never appeared (refused after the webhook, retried
    /// admission) are deleted after the grace period (architecture §4.6).
    fn collect_orphans(&mut self) {
        let grace_ms = i64::try_from(self.settings.orphan_grace.as_millis()).unwrap_or(i64::MAX);
        let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let orphans: Vec<Key> = self
            .units
            .iter()
            .filter(|(_, st)| st.rec.phase.is_none() && !st.busy && !st.rec.deleting)
            .filter(|(_, st)| now_ms - st.rec.created_ms > grace_ms)
            .filter(|(_, st)| {
                self.jobs
                    .get(&st.rec.job_key())
                    .is_none_or(|j| j.unit_name != st.rec.name)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in orphans {
            tracing::info!(unit = %k, "deleting orphan QueueUnit: its job did not appear");
            self.submit_unit_write(&k, Write::DeleteUnit { unit: k.clone() });
        }
    }

    /// Jobs whose unit is missing, in one pass over the jobs (it runs
    /// every [`MISSING_SCAN_INTERVAL`]):
    /// - a job running without its unit is held (it would run unqueued),
    ///   once, with an Event;
    /// - a held job whose unit never appeared within the grace period gets
    ///   it created from the job (the webhook answered but did not create
    ///   it, e.g. it was killed) — only for jobs younger than
    ///   [`RECREATE_WINDOW_MS`] whose unit is not known to be gone.
    fn jobs_without_unit(&mut self) {
        let now = Instant::now();
        let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let mut to_hold = Vec::new();
        let mut to_create = Vec::new();
        let mut missing = HashMap::new();
        // Nothing is allocated for a job that has its unit: this runs over
        // every job twice a second.
        for (job_key, job) in &self.jobs {
            // The cheap tests first.
            if job.deleting
                || finished(job.state)
                || (job.held && now_ms - job.created_ms > RECREATE_WINDOW_MS)
                || self.units.contains_key(&job.unit)
            {
                continue;
            }
            if self.unit_gone.contains(job_key) || self.recreating.contains(job_key) {
                continue;
            }
            let job_key = job_key.clone();
            if !job.held {
                to_hold.push(job.clone());
                continue;
            }
            let since = self
                .missing_unit_since
                .get(&job_key)
                .copied()
                .unwrap_or(now);
            if now.duration_since(since) >= self.settings.orphan_grace {
                to_create.push(job.clone());
            } else {
                missing.insert(job_key, since);
            }
        }
        self.missing_unit_since = missing;
        for job in to_hold {
            self.unit_gone.insert(job.key());
            let job_ref = job_ref(&job);
            self.writer.submit(Write::HoldJob {
                unit: job.unit.clone(),
                job: job_ref.clone(),
            });
            self.event(&job_ref, true, "QueueUnitMissing", format!(
                "QueueUnit {} does not exist: the job is held. Delete and re-create the job to queue it again",
                job.unit_name
            ));
        }
        for job in to_create {
            self.recreating.insert(job.key());
            let job_ref = job_ref(&job);
            self.writer.submit(Write::RecreateUnit {
                unit: job.unit.clone(),
                job: job_ref.clone(),
            });
            self.event(&job_ref, true, "QueueUnitRecreated", format!(
                "QueueUnit {} did not appear within {:?} of the job's admission: created from the job",
                job.unit_name, self.settings.orphan_grace
            ));
        }
    }

    /// One Queue per ElasticQuota (except the root), with the policy of the
    /// quota's `koord-queue/queue-policy` label; deleted with the quota.
    fn sync_queues_with_quotas(&mut self) {
        let mut writes = Vec::new();
        for quota in self.quotas.values() {
            if quota.name == keys::ROOT_QUOTA_NAME || self.queue_writes.contains(&quota.name) {
                continue;
            }
            let existing = self.queues.get(&quota.name);
            let needed = match existing {
                None => true,
                Some(q) => {
                    q.managed_for.as_deref() == Some(quota.name.as_str())
                        && q.policy != quota.policy
                }
            };
            if needed {
                let mut queue = Queue::new(
                    &quota.name,
                    QueueSpec {
                        queue_policy: quota.policy,
                        ..Default::default()
                    },
                );
                queue.metadata.namespace = Some(self.settings.namespace.clone());
                queue.metadata.labels =
                    Some([(QUEUE_FOR_QUOTA_LABEL.to_string(), quota.name.clone())].into());
                writes.push(Write::EnsureQueue {
                    name: quota.name.clone(),
                    queue: Box::new(queue),
                    exists: existing.is_some(),
                });
            }
        }
        for queue in self.queues.values() {
            if let Some(quota) = &queue.managed_for
                && !self.quotas.contains_key(quota)
                && !self.queue_writes.contains(&queue.name)
            {
                writes.push(Write::DeleteQueue {
                    name: queue.name.clone(),
                });
            }
        }
        for w in writes {
            if let Write::EnsureQueue { name, .. } | Write::DeleteQueue { name } = &w {
                self.queue_writes.insert(name.clone());
            }
            self.writer.submit(w);
        }
    }

    /// Positions and reasons of waiting units, written only when changed and
    /// at most once per status interval per unit, within a budget per pass.
    /// Returns whether the pass was complete: every waiting unit compared,
    /// none left for a later pass.
    fn publish_positions(&mut self, now: Instant) -> bool {
        let scan = scan_positions(
            &self.core,
            &self.units,
            now,
            if self.writer.latency_ms() >= SLOW_WRITES_MS {
                self.settings.status_interval * SLOW_VISIBILITY_FACTOR
            } else {
                self.settings.status_interval
            },
            VISIBILITY_BUDGET,
        );
        let writes = scan.writes;
        for (k, position, message) in writes {
            let Some(st) = self.units.get_mut(&k) else {
                continue;
            };
            st.publishing = true;
            st.last_published = Some(now);
            // An Event when the reason (not just the place) changes.
            let reason_changed =
                strip_position(st.rec.message.as_deref()) != strip_position(Some(&message));
            let event_due = st
                .last_waiting_event
                .is_none_or(|t| now.duration_since(t) >= WAITING_EVENT_INTERVAL);
            let job = self
                .jobs
                .get(&st.rec.job_key())
                .filter(|j| j.unit_name == st.rec.name)
                .map(job_ref);
            if reason_changed
                && event_due
                && let Some(job) = job
            {
                st.last_waiting_event = Some(now);
                self.event(&job, false, "Waiting", message.clone());
            }
            self.writer.submit(Write::Visibility {
                unit: k,
                position,
                message,
            });
        }
        scan.complete
    }

    /// `Queue.status`: the first waiting units in order and the counts,
    /// written only when changed. Returns whether every Queue was compared
    /// (none left for a later pass).
    fn publish_queue_status(&mut self, now: Instant) -> bool {
        let mut complete = true;
        let warnings: Vec<(String, String)> = self
            .core
            .min_warnings()
            .iter()
            .map(|w| (w.quota.to_string(), w.to_string()))
            .collect();
        let names: Vec<String> = self.queues.keys().cloned().collect();
        for name in names {
            // A Queue with a write in flight is looked at again when its
            // result arrives (which reopens the gate).
            if self.queue_writes.contains(&name) {
                continue;
            }
            if self
                .queue_published
                .get(&name)
                .is_some_and(|t| now.duration_since(*t) < self.settings.status_interval)
            {
                complete = false;
                continue;
            }
            let counts = self.core.queue_counts(&name).unwrap_or_default();
            // Most passes change nothing: compare with the published status
            // in place before building a new one (up to 1,000 entries of two
            // strings for each of 1,000 queues, every pass).
            if let Some(published) = self.queues.get(&name).and_then(|q| q.status.as_ref())
                && published.pending == i64::try_from(counts.pending).ok()
                && published.admitted == i64::try_from(counts.admitted).ok()
                && published.queue_item_details.len() == 1
                && details_match(
                    published
                        .queue_item_details
                        .get("active")
                        .map_or(&[], Vec::as_slice),
                    self.core.queue_waiting(&name).take(QUEUE_DETAILS_LIMIT),
                )
                && min_conditions(&name, &warnings, published.conditions.clone())
                    == published.conditions
            {
                continue;
            }
            let details: Vec<QueueItemDetail> = self
                .core
                .queue_waiting(&name)
                .take(QUEUE_DETAILS_LIMIT)
                .map(|w| {
                    let (ns, n) = split_key(w.key);
                    QueueItemDetail {
                        name: n.to_string(),
                        namespace: ns.to_string(),
                        priority: w.priority,
                        position: i64::try_from(w.position).unwrap_or(i64::MAX),
                    }
                })
                .collect();
            let Some(queue) = self.queues.get_mut(&name) else {
                continue;
            };
            let mut status = queue.status.clone().unwrap_or_default();
            let mut items = BTreeMap::new();
            items.insert("active".to_string(), details);
            status.queue_item_details = items;
            status.pending = Some(i64::try_from(counts.pending).unwrap_or(i64::MAX));
            status.admitted = Some(i64::try_from(counts.admitted).unwrap_or(i64::MAX));
            status.conditions = min_conditions(&name, &warnings, status.conditions);
            if queue.status.as_ref() == Some(&status)
                || (queue.status.is_none() && status == empty_status())
            {
                continue;
            }
            queue.status = Some(status.clone());
            self.queue_published.insert(name.clone(), now);
            self.queue_writes.insert(name.clone());
            self.writer.submit(Write::QueueStatus {
                name,
                status: Box::new(status),
            });
        }
        complete
    }

    fn publish_metrics(&mut self) {
        for q in self.core.queues() {
            let labels = QueueLabels {
                queue: q.name.to_string(),
            };
            if let Some(c) = self.core.queue_counts(q.name) {
                self.metrics
                    .pending
                    .get_or_create(&labels)
                    .set(i64::try_from(c.pending).unwrap_or(i64::MAX));
                self.metrics
                    .admitted
                    .get_or_create(&labels)
                    .set(i64::try_from(c.admitted).unwrap_or(i64::MAX));
            }
        }
        let mut used = Vec::new();
        for name in self.quotas.keys() {
            let Some(f) = self.core.quota_figures(name) else {
                continue;
            };
            let labels = |resource: &str| QuotaLabels {
                quota: name.clone(),
                resource: resource.to_string(),
            };
            for (family, values) in [
                (&self.metrics.quota_min, &f.min),
                (&self.metrics.quota_max, &f.max),
            ] {
                for (resource, amount) in values.iter() {
                    family.get_or_create(&labels(resource)).set(amount);
                }
            }
            used.extend(f.used.iter().map(|(r, amount)| (labels(r), amount)));
        }
        self.quota_used_series = self
            .metrics
            .publish_quota_used(&self.quota_used_series, used);
    }

    /// Root capacity for the `auto` source: the root quota's max, else the
    /// allocatable of Ready nodes. Returns whether it changed.
    fn recompute_capacity(&mut self) -> bool {
        if self.core.capacity_source() != Some(&CapacitySource::Auto) || !self.synced() {
            return false;
        }
        let capacity = match self.quotas.get(keys::ROOT_QUOTA_NAME) {
            Some(root) if !root.max.is_zero() => RootCapacity::Limited(root.max.clone()),
            Some(_) => RootCapacity::Unlimited,
            None => {
                let mut total = Resources::new();
                for node in self.nodes.values().filter(|n| n.ready) {
                    total.add(&node.allocatable);
                }
                RootCapacity::Limited(total)
            }
        };
        if self.capacity.as_ref() == Some(&capacity) {
            return false;
        }
        tracing::info!(?capacity, "root capacity");
        self.core.set_capacity(&capacity);
        self.capacity = Some(capacity);
        true
    }
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
