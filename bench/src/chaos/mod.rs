//! The chaos run (issue 18, docs/reliability.md): Kueue's baseline shape as
//! the `run` phase plays it — paced arrivals, class runtimes, the quota
//! tree with its real limits — on a fresh tier 1 control plane, with the
//! components as separate processes (two schedulers on one Lease, each
//! through its own proxy; two webhooks behind a balancer) and faults
//! injected on a schedule while the jobs flow ([`faults`]). Checked from
//! outside, all the time: the CPU of running jobs and of what the
//! QueueUnits hold never above a quota's max (the job runtime and the
//! QueueUnit checker of the other phases), no unit released twice without
//! being sent back in between, every job finished, and at the end nothing
//! held — by the QueueUnits nor in the leader's own figures.

mod checks;
mod fault_report;
pub mod faults;
pub mod fleet;
pub mod monitor;
mod processes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use koord_queue_api::keys;
use koord_queue_tests::{ControlPlane, Tier, install};
use serde_json::{Value, json};
use tokio::sync::{Mutex as AsyncMutex, watch};

use self::checks::{UnitsNow, leader_quota_used, runtime_double_releases, units_now};
pub use self::fault_report::plan_json;
use self::fault_report::{fault_list, round};
use self::faults::{FaultPlan, FaultRecord};
use self::fleet::Fleet;
use self::monitor::Monitor;
use self::processes::{start_schedulers, start_webhooks};
use super::admin_scrape;
use super::api_stats::{self, ApiStats, Component};
use super::checker::Checker;
use super::member;
use super::phase::{self, JobFlow, PhaseSpec};
use super::report;
use super::runner::RuntimeOptions;
use super::scheduler_settings::SchedulerOptions;
use super::shape::Shape;

/// The schedulers' Lease (and the release name of the fencing policy).
pub const LEASE: &str = "bench-scheduler";

/// Settings of the chaos run.
#[derive(Clone, Debug)]
pub struct ChaosConfig {
    /// The schedulers' flags (the root capacity comes from the shape).
    pub scheduler: SchedulerOptions,
    /// The job runtime's (its retries should outlast an API outage).
    pub runtime: RuntimeOptions,
    /// The faults.
    pub plan: FaultPlan,
    /// The run fails when its jobs have not all finished by then.
    pub timeout: Duration,
    /// How long the quota may take to read 0 everywhere once every job
    /// finished.
    pub settle: Duration,
    /// Where the component binaries are (default: next to this binary).
    pub bin_dir: Option<PathBuf>,
    /// Where every process's logs are copied at the end.
    pub logs_dir: PathBuf,
}

/// Runs the chaos phase and returns its JSON result and the list of what
/// failed (empty: passed).
pub async fn run(shape: Arc<Shape>, config: &ChaosConfig) -> Result<(Value, Vec<String>)> {
    let scheduler_bin = fleet::binary(config.bin_dir.as_deref(), "koord-queue-scheduler")?;
    let webhook_bin = fleet::binary(config.bin_dir.as_deref(), "koord-queue-webhook")?;
    eprintln!("[chaos] starting a tier 1 control plane");
    let cp = Arc::new(ControlPlane::start(Tier::One).await?);
    let stats = Arc::new(ApiStats::default());
    let admin_path = cp.kubeconfig().to_path_buf();
    let admin = api_stats::client(&admin_path, stats.clone(), Component::Admin).await?;
    // The run phase's jobs, quotas and checks; the components are the
    // chaos run's own (replicated processes), and faults come on top.
    let spec = PhaseSpec::RUN;
    phase::prepare(&admin, &shape, &spec, None).await?;
    install::fencing_policy(&cp, keys::SYSTEM_NAMESPACE, LEASE).await?;

    eprintln!("[chaos] starting 2 webhooks, the balancer and 2 schedulers (processes)");
    let (webhooks, balancer) = start_webhooks(&cp, &admin, &webhook_bin).await?;
    let balancer = Arc::new(balancer);
    let mut scheduler_options = config.scheduler.clone();
    scheduler_options.root_cpu = spec.limits_bind().then_some(shape.root_cpu);
    let (schedulers, proxies) =
        start_schedulers(&cp, &admin, &shape, &scheduler_options, &scheduler_bin).await?;
    let fleet = Arc::new(AsyncMutex::new(Fleet {
        schedulers,
        proxies,
        webhooks,
    }));

    let (creator, runner_client) = phase::job_clients(&cp, &admin_path, &stats).await?;

    let load_before = koord_queue_tests::proc_stats::load_average();
    let n = shape.jobs.len();
    eprintln!(
        "[chaos] {n} jobs; faults every {:?}: {}; load average {:?}",
        config.plan.interval,
        config
            .plan
            .kinds
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", "),
        load_before.unwrap_or_default()
    );
    let mut flow = JobFlow::start(
        &spec,
        shape.clone(),
        runner_client.clone(),
        config.runtime.clone(),
    );
    let runner = flow.runner().clone();
    let t0 = runner.t0();
    let checker = Checker::start(
        shape.clone(),
        runner_client.clone(),
        t0,
        spec.limits_bind(),
        Some(runner.clone()),
    );
    let (monitor, monitor_task) =
        Monitor::start(fleet.clone(), admin.clone(), t0, Duration::from_secs(1));
    // Paced arrivals: no create concurrency applies.
    flow.arrive(&spec, creator, 0, super::runner::PACED_IN_FLIGHT, None)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let fault_task = tokio::spawn(faults::run(
        faults::Target {
            cp: cp.clone(),
            fleet: fleet.clone(),
            monitor: monitor.clone(),
            balancer: balancer.clone(),
            admin: admin.clone(),
            t0,
        },
        config.plan.clone(),
        stop_rx,
    ));

    let mut failures = Vec::new();
    let mut jobs_finished_at: Option<Instant> = None;
    let started = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        match flow.creation_ended().await {
            Some(Ok(Err(e))) => failures.push(format!("job creation failed: {e:#}")),
            Some(Err(e)) => failures.push(format!("the job creation task failed: {e}")),
            Some(Ok(Ok(()))) | None => {}
        }
        let finished = runner.finished();
        let succeeded = checker.succeeded();
        if !flow.creating() && finished >= n {
            // Every job ran to its end: its unit must follow, within the
            // settle time.
            let since = *jobs_finished_at.get_or_insert_with(Instant::now);
            if succeeded >= n || since.elapsed() > config.settle {
                break;
            }
        }
        if !flow.creating() && !failures.is_empty() {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            flow.print_progress("chaos", succeeded);
        }
        if started.elapsed() > config.timeout {
            failures.push(format!(
                "not every job finished within {:?}: finished {finished}/{n}, units succeeded {succeeded}/{n}",
                config.timeout
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let jobs_done_at = runner.now();
    eprintln!("[chaos] {jobs_done_at:>6.1}s jobs done; stopping the faults");
    let _ = stop_tx.send(true);
    let fault_records: Vec<FaultRecord> = fault_task.await.unwrap_or_default();

    // Once the faults are healed, nothing may stay held.
    let settle_deadline = Instant::now() + config.settle;
    let (leader_view, settled_at) = loop {
        let units_cpu = checker.usage().map_or(0, |u| u.root_now());
        let view = leader_quota_used(&fleet).await;
        if units_cpu == 0 && view.as_ref().is_some_and(|(_, used)| *used == 0.0) {
            break (view, Some(runner.now()));
        }
        if Instant::now() > settle_deadline {
            break (view, None);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let UnitsNow {
        holding: units_holding,
        holding_cpu: units_holding_cpu,
        not_done: units_not_succeed,
        not_done_examples,
    } = units_now(&admin, &shape, &runner).await?;
    // Final figures of every replica still running.
    let mut exited = Vec::new();
    {
        let mut guard = fleet.lock().await;
        let f = &mut *guard;
        for m in f.schedulers.iter_mut().chain(f.webhooks.iter_mut()) {
            if m.check_alive().is_err() {
                exited.push(m.name.clone());
                continue;
            }
            if let Ok(text) = admin_scrape::scrape(m.admin).await {
                monitor.record(&m.name, m.incarnation(), &text);
            }
        }
    }
    monitor.read_apiserver(&admin).await;
    monitor_task.abort();
    runner.stop();
    checker.stop();

    let timelines = runner.timelines();
    let (wall_seconds, creation_seconds) = flow.times(checker.last_succeeded_at());

    // The checks.
    let running_usage = runner.running_usage();
    let running_recorded = running_usage.as_ref().map_or(0, |u| u.violation_count);
    let (running_examples, running_violations) = runner.violations_beyond_completed();
    let unit_usage = checker.usage();
    let unit_recorded = unit_usage.as_ref().map_or(0, |u| u.violation_count);
    let (unit_examples, unit_violations) = checker.violation_examples();
    if running_violations > 0 {
        failures.push(format!(
            "{running_violations} quota violations by the CPU of running jobs (beyond jobs whose completion was written)"
        ));
    }
    if unit_violations > 0 {
        failures.push(format!(
            "{unit_violations} quota violations by what QueueUnits hold (beyond finished jobs' CPU)"
        ));
    }
    let doubles = checker.double_releases();
    let runtime_doubles = runtime_double_releases(&timelines);
    if !doubles.is_empty() {
        failures.push(format!(
            "{} double releases (a unit released again without being sent back)",
            doubles.len()
        ));
    }
    if runtime_doubles > 0 {
        failures.push(format!(
            "{runtime_doubles} jobs released twice without a suspension between (job runtime)"
        ));
    }
    let finished = runner.finished();
    let succeeded = checker.succeeded();
    let unfinished: Vec<Value> = timelines
        .iter()
        .enumerate()
        .filter(|(_, j)| j.finished.is_none())
        .take(10)
        .map(|(i, j)| {
            json!({
                "job": format!("{}/{}", shape.leaves[shape.jobs[i].leaf].namespace, shape.jobs[i].name),
                "created_s": j.created, "releases_s": j.releases, "suspensions_s": j.suspensions,
                "transitions": j.transitions,
            })
        })
        .collect();
    if finished < n || succeeded < n || units_not_succeed > 0 {
        failures.push(format!(
            "unfinished: {finished}/{n} jobs finished, {succeeded}/{n} units seen Succeed, {units_not_succeed} units not Succeed at the end"
        ));
    }
    let leader_used = leader_view.as_ref().map(|(_, u)| *u);
    if units_holding > 0 || units_holding_cpu != 0 {
        failures.push(format!(
            "leaked quota: {units_holding} QueueUnits still hold {units_holding_cpu} m CPU at the end"
        ));
    }
    match &leader_view {
        Some((_, used)) if *used == 0.0 => {}
        Some((name, used)) => failures.push(format!(
            "leaked quota: the leader {name} still counts {used} used (quota_used summed) {:?} after the last job",
            config.settle
        )),
        None => failures.push("no scheduler led at the end".to_string()),
    }
    for f in &fault_records {
        if let Some(e) = &f.error {
            failures.push(format!("fault {} at {:.1}s: {e}", f.kind.name(), f.at_s));
        }
    }
    for name in &exited {
        failures.push(format!("{name} exited by itself (see its log)"));
    }

    // Figures.
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in fault_records.iter().filter(|f| f.injected) {
        *by_kind.entry(f.kind.name()).or_default() += 1;
    }
    let leadership = monitor.leadership();
    let end = runner.now();
    let fault_json = fault_list(&fault_records, &leadership, end);
    let scheduler_totals = monitor.totals("scheduler");
    let webhook_totals = monitor.totals("webhook");
    let relists = scheduler_totals
        .get(monitor::SCHEDULER_COUNTERS[0])
        .copied()
        .unwrap_or(0.0);
    let dropped = scheduler_totals
        .get(monitor::SCHEDULER_COUNTERS[1])
        .copied()
        .unwrap_or(0.0);
    let (samples, two_leaders, no_leader) = monitor.leader_samples();
    let create_failures = runner.create_failures();
    let (runtime_errors, runtime_last_error) = runner.write_errors();
    let ttr: Vec<Value> = report::time_to_release(&shape, &timelines)
        .into_iter()
        .map(|(class, last, first)| json!({ "class": class, "last_release": last, "first_release": first }))
        .collect();
    let incarnations: BTreeMap<String, u32> = {
        let f = fleet.lock().await;
        f.schedulers
            .iter()
            .chain(&f.webhooks)
            .map(|m| (m.name.clone(), m.incarnation()))
            .collect()
    };
    let checker_lists = checker.lists();
    let json = json!({
        "scale": shape.scale,
        "jobs": n,
        "shape": {
            "leaf_quotas": shape.leaves.len(), "parents": shape.parents.len(), "root_cpu": shape.root_cpu,
            "classes": shape.classes,
        },
        "passed": failures.is_empty(),
        "failures": failures.clone(),
        "wall_seconds": round(wall_seconds, 1),
        "creation_seconds": round(creation_seconds, 1),
        "jobs_done_at_s": round(jobs_done_at, 1),
        "quota_zero_at_s": settled_at.map(|t| round(t, 1)),
        "load_average_at_start": load_before,
        "faults": {
            "injected": by_kind.values().sum::<usize>(),
            "by_kind": by_kind,
            "not_injected": fault_records.iter().filter(|f| !f.injected).count(),
            "list": fault_json,
        },
        "checks": {
            "quota_violations": {
                "running_jobs": running_violations,
                "running_jobs_recorded": running_recorded,
                "queue_units_beyond_finished_jobs": unit_violations,
                "queue_units_recorded": unit_recorded,
                "running_examples": running_examples,
                "running_recorded_examples": running_usage.as_ref().map(|u| u.violations.clone()).unwrap_or_default(),
                "queue_unit_examples": unit_examples,
            },
            "double_releases": {
                "count": doubles.len(),
                "examples": doubles.iter().take(20).collect::<Vec<_>>(),
                "runtime_two_releases_without_suspension": runtime_doubles,
                "releases_seen": checker.releases(),
                "queue_unit_watch_relists": checker_lists.len().saturating_sub(1),
            },
            "finished": {
                "jobs_finished": finished, "units_succeeded": succeeded,
                "units_not_succeed_at_end": units_not_succeed, "of": n,
                "units_not_succeed_examples": not_done_examples,
                "unfinished_examples": unfinished,
            },
            "quota_at_end": {
                "queue_units_holding": units_holding,
                "queue_units_holding_cpu_m": units_holding_cpu,
                "leader": leader_view.as_ref().map(|(name, _)| name.clone()),
                "leader_quota_used_sum": leader_used,
            },
        },
        "schedulers": {
            "watch_relists_total": relists,
            "relist_dropped_records_total": dropped,
            "totals": scheduler_totals,
            "per_incarnation": monitor.per_incarnation(),
            "starts": incarnations,
            "leadership_changes": leadership.len(),
            "leadership": leadership,
            "leader_samples": { "taken": samples, "two_leaders": two_leaders, "no_leader": no_leader },
            "fenced_writes_refused_by_the_api_server": monitor.policy_denials(),
        },
        "webhooks": {
            "totals": webhook_totals,
            "balancer_connections": balancer.connections(),
            "balancer_unserved": balancer.unserved(),
        },
        "admission": {
            "create_failures": create_failures,
        },
        "runtime_write_errors": { "count": runtime_errors, "last": runtime_last_error },
        "time_to_release": ttr,
        "requests_by_client": stats.snapshot().iter().map(|((c, verb, res), s)| {
            json!({ "client": c.name(), "verb": verb, "resource": res, "count": s.count, "errors": s.errors })
        }).collect::<Vec<_>>(),
    });

    // Logs, then everything down.
    fleet.lock().await.kill_all();
    match member::copy_logs(cp.dir(), &config.logs_dir) {
        Ok(count) => eprintln!(
            "[chaos] {count} process logs copied to {}",
            config.logs_dir.display()
        ),
        Err(e) => eprintln!("[chaos] copying the logs failed: {e:#}"),
    }
    drop(balancer);
    cp.stop().await;
    Ok((json, failures))
}
