//! The controller's side of the start-time estimates (`controller::estimate`):
//! it learns runtimes as units finish, takes a snapshot of its state when
//! an estimate is due, runs it on a blocking thread — off the decision
//! path — and keeps the answer for the visibility API and the units'
//! status (`publish_reasons`).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Controller, Membership, UnitState, queue_of};
use crate::controller::clock::Stopwatch;
use crate::controller::estimate::{
    self, EstimateSettings, Estimates, Pacing, Runtimes, Snapshot, UNKNOWN_RUN_MS, overdue_end,
};
use crate::controller::records::{Key, Labels};
use crate::forecast::Job;

/// What an estimate run sends back.
pub(super) type EstimateResult = Result<Estimates, String>;

/// The estimates' state in the controller.
#[derive(Debug, Default)]
pub(super) struct EstimateState {
    /// `None`: estimates are off.
    settings: Option<EstimateSettings>,
    runtimes: Runtimes,
    pacing: Pacing,
    /// The last estimates.
    current: Estimates,
    /// Where runs send their answer (set by the run loop).
    done: Option<mpsc::UnboundedSender<EstimateResult>>,
}

impl EstimateState {
    pub(super) fn new(settings: Option<EstimateSettings>) -> Self {
        Self {
            settings,
            ..Self::default()
        }
    }

    /// The run loop receives the answers of runs on `done`.
    pub(super) fn connect(&mut self, done: mpsc::UnboundedSender<EstimateResult>) {
        self.done = Some(done);
    }

    /// When unit `key` is expected to be released (ms since the epoch).
    pub(super) fn start_of(&self, key: &str) -> Option<i64> {
        self.current.starts.get(key).copied()
    }

    /// A unit of `queue` held its quota `runtime_ms` and finished.
    pub(super) fn learn(&mut self, queue: &str, runtime_ms: i64) {
        self.runtimes.learn(queue, runtime_ms);
    }
}

impl Controller {
    /// Starts an estimate when one is due (housekeeping): leading, synced,
    /// nothing running, its share of a core respected, and something changed.
    pub(super) fn maybe_estimate(&mut self) {
        let Some(settings) = self.estimates.settings.clone() else {
            return;
        };
        let Some(done) = self.estimates.done.clone() else {
            return;
        };
        let generation = self.visibility.generation();
        if !self.leads()
            || !self.synced()
            || !self
                .estimates
                .pacing
                .due(self.now.at, self.now.wall_ms, generation)
        {
            return;
        }
        self.estimates.pacing.started(generation);
        // Without a runtime learned or a bound nothing ends in the
        // simulation: it would only estimate the units that fit now, which
        // the next cycle releases. A fresh cluster of 100,000 units skips
        // the snapshot (a tenth of a second of the controller's time).
        if self.estimates.runtimes.is_empty()
            && !self.units.values().any(|st| st.rec.max_run_ms.is_some())
        {
            self.on_estimates(Ok(Estimates {
                at_ms: self.now.wall_ms,
                ..Estimates::default()
            }));
            return;
        }
        let snapshot = self.estimate_snapshot();
        tokio::task::spawn_blocking(move || {
            let result = estimate::estimate(&settings, snapshot).map_err(|e| e.to_string());
            // The controller is gone: nothing to tell.
            let _ = done.send(result);
        });
    }

    /// What an estimate starts from: the quota tree, the queues, the units
    /// holding quota with their ends and the units waiting in line with
    /// their runtimes.
    pub(super) fn estimate_snapshot(&self) -> Snapshot {
        let stopwatch = Stopwatch::start();
        let now_ms = self.now.wall_ms;
        let runtimes = &self.estimates.runtimes;
        let class: Arc<str> = Arc::from("");
        // Units repeat a few label sets: one map each.
        let mut labels: HashMap<&Labels, Arc<std::collections::BTreeMap<String, String>>> =
            HashMap::new();
        let mut running = Vec::new();
        let mut waiting = Vec::new();
        for st in self.units.values() {
            // A unit's own bound first (what its owner declared), else what
            // its queue's finished units took.
            let runtime = st
                .rec
                .max_run_ms
                .or_else(|| runtimes.expected(queue_of(&st.rec)));
            let shared = labels
                .entry(&st.rec.labels)
                .or_insert_with(|| Arc::new(st.rec.labels.to_map()))
                .clone();
            match st.member {
                Membership::Absent => {}
                Membership::Waiting => waiting.push(job_of(
                    st,
                    runtime.unwrap_or(UNKNOWN_RUN_MS),
                    &class,
                    shared,
                )),
                Membership::Holding => {
                    let released = st.rec.allocated_ms.unwrap_or(now_ms);
                    let job = job_of(st, runtime.unwrap_or(UNKNOWN_RUN_MS), &class, shared);
                    let end = overdue_end(now_ms, released, released.saturating_add(job.run_ms));
                    running.push((job, released, end));
                }
            }
        }
        Snapshot {
            now_ms,
            quotas: self.quotas.values().filter_map(|q| q.to_def()).collect(),
            queues: self.queues.values().map(|q| q.to_def()).collect(),
            capacity: self.capacity.clone(),
            running,
            waiting,
            cycle_batch_ms: super::millis(self.settings.cycle_batch),
            jitter_salt: self.settings.jitter_salt,
            snapshot_took: stopwatch.elapsed(),
            stopwatch,
        }
    }

    /// An estimate's answer: kept for the visibility API and the status,
    /// the next paced by its cost.
    pub(super) fn on_estimates(&mut self, result: EstimateResult) {
        let Some(settings) = self.estimates.settings.as_ref() else {
            return;
        };
        match result {
            Ok(estimates) => {
                tracing::debug!(
                    waiting = estimates.waiting,
                    estimated = estimates.starts.len(),
                    snapshot_ms = estimates.snapshot_took.as_millis() as u64,
                    took_ms = estimates.took.as_millis() as u64,
                    "start times estimated"
                );
                self.metrics.observe_estimate(&estimates);
                self.estimates.pacing.finished(
                    self.now.at,
                    estimates.took,
                    settings.cpu_share,
                    settings.min_interval,
                    estimates.valid_until_ms,
                );
                self.estimates.current = estimates;
                // What users see changed (answers, status): not a change
                // of the state the next estimate starts from.
                let before = self.visibility.generation();
                self.visibility.changed();
                self.estimates
                    .pacing
                    .own_change(before, self.visibility.generation());
            }
            Err(error) => {
                tracing::warn!(%error, "start times could not be estimated");
                self.estimates
                    .pacing
                    .failed(self.now.at, settings.min_interval);
            }
        }
    }

    /// Unit `st` finished: how long it held its quota teaches its queue's
    /// runtime.
    pub(super) fn learn_runtime(&mut self, k: &Key) {
        let Some(st) = self.units.get(k) else {
            return;
        };
        if let Some(released) = st.rec.allocated_ms {
            let queue = queue_of(&st.rec).to_string();
            self.estimates
                .learn(&queue, self.now.wall_ms.saturating_sub(released));
        }
    }
}

/// The job a unit is in the simulation: as `UnitState::def` tells the core,
/// running `run_ms` (at most its bound).
fn job_of(
    st: &UnitState,
    run_ms: i64,
    class: &Arc<str>,
    labels: Arc<std::collections::BTreeMap<String, String>>,
) -> Job {
    let r = &st.rec;
    let (run_ms, bounded_out) = Job::bounded(run_ms, r.max_run_ms);
    Job {
        namespace: r.namespace.clone(),
        name: Box::from(r.name()),
        quota: r.quota.clone(),
        queue: r.queue.clone(),
        priority: r.priority,
        class: class.clone(),
        submit_ms: r.created_ms,
        run_ms,
        bounded_out,
        max_run_ms: r.max_run_ms,
        request: r.request.clone(),
        labels,
        observed_wait_ms: None,
        observed_admit_ms: None,
    }
}
