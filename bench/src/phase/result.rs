//! What a phase of the end-to-end benchmark measured (`phase::run` fills
//! it; `output` renders it).

use std::collections::BTreeMap;

use koord_queue_tests::proc_stats::CpuUsage;

use super::PhaseKind;
use crate::admin_scrape::Metrics;
use crate::api_stats::{self, Component, RequestKey, RequestStat, ServerRequests};
use crate::checker::Preemptions;
use crate::floor::FloorWrites;
use crate::quota::{Usage, Violation};
use crate::runner::{self, JobTimeline};

/// What a phase measured.
#[derive(Debug)]
pub struct PhaseResult {
    /// Which phase.
    pub kind: PhaseKind,
    /// Jobs.
    pub jobs: usize,
    /// From the first create to the last job finished and its quota freed.
    pub wall_seconds: f64,
    /// From the first to the last create request.
    pub creation_seconds: f64,
    /// Each job's timeline.
    pub timelines: Vec<JobTimeline>,
    /// Held quota per the QueueUnits.
    pub unit_usage: Option<Usage>,
    /// The QueueUnit check's violations with the CPU still held for
    /// finished jobs, and the number that exceed the max even without it.
    pub unit_violations: (Vec<Violation>, usize),
    /// CPU of the jobs that actually ran.
    pub running_usage: Option<Usage>,
    /// The running-job check's violations that exceed the max even without
    /// the CPU of jobs whose completion was written and not yet seen back
    /// (examples with the jobs counted, and the number).
    pub running_beyond_completed: (Vec<runner::RunningViolation>, usize),
    /// Entries of units into each phase.
    pub phase_entries: BTreeMap<String, usize>,
    /// Preemptions seen on the units (`None` for Kueue's Workloads).
    pub preemptions: Option<Preemptions>,
    /// CPU time.
    pub cpu: CpuUsage,
    /// Peak RSS of this process during the phase, KiB.
    pub peak_rss_kib: Option<u64>,
    /// Peak RSS of the API server and etcd, KiB.
    pub server_rss_kib: BTreeMap<String, u64>,
    /// Requests by client.
    pub client_requests: BTreeMap<RequestKey, RequestStat>,
    /// Requests the API server counted.
    pub server_requests: ServerRequests,
    /// Selected scheduler metrics.
    pub scheduler_metrics: Metrics,
    /// Selected webhook metrics.
    pub webhook_metrics: Metrics,
    /// Failed job status writes of the runtime, and the last error.
    pub runtime_errors: (u64, Option<String>),
    /// Load average when the phase started.
    pub load_before: Option<[f64; 3]>,
    /// Each job's QueueUnit's times (by job; empty for Kueue).
    pub unit_times: Vec<Option<crate::checker::UnitTimes>>,
    /// The start-time estimates read during the phase, when asked.
    pub estimate_samples: Option<crate::estimate_accuracy::Samples>,
}

impl PhaseResult {
    /// Jobs per second over the wall time.
    pub fn throughput(&self) -> f64 {
        if self.wall_seconds > 0.0 {
            self.jobs as f64 / self.wall_seconds
        } else {
            0.0
        }
    }

    /// The floor's writes copied from this (saturated) run's client counts.
    pub fn writes_for_floor(&self) -> FloorWrites {
        let c = &self.client_requests;
        let s = Component::Scheduler;
        FloorWrites {
            job_reads: api_stats::count_of(c, Component::Webhook, "get", "jobs"),
            unit_creates: api_stats::count_of(c, Component::Webhook, "create", "queueunits"),
            unit_patches: api_stats::count_of(c, s, "patch", "queueunits"),
            unit_status_patches: api_stats::count_of(c, s, "patch", "queueunits/status"),
            job_patches: api_stats::count_of(c, s, "patch", "jobs"),
            event_creates: api_stats::count_of(c, s, "create", "events"),
        }
    }
}
