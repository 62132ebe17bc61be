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
use engine::{Settings, Simulation};
use job::JobBuilder;
use report::Report;
use trace::TraceJob;

/// Why a simulation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The cluster's objects.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
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

/// A simulation of `trace` on `cluster`, its jobs added, not yet run.
pub fn prepare(
    cluster: &Cluster,
    trace: &[TraceJob],
    settings: Settings,
) -> Result<Simulation, SimError> {
    let start = trace.iter().map(|t| t.submit_ms).min().unwrap_or(0);
    let mut sim = Simulation::new(cluster, settings, start)?;
    let mut builder = JobBuilder::new(cluster.priority_classes.clone());
    let mut seen = std::collections::HashSet::new();
    for (index, t) in trace.iter().enumerate() {
        let job = builder.build(t, index).map_err(|reason| SimError::Job {
            index,
            name: t.name.clone().unwrap_or_default(),
            reason,
        })?;
        if !seen.insert(job.key()) {
            return Err(SimError::Job {
                index,
                name: job.name.to_string(),
                reason: "a job of this namespace and name comes earlier in the trace".into(),
            });
        }
        sim.add_job(job);
    }
    Ok(sim)
}

/// Runs `trace` on `cluster` to its end and reports.
pub fn simulate(
    cluster: &Cluster,
    trace: &[TraceJob],
    settings: Settings,
) -> Result<Report, SimError> {
    let seed = settings.seed;
    let mut sim = prepare(cluster, trace, settings)?;
    let run = sim.run(None);
    let observed: Vec<Option<i64>> = trace
        .iter()
        .map(|t| {
            t.observed
                .as_ref()
                .and_then(|o| o.release_ms)
                .map(|r| r - t.submit_ms)
        })
        .collect();
    Ok(report::build(&mut sim, cluster, run, seed, &observed))
}
