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

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use koord_queue_bench::api_stats::ApiStats;
use koord_queue_bench::chaos::{self, ChaosConfig, faults::FaultKind, faults::FaultPlan};
use koord_queue_bench::components::{Placement, SchedulerOptions};
use koord_queue_bench::fairness::{self, plan::FairnessConfig};
use koord_queue_bench::output;
use koord_queue_bench::phase::{self, PhaseConfig, PhaseKind};
use koord_queue_bench::rounds;
use koord_queue_bench::runner::RuntimeOptions;
use koord_queue_bench::shape::{Shape, parse_scale};
use koord_queue_runtime::parse_duration;
use koord_queue_tests::proc_stats;
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
    /// Job status writes of the benchmark's job runtime in flight at most.
    #[arg(long, default_value_t = 32)]
    runtime_concurrency: usize,
    /// Do not mark released jobs running before completing them.
    #[arg(long)]
    no_running_status: bool,
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
    match run(Cli::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("bench-e2e: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<bool> {
    if cli.phases.iter().any(|p| p.trim() == "fairness") {
        if cli.phases.len() != 1 {
            bail!("--phases fairness runs alone");
        }
        return run_fairness(&cli).await;
    }
    let (jobs, queues, cohorts) = parse_scale(&cli.scale)?;
    let shape = Arc::new(Shape::new(
        &cli.scale,
        cli.jobs.unwrap_or(jobs),
        cli.queues.unwrap_or(queues),
        cli.cohorts.unwrap_or(cohorts),
    )?);
    if cli.phases.iter().any(|p| p.trim() == "kueue") {
        if cli.phases.len() != 1 {
            bail!("--phases kueue runs alone (it runs `run`, then Kueue)");
        }
        return run_kueue(&cli, shape).await;
    }
    if cli.phases.iter().any(|p| p.trim() == "chaos") {
        if cli.phases.len() != 1 {
            bail!("--phases chaos runs alone");
        }
        return run_chaos(&cli, shape).await;
    }
    let kinds = cli
        .phases
        .iter()
        .map(|p| PhaseKind::parse(p))
        .collect::<Result<Vec<_>>>()?;
    if kinds.is_empty() {
        bail!("--phases: nothing to run");
    }
    if cli.rounds == 0 {
        bail!("--rounds: at least 1");
    }
    let Start {
        command,
        source,
        load,
    } = Start::take(&cli)?;
    eprintln!(
        "bench-e2e: {} jobs, {} leaf quotas, {} parents; phases {:?}; load average {:?}",
        shape.jobs.len(),
        shape.leaves.len(),
        shape.parents.len(),
        cli.phases,
        load.unwrap_or_default()
    );
    let scheduler = SchedulerOptions {
        write_concurrency: cli.write_concurrency,
        status_interval: cli.status_interval,
        job_events: cli.job_events,
        cycle_batch: cli.cycle_batch,
        root_cpu: None,
    };
    let runtime = RuntimeOptions {
        mark_running: !cli.no_running_status,
        class_runtimes: true,
        write_concurrency: cli.runtime_concurrency,
        retry_for: Duration::ZERO,
    };
    let stats = Arc::new(ApiStats::default());
    let mut results = Vec::new();
    // Each round's floor copies that round's saturated writes.
    let mut floor_writes_by_round = Vec::new();
    for kind in rounds::schedule(&kinds, cli.rounds) {
        let config = PhaseConfig {
            kind,
            scheduler: scheduler.clone(),
            runtime: runtime.clone(),
            create_concurrency: cli.create_concurrency,
            floor_writes: floor_writes_by_round.last().cloned(),
            timeout: cli.timeout,
            queue_spec: cli.queue_spec.clone(),
            components: placement(&cli, false),
            logs_dir: cli.logs_dir.clone(),
        };
        let result = phase::run(shape.clone(), &config, stats.clone()).await?;
        if kind == PhaseKind::Saturated {
            floor_writes_by_round.push(result.writes_for_floor());
        }
        results.push(result);
    }
    let ran: Vec<(PhaseKind, f64)> = results.iter().map(|r| (r.kind, r.throughput())).collect();
    let rounds = rounds::rounds(&ran);
    let round = rounds::median(&rounds);
    let results = rounds::reported(results, |r| r.kind, round);

    let settings = json!({
        "create_concurrency": cli.create_concurrency,
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "scheduler": {
            "write_concurrency": cli.write_concurrency,
            "status_interval": format!("{:?}", cli.status_interval),
            "job_events": cli.job_events,
            "cycle_batch": format!("{:?}", cli.cycle_batch),
        },
        "queue_spec": cli.queue_spec,
        "floor_writes": round.and_then(|i| floor_writes_by_round.get(i)),
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_start": load,
        },
        "source": source,
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhook and scheduler in this process",
    });
    let json = output::result_json(&shape, &command, settings, &results, &rounds, round);
    let base = cli.out_dir.join(format!("e2e-{}", shape.scale));
    let json_path = base.with_extension("json");
    let svg_path = base.with_extension("svg");
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let subtitle = format!(
        "{} leaf quotas (min 20, max 120 CPU) under {} parents, root {} CPU; webhook + scheduler on a real kube-apiserver v1.35.4; {}",
        shape.leaves.len(),
        shape.parents.len(),
        shape.root_cpu,
        json["wall_seconds"]
            .as_f64()
            .map(|w| format!("wall {w:.1} s"))
            .unwrap_or_default()
    );
    std::fs::write(&svg_path, output::svg(&shape, &results, &subtitle))
        .with_context(|| format!("writing {}", svg_path.display()))?;
    print!("{}", output::text(&shape, &json, &results));
    println!(
        "  results: {}  plot: {}",
        json_path.display(),
        svg_path.display()
    );

    let violations = json["quota_violations"].as_u64().unwrap_or(0);
    if violations > 0 {
        eprintln!(
            "bench-e2e: FAILED: {violations} quota violations (see quota_violation_examples in the JSON)"
        );
        return Ok(false);
    }
    Ok(true)
}

/// Where the webhook and the scheduler run (`--components`).
fn placement(cli: &Cli, kueue: bool) -> Placement {
    Placement::from_flag(cli.components.as_deref(), cli.bin_dir.clone(), kueue)
}

/// `--phases kueue`: docs/performance.md, "Against Kueue".
async fn run_kueue(cli: &Cli, shape: Arc<Shape>) -> Result<bool> {
    // Fail before the first phase when Kueue is not provisioned.
    koord_queue_bench::kueue::Install::find()?;
    let Start {
        command,
        source,
        load,
    } = Start::take(cli)?;
    eprintln!(
        "bench-e2e kueue: {} jobs, {} queues, {} cohorts; Koord-Queue, then Kueue {}; load average {:?}",
        shape.jobs.len(),
        shape.leaves.len(),
        shape.parents.len(),
        koord_queue_bench::kueue::KUEUE_VERSION,
        load.unwrap_or_default()
    );
    let stats = Arc::new(ApiStats::default());
    let mut results = Vec::new();
    for kind in [PhaseKind::Run, PhaseKind::Kueue] {
        let config = PhaseConfig {
            kind,
            scheduler: SchedulerOptions {
                write_concurrency: cli.write_concurrency,
                status_interval: cli.status_interval,
                job_events: cli.job_events,
                cycle_batch: cli.cycle_batch,
                root_cpu: None,
            },
            runtime: RuntimeOptions {
                mark_running: !cli.no_running_status,
                class_runtimes: true,
                write_concurrency: cli.runtime_concurrency,
                retry_for: Duration::ZERO,
            },
            create_concurrency: cli.create_concurrency,
            floor_writes: None,
            timeout: cli.timeout,
            queue_spec: cli.queue_spec.clone(),
            components: placement(cli, true),
            logs_dir: cli.logs_dir.clone(),
        };
        results.push(phase::run(shape.clone(), &config, stats.clone()).await?);
    }
    let (ours, kueue) = (&results[0], &results[1]);
    let mut json = koord_queue_bench::kueue::report::comparison_json(&shape, ours, kueue);
    json["benchmark"] = json!(format!(
        "koord-queue against Kueue {} (issue 22): Kueue's scheduler-performance baseline shape as batch/v1 Jobs, the same job stream, runtime stand-in and quota checks",
        koord_queue_bench::kueue::KUEUE_VERSION
    ));
    json["command"] = json!(command);
    json["source"] = source;
    json["scale"] = json!(shape.scale);
    json["jobs"] = json!(shape.jobs.len());
    json["settings"] = json!({
        "koord_queue": {
            "webhook_and_scheduler": placement(cli, true).describe(),
            "write_concurrency": cli.write_concurrency,
            "status_interval": format!("{:?}", cli.status_interval),
            "job_events": cli.job_events,
            "cycle_batch": format!("{:?}", cli.cycle_batch),
            "queue_spec": cli.queue_spec,
        },
        "kueue": koord_queue_bench::kueue::settings_json(),
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_start": load,
        },
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; a fresh one per system",
    });
    let base = cli.out_dir.join(format!("kueue-{}", shape.scale));
    let (json_path, svg_path) = (base.with_extension("json"), base.with_extension("svg"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let subtitle = format!(
        "{} queues (nominal 20, borrowing limit 100 CPU) in {} cohorts; both on kube-apiserver v1.35.4 on this machine",
        shape.leaves.len(),
        shape.parents.len()
    );
    std::fs::write(
        &svg_path,
        koord_queue_bench::kueue::report::svg(&shape, ours, kueue, &subtitle),
    )
    .with_context(|| format!("writing {}", svg_path.display()))?;
    print!("{}", koord_queue_bench::kueue::report::text(&json));
    println!(
        "  results: {}  plot: {}",
        json_path.display(),
        svg_path.display()
    );
    let mut passed = true;
    for (name, m) in [
        ("koord-queue", &json["koord_queue"]),
        ("kueue", &json["kueue"]),
    ] {
        let violations = m["quota_violations"].as_u64().unwrap_or(0);
        let finished = m["jobs_finished"].as_u64().unwrap_or(0);
        if violations > 0 || finished < shape.jobs.len() as u64 {
            eprintln!(
                "bench-e2e kueue: FAILED: {name}: {violations} quota violations, {finished}/{} jobs finished",
                shape.jobs.len()
            );
            passed = false;
        }
    }
    Ok(passed)
}

/// `--phases chaos`: docs/reliability.md.
async fn run_chaos(cli: &Cli, shape: Arc<Shape>) -> Result<bool> {
    let Start {
        command,
        source,
        load,
    } = Start::take(cli)?;
    let kinds = cli
        .faults
        .iter()
        .map(|f| FaultKind::parse(f))
        .collect::<Result<Vec<_>>>()?;
    let plan = FaultPlan {
        kinds,
        interval: cli.fault_interval,
        restart_after: cli.restart_after,
        delay_chunk: cli.delay_chunk,
        delay_for: cli.delay_for,
    };
    let config = ChaosConfig {
        scheduler: SchedulerOptions {
            write_concurrency: cli.write_concurrency,
            status_interval: cli.status_interval,
            job_events: cli.job_events,
            cycle_batch: cli.cycle_batch,
            root_cpu: None,
        },
        runtime: RuntimeOptions {
            mark_running: !cli.no_running_status,
            class_runtimes: true,
            write_concurrency: cli.runtime_concurrency,
            retry_for: cli.retry_for,
        },
        plan: plan.clone(),
        timeout: cli.timeout,
        settle: cli.settle,
        bin_dir: cli.bin_dir.clone(),
        logs_dir: cli.logs_dir.clone().unwrap_or_else(|| {
            PathBuf::from("target/bench-chaos").join(format!("logs-{}", shape.scale))
        }),
    };
    eprintln!(
        "bench-e2e chaos: {} jobs, {} leaf quotas, {} parents; load average {:?}",
        shape.jobs.len(),
        shape.leaves.len(),
        shape.parents.len(),
        load.unwrap_or_default()
    );
    let (mut json, failures) = chaos::run(shape.clone(), &config).await?;
    json["benchmark"] =
        json!("koord-queue chaos run (issue 18): Kueue's baseline shape with faults");
    json["command"] = json!(command);
    json["source"] = source;
    json["settings"] = json!({
        "faults": chaos::plan_json(&plan),
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "retry_for": format!("{:?}", cli.retry_for),
        "settle": format!("{:?}", cli.settle),
        "scheduler": {
            "processes": 2,
            "write_concurrency": cli.write_concurrency,
            "status_interval": format!("{:?}", cli.status_interval),
            "job_events": cli.job_events,
            "cycle_batch": format!("{:?}", cli.cycle_batch),
            "enabled_kinds": "batchjob",
            "lease": { "name": chaos::LEASE, "duration": "15s", "renew_deadline": "10s", "retry_period": "2s", "fencing_policy": true },
        },
        "webhook": { "processes": 2, "behind": "a TCP balancer to the ready backends" },
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_start": load,
        },
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhooks and schedulers as separate processes",
    });
    let path = cli.out_dir.join(format!("chaos-{}.json", shape.scale));
    std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("{}", chaos_text(&json));
    println!("  results: {}", path.display());
    if failures.is_empty() {
        return Ok(true);
    }
    for f in &failures {
        eprintln!("bench-e2e chaos: FAILED: {f}");
    }
    Ok(false)
}

/// `--phases fairness`: docs/performance.md, "Fair sharing".
async fn run_fairness(cli: &Cli) -> Result<bool> {
    let config = FairnessConfig {
        submit_for: cli.submit_for,
        warmup: cli.warmup,
        backlog: cli.backlog,
        ..FairnessConfig::default()
    };
    config.validate()?;
    let modes = fairness::plan::parse_modes(&cli.fair_sharing)?;
    let Start {
        command,
        source,
        load,
    } = Start::take(cli)?;
    eprintln!(
        "bench-e2e fairness: fair sharing {}; {} children under {} CPU; load average {:?}",
        cli.fair_sharing,
        config.children.len(),
        config.parent_cpu,
        load.unwrap_or_default()
    );
    let scheduler = SchedulerOptions {
        write_concurrency: cli.write_concurrency,
        status_interval: cli.status_interval,
        job_events: cli.job_events,
        cycle_batch: cli.cycle_batch,
        root_cpu: None,
    };
    let runtime = RuntimeOptions {
        mark_running: !cli.no_running_status,
        class_runtimes: true,
        write_concurrency: cli.runtime_concurrency,
        retry_for: Duration::ZERO,
    };
    let (records, failures) = fairness::run_all(&config, &modes, &scheduler, &runtime).await?;
    let json = json!({
        "benchmark": "koord-queue fair sharing (issue 19): three sibling quotas with weights 1:1:2 under one parent, each submitting more than the parent holds",
        "command": command,
        "source": source,
        "config": fairness::report::config_json(&config),
        "settings": {
            "runtime_concurrency": cli.runtime_concurrency,
            "runtime_marks_running": !cli.no_running_status,
            "scheduler": {
                "write_concurrency": cli.write_concurrency,
                "status_interval": format!("{:?}", cli.status_interval),
                "job_events": cli.job_events,
                "cycle_batch": format!("{:?}", cli.cycle_batch),
                "root_capacity_cpu": config.parent_cpu,
            },
        },
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_start": load,
        },
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhook and scheduler in this process; a fresh control plane per run",
        "passed": failures.is_empty(),
        "failures": failures,
        "runs": records.iter().map(|r| fairness::report::run_json(&config, r)).collect::<Vec<_>>(),
    });
    let json_path = cli.out_dir.join("fairness.json");
    let svg_path = cli.out_dir.join("fairness.svg");
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    std::fs::write(&svg_path, fairness::report::svg(&config, &records))
        .with_context(|| format!("writing {}", svg_path.display()))?;
    print!("{}", fairness::report::text(&config, &records));
    println!(
        "  results: {}  plot: {}",
        json_path.display(),
        svg_path.display()
    );
    if failures.is_empty() {
        return Ok(true);
    }
    for f in &failures {
        eprintln!("bench-e2e fairness: FAILED: {f}");
    }
    Ok(false)
}

/// The chaos run's summary for the terminal.
fn chaos_text(json: &serde_json::Value) -> String {
    let checks = &json["checks"];
    format!(
        "chaos {}: {} in {} s (jobs done at {} s); faults {} {}\n  quota violations: running jobs {}, QueueUnits {}; double releases {}; finished {}/{}; at the end QueueUnits hold {} m, the leader counts {}\n  relists {} (dropped records {}); create failures {}; passed: {}",
        json["scale"],
        json["jobs"],
        json["wall_seconds"],
        json["jobs_done_at_s"],
        json["faults"]["injected"],
        json["faults"]["by_kind"],
        checks["quota_violations"]["running_jobs"],
        checks["quota_violations"]["queue_units_beyond_finished_jobs"],
        checks["double_releases"]["count"],
        checks["finished"]["jobs_finished"],
        json["jobs"],
        checks["quota_at_end"]["queue_units_holding_cpu_m"],
        checks["quota_at_end"]["leader_quota_used_sum"],
        json["schedulers"]["watch_relists_total"],
        json["schedulers"]["relist_dropped_records_total"],
        json["admission"]["create_failures"]["attempts_by_cause"],
        json["passed"],
    )
}

/// What every mode records before its first phase: the command line, the
/// source revision (taken now: the tree may move on during a long run) and
/// the load average; the output directory exists and TLS is set up.
struct Start {
    command: String,
    source: serde_json::Value,
    load: Option<[f64; 3]>,
}

impl Start {
    fn take(cli: &Cli) -> Result<Self> {
        std::fs::create_dir_all(&cli.out_dir)
            .with_context(|| format!("creating {}", cli.out_dir.display()))?;
        koord_queue_certs::install_crypto_provider();
        Ok(Self {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            source: source_revision(),
            load: proc_stats::load_average(),
        })
    }
}

/// The commit the benchmark was built from and whether the tree had changes.
fn source_revision() -> serde_json::Value {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let changed =
        git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| s.lines().count());
    json!({ "commit": git(&["rev-parse", "HEAD"]), "modified_files": changed })
}

/// A JSON object from the command line.
fn parse_json_object(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(_) => Err("expected a JSON object such as {\"preemption\":{...}}".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}
