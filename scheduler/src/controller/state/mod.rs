//! The controller's state machine. One task owns it: every input (watch
//! change, write result, timer, leadership change) is handled in turn, so the
//! core and the records never race.

mod backoff;
mod decide;
mod estimates;
mod failing;
mod groups;
mod history;
mod inputs;
mod lifecycle;
mod pending;
mod pods;
mod queue_status;
mod quotas;
mod release;
mod release_write;
mod relist;
mod repair;
mod results;
mod unit;
mod view;
mod visibility;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use koord_queue_runtime::{Leadership, Readiness};
use koord_queue_visibility::Query;
use tokio::sync::{mpsc, watch};

pub use backoff::{backoff_delay, jitter_seed};
use decide::{Intent, OnSubmit};
use pods::Pods;
use repair::Repair;
use unit::{Membership, UnitState};
use visibility::Visibility;

use super::clock::Now;
use super::estimate::EstimateSettings;
use super::metrics::Metrics;
use super::quota_names::QuotaNames;
use super::records::{
    Grouping, JobKey, JobRecord, Key, NamespaceQuotaRecord, NodeRecord, QueueRecord, QuotaRecord,
    UnitRecord,
};
use super::sources::{Input, SourceName};
use super::writes::{GroupTarget, JobRef, Write, WriteSink, Written};
use crate::core::{Core, RootCapacity};

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
    /// Salt of the backoff jitter (see `view::UnitView::jitter_salt`): random
    /// per process, so that replicas do not send units back in step; fixed
    /// in tests, so that a backoff's end is known.
    pub jitter_salt: u64,
    /// Start-time estimates (`None`: off).
    pub estimates: Option<EstimateSettings>,
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
    /// The order of the last visibility API listing, for its next pages.
    listing: pending::LastListing,
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
    /// Start-time estimates (see `estimates.rs`).
    estimates: estimates::EstimateState,
    /// The bounded history the visibility API serves (see `history.rs`).
    history: history::History,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("units", &self.units.len())
            .finish_non_exhaustive()
    }
}

/// The job of unit `rec`: the job its consumer names, if that job names
/// this unit back (a re-created job may name another).
fn unit_job<'a>(jobs: &'a HashMap<JobKey, JobRecord>, rec: &UnitRecord) -> Option<&'a JobRecord> {
    jobs.get(rec.job()).filter(|j| j.unit_name() == rec.name())
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
        let settings_estimates = settings.estimates.clone();
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
            listing: pending::LastListing::default(),
            repair: Repair::default(),
            retry: HashSet::new(),
            to_enqueue: HashSet::new(),
            timed: HashSet::new(),
            pods: Pods::default(),
            failing_kinds: HashSet::new(),
            groups: groups::Groups::default(),
            estimates: estimates::EstimateState::new(settings_estimates),
            history: history::History::default(),
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
        self.sample_history();
    }

    /// Runs until `stop` resolves. Visibility `queries` are answered
    /// between two inputs, before any other waiting input: an answer reads
    /// the state and writes nothing, and a person waits for it.
    pub async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut written: mpsc::UnboundedReceiver<Written>,
        mut leadership: watch::Receiver<bool>,
        mut queries: mpsc::Receiver<Query>,
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
        let (estimated_tx, mut estimated) = mpsc::unbounded_channel();
        self.estimates.connect(estimated_tx);
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
                Some(query) = queries.recv() => self.answer(query),
                Some(result) = estimated.recv() => {
                    self.set_now(Now::read());
                    self.on_estimates(result);
                }
                Some(w) = written.recv() => {
                    self.set_now(Now::read());
                    self.on_written(w);
                }
                Some(input) = inputs.recv() => {
                    self.set_now(Now::read());
                    self.on_input(input);
                }
                changed = leadership.changed() => {
                    if changed.is_err() {
                        tracing::warn!("leader election ended; controller stopping");
                        return;
                    }
                    let leads = *leadership.borrow();
                    self.set_now(Now::read());
                    self.on_leadership(leads);
                }
                _ = cycle => {
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
                uid: job.uid.to_string(),
                size: *size,
            }),
        };
    }
    JobRef {
        adapter: job.adapter,
        namespace: job.namespace.to_string(),
        name: job.name.clone(),
        uid: job.uid.to_string(),
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
