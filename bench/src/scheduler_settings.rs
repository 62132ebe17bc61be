//! The scheduler's settings the benchmark exposes and the plugin
//! configuration it writes: one description for the in-process scheduler,
//! the scheduler processes and the chaos run's replicas, so every run
//! measures the scheduler configured alike.

use std::time::Duration;

/// Scheduler settings the benchmark exposes.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// `--write-concurrency`.
    pub write_concurrency: usize,
    /// `--status-interval`.
    pub status_interval: Duration,
    /// `--job-events`.
    pub job_events: bool,
    /// `--cycle-batch`.
    pub cycle_batch: Duration,
    /// Root capacity in CPU; `None`: unlimited.
    pub root_cpu: Option<u32>,
    /// Serve the visibility API, registered with the aggregation layer
    /// (the run phase reads the start-time estimates through it).
    pub visibility: bool,
}

/// The scheduler's plugin configuration: Priority, then ElasticQuota with
/// the root capacity (`None`: unlimited).
pub fn scheduler_config(root_cpu: Option<u32>) -> String {
    let capacity = match root_cpu {
        Some(cpu) => format!("{{cpu: \"{cpu}\"}}"),
        None => "unlimited".to_string(),
    };
    format!(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args:\n    rootCapacity: {capacity}\n"
    )
}
