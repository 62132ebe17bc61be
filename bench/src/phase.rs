//! One phase of the benchmark on a fresh tier 1 control plane:
//!
//! - `run`: Kueue's baseline — paced arrivals, class runtimes, the quota
//!   tree with its real limits, the webhook and the scheduler;
//! - `saturated`: the same jobs created as fast as the API allows, completed
//!   at once, under quotas that never bind — the scheduler's throughput;
//! - `floor`: the same API work done by a null scheduler (no webhook, no
//!   scheduling logic) — what the API server allows;
//! - `kueue`: the `run` phase's jobs, runtimes and checks with Kueue
//!   v0.17.0 queueing them instead of Koord-Queue ([`super::kueue`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_queue_api::keys;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::admin_scrape::{self, Metrics};
use super::api_stats::{self, ApiStats, Component, ServerRequests};
use super::checker::Checker;
use super::components::{Components, Placement, SchedulerOptions};
use super::floor::{self, FloorClients, FloorWrites};
use super::kueue::{self, Kueue, workloads::WorkloadChecker};
pub use super::phase_result::PhaseResult;
use super::quota::{Usage, Violation};
use super::runner::{self, Runner, RuntimeOptions};
use super::shape::{CLASSES, LEAF_MAX_CPU, LEAF_MIN_CPU, Shape};
use koord_queue_tests::kubeconfig::Credentials;
use koord_queue_tests::proc_stats::{self, CpuSnapshot};
use koord_queue_tests::{ControlPlane, Tier, e2e, fixtures};

/// The three phases.
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
    pub logs_dir: Option<std::path::PathBuf>,
}

async fn create_ignoring_conflict<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates the PriorityClasses, the creators' RBAC, the quota tree and the
/// namespaces.
pub async fn prepare(
    admin: &kube::Client,
    shape: &Shape,
    kind: PhaseKind,
    queue_spec: Option<&serde_json::Value>,
) -> Result<()> {
    if kind != PhaseKind::Kueue {
        fixtures::apply_koord_queue_crds(admin).await?;
        fixtures::ensure_namespace(admin, keys::SYSTEM_NAMESPACE).await?;
    }
    let classes: Api<PriorityClass> = Api::all(admin.clone());
    for class in &CLASSES {
        let pc: PriorityClass = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": { "name": class.name }, "value": class.priority,
            "description": "koord-queue benchmark class",
        }))?;
        create_ignoring_conflict(&classes, &pc).await?;
    }
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": "bench-jobs" },
        "rules": [{ "apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list"] }],
    }))?;
    create_ignoring_conflict(&Api::all(admin.clone()), &role).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": "bench-user-jobs" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-jobs" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": BENCH_USER }],
    }))?;
    create_ignoring_conflict(&Api::all(admin.clone()), &binding).await?;

    // Kueue's queues are created once its webhooks serve (Kueue::start).
    if !matches!(kind, PhaseKind::Floor | PhaseKind::Kueue) {
        // Saturated: the same tree, limits that never bind.
        let unbound = "1000000";
        for parent in &shape.parents {
            let cpu = parent.cpu.to_string();
            let max = if kind == PhaseKind::Run {
                cpu.as_str()
            } else {
                unbound
            };
            e2e::create_quota(admin, &parent.name, None, true, &cpu, max, None).await?;
        }
        let (min, max) = (LEAF_MIN_CPU.to_string(), LEAF_MAX_CPU.to_string());
        for leaf in &shape.leaves {
            let max = if kind == PhaseKind::Run {
                max.as_str()
            } else {
                unbound
            };
            let parent = &shape.parents[leaf.parent].name;
            e2e::create_quota_serving(
                admin,
                &leaf.name,
                Some(parent),
                false,
                (&min, max),
                None,
                &[&leaf.namespace],
            )
            .await?;
        }
        if let Some(extra) = queue_spec {
            create_leaf_queues(admin, shape, extra).await?;
        }
    }
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for leaf in &shape.leaves {
        let labels = if matches!(kind, PhaseKind::Floor | PhaseKind::Kueue) {
            json!({})
        } else {
            json!({ keys::ENABLED_NAMESPACE_LABEL: "true" })
        };
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": leaf.namespace, "labels": labels },
        }))?;
        create_ignoring_conflict(&namespaces, &ns).await?;
    }
    Ok(())
}

/// Creates each leaf's Queue (the scheduler would create it with the
/// default spec; one that exists and that it did not create is left as it
/// is), its spec `Priority` merged with `extra`.
async fn create_leaf_queues(
    admin: &kube::Client,
    shape: &Shape,
    extra: &serde_json::Value,
) -> Result<()> {
    let queues: Api<koord_queue_api::Queue> =
        Api::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE);
    for leaf in &shape.leaves {
        let mut spec = json!({ "queuePolicy": "Priority" });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let queue = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
            "metadata": { "name": leaf.name, "namespace": keys::SYSTEM_NAMESPACE },
            "spec": spec,
        }))
        .with_context(|| format!("--queue-spec does not make a Queue spec: {extra}"))?;
        create_ignoring_conflict(&queues, &queue).await?;
    }
    Ok(())
}

/// The clients of the job creator (the ordinary user [`BENCH_USER`]) and of
/// the job runtime (admin), both counted in `stats`.
pub async fn job_clients(
    cp: &ControlPlane,
    admin_path: &std::path::Path,
    stats: &Arc<ApiStats>,
) -> Result<(kube::Client, kube::Client)> {
    let user = cp.pki().client_cert(BENCH_USER, &[])?;
    let user_path = cp.write_kubeconfig(
        "bench-user",
        BENCH_USER,
        &Credentials::Certificate {
            cert_pem: user.cert_pem,
            key_pem: user.key_pem,
        },
    )?;
    let creator = api_stats::client(&user_path, stats.clone(), Component::Creator).await?;
    let runner = api_stats::client(admin_path, stats.clone(), Component::Runner).await?;
    Ok((creator, runner))
}

/// The ordinary user that creates the jobs.
pub const BENCH_USER: &str = "bench-user";

/// The queue system of a phase.
enum System {
    /// None (the floor).
    Null,
    /// Koord-Queue's webhook and scheduler in this process.
    Ours(Box<Components>),
    /// Kueue's manager process.
    Kueue(Kueue),
}

/// The queue system's own record of held quota, checked against the maxima.
enum HeldWatch {
    /// Koord-Queue's QueueUnits.
    Units(Arc<Checker>),
    /// Kueue's Workloads.
    Workloads(Arc<WorkloadChecker>),
}

impl HeldWatch {
    /// Units that succeeded, or Workloads that finished.
    fn succeeded(&self) -> usize {
        match self {
            Self::Units(c) => c.succeeded(),
            Self::Workloads(c) => c.finished(),
        }
    }

    fn last_succeeded_at(&self) -> f64 {
        match self {
            Self::Units(c) => c.last_succeeded_at(),
            Self::Workloads(c) => c.last_finished_at(),
        }
    }

    fn usage(&self) -> Option<Usage> {
        match self {
            Self::Units(c) => c.usage(),
            Self::Workloads(c) => c.usage(),
        }
    }

    fn violation_examples(&self) -> (Vec<Violation>, usize) {
        match self {
            Self::Units(c) => c.violation_examples(),
            Self::Workloads(c) => c.violation_examples(),
        }
    }

    /// Preemptions seen on QueueUnits (`None` for Kueue's Workloads).
    fn preemptions(&self) -> Option<super::checker::Preemptions> {
        match self {
            Self::Units(c) => Some(c.preemptions()),
            Self::Workloads(_) => None,
        }
    }

    /// Entries into each QueueUnit phase, or each Workload condition.
    fn entries(&self) -> BTreeMap<String, usize> {
        match self {
            Self::Units(c) => c.phase_entries(),
            Self::Workloads(c) => c.condition_entries(),
        }
    }

    fn stop(&self) {
        match self {
            Self::Units(c) => c.stop(),
            Self::Workloads(c) => c.stop(),
        }
    }
}

/// Runs one phase on a fresh control plane.
pub async fn run(
    shape: Arc<Shape>,
    config: &PhaseConfig,
    stats: Arc<ApiStats>,
) -> Result<PhaseResult> {
    let kind = config.kind;
    let name = kind.name();
    // Before the control plane starts: a missing Kueue fails at once.
    let kueue_install = (kind == PhaseKind::Kueue)
        .then(kueue::Install::find)
        .transpose()?;
    let shape = if kind == PhaseKind::Kueue {
        Arc::new(shape.with_queue_labels(kueue::JOB_LABELS))
    } else {
        shape
    };
    // Kueue's baseline: paced arrivals, class runtimes, quotas that bind.
    let paced = matches!(kind, PhaseKind::Run | PhaseKind::Kueue);
    eprintln!("[{name}] starting a tier 1 control plane");
    let cp = ControlPlane::start(Tier::One).await?;
    let admin_path = cp.kubeconfig().to_path_buf();
    let admin = api_stats::client(&admin_path, stats.clone(), Component::Admin).await?;
    prepare(&admin, &shape, kind, config.queue_spec.as_ref()).await?;

    let mut scheduler_options = config.scheduler.clone();
    scheduler_options.root_cpu = (kind == PhaseKind::Run).then_some(shape.root_cpu);
    let mut system = match (kind, &kueue_install) {
        (PhaseKind::Floor, _) => System::Null,
        (PhaseKind::Kueue, Some(install)) => {
            eprintln!("[{name}] starting Kueue {}", kueue::KUEUE_VERSION);
            System::Kueue(Kueue::start(&cp, &admin, &shape, install).await?)
        }
        _ => {
            eprintln!("[{name}] starting the webhook and the scheduler");
            System::Ours(Box::new(
                Components::start_placed(
                    &config.components,
                    &cp,
                    &shape,
                    &scheduler_options,
                    stats.clone(),
                )
                .await?,
            ))
        }
    };

    let (creator, runner_client) = job_clients(&cp, &admin_path, &stats).await?;
    let floor_clients = if kind == PhaseKind::Floor {
        let cert = cp.pki().client_cert(
            koord_queue_tests::webhook::SCHEDULER_USER,
            &["system:masters"],
        )?;
        let path = cp.write_kubeconfig(
            "bench-null-scheduler",
            koord_queue_tests::webhook::SCHEDULER_USER,
            &Credentials::Certificate {
                cert_pem: cert.cert_pem,
                key_pem: cert.key_pem,
            },
        )?;
        let null_scheduler =
            api_stats::client(&path, stats.clone(), Component::NullScheduler).await?;
        Some(FloorClients {
            creator: creator.clone(),
            unit_creator: null_scheduler.clone(),
            null_scheduler,
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
    match &system {
        System::Kueue(k) => others.push(("kueue".to_string(), k.pid())),
        System::Ours(c) => others.extend(c.pids()),
        System::Null => {}
    }
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

    let mut runtime = config.runtime.clone();
    runtime.class_runtimes = paced;
    let runner = Runner::start(shape.clone(), runner_client.clone(), runtime, paced);
    let checker = if kind == PhaseKind::Kueue {
        HeldWatch::Workloads(WorkloadChecker::start(
            shape.clone(),
            runner_client.clone(),
            runner.t0(),
            true,
        ))
    } else {
        HeldWatch::Units(Checker::start(
            shape.clone(),
            runner_client.clone(),
            runner.t0(),
            kind == PhaseKind::Run,
            Some(runner.clone()),
        ))
    };
    let generation = {
        let (shape, runner) = (shape.clone(), runner.clone());
        let concurrency = config.create_concurrency;
        match kind {
            PhaseKind::Run | PhaseKind::Kueue => {
                tokio::spawn(runner::create_paced(shape, runner, creator, false))
            }
            PhaseKind::Saturated => tokio::spawn(runner::create_saturated(
                shape,
                runner,
                creator,
                concurrency,
                false,
            )),
            PhaseKind::Floor => {
                let writes = config
                    .floor_writes
                    .clone()
                    .unwrap_or_else(|| FloorWrites::default_for(shape.jobs.len()));
                let clients = floor_clients.context("floor clients")?;
                let write_concurrency = config.scheduler.write_concurrency;
                tokio::spawn(async move {
                    floor::run(
                        shape,
                        runner,
                        clients,
                        writes,
                        concurrency,
                        write_concurrency,
                    )
                    .await
                })
            }
        }
    };
    let mut generation = Some(generation);
    let mut generation_done_at = None;
    let n = shape.jobs.len();
    let started = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        if let Some(task) = &generation
            && task.is_finished()
        {
            if let Some(task) = generation.take() {
                task.await.context("the job creation task failed")??;
            }
            generation_done_at = Some(runner.now());
        }
        let finished = runner.finished();
        let succeeded = checker.succeeded();
        let units_done = kind == PhaseKind::Floor || succeeded >= n;
        if generation.is_none() && finished >= n && units_done {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            match &mut system {
                System::Kueue(k) => k.check_alive()?,
                System::Ours(c) => c.check_alive()?,
                System::Null => {}
            }
            let timelines = runner.timelines();
            let created = timelines.iter().filter(|j| j.created.is_some()).count();
            let released = timelines.iter().filter(|j| !j.releases.is_empty()).count();
            eprintln!(
                "[{name}] {:>6.1}s created {created}/{n} released {released} finished {finished} units succeeded {succeeded}",
                runner.now()
            );
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
                if generation.is_none() {
                    "done"
                } else {
                    "running"
                }
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let cpu_after = CpuSnapshot::take(&others);
    let peak_rss_kib = proc_stats::status_kib("self", "VmHWM");
    let client_requests = stats.snapshot();
    let server_after = ServerRequests::scrape(&admin).await?;
    let timelines = runner.timelines();
    let last_finish = timelines
        .iter()
        .filter_map(|j| j.finished)
        .fold(0.0f64, f64::max);
    let last_succeed = checker.last_succeeded_at();
    let wall_seconds = last_finish
        .max(last_succeed)
        .max(generation_done_at.unwrap_or(0.0));
    let creation_seconds = timelines
        .iter()
        .filter_map(|j| j.created)
        .fold(0.0f64, f64::max);

    let mut scheduler_metrics = Metrics::new();
    let mut webhook_metrics = Metrics::new();
    if let System::Ours(c) = &system {
        if let Ok(text) = admin_scrape::scrape(c.scheduler_admin).await {
            scheduler_metrics = admin_scrape::selected(
                &text,
                &[
                    "koord_queue_scheduler_cycle_duration_seconds_count",
                    "koord_queue_scheduler_cycle_duration_seconds_sum",
                    "koord_queue_scheduler_dequeue_latency_seconds_count",
                    "koord_queue_scheduler_dequeue_latency_seconds_sum",
                ],
            );
            admin_scrape::add_by_label(
                &mut scheduler_metrics,
                &text,
                "koord_queue_scheduler_api_write_errors_total",
                "operation",
            );
            admin_scrape::add_by_label(
                &mut scheduler_metrics,
                &text,
                "koord_queue_scheduler_admission_attempts_total",
                "result",
            );
        }
        if let Ok(text) = admin_scrape::scrape(c.webhook_admin).await {
            webhook_metrics = admin_scrape::selected(
                &text,
                &[
                    "koord_queue_webhook_review_duration_seconds_count",
                    "koord_queue_webhook_review_duration_seconds_sum",
                ],
            );
            admin_scrape::add_by_label(
                &mut webhook_metrics,
                &text,
                "koord_queue_webhook_reviews_total",
                "verdict",
            );
            admin_scrape::add_by_label(
                &mut webhook_metrics,
                &text,
                "koord_queue_webhook_queue_unit_create_errors_total",
                "reason",
            );
        }
    }
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
        timelines,
    };
    runner.stop();
    checker.stop();
    if let (System::Ours(_), Some(dir)) = (&system, &config.logs_dir) {
        let dir = dir.join(name.replace(' ', "-"));
        match crate::member::copy_logs(cp.dir(), &dir) {
            Ok(n) => eprintln!("[{name}] {n} log files copied to {}", dir.display()),
            Err(e) => eprintln!(
                "[{name}] copying the logs to {} failed: {e:#}",
                dir.display()
            ),
        }
    }
    match system {
        System::Ours(c) => c.stop().await,
        System::Kueue(k) => k.stop(),
        System::Null => {}
    }
    cp.stop().await;
    drop(cp);
    eprintln!(
        "[{name}] done: {n} jobs in {:.1}s ({:.1} jobs/s)",
        result.wall_seconds,
        result.throughput()
    );
    Ok(result)
}
