//! A forward simulation: the scheduler's core driven in virtual time. The
//! scheduler runs it from its own state to estimate when waiting units
//! start (`controller::estimate`); the simulator (`koord-queue-sim`) runs it
//! over a trace. It lives here, beside the controller whose behaviour it
//! reproduces, so that both use one engine.
//!
//! The core decides everything it decides in the cluster — order, fit,
//! reclaim, preemption, fair sharing, reserving heads — from the same
//! configuration and plugins. What the controller adds around it is
//! reproduced here by calling its own functions, not copies:
//! - cycles are batched as `--cycle-batch` batches them: the first change
//!   after a cycle starts the next one `cycle_batch_ms` later;
//! - a reclaim or preemption victim is sent back with the controller's
//!   backoff (`backoff_delay` with `jitter_seed`, the seed being the
//!   controller's jitter salt), its quota freed when its job is held again,
//!   and it waits again once its backoff is over, at the housekeeping tick
//!   that notices it; its job starts over when released again;
//! - a due preemption (a victim's minimum run time) or reserving head
//!   starts a cycle at the housekeeping tick after it, as
//!   `Controller::housekeeping` does;
//! - a job runs its runtime (at most its bound) from its release, then its
//!   quota is freed.
//!
//! API latency and the write backlog are parameters ([`Latency`], zero by
//! default). A simulation can start from any state — jobs running with
//! known end times, jobs waiting, jobs yet to come — so the same engine
//! estimates when waiting units start (docs/simulate.md "Starting from a
//! state").
//!
//! This file holds the simulation's state and its calls; what each event
//! does is in `steps.rs`, the calendar in `events.rs`, usage in `usage.rs`.

mod events;
mod job;
mod latency;
mod steps;
mod usage;

use std::collections::HashMap;
use std::sync::Arc;

use crate::controller::jitter_seed;
use koord_queue_core::{CapacitySource, Core, QuotaDef, RootCapacity};

use events::{Calendar, Kind};
pub use job::Job;
pub use latency::{Latency, LatencyBucket, LatencyProfile, ProfileError};
use usage::Usage;
pub use usage::{NodeUsage, UsageSeries};

/// How the controller around the core behaves, and the latencies of the
/// API it would talk to.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The scheduler's `--cycle-batch` (20 ms).
    pub cycle_batch_ms: i64,
    /// The controller's housekeeping interval (500 ms): backoffs end and
    /// due preemptions start a cycle at its ticks.
    pub housekeeping_ms: i64,
    /// The seed of the backoff jitter (the controller's jitter salt).
    pub seed: u64,
    /// Latencies of the API, all zero by default.
    pub latency: Latency,
    /// Width of a usage bucket; `None`: about 1/256 of the trace's span.
    pub bucket_ms: Option<i64>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cycle_batch_ms: 20,
            housekeeping_ms: 500,
            seed: 0,
            latency: Latency::default(),
            bucket_ms: None,
        }
    }
}

/// What happened to one job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitOutcome {
    /// Its first release (ms), if it was released.
    pub first_release_ms: Option<i64>,
    /// Its last release (ms).
    pub last_release_ms: Option<i64>,
    /// When it ended (ms), if it did within the run.
    pub end_ms: Option<i64>,
    /// Times released.
    pub releases: u32,
    /// Times reclaimed for a guaranteed unit.
    pub reclaimed: u32,
    /// Times preempted inside its quota.
    pub preempted: u32,
    /// Times reclaimed for fair sharing.
    pub fair_share_reclaimed: u32,
}

impl UnitOutcome {
    /// Times sent back, for any reason.
    pub fn sent_back(&self) -> u32 {
        self.reclaimed + self.preempted + self.fair_share_reclaimed
    }
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Future,
    Waiting,
    Holding,
    Backoff,
    Done,
}

/// Work done by a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Events handled.
    pub events: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Time of the last event handled (ms).
    pub end_ms: i64,
    /// Most units waiting at once (what each cycle walks).
    pub peak_waiting: u64,
    /// Jobs submitted while a job of their namespace and name existed
    /// (refused, as the API would).
    pub refused: u64,
    /// Time in which work waited (a unit in its queue or in backoff) while
    /// the root held less than half its capacity of every limited resource
    /// (ms): capacity idle while work waits (issue 44).
    pub idle_waiting_ms: i64,
    /// The whole seconds of the run (from its start) that had some of that.
    pub idle_waiting_seconds: u64,
    /// The most times one unit was sent back.
    pub max_sent_back_of_one: u32,
}

/// A simulation: a core, its jobs and the calendar.
#[derive(Debug)]
pub struct Simulation {
    core: Core,
    settings: Settings,
    /// The clock's start: given ([`Simulation::start_at`]), else the first
    /// submission; fixed when the run starts.
    start: Option<i64>,
    start_ms: i64,
    first_submit: Option<i64>,
    now: i64,
    jobs: Vec<Job>,
    outcomes: Vec<UnitOutcome>,
    phase: Vec<Phase>,
    generation: Vec<u32>,
    /// Times each job was sent back (the controller's `requeue_count`).
    requeues: Vec<i32>,
    /// When each job in backoff is due back (its `Requeue` event's time):
    /// an event at another time is one its early return made stale.
    requeue_due: Vec<i64>,
    /// When each holding job's pods end (ms): its quota is free a free
    /// latency later, and that latency may differ by the moment.
    pods_end: Vec<i64>,
    /// Jobs in backoff that a reclaim or preemption sent there: each
    /// housekeeping tick puts back those whose room is free (issue 44).
    backoff: Vec<u32>,
    /// Units in the core, by key.
    keys: HashMap<Arc<str>, u32>,
    calendar: Calendar,
    cycle_due: Option<i64>,
    tick_due: Option<i64>,
    /// Quota names → index in `quota_names`; parents among them.
    quota_index: HashMap<String, usize>,
    quota_names: Vec<String>,
    quota_parents: Vec<Option<usize>>,
    /// Resource names → index (for usage).
    resources: Vec<String>,
    /// A job's request by resource index (reused).
    scratch: Vec<(usize, i64)>,
    /// Jobs holding from the start (`add_running`): held once the run starts.
    running_at_start: Vec<(u32, i64)>,
    usage: Option<Usage>,
    root_capacity: Option<RootCapacity>,
    stats: RunStats,
    /// Units waiting now.
    waiting: u64,
    /// Units in backoff now.
    backing_off: u64,
    /// What the root holds now, by resource index (for idle time).
    root_used: Vec<i64>,
    /// The last second counted in `idle_waiting_seconds`.
    last_idle_second: Option<i64>,
    /// Jobs added to be submitted that were not released yet and still may.
    unreleased: u64,
}

impl Simulation {
    /// A simulation on `core` (told the quota tree `quotas` and the
    /// queues, holding nothing); an automatic root capacity is
    /// `auto_capacity`. Its clock starts at the first submission unless
    /// [`Simulation::start_at`] says otherwise.
    pub fn new(
        core: Core,
        quotas: &[QuotaDef],
        auto_capacity: Option<RootCapacity>,
        settings: Settings,
    ) -> Self {
        let root_capacity = match core.capacity_source() {
            Some(CapacitySource::Fixed(r)) => Some(RootCapacity::Limited(r.clone())),
            Some(CapacitySource::Unlimited) | None => Some(RootCapacity::Unlimited),
            Some(CapacitySource::Auto) => auto_capacity,
        };
        let quota_names: Vec<String> = quotas.iter().map(|q| q.name.clone()).collect();
        let quota_index: HashMap<String, usize> = quota_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let quota_parents = quotas
            .iter()
            .map(|q| q.parent.as_ref().and_then(|p| quota_index.get(p).copied()))
            .collect();
        Self {
            core,
            settings,
            start: None,
            start_ms: 0,
            first_submit: None,
            now: 0,
            jobs: Vec::new(),
            outcomes: Vec::new(),
            phase: Vec::new(),
            generation: Vec::new(),
            requeues: Vec::new(),
            requeue_due: Vec::new(),
            pods_end: Vec::new(),
            backoff: Vec::new(),
            keys: HashMap::new(),
            calendar: Calendar::default(),
            cycle_due: None,
            tick_due: None,
            quota_index,
            quota_names,
            quota_parents,
            resources: Vec::new(),
            scratch: Vec::new(),
            running_at_start: Vec::new(),
            usage: None,
            root_capacity,
            stats: RunStats::default(),
            waiting: 0,
            backing_off: 0,
            root_used: Vec::new(),
            last_idle_second: None,
            unreleased: 0,
        }
    }

    /// Starts the clock at `start_ms` (the scheduler's now, for an
    /// estimate): jobs submitted before wait from then, in their order.
    pub fn start_at(&mut self, start_ms: i64) {
        self.start = Some(start_ms);
    }

    /// When the clock starts (as fixed by the run).
    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }

    /// Job `i`'s draw of the API's spread for its step `step` (0: its
    /// admission, n: its n-th release): in `[-spread_ms/2, spread_ms/2)`, the
    /// same for the same seed. Drawn as the backoff's jitter is, at negative
    /// counts (the backoff's run from 1), so the two are not the same draw.
    fn spread(&self, i: u32, step: u32) -> i64 {
        let spread = self.settings.latency.spread_ms;
        let Some(job) = self.jobs.get(i as usize).filter(|_| spread > 0) else {
            return 0;
        };
        let count = i32::try_from(step).map_or(i32::MIN, |s| -1 - s);
        let seed = jitter_seed(self.settings.seed, &job.key(), count);
        i64::try_from(seed % spread.unsigned_abs()).unwrap_or(0) - spread / 2
    }

    fn push_job(&mut self, job: Job) -> u32 {
        let i = u32::try_from(self.jobs.len()).unwrap_or(u32::MAX);
        self.first_submit = Some(
            self.first_submit
                .map_or(job.submit_ms, |f| f.min(job.submit_ms)),
        );
        for (name, _) in job.request.iter() {
            if !self.resources.iter().any(|n| n == name) {
                self.resources.push(name.to_string());
            }
        }
        self.jobs.push(job);
        self.outcomes.push(UnitOutcome::default());
        self.phase.push(Phase::Future);
        self.generation.push(0);
        self.requeues.push(0);
        self.requeue_due.push(i64::MIN);
        self.pods_end.push(i64::MIN);
        i
    }

    /// Adds a job that is submitted at its `submit_ms` (one submitted
    /// before the start waits from the start, in its place by submission).
    /// Returns its index.
    pub fn add_job(&mut self, job: Job) -> usize {
        let i = self.push_job(job);
        let job = &self.jobs[i as usize];
        let submit = job.submit_ms;
        let at = match job.observed_admit_ms {
            Some(seen) if self.settings.latency.admit_observed => seen.max(submit),
            _ => {
                let admit = self.settings.latency.admit_at(submit) + self.spread(i, 0);
                submit + admit.max(0)
            }
        };
        self.unreleased += 1;
        self.calendar.push_arrival(at, i);
        i as usize
    }

    /// Adds a job that was released at `released_ms` and holds its request
    /// until `ends_ms` (at least the start), when its quota is free.
    /// Returns its index.
    pub fn add_running(&mut self, job: Job, released_ms: i64, ends_ms: i64) -> usize {
        let i = self.push_job(job);
        self.running_at_start.push((i, released_ms));
        let o = &mut self.outcomes[i as usize];
        o.first_release_ms = Some(released_ms);
        o.last_release_ms = Some(released_ms);
        o.releases = 1;
        self.pods_end[i as usize] = ends_ms - self.settings.latency.free_ms;
        self.calendar.push(ends_ms, Kind::Finish(i, 0));
        i as usize
    }

    /// The jobs, in the order added.
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// What happened to each job, in the order added.
    pub fn outcomes(&self) -> &[UnitOutcome] {
        &self.outcomes
    }

    /// Quota names, in the order of the usage series' nodes (after the root).
    pub fn quota_names(&self) -> &[String] {
        &self.quota_names
    }

    /// Resource names, in the order of the usage series' columns.
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// The root capacity the run had (`None`: unknown).
    pub fn root_capacity(&self) -> Option<&RootCapacity> {
        self.root_capacity.as_ref()
    }

    /// The core, as the run left it (for reasons of units still waiting).
    pub fn core(&self) -> &Core {
        &self.core
    }

    fn start(&mut self) {
        if self.usage.is_some() {
            return;
        }
        self.start_ms = self.start.or(self.first_submit).unwrap_or(0);
        self.now = self.start_ms;
        let r = self.resources.len();
        let min_eff = self
            .quota_names
            .iter()
            .map(|name| {
                let figures = self.core.quota_figures(name);
                self.resources
                    .iter()
                    .map(|res| figures.as_ref().map_or(0, |f| f.min_effective.get(res)))
                    .collect()
            })
            .collect();
        let width = self.settings.bucket_ms.unwrap_or_else(|| {
            let last = self
                .jobs
                .iter()
                .map(|j| j.submit_ms.max(self.start_ms) + j.run_ms)
                .max()
                .unwrap_or(self.start_ms);
            ((last - self.start_ms) / 256).max(1)
        });
        self.usage = Some(Usage::new(
            self.start_ms,
            width,
            r,
            &self.quota_parents,
            min_eff,
        ));
        for (i, released_ms) in std::mem::take(&mut self.running_at_start) {
            let job = &self.jobs[i as usize];
            let key: Arc<str> = Arc::from(job.key());
            if let Err(error) = self
                .core
                .upsert_unit(&job.unit_def())
                .and_then(|()| self.core.hold_at(&key, &job.request, Some(released_ms)))
            {
                // An unschedulable unit (a bad name): it holds nothing.
                let _ = error;
                self.phase[i as usize] = Phase::Done;
                continue;
            }
            self.keys.insert(key, i);
            self.phase[i as usize] = Phase::Holding;
            self.charge(i, 1);
        }
    }

    fn charge(&mut self, i: u32, sign: i64) {
        let job = &self.jobs[i as usize];
        let quota = job
            .quota
            .as_deref()
            .and_then(|q| self.quota_index.get(q).copied());
        self.scratch.clear();
        for (name, amount) in job.request.iter() {
            if let Some(r) = self.resources.iter().position(|n| n == name) {
                self.scratch.push((r, amount));
            }
        }
        if let Some(usage) = self.usage.as_mut() {
            usage.change(quota, &self.scratch, sign, self.now);
        }
        if self.root_used.len() < self.resources.len() {
            self.root_used.resize(self.resources.len(), 0);
        }
        for &(r, amount) in &self.scratch {
            self.root_used[r] = self.root_used[r].saturating_add(sign.saturating_mul(amount));
        }
    }

    /// Whether the root holds less than half its capacity of every resource
    /// it limits (`false` when the capacity is unknown or unlimited).
    fn root_under_half(&self) -> bool {
        let Some(RootCapacity::Limited(cap)) = &self.root_capacity else {
            return false;
        };
        let mut limited = false;
        for (r, name) in self.resources.iter().enumerate() {
            let c = cap.get(name);
            if !cap.contains(name) || c <= 0 {
                continue;
            }
            limited = true;
            let used = self.root_used.get(r).copied().unwrap_or(0);
            if used.saturating_mul(2) >= c {
                return false;
            }
        }
        limited
    }

    /// Counts `[self.now, to)` as idle time if work waits meanwhile while
    /// the root runs under half its capacity.
    fn count_idle(&mut self, to: i64) {
        if to <= self.now || self.waiting + self.backing_off == 0 || !self.root_under_half() {
            return;
        }
        self.stats.idle_waiting_ms = self.stats.idle_waiting_ms.saturating_add(to - self.now);
        let first = (self.now - self.start_ms) / 1000;
        let last = (to - 1 - self.start_ms) / 1000;
        let from = match self.last_idle_second {
            Some(s) if s >= first => s + 1,
            _ => first,
        };
        if last >= from {
            self.stats.idle_waiting_seconds += u64::try_from(last - from + 1).unwrap_or(0);
            self.last_idle_second = Some(last);
        }
    }

    /// Runs until nothing is left to happen, or until `until_ms`.
    pub fn run(&mut self, until_ms: Option<i64>) -> RunStats {
        self.run_while(until_ms, false)
    }

    /// Runs until every job added with [`Simulation::add_job`] was released
    /// (or can never be), or until `until_ms`: what an estimate of start
    /// times needs — the ends of the jobs after that change nothing.
    pub fn run_to_releases(&mut self, until_ms: Option<i64>) -> RunStats {
        self.run_while(until_ms, true)
    }

    fn run_while(&mut self, until_ms: Option<i64>, to_releases: bool) -> RunStats {
        self.start();
        while !(to_releases && self.unreleased == 0)
            && let Some((at, kind)) = self.calendar.pop_until(until_ms)
        {
            // What was due before the start happens at the start, in order.
            self.count_idle(at);
            self.now = at.max(self.start_ms);
            self.stats.events += 1;
            self.handle(kind);
        }
        self.stats.max_sent_back_of_one = self
            .outcomes
            .iter()
            .map(UnitOutcome::sent_back)
            .max()
            .unwrap_or(0);
        self.stats
    }

    /// The usage series up to the end of the run (or `end_ms`, if later).
    pub fn usage(&mut self, end_ms: Option<i64>) -> Option<UsageSeries> {
        let end = end_ms.unwrap_or(self.now).max(self.now);
        self.usage.take().map(|u| u.finish(end))
    }
}
