//! One phase of the benchmark on a fresh tier 1 control plane:
//!
//! - `run`: Kueue's baseline — paced arrivals, class runtimes, the quota
//!   tree with its real limits, the webhook and the scheduler;
//! - `saturated`: the same jobs created as fast as the API allows, completed
//!   at once, under quotas that never bind — the scheduler's throughput;
//! - `floor`: the same API work done by a null scheduler (no webhook, no
//!   scheduling logic) — what the API server allows;
//! - `kueue`: the `run` phase's jobs, runtimes and checks with Kueue
//!   v0.17.0 queueing them instead of Koord-Queue ([`crate::kueue`]).
//!
//! What each is, is data ([`PhaseSpec`], `spec.rs`); [`run`] is the one
//! path that reads it. `prepare.rs` sets up the control plane, `system.rs`
//! holds the queue system and its record of held quota, `flow.rs` the jobs
//! on their way, `result.rs` what a phase measured.

mod flow;
mod prepare;
mod result;
mod spec;
mod system;

pub use flow::{JobFlow, NullScheduler};
use prepare::null_scheduler_clients;
pub use prepare::{BENCH_USER, job_clients, prepare};
pub use result::PhaseResult;
pub use spec::{Arrivals, PhaseSpec, QueueSystem, Quotas};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use koord_queue_tests::proc_stats::{self, CpuSnapshot};
use koord_queue_tests::{ControlPlane, Tier};

use self::system::{HeldWatch, System, kueue_install};
use crate::api_stats::{self, ApiStats, Component, ServerRequests};
use crate::components::Placement;
use crate::estimate_accuracy::Sampler;
use crate::floor::FloorWrites;
use crate::kueue;
use crate::runner::RuntimeOptions;
use crate::scheduler_settings::SchedulerOptions;
use crate::shape::Shape;

/// Waiting units per page when the estimates are read (`kubectl get`'s).
const ESTIMATE_PAGE: usize = 500;

/// The phases (what each is: [`PhaseKind::spec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseKind {
    /// Kueue's baseline shape.
    Run,
    /// Saturated, non-binding quotas, zero runtime.
    Saturated,
    /// The null scheduler.
    Floor,
    /// Kueue's baseline shape queued by Kueue.
    Kueue,
}

impl PhaseKind {
    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Saturated => "saturated",
            Self::Floor => "floor",
            Self::Kueue => "kueue",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name.trim() {
            "run" => Self::Run,
            "saturated" => Self::Saturated,
            "floor" => Self::Floor,
            "kueue" => Self::Kueue,
            other => bail!("unknown phase {other:?} (run, saturated, floor, kueue)"),
        })
    }
}

/// Settings of a phase.
#[derive(Clone, Debug)]
pub struct PhaseConfig {
    /// Which phase.
    pub kind: PhaseKind,
    /// Scheduler settings (the root capacity is set per phase).
    pub scheduler: SchedulerOptions,
    /// Job runtime settings (class runtimes are set per phase).
    pub runtime: RuntimeOptions,
    /// Job creates in flight at most (saturated and floor).
    pub create_concurrency: usize,
    /// Job creates in flight at most when paced (see `runner::create_paced`).
    pub paced_in_flight: usize,
    /// The floor's writes (floor only).
    pub floor_writes: Option<FloorWrites>,
    /// The phase fails when the jobs have not all finished by then.
    pub timeout: Duration,
    /// Merged into the spec of every leaf's Queue (`--queue-spec`).
    pub queue_spec: Option<serde_json::Value>,
    /// Where the webhook and the scheduler run.
    pub components: Placement,
    /// Where the component processes' logs are copied at the end
    /// (`--logs-dir`; `None`: not kept).
    pub logs_dir: Option<PathBuf>,
    /// Read the waiting units' start-time estimates through the visibility
    /// API this often (`--estimates-every`; Koord-Queue's phases only).
    pub estimates_every: Option<Duration>,
    /// Kueue's client rate limit (Kueue's phases only).
    pub kueue_client_rate: kueue::ClientRate,
}

/// Runs one phase on a fresh control plane.
pub async fn run(
    shape: Arc<Shape>,
    config: &PhaseConfig,
    stats: Arc<ApiStats>,
) -> Result<PhaseResult> {
    let kind = config.kind;
    let spec = kind.spec();
    let name = kind.name();
    // Before the control plane starts: a missing Kueue fails at once.
    let install = kueue_install(&spec)?;
    let shape = if spec.system == QueueSystem::Kueue {
        Arc::new(shape.with_queue_labels(kueue::JOB_LABELS))
    } else {
        shape
    };
    eprintln!("[{name}] starting a tier 1 control plane");
    let cp = ControlPlane::start(Tier::One).await?;
    let admin_path = cp.kubeconfig().to_path_buf();
    let admin = api_stats::client(&admin_path, stats.clone(), Component::Admin).await?;
    prepare(&admin, &shape, &spec, config.queue_spec.as_ref()).await?;
    let mut system = System::start(
        &spec,
        config,
        &cp,
        &admin,
        &shape,
        install.as_ref(),
        stats.clone(),
    )
    .await?;

    let (creator, runner_client) = job_clients(&cp, &admin_path, &stats).await?;
    let null_scheduler = if spec.arrivals == Arrivals::NullScheduler {
        Some(NullScheduler {
            clients: null_scheduler_clients(&cp, &creator, &stats).await?,
            writes: config
                .floor_writes
                .clone()
                .unwrap_or_else(|| FloorWrites::default_for(shape.jobs.len())),
            write_concurrency: config.scheduler.write_concurrency,
        })
    } else {
        None
    };

    // The measured window starts here.
    let mut others: Vec<(String, u32)> = ["etcd", "kube-apiserver"]
        .iter()
        .zip(cp.pids())
        .map(|(n, p)| ((*n).to_string(), *p))
        .collect();
    others.extend(system.pids());
    let load_before = proc_stats::load_average();
    eprintln!(
        "[{name}] {} jobs; load average {:?}",
        shape.jobs.len(),
        load_before.unwrap_or_default()
    );
    let ticks = proc_stats::clock_ticks();
    let server_before = ServerRequests::scrape(&admin).await?;
    stats.reset();
    proc_stats::reset_peak_rss();
    let cpu_before = CpuSnapshot::take(&others);

    let mut flow = JobFlow::start(
        &spec,
        shape.clone(),
        runner_client.clone(),
        config.runtime.clone(),
    );
    let runner = flow.runner().clone();
    let checker = HeldWatch::start(&spec, shape.clone(), runner_client, &runner, runner.t0());
    // A plain client: its requests are not the run's own (their cost is
    // reported apart), while the API server counts them as any.
    let sampler = match config.estimates_every {
        Some(every) if spec.system == QueueSystem::KoordQueue => Some(Sampler::start(
            shape.clone(),
            cp.client().await?,
            runner.t0(),
            every,
            ESTIMATE_PAGE,
        )),
        _ => None,
    };
    flow.arrive(
        &spec,
        creator,
        config.create_concurrency,
        config.paced_in_flight,
        null_scheduler,
    )?;
    let n = shape.jobs.len();
    let started = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        if let Some(outcome) = flow.creation_ended().await {
            outcome.context("the job creation task failed")??;
        }
        let finished = runner.finished();
        let succeeded = checker.succeeded();
        let units_done = !spec.waits_for_the_queue_system() || succeeded >= n;
        if !flow.creating() && finished >= n && units_done {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            system.check_alive()?;
            flow.print_progress(name, succeeded);
        }
        if started.elapsed() > config.timeout {
            let (errors, last) = runner.write_errors();
            let unfinished: Vec<String> = runner
                .timelines()
                .iter()
                .enumerate()
                .filter(|(_, j)| j.finished.is_none())
                .take(5)
                .map(|(i, j)| {
                    format!(
                        "{}/{} (time s, resourceVersion, suspended): {:?}",
                        shape.leaves[shape.jobs[i].leaf].namespace,
                        shape.jobs[i].name,
                        j.transitions
                    )
                })
                .collect();
            bail!(
                "[{name}] not every job finished within {:?}: finished {finished}/{n}, units succeeded {succeeded}/{n}, job creation {}; runtime write errors {errors} (last: {last:?}); unfinished jobs as the runtime saw them: {unfinished:#?}",
                config.timeout,
                if flow.creating() { "running" } else { "done" }
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let estimate_samples = sampler.map(Sampler::stop);
    let cpu_after = CpuSnapshot::take(&others);
    let peak_rss_kib = proc_stats::status_kib("self", "VmHWM");
    let client_requests = stats.snapshot();
    let server_after = ServerRequests::scrape(&admin).await?;
    let (wall_seconds, creation_seconds) = flow.times(checker.last_succeeded_at());
    let (scheduler_metrics, webhook_metrics) = system.metrics().await;
    let server_rss_kib = others
        .iter()
        .filter_map(|(n, pid)| Some((n.clone(), proc_stats::status_kib(pid, "VmHWM")?)))
        .collect();

    let result = PhaseResult {
        kind,
        jobs: n,
        wall_seconds,
        creation_seconds,
        unit_usage: checker.usage(),
        unit_violations: checker.violation_examples(),
        running_usage: runner.running_usage(),
        running_beyond_completed: runner.violations_beyond_completed(),
        phase_entries: checker.entries(),
        preemptions: checker.preemptions(),
        cpu: proc_stats::usage(&cpu_before, &cpu_after, ticks),
        peak_rss_kib,
        server_rss_kib,
        client_requests,
        server_requests: server_after.since(&server_before),
        scheduler_metrics,
        webhook_metrics,
        runtime_errors: runner.write_errors(),
        load_before,
        timelines: runner.timelines(),
        unit_times: checker.unit_times(),
        estimate_samples,
    };
    runner.stop();
    checker.stop();
    system.keep_logs(name, cp.dir(), config.logs_dir.as_deref());
    system.stop().await;
    cp.stop().await;
    drop(cp);
    eprintln!(
        "[{name}] done: {n} jobs in {:.1}s ({:.1} jobs/s)",
        result.wall_seconds,
        result.throughput()
    );
    Ok(result)
}
