//! The queue system a phase runs ([`QueueSystem`] of its spec) once it is
//! started, and its own record of held quota: what the run path asks of
//! either is asked here, so the run path does not tell them apart.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use koord_queue_tests::ControlPlane;

use super::PhaseConfig;
use super::spec::{PhaseSpec, QueueSystem};
use crate::admin_scrape::{self, Metrics};
use crate::api_stats::ApiStats;
use crate::checker::{Checker, Preemptions};
use crate::components::Components;
use crate::kueue::workloads::WorkloadChecker;
use crate::kueue::{self, Kueue};
use crate::member;
use crate::quota::{Usage, Violation};
use crate::runner::Runner;
use crate::shape::Shape;

/// The scheduler's figures a phase reports.
const SCHEDULER_METRICS: [&str; 6] = [
    "koord_queue_scheduler_cycle_duration_seconds_count",
    "koord_queue_scheduler_cycle_duration_seconds_sum",
    "koord_queue_scheduler_dequeue_latency_seconds_count",
    "koord_queue_scheduler_dequeue_latency_seconds_sum",
    // The start-time estimates' cost (off the decision path).
    "koord_queue_scheduler_estimate_duration_seconds_count",
    "koord_queue_scheduler_estimate_duration_seconds_sum",
];
/// The scheduler's counters a phase reports by label: (metric, label).
const SCHEDULER_LABELLED: [(&str, &str); 3] = [
    ("koord_queue_scheduler_api_write_errors_total", "operation"),
    ("koord_queue_scheduler_admission_attempts_total", "result"),
    // What the waiting units' status writes were for.
    ("koord_queue_scheduler_unit_status_publishes_total", "cause"),
];
/// The webhook's figures a phase reports.
const WEBHOOK_METRICS: [&str; 2] = [
    "koord_queue_webhook_review_duration_seconds_count",
    "koord_queue_webhook_review_duration_seconds_sum",
];
/// The webhook's counters a phase reports by label: (metric, label).
const WEBHOOK_LABELLED: [(&str, &str); 2] = [
    ("koord_queue_webhook_reviews_total", "verdict"),
    (
        "koord_queue_webhook_queue_unit_create_errors_total",
        "reason",
    ),
];

/// The running queue system of a phase.
pub(super) enum System {
    /// None (the floor).
    Null,
    /// Koord-Queue's webhook and scheduler.
    Ours(Box<Components>),
    /// Kueue's manager process.
    Kueue(Kueue),
}

/// Where Kueue was provisioned, looked for before the control plane starts
/// so that a missing Kueue fails at once; `None` for the other systems.
pub(super) fn kueue_install(spec: &PhaseSpec) -> Result<Option<kueue::Install>> {
    (spec.system == QueueSystem::Kueue)
        .then(kueue::Install::find)
        .transpose()
}

impl System {
    /// Starts the queue system of `spec` (Kueue from `install`).
    pub(super) async fn start(
        spec: &PhaseSpec,
        config: &PhaseConfig,
        cp: &ControlPlane,
        admin: &kube::Client,
        shape: &Shape,
        install: Option<&kueue::Install>,
        stats: Arc<ApiStats>,
    ) -> Result<Self> {
        let name = config.kind.name();
        Ok(match spec.system {
            QueueSystem::Null => Self::Null,
            QueueSystem::Kueue => {
                eprintln!("[{name}] starting Kueue {}", kueue::KUEUE_VERSION);
                let install = install.context("Kueue's install was not looked for")?;
                Self::Kueue(
                    Kueue::start(cp, admin, shape, install, config.kueue_client_rate).await?,
                )
            }
            QueueSystem::KoordQueue => {
                eprintln!("[{name}] starting the webhook and the scheduler");
                let mut options = config.scheduler.clone();
                options.root_cpu = spec.limits_bind().then_some(shape.root_cpu);
                Self::Ours(Box::new(
                    Components::start_placed(&config.components, cp, shape, &options, stats)
                        .await?,
                ))
            }
        })
    }

    /// Its processes by name and pid (for their CPU time and peak RSS).
    pub(super) fn pids(&self) -> Vec<(String, u32)> {
        match self {
            Self::Kueue(k) => vec![("kueue".to_string(), k.pid())],
            Self::Ours(c) => c.pids(),
            Self::Null => Vec::new(),
        }
    }

    /// An error if a process of it has exited.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        match self {
            Self::Kueue(k) => k.check_alive(),
            Self::Ours(c) => c.check_alive(),
            Self::Null => Ok(()),
        }
    }

    /// The scheduler's and the webhook's figures the phase reports (empty
    /// for another system, or a component whose `/metrics` did not answer).
    pub(super) async fn metrics(&self) -> (Metrics, Metrics) {
        let mut scheduler = Metrics::new();
        let mut webhook = Metrics::new();
        if let Self::Ours(c) = self {
            if let Ok(text) = admin_scrape::scrape(c.scheduler_admin).await {
                scheduler = admin_scrape::selected(&text, &SCHEDULER_METRICS);
                for (name, label) in SCHEDULER_LABELLED {
                    admin_scrape::add_by_label(&mut scheduler, &text, name, label);
                }
            }
            if let Ok(text) = admin_scrape::scrape(c.webhook_admin).await {
                webhook = admin_scrape::selected(&text, &WEBHOOK_METRICS);
                for (name, label) in WEBHOOK_LABELLED {
                    admin_scrape::add_by_label(&mut webhook, &text, name, label);
                }
            }
        }
        (scheduler, webhook)
    }

    /// Copies the component logs of the control plane's directory `from`
    /// into `<logs_dir>/<phase>` (Koord-Queue's components only).
    pub(super) fn keep_logs(&self, name: &str, from: &Path, logs_dir: Option<&Path>) {
        let (Self::Ours(_), Some(dir)) = (self, logs_dir) else {
            return;
        };
        let dir = dir.join(name.replace(' ', "-"));
        match member::copy_logs(from, &dir) {
            Ok(n) => eprintln!("[{name}] {n} log files copied to {}", dir.display()),
            Err(e) => eprintln!(
                "[{name}] copying the logs to {} failed: {e:#}",
                dir.display()
            ),
        }
    }

    /// Stops it.
    pub(super) async fn stop(self) {
        match self {
            Self::Ours(c) => c.stop().await,
            Self::Kueue(k) => k.stop(),
            Self::Null => {}
        }
    }
}

/// The queue system's own record of held quota, checked against the maxima.
pub(super) enum HeldWatch {
    /// Koord-Queue's QueueUnits (also the floor's, which the null
    /// scheduler writes).
    Units(Arc<Checker>),
    /// Kueue's Workloads.
    Workloads(Arc<WorkloadChecker>),
}

impl HeldWatch {
    /// Starts the watch of `spec`'s system, from the runtime's `t0`.
    pub(super) fn start(
        spec: &PhaseSpec,
        shape: Arc<Shape>,
        client: kube::Client,
        runner: &Arc<Runner>,
        t0: Instant,
    ) -> Self {
        let check = spec.limits_bind();
        match spec.system {
            QueueSystem::Kueue => Self::Workloads(WorkloadChecker::start(shape, client, t0, check)),
            QueueSystem::KoordQueue | QueueSystem::Null => Self::Units(Checker::start(
                shape,
                client,
                t0,
                check,
                Some(runner.clone()),
            )),
        }
    }

    /// Units that succeeded, or Workloads that finished.
    pub(super) fn succeeded(&self) -> usize {
        match self {
            Self::Units(c) => c.succeeded(),
            Self::Workloads(c) => c.finished(),
        }
    }

    pub(super) fn last_succeeded_at(&self) -> f64 {
        match self {
            Self::Units(c) => c.last_succeeded_at(),
            Self::Workloads(c) => c.last_finished_at(),
        }
    }

    pub(super) fn usage(&self) -> Option<Usage> {
        match self {
            Self::Units(c) => c.usage(),
            Self::Workloads(c) => c.usage(),
        }
    }

    pub(super) fn violation_examples(&self) -> (Vec<Violation>, usize) {
        match self {
            Self::Units(c) => c.violation_examples(),
            Self::Workloads(c) => c.violation_examples(),
        }
    }

    /// Preemptions seen on QueueUnits (`None` for Kueue's Workloads).
    pub(super) fn preemptions(&self) -> Option<Preemptions> {
        match self {
            Self::Units(c) => Some(c.preemptions()),
            Self::Workloads(_) => None,
        }
    }

    /// Each job's QueueUnit's times (empty for Kueue's Workloads).
    pub(super) fn unit_times(&self) -> Vec<Option<crate::checker::UnitTimes>> {
        match self {
            Self::Units(c) => c.unit_times(),
            Self::Workloads(_) => Vec::new(),
        }
    }

    /// Entries into each QueueUnit phase, or each Workload condition.
    pub(super) fn entries(&self) -> BTreeMap<String, usize> {
        match self {
            Self::Units(c) => c.phase_entries(),
            Self::Workloads(c) => c.condition_entries(),
        }
    }

    pub(super) fn stop(&self) {
        match self {
            Self::Units(c) => c.stop(),
            Self::Workloads(c) => c.stop(),
        }
    }
}
