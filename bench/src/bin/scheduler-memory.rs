//! Memory of the whole scheduler process with many QueueUnits cached
//! (architecture §9: ≤ 400 MB RSS with 100,000 units).
//!
//!   cargo run --release -p koord-queue-bench --bin scheduler-memory -- \
//!       [--units 100000] [--queues 1000] [--namespaces 50] [--concurrency 96]
//!
//! Starts a tier 1 control plane (etcd + kube-apiserver), creates the
//! 3-level quota tree of the core benchmarks with `--queues` leaves and
//! `--units` held batch Jobs, each with the QueueUnit the webhook would have
//! created, then runs the real `koord-queue-scheduler` binary (a release
//! build, made here with cargo unless `--scheduler-bin` names one) as a
//! separate process. It waits until the scheduler is ready and its metrics
//! count every unit, then until it has settled (its writes — adoptions,
//! releases, reclaims, Events, positions — are done: none reaches the API
//! server for `--settle-secs`), and reports VmRSS and VmHWM from
//! `/proc/<pid>/status`. There is no job controller in tier
//! 1: released jobs stay unsuspended without pods, so the units the quotas
//! admit keep holding quota and the others keep waiting.
//!
//! Once settled it measures what a quiet cluster costs (the writes per
//! minute and the CPU over `--idle-secs`, which should be no writes at all:
//! a unit's status changes only with its phase or its reason, issue 39), and
//! how fast the visibility API lists: the scheduler serves it, registered
//! with the aggregation layer as `make run` does, and the first `--backlog`
//! units all go to the first leaf's Queue, whose backlog and namespace are
//! listed through the kube-apiserver as an administrator would.
//!
//! Then the dashboard's overview and that Queue's page are loaded
//! `--dashboard-loads` times in headless chromium, and (unless
//! `--failover false`) the leader is SIGKILLed beside a warm standby, and
//! the new leader SIGKILLed and started again cold: how long each takes to
//! its first release, and what each writes to QueueUnits (issue 43).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use koord_queue_bench::dashboard_load;
use koord_queue_bench::failover::{self, Launcher};
use koord_queue_bench::visibility_listing::measure;
use koord_queue_tests::process::{Process, free_port};
use koord_queue_tests::{
    ControlPlane, Tier, admin, fixtures, load, metrics, proc_stats, visibility,
};
use koord_queue_visibility::types::PendingUnitList;

/// The leader-election timing of the failover measurement.
const FAILOVER_LEASE: [&str; 3] = [
    "--lease-duration=5s",
    "--renew-deadline=3s",
    "--retry-period=1s",
];

#[derive(Debug, Parser)]
#[command(about = "Resident memory of the scheduler process with many QueueUnits cached")]
struct Cli {
    /// QueueUnits (each with its held Job).
    #[arg(long, default_value_t = 100_000)]
    units: usize,
    /// Leaf quotas, hence queues (ten per middle quota, ten middles per parent).
    #[arg(long, default_value_t = 1_000)]
    queues: usize,
    /// Namespaces the jobs are spread over.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// Creates in flight while loading.
    #[arg(long, default_value_t = 96)]
    concurrency: usize,
    /// Units put in the first leaf's Queue (the rest are spread over every
    /// leaf), so that a long backlog can be listed.
    #[arg(long, default_value_t = 10_000)]
    backlog: usize,
    /// Once settled, measure writes and CPU for this long.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Listings of each kind measured through the visibility API.
    #[arg(long, default_value_t = 100)]
    listings: usize,
    /// The scheduler binary; default: a release build made with cargo.
    #[arg(long)]
    scheduler_bin: Option<PathBuf>,
    /// Settled: this long without a write to the kinds the scheduler writes.
    #[arg(long, default_value_t = 15)]
    settle_secs: u64,
    /// Report anyway when the scheduler has not settled this long after its
    /// start (100,000 fresh units take ~35 min of writes on 2 busy cores).
    #[arg(long, default_value_t = 3600)]
    timeout_secs: u64,
    /// Copy the scheduler's log here at the end.
    #[arg(long)]
    log_out: Option<PathBuf>,
    /// Page loads of each measured dashboard page (0: none).
    #[arg(long, default_value_t = 20)]
    dashboard_loads: usize,
    /// Measure a failover to a warm standby and a cold restart at the end.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    failover: bool,
    /// Load the cluster, print how to run the scheduler against it (e.g.
    /// under a heap profiler) and keep it until Ctrl-C; measure nothing.
    #[arg(long)]
    load_only: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    koord_queue_tests::init_tracing();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("scheduler-memory: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The release build of the scheduler binary in this binary's target
/// directory, built (or found up to date) by cargo.
fn release_scheduler() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let target_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("cannot find the cargo target directory")?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    println!(
        "building the scheduler (release) in {}",
        target_dir.display()
    );
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "koord-queue-scheduler"])
        .args(["--bin", "koord-queue-scheduler", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo build of koord-queue-scheduler failed ({status})");
    }
    Ok(target_dir.join("release").join("koord-queue-scheduler"))
}

async fn load(cp: &ControlPlane, cli: &Cli) -> Result<Duration> {
    let client = cp.client().await?;
    fixtures::apply_koord_queue_crds(&client).await?;
    fixtures::ensure_namespace(&client, koord_queue_api::keys::SYSTEM_NAMESPACE).await?;
    for k in 0..cli.namespaces.min(cli.queues).max(1) {
        fixtures::ensure_namespace(&client, &format!("ns-{k}")).await?;
    }
    load::create_all(&client, &load::quota_tree(cli.queues)?, cli.concurrency).await?;

    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let progress = {
        let (done, total) = (done.clone(), cli.units);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(15)).await;
                let n = done.load(Ordering::Relaxed);
                println!(
                    "  created {n}/{total} jobs and units ({:.0}/s)",
                    n as f64 / started.elapsed().as_secs_f64()
                );
            }
        })
    };
    let result = load::for_each_concurrent(cli.units, cli.concurrency, |n| {
        let (client, done) = (&client, &done);
        async move {
            let leaf = if n < cli.backlog {
                0
            } else {
                n % cli.queues.max(1)
            };
            let (job, unit) = load::job_and_unit(n, leaf, cli.namespaces)?;
            load::create(client, &job).await?;
            load::create(client, &unit).await?;
            done.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    })
    .await;
    progress.abort();
    result?;
    Ok(started.elapsed())
}

/// Writes to the kinds the scheduler writes (QueueUnits, Jobs, Queues,
/// Events) that reached the API server; its Lease renewals and the API
/// server's own housekeeping are left out.
async fn api_writes(client: &kube::Client) -> Result<f64> {
    koord_queue_bench::admin_scrape::apiserver_writes(
        client,
        &["queueunits", "jobs", "queues", "events"],
    )
    .await
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One observation of the running scheduler.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    cpu_ticks: u64,
    writes: f64,
}

#[derive(Debug, Default)]
struct Milestones {
    ready: Option<Duration>,
    all_units: Option<(Duration, u64)>,
    settled: Option<Duration>,
    /// CPU share (of one core) over the settle window.
    idle_cpu: f64,
}

async fn run(cli: Cli) -> Result<()> {
    let bin = match &cli.scheduler_bin {
        Some(bin) => bin.clone(),
        None => release_scheduler()?,
    };
    let cp = ControlPlane::start(Tier::One).await?;
    println!(
        "loading {} units (with their held Jobs) into {} queues over {} namespaces, {} creates in flight",
        cli.units, cli.queues, cli.namespaces, cli.concurrency
    );
    let load_time = load(&cp, &cli).await?;
    println!(
        "  loaded in {load_time:.1?} ({:.0} jobs+units/s)",
        cli.units as f64 / load_time.as_secs_f64()
    );

    let config = cp.dir().join("scheduler-config.yaml");
    std::fs::write(&config, load::scheduler_config(cli.queues))?;
    let mut args: Vec<String> = vec![
        format!("--config={}", config.display()),
        format!(
            "--visibility-cert-dir={}",
            visibility::serving_dir(&cp)?.display()
        ),
        "--lease-name=scheduler-memory".into(),
        "--log-level=info,kube=warn".into(),
    ];
    if cli.failover {
        // What the failover is measured with (the chart's
        // `scheduler.leaderElection`): a standby takes a silent leader's
        // Lease after 5 s instead of the default 15 s.
        args.extend(FAILOVER_LEASE.iter().map(|a| a.to_string()));
    }
    let launcher = Launcher {
        bin: bin.clone(),
        args,
        kubeconfig: cp.kubeconfig().to_path_buf(),
        log_dir: cp.dir().to_path_buf(),
    };
    if cli.load_only {
        let admin_addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?));
        println!("loaded; run the scheduler against it with:");
        println!(
            "  KUBECONFIG={} {} {}",
            cp.kubeconfig().display(),
            bin.display(),
            launcher
                .args_of("scheduler-memory", admin_addr, free_port()?)
                .join(" ")
        );
        println!("Press Ctrl-C to stop.");
        tokio::signal::ctrl_c().await?;
        return Ok(());
    }
    let started = Instant::now();
    let mut leader = launcher.start("scheduler-memory")?;
    let (pid, admin_addr, visibility_port) =
        (leader.process.pid(), leader.admin, leader.visibility_port);
    let log = leader.process.log_path().to_path_buf();
    println!("scheduler {} started (pid {pid})", bin.display());

    let result = watch(&cp, &cli, &mut leader.process, admin_addr, started).await;
    if let Some(out) = &cli.log_out {
        std::fs::copy(&log, out)
            .with_context(|| format!("copying the log to {}", out.display()))?;
    }
    let (milestones, rss, hwm, metrics) = result?;
    let quiet = quiet_window(&cp, pid, Duration::from_secs(cli.idle_secs)).await?;
    visibility::register(&cp, visibility_port).await?;
    let admin_client = cp.client().await?;
    let mut listings = Vec::new();
    for path in [
        visibility::queue_path(&load::leaf_name(0)),
        visibility::namespace_path("ns-0"),
    ] {
        for page_limit in [None, Some(500)] {
            // As `kubectl get -o json` parses, and as `kubectl koord-queue
            // pending` (a typed client) does.
            for listing in [
                measure::<serde_json::Value>(&admin_client, &path, page_limit, cli.listings)
                    .await?,
                measure::<PendingUnitList>(&admin_client, &path, page_limit, cli.listings).await?,
            ] {
                println!("  {}", listing.line());
                listings.push(listing);
            }
        }
    }
    // The reference: the API server listing the same namespace's
    // QueueUnits from its watch cache, with the same client — what a
    // listing of that many objects costs on this machine without the
    // aggregation layer and the scheduler.
    let reference_path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns-0/queueunits";
    let mut references = Vec::new();
    for page_limit in [None, Some(500)] {
        let listing =
            measure::<serde_json::Value>(&admin_client, reference_path, page_limit, cli.listings)
                .await?;
        println!("  {} (reference)", listing.line());
        references.push(listing);
    }
    let rss_after_listings = rss_of(pid, "VmRSS")?;
    leader.process.check_alive()?;
    let pages = [
        "/#/".to_string(),
        format!("/#/queue/{}", load::leaf_name(0)),
    ];
    let page_loads = if cli.dashboard_loads > 0 {
        let loads = dashboard_load::measure(&cp, &pages, cli.dashboard_loads).await?;
        for page in &loads {
            println!("  {}", page.line());
        }
        loads
    } else {
        Vec::new()
    };
    let mut takeovers = Vec::new();
    if cli.failover {
        // Two units holding quota in the backlog's Queue: a takeover's
        // first release is the room one of them leaves.
        let (namespace, queue) = ("ns-0", load::leaf_name(0));
        let jobs = failover::admitted_jobs(&admin_client, namespace, &queue, 2).await?;
        let (mut standby, warm) =
            failover::warm_standby(&admin_client, &launcher, &mut leader, namespace, &jobs[0])
                .await?;
        println!("  {}", warm.line());
        takeovers.push(warm);
        let (mut restarted, cold) =
            failover::cold_restart(&admin_client, &launcher, &mut standby, namespace, &jobs[1])
                .await?;
        println!("  {}", cold.line());
        takeovers.push(cold);
        restarted.process.terminate(Duration::from_secs(15));
    } else {
        leader.process.terminate(Duration::from_secs(15));
    }

    let secs =
        |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.1}s", d.as_secs_f64()));
    println!();
    println!("scheduler-memory report");
    println!(
        "  load:        {} QueueUnits + {} held Jobs, {} queues ({} quotas), {} namespaces; created in {:.1}s",
        cli.units,
        cli.units,
        cli.queues,
        load::quota_tree(cli.queues)?.len(),
        cli.namespaces,
        load_time.as_secs_f64()
    );
    println!("  scheduler:   {}", bin.display());
    println!(
        "  ready:       {} (/readyz: caches synced, first cycle run)",
        secs(milestones.ready)
    );
    println!(
        "  adopted:     {} (metrics pending + admitted = {}; RSS then {:.0} MiB)",
        secs(milestones.all_units.map(|(d, _)| d)),
        cli.units,
        milestones.all_units.map_or(0.0, |(_, rss)| mib(rss))
    );
    println!(
        "  settled:     {} (no write for {}s; CPU over the last window {:.0} % of a core)",
        milestones
            .settled
            .map_or("not settled".to_string(), |d| secs(Some(d))),
        cli.settle_secs,
        milestones.idle_cpu * 100.0
    );
    println!(
        "  units:       {} pending, {} admitted; {} cycles run",
        metrics::sum_of(&metrics, "koord_queue_scheduler_pending_units{"),
        metrics::sum_of(&metrics, "koord_queue_scheduler_admitted_units{"),
        metrics::sum_of(
            &metrics,
            "koord_queue_scheduler_cycle_duration_seconds_count"
        )
    );
    let cycle = |q| {
        metrics::histogram_quantile(&metrics, "koord_queue_scheduler_cycle_duration_seconds", q)
            .map_or("-".to_string(), |s| format!("≤ {:.1} ms", s * 1000.0))
    };
    let family = "koord_queue_scheduler_cycle_duration_seconds";
    let all = metrics::sum_of(&metrics, &format!("{family}_count"));
    let over_50ms = metrics::sample(&metrics, &format!("{family}_bucket"), &[("le", "0.05")])
        .map_or("-".to_string(), |within| format!("{:.0}", all - within));
    println!(
        "  cycles:      p50 {}, p99 {}, longest {}, {over_50ms} over 50 ms (the duration histogram's bucket bounds; the first cycles after the start look at every unit; goal: a full cycle ≤ 50 ms)",
        cycle(0.5),
        cycle(0.99),
        cycle(1.0)
    );
    println!(
        "  VmRSS:       {:.1} MiB ({:.1} MB)",
        mib(rss),
        rss as f64 * 1024.0 / 1e6
    );
    println!(
        "  VmHWM:       {:.1} MiB ({:.1} MB)",
        mib(hwm),
        hwm as f64 * 1024.0 / 1e6
    );
    println!("  target:      VmRSS ≤ 400 MB (architecture §9)");
    println!(
        "  quiet:       {:.1} writes/min and {:.1} % of a core over {}s after settling (goal: no writes)",
        quiet.writes_per_min,
        quiet.cpu_share * 100.0,
        cli.idle_secs
    );
    println!(
        "  listings:    through the aggregation layer as an administrator (goal: a 10,000-unit Queue backlog, p99 ≤ 100 ms)"
    );
    for listing in &listings {
        println!("               {}", listing.line());
    }
    println!("  reference:   the same namespace's QueueUnits listed by the API server itself");
    for listing in &references {
        println!("               {}", listing.line());
    }
    println!(
        "  VmRSS after the listings: {:.1} MiB",
        mib(rss_after_listings)
    );
    if !page_loads.is_empty() {
        println!(
            "  dashboard:   page loads as the demo administrator, from the navigation's start to the first figures drawn (goal: p95 ≤ 1 s)"
        );
        for page in &page_loads {
            println!("               {}", page.line());
        }
    }
    if !takeovers.is_empty() {
        println!(
            "  failover:    Lease {} (goals: a warm standby's first release ≤ 10 s after the SIGKILL, a cold start's ≤ 60 s; no writes to units whose state did not change)",
            FAILOVER_LEASE.join(" ")
        );
        for takeover in &takeovers {
            println!("               {}", takeover.line());
        }
    }
    Ok(())
}

/// What the settled scheduler costs while nothing changes.
struct Quiet {
    writes_per_min: f64,
    cpu_share: f64,
}

/// Writes and CPU of process `pid` over `window`.
async fn quiet_window(cp: &ControlPlane, pid: u32, window: Duration) -> Result<Quiet> {
    let client = cp.client().await?;
    println!("  measuring {window:?} of quiet");
    let (writes, ticks, at) = (api_writes(&client).await?, ticks_of(pid)?, Instant::now());
    tokio::time::sleep(window).await;
    let elapsed = at.elapsed().as_secs_f64();
    let writes = api_writes(&client).await? - writes;
    let ticks = ticks_of(pid)?.saturating_sub(ticks) as f64;
    Ok(Quiet {
        writes_per_min: writes * 60.0 / elapsed,
        cpu_share: ticks / proc_stats::clock_ticks() / elapsed,
    })
}

/// Follows the scheduler until it has settled; returns the milestones,
/// VmRSS and VmHWM (KiB) once settled, and its last metrics.
async fn watch(
    cp: &ControlPlane,
    cli: &Cli,
    scheduler: &mut Process,
    admin_addr: std::net::SocketAddr,
    started: Instant,
) -> Result<(Milestones, u64, u64, String)> {
    let client = cp.client().await?;
    let pid = scheduler.pid();
    let window = Duration::from_secs(cli.settle_secs);
    let deadline = started + Duration::from_secs(cli.timeout_secs);
    let mut m = Milestones::default();
    let mut samples: Vec<Sample> = Vec::new();
    let mut last_print = Instant::now();
    loop {
        scheduler.check_alive()?;
        let now = Instant::now();
        let ready = koord_queue_bench::admin_scrape::answers_ok(admin_addr, "/readyz").await;
        if ready && m.ready.is_none() {
            m.ready = Some(started.elapsed());
            println!("  ready after {:.1?}", started.elapsed());
        }
        let metrics = admin::get(admin_addr, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        let pending = metrics::sum_of(&metrics, "koord_queue_scheduler_pending_units{");
        let admitted = metrics::sum_of(&metrics, "koord_queue_scheduler_admitted_units{");
        let rss = rss_of(pid, "VmRSS")?;
        if m.all_units.is_none() && (pending + admitted) as usize >= cli.units {
            m.all_units = Some((started.elapsed(), rss));
            println!(
                "  all {} units in the metrics after {:.1?} (RSS {:.0} MiB)",
                cli.units,
                started.elapsed(),
                mib(rss)
            );
        }
        let sample = Sample {
            at: now,
            cpu_ticks: ticks_of(pid)?,
            writes: api_writes(&client).await?,
        };
        samples.retain(|s| now.duration_since(s.at) <= window + Duration::from_secs(2));
        let oldest = samples.first().cloned();
        samples.push(sample.clone());
        let cpu_share = |from: &Sample| {
            let ticks = sample.cpu_ticks.saturating_sub(from.cpu_ticks) as f64;
            ticks / proc_stats::clock_ticks() / now.duration_since(from.at).as_secs_f64()
        };
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            let recent = samples
                .iter()
                .rev()
                .find(|s| now.duration_since(s.at) >= Duration::from_secs(5));
            println!(
                "  t={:>6.1}s RSS {:>6.1} MiB, pending {pending}, admitted {admitted}, CPU {:>3.0} %, API writes {:.0}",
                started.elapsed().as_secs_f64(),
                mib(rss),
                recent.map_or(0.0, |s| cpu_share(s) * 100.0),
                sample.writes
            );
        }
        if let Some(oldest) = &oldest
            && m.all_units.is_some()
            && ready
            && now.duration_since(oldest.at) >= window
            && sample.writes == oldest.writes
        {
            m.settled = Some(started.elapsed());
            m.idle_cpu = cpu_share(oldest);
            let rss = rss_of(pid, "VmRSS")?;
            let hwm = rss_of(pid, "VmHWM")?;
            return Ok((m, rss, hwm, metrics));
        }
        if now > deadline {
            // Still worth reporting: the figures at this point, unsettled.
            println!(
                "  not settled within {}s: reporting the figures as they are",
                cli.timeout_secs
            );
            m.idle_cpu = oldest.as_ref().map_or(0.0, cpu_share);
            let hwm = rss_of(pid, "VmHWM")?;
            return Ok((m, rss, hwm, metrics));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// CPU ticks process `pid` has used.
fn ticks_of(pid: u32) -> Result<u64> {
    proc_stats::process_ticks(pid).with_context(|| format!("reading /proc/{pid}/stat"))
}

/// A memory field of process `pid`'s status, in KiB.
fn rss_of(pid: u32, field: &str) -> Result<u64> {
    proc_stats::status_kib(pid, field).with_context(|| format!("no {field} in /proc/{pid}/status"))
}
