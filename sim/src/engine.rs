//! The simulation: the scheduler's own forward simulation
//! (`koord_queue_scheduler::forecast`, which the scheduler also runs to
//! estimate start times), set up from a cluster's objects.

pub use koord_queue_scheduler::forecast::{
    Latency, LatencyBucket, LatencyProfile, NodeUsage, RunStats, Settings, Simulation, UnitOutcome,
    UsageSeries,
};

use crate::cluster::{Cluster, ClusterError};

/// A simulation of `cluster`, holding nothing yet.
pub fn simulation(cluster: &Cluster, settings: Settings) -> Result<Simulation, ClusterError> {
    Ok(Simulation::new(
        cluster.core()?,
        &cluster.quotas,
        cluster.auto_capacity.clone(),
        settings,
    ))
}
