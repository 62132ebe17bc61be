//! Start-time estimates (issue 40, architecture §4.9): when each waiting
//! unit will be released, told by the same forward simulation the simulator
//! runs (`crate::forecast`), started from the controller's state.
//!
//! The controller takes a [`Snapshot`] of what it knows — the quota tree,
//! the queues, the units holding quota with when they will end, the units
//! waiting — between two inputs; [`estimate`] runs it on a blocking thread,
//! off the decision path, and the controller publishes the answer through
//! the visibility API (and, on a large step, the unit's status).
//!
//! What the estimate assumes, and so what it cannot know:
//! - a unit runs to its run bound (what its owner declared: the job's
//!   deadline and its pods' grace period), else for the runtime learned
//!   from its queue's finished units ([`Runtimes`]); a running unit past
//!   that end ends "soon" ([`overdue_end`]);
//! - with neither, its runtime is unknown and it never ends in the simulation:
//!   the units that need its room get no estimate rather than an invented
//!   one;
//! - arrivals not yet seen are not invented: a unit submitted later with a
//!   higher priority moves the estimates of those behind it;
//! - units out of line (sent back until their backoff ends, admission
//!   checks pending) are not estimated and hold nothing in the simulation.
//!
//! `runtimes.rs` learns runtimes; `pacing.rs` decides when the next
//! estimate runs (its cost bounded to a share of one core).

mod pacing;
mod runtimes;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::core::{
    CapacitySource, ConfigError, Core, QueueDef, QuotaDef, Registry, RootCapacity, SchedulerConfig,
};
use crate::forecast::{Job, Settings as ForecastSettings, Simulation};

pub use pacing::Pacing;
pub use runtimes::Runtimes;

use super::clock::Stopwatch;
use super::records::Key;

/// How the estimates are made.
#[derive(Clone, Debug)]
pub struct EstimateSettings {
    /// The scheduler's plugin configuration (the simulation's core is built
    /// from it, as the scheduler's own).
    pub config: Arc<SchedulerConfig>,
    /// Most of one core the estimates may take over time (0.1: 10 %).
    pub cpu_share: f64,
    /// Least time between two estimates.
    pub min_interval: Duration,
    /// How far ahead an estimate looks: a unit not released within it has
    /// none.
    pub horizon: Duration,
}

impl EstimateSettings {
    /// The defaults: 10 % of a core at most, at most every 10 s, 7 days ahead.
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            config: Arc::new(config),
            cpu_share: 0.1,
            min_interval: Duration::from_secs(10),
            horizon: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// The runtime given to a unit whose runtime nobody knows: longer than any
/// horizon, so it never ends within an estimate.
pub const UNKNOWN_RUN_MS: i64 = 10 * 365 * 24 * 3600 * 1000;

/// What the controller knows, taken between two inputs.
#[derive(Debug)]
pub struct Snapshot {
    /// The controller's clock (ms since the epoch).
    pub now_ms: i64,
    /// The quota tree.
    pub quotas: Vec<QuotaDef>,
    /// The queues.
    pub queues: Vec<QueueDef>,
    /// The root capacity an automatic source has now.
    pub capacity: Option<RootCapacity>,
    /// Units holding quota: the job, when it was released, when it ends.
    pub running: Vec<(Job, i64, i64)>,
    /// Units waiting in line, their runtime set (or [`UNKNOWN_RUN_MS`]).
    pub waiting: Vec<Job>,
    /// The controller's cycle batching and backoff jitter salt.
    pub cycle_batch_ms: i64,
    /// The backoff jitter's seed (the controller's salt).
    pub jitter_salt: u64,
    /// Started when the controller started taking it.
    pub stopwatch: Stopwatch,
    /// How long taking it took.
    pub snapshot_took: Duration,
}

/// When each waiting unit is expected to be released.
#[derive(Debug, Default)]
pub struct Estimates {
    /// The clock they were made at (ms since the epoch).
    pub at_ms: i64,
    /// Release time (ms since the epoch) by unit; a waiting unit not in it
    /// has no estimate within the horizon.
    pub starts: HashMap<Key, i64>,
    /// Units estimated (waiting in the snapshot).
    pub waiting: usize,
    /// The earliest end given a running unit: past it, these estimates are
    /// out of date even if nothing else changed.
    pub valid_until_ms: Option<i64>,
    /// What it cost: taking the snapshot on the controller's task, and the
    /// whole (snapshot and simulation).
    pub snapshot_took: Duration,
    /// The snapshot and the simulation.
    pub took: Duration,
}

/// Least move of an estimate worth a status write, and least wait for a
/// first estimate to be written: the visibility API has every estimate; the
/// status has those a person waits long enough to look at, and a unit
/// released soon after it got one costs no extra write.
pub const STATUS_STEP_MS: i64 = 5 * 60 * 1000;

/// Whether the estimate `estimate` moved far enough from `published` (the
/// unit's status) at `now_ms` to be written there: a first estimate at
/// least [`STATUS_STEP_MS`] ahead, the end of one (none any more), or a move
/// by at least [`STATUS_STEP_MS`] and a quarter of the wait the status
/// announced. Small moves are not written: the status is no feed.
pub fn status_step(published: Option<i64>, estimate: Option<i64>, now_ms: i64) -> bool {
    match (published, estimate) {
        (None, None) => false,
        (None, Some(at)) => at - now_ms >= STATUS_STEP_MS,
        (Some(_), None) => true,
        (Some(p), Some(at)) => {
            let announced = (p - now_ms).max(0);
            (at - p).abs() >= STATUS_STEP_MS.max(announced / 4)
        }
    }
}

/// The end of a running unit expected to have ended already (`expected_ms`
/// before `now_ms`): it ends soon — a tenth of its runtime from now, at
/// least a minute — rather than at once, which would promise its room.
pub fn overdue_end(now_ms: i64, released_ms: i64, expected_ms: i64) -> i64 {
    if expected_ms > now_ms {
        return expected_ms;
    }
    let runtime = (expected_ms - released_ms).max(0);
    now_ms + (runtime / 10).max(60_000)
}

/// Runs the simulation of `snapshot` until every waiting unit is released
/// or the horizon: when each is released.
pub fn estimate(settings: &EstimateSettings, snapshot: Snapshot) -> Result<Estimates, ConfigError> {
    let Snapshot {
        now_ms,
        quotas,
        queues,
        capacity,
        running,
        waiting,
        cycle_batch_ms,
        jitter_salt,
        stopwatch,
        snapshot_took,
    } = snapshot;
    let mut core = Core::new(&settings.config, &Registry::with_builtins())?;
    // The forecast reads releases only.
    core.report_reasons(false);
    for quota in &quotas {
        // The controller gave these to its own core: refused ones were
        // refused there too.
        let _ = core.upsert_quota(quota);
    }
    for queue in &queues {
        core.upsert_queue(queue);
    }
    if core.capacity_source() == Some(&CapacitySource::Auto)
        && let Some(capacity) = &capacity
    {
        core.set_capacity(capacity);
    }
    let forecast = ForecastSettings {
        cycle_batch_ms,
        seed: jitter_salt,
        ..ForecastSettings::default()
    };
    let mut sim = Simulation::new(core, &quotas, capacity, forecast);
    sim.start_at(now_ms);
    let valid_until_ms = running.iter().map(|(_, _, end)| *end).min();
    for (job, released_ms, ends_ms) in running {
        sim.add_running(job, released_ms, ends_ms);
    }
    let first = sim.jobs().len();
    let count = waiting.len();
    for job in waiting {
        sim.add_job(job);
    }
    let horizon_ms = i64::try_from(settings.horizon.as_millis()).unwrap_or(i64::MAX / 4);
    sim.run_to_releases(Some(now_ms.saturating_add(horizon_ms)));
    let starts = sim.jobs()[first..]
        .iter()
        .zip(&sim.outcomes()[first..])
        .filter_map(|(job, outcome)| Some((Key::from(job.key()), outcome.first_release_ms?)))
        .collect();
    Ok(Estimates {
        at_ms: now_ms,
        starts,
        waiting: count,
        valid_until_ms,
        snapshot_took,
        took: stopwatch.elapsed(),
    })
}

#[cfg(test)]
mod tests;
