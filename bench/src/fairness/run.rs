//! One run of the fair-sharing scenario on a fresh tier 1 control plane:
//! the benchmark's quota tree, webhook and scheduler (in this process, as
//! in the `run` phase), the job runtime stand-in and the QueueUnit checker;
//! each tenant keeps a backlog of waiting jobs for the submission time
//! while each child's running CPU is sampled; then the jobs left finish.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use koord_queue_api::{ElasticQuota, keys};
use koord_queue_tests::{ControlPlane, Tier, proc_stats};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::plan::{FairnessConfig, PARENT};
use super::shares::Sample;
use crate::admin_scrape::{self, Metrics};
use crate::api_stats::{self, ApiStats, Component};
use crate::checker::Checker;
use crate::components::Components;
use crate::phase::{self, PhaseSpec};
use crate::quota::Violation;
use crate::runner::{self, Runner, RuntimeOptions};
use crate::scheduler_settings::SchedulerOptions;
use crate::shape::Shape;

/// What one run saw.
#[derive(Debug)]
pub struct RunRecord {
    /// Fair sharing switched on at the parent.
    pub fair_sharing: bool,
    /// Load average when the run started.
    pub load_before: Option<[f64; 3]>,
    /// Every sample, from the first create to the end of the submissions.
    pub samples: Vec<Sample>,
    /// Seconds (since the first create) when the tenants stopped.
    pub submitted_until: f64,
    /// When the last job finished.
    pub wall_seconds: f64,
    /// Jobs created, per child.
    pub created: Vec<usize>,
    /// Jobs finished, per child.
    pub finished: Vec<usize>,
    /// Jobs finished within the steady window, per child.
    pub finished_in_window: Vec<usize>,
    /// Suspensions after a release (reclaims, preemptions) the job runtime
    /// saw, per child.
    pub sent_back: Vec<usize>,
    /// Whether a child ran out of planned jobs (its backlog then shrank).
    pub plan_exhausted: Vec<bool>,
    /// Units that reached Succeed.
    pub units_succeeded: usize,
    /// Every created job finished and its unit reached Succeed in time.
    pub drained: bool,
    /// Quota violations by the CPU of running jobs (job runtime's check).
    pub running_violations: usize,
    /// Quota violations by what QueueUnits hold beyond finished jobs' CPU.
    pub unit_violations: usize,
    /// Examples of both.
    pub violation_examples: Vec<Violation>,
    /// Entries of units into each phase.
    pub phase_entries: BTreeMap<String, usize>,
    /// Preemptions and admission attempts per the scheduler's `/metrics`.
    pub scheduler_metrics: Metrics,
    /// Failed job status writes of the runtime, and the last error.
    pub runtime_errors: (u64, Option<String>),
}

/// Sets what `phase::prepare` does not: the children's mins and weights,
/// and the parent's fair-sharing switch (`"false"` spelled out for off, so
/// the run stays the baseline whatever the default becomes).
async fn set_quotas(admin: &kube::Client, config: &FairnessConfig, fair: bool) -> Result<()> {
    let quotas: Api<ElasticQuota> = Api::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE);
    let params = PatchParams::default();
    let switch = if fair { "true" } else { "false" };
    let parent =
        json!({ "metadata": { "annotations": { keys::FAIR_SHARING_ANNOTATION: switch } } });
    quotas
        .patch(PARENT, &params, &Patch::Merge(&parent))
        .await
        .context("annotating the parent quota")?;
    for child in &config.children {
        let patch = json!({
            "metadata": { "annotations": { keys::FAIR_SHARE_WEIGHT_ANNOTATION: child.weight.to_string() } },
            "spec": { "min": { "cpu": child.min_cpu.to_string() } },
        });
        quotas
            .patch(&child.name, &params, &Patch::Merge(&patch))
            .await
            .with_context(|| format!("setting quota {}", child.name))?;
    }
    Ok(())
}

/// Keeps `backlog` of `jobs` (one child's, in order) created and not yet
/// released until `until` seconds, publishing how many wait in `waiting`.
/// Returns how many it created and whether it ran out of jobs.
async fn keep_backlog(
    shape: Arc<Shape>,
    runner: Arc<Runner>,
    client: kube::Client,
    jobs: Vec<usize>,
    backlog: usize,
    until: f64,
    waiting: Arc<AtomicUsize>,
) -> Result<(usize, bool)> {
    let mut pending: VecDeque<usize> = VecDeque::new();
    let mut next = 0;
    while runner.now() < until {
        pending.retain(|&i| {
            runner
                .timeline(i)
                .is_some_and(|t| t.releases.is_empty() && t.finished.is_none())
        });
        let want = backlog.saturating_sub(pending.len());
        let batch = &jobs[next..(next + want).min(jobs.len())];
        futures::stream::iter(batch.iter().copied())
            .map(|i| {
                let (shape, runner, client) = (&shape, &runner, &client);
                async move { runner::create_job(shape, runner, client, i, false).await }
            })
            .buffer_unordered(8)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        next += batch.len();
        pending.extend(batch);
        waiting.store(pending.len(), Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((next, next == jobs.len()))
}

/// Runs the scenario once (`fair`: fair sharing on).
pub async fn run(
    config: &FairnessConfig,
    shape: Arc<Shape>,
    fair: bool,
    scheduler: &SchedulerOptions,
    runtime: &RuntimeOptions,
) -> Result<RunRecord> {
    let name = format!("fairness {}", if fair { "on" } else { "off" });
    eprintln!("[{name}] starting a tier 1 control plane");
    let cp = ControlPlane::start(Tier::One).await?;
    let stats = Arc::new(ApiStats::default());
    let admin_path = cp.kubeconfig().to_path_buf();
    let admin = api_stats::client(&admin_path, stats.clone(), Component::Admin).await?;
    phase::prepare(&admin, &shape, &PhaseSpec::RUN, config.queue_spec.as_ref()).await?;
    set_quotas(&admin, config, fair).await?;
    let mut options = scheduler.clone();
    options.root_cpu = Some(shape.root_cpu);
    eprintln!("[{name}] starting the webhook and the scheduler");
    let components = Components::start(&cp, &shape, &options, stats.clone()).await?;

    let (creator, runner_client) = phase::job_clients(&cp, &admin_path, &stats).await?;
    let load_before = proc_stats::load_average();
    eprintln!(
        "[{name}] tenants keep {} waiting jobs each for {:?}; load average {:?}",
        config.backlog,
        config.submit_for,
        load_before.unwrap_or_default()
    );

    let mut runtime = runtime.clone();
    runtime.class_runtimes = true;
    let runner = Runner::start(shape.clone(), runner_client.clone(), runtime, true);
    let checker = Checker::start(
        shape.clone(),
        runner_client,
        runner.t0(),
        true,
        Some(runner.clone()),
    );
    let children = shape.leaves.len();
    let until = config.submit_for.as_secs_f64();
    let waiting: Vec<Arc<AtomicUsize>> = (0..children)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let mut tenants = Vec::new();
    let mut results: Vec<Option<(usize, bool)>> = vec![None; children];
    for (child, count) in waiting.iter().enumerate() {
        let jobs: Vec<usize> = (0..shape.jobs.len())
            .filter(|&i| shape.jobs[i].leaf == child)
            .collect();
        tenants.push(Some(tokio::spawn(keep_backlog(
            shape.clone(),
            runner.clone(),
            creator.clone(),
            jobs,
            config.backlog,
            until,
            count.clone(),
        ))));
    }

    // Sample every child's running CPU until the tenants stop.
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(config.sample_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_progress = Instant::now();
    loop {
        tick.tick().await;
        let t = runner.now();
        if t > until {
            break;
        }
        let usage = runner
            .running_usage()
            .context("the job runtime's accounting")?;
        let sample = Sample {
            t,
            used_m: (0..children).map(|l| usage.leaf_now(l)).collect(),
            waiting: waiting.iter().map(|w| w.load(Ordering::Relaxed)).collect(),
        };
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            eprintln!(
                "[{name}] {t:>6.1}s running CPU {:?} waiting {:?} finished {}",
                sample
                    .used_m
                    .iter()
                    .map(|m| *m as f64 / 1000.0)
                    .collect::<Vec<_>>(),
                sample.waiting,
                runner.finished()
            );
        }
        samples.push(sample);
        // A tenant that fails stops the run at once.
        for (task, result) in tenants.iter_mut().zip(&mut results) {
            if task.as_ref().is_some_and(|t| t.is_finished())
                && let Some(task) = task.take()
            {
                *result = Some(task.await.context("a tenant task failed")??);
            }
        }
    }
    let submitted_until = runner.now();
    let mut created = Vec::new();
    let mut plan_exhausted = Vec::new();
    for (task, result) in tenants.into_iter().zip(results) {
        let (n, exhausted) = match (task, result) {
            (_, Some(done)) => done,
            (Some(task), None) => task.await.context("a tenant task failed")??,
            (None, None) => (0, false),
        };
        created.push(n);
        plan_exhausted.push(exhausted);
    }
    let total: usize = created.iter().sum();
    eprintln!("[{name}] {submitted_until:>6.1}s tenants stopped; {total} jobs created; draining");

    let deadline = Instant::now() + config.drain;
    let drained = loop {
        if runner.finished() >= total && checker.succeeded() >= total {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let mut scheduler_metrics = Metrics::new();
    if let Ok(text) = admin_scrape::scrape(components.scheduler_admin).await {
        for (metric, label) in [
            ("koord_queue_scheduler_preemptions_total", "reason"),
            ("koord_queue_scheduler_admission_attempts_total", "result"),
        ] {
            admin_scrape::add_by_label(&mut scheduler_metrics, &text, metric, label);
        }
    }
    let timelines = runner.timelines();
    let window = (config.warmup.as_secs_f64(), submitted_until);
    let mut finished = vec![0; children];
    let mut finished_in_window = vec![0; children];
    let mut sent_back = vec![0; children];
    for (i, j) in timelines.iter().enumerate() {
        let child = shape.jobs[i].leaf;
        sent_back[child] += j.suspensions.len();
        if let Some(t) = j.finished {
            finished[child] += 1;
            if t >= window.0 && t <= window.1 {
                finished_in_window[child] += 1;
            }
        }
    }
    let wall_seconds = timelines
        .iter()
        .filter_map(|j| j.finished)
        .fold(submitted_until, f64::max);
    let running = runner.running_usage();
    let (mut violation_examples, unit_violations) = checker.violation_examples();
    if let Some(u) = &running {
        violation_examples.extend(u.violations.iter().cloned());
    }
    let record = RunRecord {
        fair_sharing: fair,
        load_before,
        samples,
        submitted_until,
        wall_seconds,
        created,
        finished,
        finished_in_window,
        sent_back,
        plan_exhausted,
        units_succeeded: checker.succeeded(),
        drained,
        running_violations: running.as_ref().map_or(0, |u| u.violation_count),
        unit_violations,
        violation_examples,
        phase_entries: checker.phase_entries(),
        scheduler_metrics,
        runtime_errors: runner.write_errors(),
    };
    runner.stop();
    checker.stop();
    components.stop().await;
    cp.stop().await;
    drop(cp);
    eprintln!(
        "[{name}] done: {} jobs finished of {total} in {:.1}s",
        record.finished.iter().sum::<usize>(),
        record.wall_seconds
    );
    Ok(record)
}
