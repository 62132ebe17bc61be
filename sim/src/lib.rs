//! Koord-Queue's simulator (issue 40, docs/simulate.md): a trace of jobs
//! replayed in virtual time against a cluster's quotas, queues and scheduler
//! configuration, decided by the scheduler's own core and plugins.
//!
//! - [`cluster`]: the cluster's objects → the core's model (the scheduler's
//!   own translation);
//! - [`trace`] and [`job`]: the trace format and its jobs;
//! - [`engine`]: the simulation, which can also start from a given state
//!   (running jobs with end times, waiting jobs) and tells each job's
//!   release time;
//! - [`report`]: JSON, HTML and comparison of two configurations;
//! - [`import`]: traces from the Standard Workload Format, from a live
//!   cluster, and from the benchmark's shapes.

pub mod cluster;
pub mod engine;
pub mod import;
pub mod job;
pub mod report;
pub mod shape;
pub mod trace;

use cluster::{Cluster, ClusterError};
use engine::{RunStats, Settings, Simulation};
use job::JobBuilder;
use report::Report;
use trace::{TraceError, TraceJob};

/// Why a simulation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The cluster's objects.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The trace cannot be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A job of the trace.
    #[error("trace job {index} ({name}): {reason}")]
    Job {
        /// Its place in the trace (0-based).
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// A simulation of the jobs of `trace` (read as they come: a trace file is
/// not held whole) on `cluster`, its jobs added, not yet run.
pub fn prepare(
    cluster: &Cluster,
    trace: impl IntoIterator<Item = Result<TraceJob, TraceError>>,
    settings: Settings,
) -> Result<Simulation, SimError> {
    let mut sim = engine::simulation(cluster, settings)?;
    let mut builder = JobBuilder::new(cluster.priority_classes.clone());
    for (index, t) in trace.into_iter().enumerate() {
        let t = t?;
        let job = builder.build(&t, index).map_err(|reason| SimError::Job {
            index,
            name: t.name.clone().unwrap_or_default(),
            reason,
        })?;
        sim.add_job(job);
    }
    Ok(sim)
}

/// Runs the jobs of `trace` on `cluster` to the end and reports.
pub fn simulate_stream(
    cluster: &Cluster,
    trace: impl IntoIterator<Item = Result<TraceJob, TraceError>>,
    settings: Settings,
) -> Result<Report, SimError> {
    let seed = settings.seed;
    let latency = settings.latency.clone();
    let mut sim = prepare(cluster, trace, settings)?;
    let run = sim.run(None);
    let mut report = report::build(&mut sim, cluster, run, seed);
    report.fidelity = report::fidelity::of(&sim, &latency);
    Ok(report)
}

/// Runs the trace `seeds` times, with the seeds `settings.seed`, the next,
/// and so on (`trace` gives the stream afresh for each run), and reports
/// the first run with the fidelity of all of them
/// ([`report::fidelity::of_runs`]): near saturation one seed's run is one
/// draw among many, and the report says how far the seed alone moves it.
pub fn simulate_seeds<I>(
    cluster: &Cluster,
    trace: impl FnMut() -> Result<I, SimError>,
    settings: Settings,
    seeds: u64,
) -> Result<Report, SimError>
where
    I: IntoIterator<Item = Result<TraceJob, TraceError>>,
{
    let (first_seed, latency) = (settings.seed, settings.latency.clone());
    let mut runs = run_seeds(cluster, trace, settings, seeds)?;
    let mut report = report::build(&mut runs.first, cluster, runs.first_stats, first_seed);
    report.fidelity = report::fidelity::of_runs(runs.first.jobs(), &runs.releases, &latency);
    Ok(report)
}

/// Runs of one trace with consecutive seeds.
#[derive(Debug)]
pub struct SeededRuns {
    /// The first run (seed `settings.seed`), finished.
    pub first: Simulation,
    /// What the first run did.
    pub first_stats: RunStats,
    /// Every run's first releases, by job
    /// ([`report::fidelity::first_releases`]); the first run's first.
    pub releases: Vec<Vec<Option<i64>>>,
}

/// Runs the trace `seeds` times (at least once) with the seeds
/// `settings.seed`, the next, and so on; `trace` gives the stream afresh
/// for each run. Only the first run is kept whole.
pub fn run_seeds<I>(
    cluster: &Cluster,
    mut trace: impl FnMut() -> Result<I, SimError>,
    settings: Settings,
    seeds: u64,
) -> Result<SeededRuns, SimError>
where
    I: IntoIterator<Item = Result<TraceJob, TraceError>>,
{
    let mut first = prepare(cluster, trace()?, settings.clone())?;
    let first_stats = first.run(None);
    let mut releases = vec![report::fidelity::first_releases(&first)];
    for k in 1..seeds.max(1) {
        let seeded = Settings {
            seed: settings.seed.wrapping_add(k),
            ..settings.clone()
        };
        let mut other = prepare(cluster, trace()?, seeded)?;
        other.run(None);
        releases.push(report::fidelity::first_releases(&other));
    }
    Ok(SeededRuns {
        first,
        first_stats,
        releases,
    })
}

/// [`simulate_stream`] of jobs in memory.
pub fn simulate(
    cluster: &Cluster,
    trace: &[TraceJob],
    settings: Settings,
) -> Result<Report, SimError> {
    simulate_stream(cluster, trace.iter().cloned().map(Ok), settings)
}
