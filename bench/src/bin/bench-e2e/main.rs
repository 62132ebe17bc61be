//! `make bench-e2e`: Koord-Queue's webhook and scheduler against a real
//! local control plane (etcd + kube-apiserver) in Kueue's
//! scheduler-performance baseline shape, with the API server floor of the
//! same API work measured in the same run.
//!
//!   cargo run --release -p koord-queue-bench --bin bench-e2e -- --scale 15k --out-dir docs/bench
//!
//! Phases, each on a fresh control plane: `run` (the baseline: paced
//! arrivals, runtimes, quotas), `saturated` (the same jobs as fast as the
//! API allows, quotas that never bind) and `floor` (the saturated run's API
//! work done by a null scheduler). Writes `e2e-<scale>.json` and
//! `e2e-<scale>.svg` into `--out-dir`. Fails when a quota was exceeded or a
//! job did not finish. See docs/performance.md.
//!
//! `--phases chaos` (`make bench-chaos`) runs the `run` phase's workload
//! instead with the webhook and the scheduler as separate processes, two of
//! each, and faults injected on a schedule; writes `chaos-<scale>.json`.
//! Fails on a quota violation, a double release, an unfinished job or
//! quota left held. See docs/reliability.md.
//!
//! `--phases fairness` (`make bench-fairness`; `--scenario fairness` is the
//! same) runs the fair-sharing scenario of issue 19 instead: three sibling
//! quotas with weights 1:1:2 under one parent, each tenant submitting more
//! than the parent holds, with fair sharing off and on (`--fair-sharing`);
//! writes `fairness.json` and `fairness.svg`. Fails on a quota violation
//! or an unfinished job. See docs/performance.md, "Fair sharing".
//!
//! `--phases kueue` (`make bench-kueue`) runs the `run` phase and then the
//! same jobs queued by Kueue v0.17.0 (provisioned by `make
//! provision-kueue`) on a fresh control plane of the same build; writes
//! `kueue-<scale>.json` (both systems' measures and ours / Kueue's ratios)
//! and `kueue-<scale>.svg`. Fails on a quota violation of either system or
//! an unfinished job. See docs/performance.md, "Against Kueue".
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod baseline;
mod chaos_mode;
mod fairness_mode;
mod kueue_mode;
mod results;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use koord_queue_bench::components::Placement;
use koord_queue_bench::floor::FloorWrites;
use koord_queue_bench::phase::{PhaseConfig, PhaseKind};
use koord_queue_bench::runner::RuntimeOptions;
use koord_queue_bench::scheduler_settings::SchedulerOptions;
use koord_queue_bench::shape;
use koord_queue_runtime::parse_duration;
use serde_json::json;

// The shipped webhook's and scheduler's allocator, for them and for the
// benchmark's own job runtime and null scheduler alike.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// End-to-end benchmark of Koord-Queue (Kueue's baseline shape).
#[derive(Debug, Parser)]
#[command(name = "bench-e2e")]
struct Cli {
    /// Size: `1k`, `15k` (Kueue's baseline: 30 queues in 5 cohorts), `50k`
    /// (Kueue's large scale: 1,000 queues in 10 cohorts), or a job count.
    #[arg(long, default_value = "15k")]
    scale: String,
    /// The shape: `baseline` (Kueue's: each queue small, medium and large
    /// jobs) or `one-large-class` (issue 44: three queues of large jobs
    /// among 27 of small ones under one parent).
    #[arg(long, default_value = "baseline")]
    shape: String,
    /// Override the number of jobs of the scale.
    #[arg(long)]
    jobs: Option<usize>,
    /// Override the number of leaf quotas (Kueue ClusterQueues).
    #[arg(long)]
    queues: Option<usize>,
    /// Override the number of parent quotas (Kueue cohorts).
    #[arg(long)]
    cohorts: Option<usize>,
    /// Phases to run, in order; or `chaos` alone (docs/reliability.md), or
    /// `fairness` alone (the fair-sharing scenario).
    #[arg(
        long,
        alias = "scenario",
        value_delimiter = ',',
        default_value = "run,saturated,floor"
    )]
    phases: Vec<String>,
    /// Rounds of the saturated run and the floor (alternating); the round
    /// with the median floor ratio is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory of the JSON result and the SVG plot.
    #[arg(long, default_value = "target/bench-e2e")]
    out_dir: PathBuf,
    /// Job creates in flight at most in the saturated run and the floor.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// Job creates in flight at most on the paced arrival schedule of the
    /// run phase: a client's connections (see `runner::create_paced`).
    #[arg(long, default_value_t = koord_queue_bench::runner::PACED_IN_FLIGHT)]
    paced_in_flight: usize,
    /// Job status writes of the benchmark's job runtime in flight at most.
    #[arg(long, default_value_t = 32)]
    runtime_concurrency: usize,
    /// Do not mark released jobs running before completing them.
    #[arg(long)]
    no_running_status: bool,
    /// Kueue's client rate limit as `QPS/BURST` (`--phases kueue`): its
    /// shipped configuration's 50/100 by default; a platform team raises it
    /// first (e.g. `500/1000`).
    #[arg(long, default_value_t = koord_queue_bench::kueue::ClientRate::SHIPPED)]
    kueue_client_rate: koord_queue_bench::kueue::ClientRate,
    /// Scheduler `--write-concurrency` (also the null scheduler's).
    #[arg(long, default_value_t = 48)]
    write_concurrency: usize,
    /// Scheduler `--status-interval`.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    status_interval: Duration,
    /// Scheduler `--job-events`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    job_events: bool,
    /// Scheduler `--cycle-batch`.
    #[arg(long, default_value = "20ms", value_parser = parse_duration)]
    cycle_batch: Duration,
    /// A phase fails when its jobs have not all finished by then.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    timeout: Duration,
    /// JSON merged into the spec of every leaf quota's Queue, created
    /// before the scheduler starts (which then leaves it as it is), e.g.
    /// `{"preemption":{"withinQuota":"LowerPriority"},"reserveHead":{"abovePriority":150}}`.
    #[arg(long, value_parser = parse_json_object)]
    queue_spec: Option<serde_json::Value>,
    /// Every job's `activeDeadlineSeconds` is its class's runtime times
    /// this, rounded up to whole seconds (at least 1): the bound by which a
    /// reserving head backfills. Unset: unbounded, as in Kueue's shape.
    #[arg(long, value_parser = parse_run_bound_factor)]
    run_bound_factor: Option<f64>,
    /// Every class's arrival interval and runtime times this (the same
    /// demand on each quota at a lower rate): a shape whose rate the
    /// machine's API server cannot take holds each released job's quota
    /// for seconds of API latency, which overturns what the shape tests
    /// (docs/performance.md, issue 44). 1: the shape as defined.
    #[arg(long, default_value_t = 1.0, value_parser = shape::parse_slow_down)]
    slow_down: f64,
    /// Chaos: from the start of one fault to the start of the next.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    fault_interval: Duration,
    /// Chaos: the faults, injected in this order, round and round
    /// (kill-leader, kill-webhook, restart-apiserver, compact-etcd,
    /// delay-leader).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill-leader,kill-webhook,restart-apiserver,compact-etcd,delay-leader"
    )]
    faults: Vec<String>,
    /// Chaos: how long a killed scheduler or webhook stays down.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    restart_after: Duration,
    /// Chaos: delay of every chunk of the slowed leader's API traffic. Past
    /// the Lease duration (15 s) a renewal lands after the Lease expired,
    /// so the standby takes over while the stalled leader's writes are
    /// still on their way (a shorter delay only makes it step down and
    /// take its own Lease back).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    delay_chunk: Duration,
    /// Chaos: how long the leader's API traffic is slowed.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    delay_for: Duration,
    /// Chaos: how long a failed job create or job status write is retried.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    retry_for: Duration,
    /// Chaos: how long the quota may take to read 0 once every job finished.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    settle: Duration,
    /// Where the webhook and the scheduler run: `in-process` (CPU time by
    /// thread, API requests by client) or `processes` (the release binaries,
    /// CPU time and peak RSS per process). Default: `processes` for
    /// `--phases kueue`, whose measures compare with Kueue's process, else
    /// `in-process`.
    #[arg(long, value_parser = ["in-process", "processes"])]
    components: Option<String>,
    /// Chaos and `--components processes`: directory of
    /// koord-queue-scheduler and koord-queue-webhook (default: this
    /// binary's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where every process's log is copied: chaos (default
    /// `target/bench-chaos/logs-<scale>`), and each phase that runs our
    /// components (a directory per phase; default: not kept).
    #[arg(long)]
    logs_dir: Option<PathBuf>,
    /// Fairness: `off` (the baseline), `on` or `both` (off, then on; each
    /// on a fresh control plane).
    #[arg(long, default_value = "both")]
    fair_sharing: String,
    /// Fairness: how long every tenant keeps its backlog of waiting jobs.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    submit_for: Duration,
    /// Fairness: the start of each run left out of the figures.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    warmup: Duration,
    /// Fairness: jobs each tenant keeps created and not yet released.
    #[arg(long, default_value_t = 20)]
    backlog: usize,
    /// The run phase: write its job stream as a simulator trace
    /// (`trace.jsonl`, each job submitted at its create with the release
    /// and finish seen) and the objects it used (`cluster.yaml`) into this
    /// directory, simulate it with and without the API latencies measured
    /// in the run, and write the comparison (`fidelity.json`,
    /// `fidelity.svg`; also under `fidelity` in the result). Issue 40.
    #[arg(long)]
    trace_out: Option<PathBuf>,
    /// The run phase: read every waiting unit's start-time estimate through
    /// the visibility API (served by the in-process scheduler, through the
    /// aggregation layer, pages of 500) this often, and report per class
    /// how close they came to the releases (`estimate_accuracy`).
    #[arg(long, value_parser = parse_duration)]
    estimates_every: Option<Duration>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                // Absent job CRDs are expected on a bare control plane.
                tracing_subscriber::EnvFilter::new(
                    "warn,kube_client=off,koord_queue_scheduler::controller::sources=error",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .try_init();
    match run(&Cli::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("bench-e2e: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// One mode per run: fairness, Kueue and chaos run alone; anything else
/// is a list of the baseline's phases.
async fn run(cli: &Cli) -> Result<bool> {
    let alone = |mode: &str| {
        let named = cli.phases.iter().any(|p| p.trim() == mode);
        if named && cli.phases.len() != 1 {
            bail!("--phases {mode} runs alone");
        }
        Ok(named)
    };
    if alone("fairness")? {
        return fairness_mode::run(cli).await;
    }
    let shape = Arc::new(
        shape::named(&cli.shape, &cli.scale, cli.jobs, cli.queues, cli.cohorts)?
            .slowed(cli.slow_down)
            .with_run_bounds(cli.run_bound_factor),
    );
    if alone("kueue")? {
        return kueue_mode::run(cli, shape).await;
    }
    if alone("chaos")? {
        return chaos_mode::run(cli, shape).await;
    }
    baseline::run(cli, shape).await
}

impl Cli {
    /// The scheduler's settings, the same in every mode.
    fn scheduler(&self) -> SchedulerOptions {
        SchedulerOptions {
            write_concurrency: self.write_concurrency,
            status_interval: self.status_interval,
            job_events: self.job_events,
            cycle_batch: self.cycle_batch,
            root_cpu: None,
            visibility: self.estimates_every.is_some(),
        }
    }

    /// The job runtime's settings; only chaos retries failed writes.
    fn runtime(&self) -> RuntimeOptions {
        RuntimeOptions {
            mark_running: !self.no_running_status,
            class_runtimes: true,
            write_concurrency: self.runtime_concurrency,
            retry_for: Duration::ZERO,
        }
    }

    /// Where the webhook and the scheduler run (`--components`).
    fn placement(&self, kueue: bool) -> Placement {
        Placement::from_flag(self.components.as_deref(), self.bin_dir.clone(), kueue)
    }

    /// A phase of the baseline or the Kueue comparison (`kueue`: our
    /// components placed as against Kueue's process).
    fn phase_config(
        &self,
        kind: PhaseKind,
        floor_writes: Option<FloorWrites>,
        kueue: bool,
    ) -> PhaseConfig {
        PhaseConfig {
            kind,
            scheduler: self.scheduler(),
            runtime: self.runtime(),
            create_concurrency: self.create_concurrency,
            paced_in_flight: self.paced_in_flight,
            floor_writes,
            timeout: self.timeout,
            queue_spec: self.queue_spec.clone(),
            components: self.placement(kueue),
            logs_dir: self.logs_dir.clone(),
            estimates_every: self.estimates_every,
            kueue_client_rate: self.kueue_client_rate,
        }
    }

    /// The scheduler's settings in a result (a mode adds its own).
    fn scheduler_json(&self) -> serde_json::Value {
        json!({
            "write_concurrency": self.write_concurrency,
            "status_interval": format!("{:?}", self.status_interval),
            "job_events": self.job_events,
            "cycle_batch": format!("{:?}", self.cycle_batch),
        })
    }
}

/// A JSON object from the command line.
fn parse_json_object(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(_) => Err("expected a JSON object such as {\"preemption\":{...}}".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// A run bound factor: a bound below the runtime would have the job
/// controller end the job before it is done.
fn parse_run_bound_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 1.0 => Ok(f),
        Ok(_) => Err("at least 1 (a bound is not shorter than the runtime)".into()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}
