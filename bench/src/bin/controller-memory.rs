//! `controller-memory`: the scheduler's state (controller, records, core,
//! estimates) holding N cached units, in one process with the scheduler's
//! allocator, without an API server — to see where its memory goes and to
//! try a change in minutes.
//!
//! The inputs are what the watches of the scheduler would send for the
//! cluster of `scheduler-memory` (the same quota tree, Jobs and QueueUnits,
//! `koord_queue_tests::load`), the units already adopted and Enqueued as a
//! restarted leader finds them. Every write the controller asks for is
//! answered as done at once; nothing comes back as a watch event, so a
//! released unit stays as the write left it. The process's VmRSS is read
//! once the controller has written nothing for `--quiet`.
//!
//! Where the memory goes: `cargo build --release -p koord-queue-bench --bin
//! controller-memory --features system-alloc`, then `heaptrack
//! controller-memory`; the process exits with its state alive, so the heap
//! it "leaked" is the settled state by call site.
//!
//! This is a tool for looking, not the measure of issue 43's goal: that is
//! `scheduler-memory` (`make bench-memory`), the real scheduler against a
//! real API server, whose watches, writer and HTTP stacks add to this.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::keys;
use koord_queue_runtime::{Leadership, Readiness};
use koord_queue_scheduler::controller::estimate::EstimateSettings;
use koord_queue_scheduler::controller::metrics::Metrics;
use koord_queue_scheduler::controller::records::{
    JobRecord, Key, QueueRecord, QuotaRecord, UnitRecord, queue_for_quota,
};
use koord_queue_scheduler::controller::sources::{Change, Input};
use koord_queue_scheduler::controller::writes::{Claim, Outcome, Write, WriteSink, Written};
use koord_queue_scheduler::controller::{CACHES_SYNCED, Controller, FIRST_CYCLE, Settings};
use koord_queue_scheduler::core::{Core, Registry, SchedulerConfig};
use koord_queue_tests::load;
use serde_json::json;
use tokio::sync::{mpsc, watch};

// The scheduler's allocator, so that the resident figure is comparable;
// `--features system-alloc` leaves the system's, which heap profilers such
// as heaptrack follow (they see malloc, not mimalloc's own pages).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "The scheduler's state with N cached units, without an API server")]
struct Cli {
    /// QueueUnits (each with its Job).
    #[arg(long, default_value_t = 100_000)]
    units: usize,
    /// Leaf quotas (and their Queues).
    #[arg(long, default_value_t = 1000)]
    queues: usize,
    /// Namespaces the jobs are spread over.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// The first this many units all go to the first leaf's queue.
    #[arg(long, default_value_t = 10_000)]
    backlog: usize,
    /// Settled: this long without a write.
    #[arg(long, default_value = "10s", value_parser = humantime_secs)]
    quiet: Duration,
    /// Stop waiting to settle after this long (the reasons of 100,000
    /// waiting units take the controller's status budget ~10 minutes).
    #[arg(long, default_value = "900s", value_parser = humantime_secs)]
    max_wait: Duration,
    /// Start-time estimates (on in the scheduler by default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    estimates: bool,
}

fn humantime_secs(s: &str) -> Result<Duration, String> {
    s.strip_suffix('s')
        .and_then(|n| n.parse::<u64>().ok())
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?}: seconds, such as 10s"))
}

/// Answers every write as done at once, counting them.
struct Answer {
    written: mpsc::UnboundedSender<Written>,
    count: Arc<AtomicU64>,
    rv: AtomicU64,
}

impl Answer {
    fn done(&self, write: Write) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let rv = self.rv.fetch_add(1, Ordering::Relaxed);
        // The controller is gone only when the run ends.
        let _ = self.written.send(Written {
            write,
            outcome: Outcome::Done(Some(rv)),
        });
    }
}

impl WriteSink for Answer {
    fn submit(&self, write: Write) {
        self.done(write);
    }
    fn submit_withdrawable(&self, write: Write) -> Claim {
        let claim = Claim::default();
        if claim.take() {
            self.done(write);
        }
        claim
    }
    fn settled(&self, _: &Key) {}
    fn latency_ms(&self) -> u64 {
        0
    }
}

fn status_kib(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .with_context(|| format!("no {field} in /proc/self/status"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The quotas of the tree and the Queue the scheduler keeps for each.
fn cluster(cli: &Cli) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for quota in &load::quota_tree(cli.queues)? {
        let rec = QuotaRecord::from_quota(quota);
        let queue = queue_for_quota(&rec, keys::SYSTEM_NAMESPACE);
        out.push(Input::Quota(Change::Applied(Box::new(rec))));
        out.push(Input::Queue(Change::Applied(Box::new(
            QueueRecord::from_queue(&queue),
        ))));
    }
    Ok(out)
}

/// Job `n` and its unit, as the watches give them.
fn job_and_unit(cli: &Cli, n: usize) -> Result<[Input; 2]> {
    let leaf = if n < cli.backlog {
        0
    } else {
        n % cli.queues.max(1)
    };
    let (job, unit) = load::job_and_unit(n, leaf, cli.namespaces)?;
    // As the API server returns them: a uid, a creation time and a
    // resourceVersion; the unit adopted by its job and Enqueued.
    let uid = format!(
        "{:08x}-0000-4000-8000-{n:012}",
        n.wrapping_mul(2_654_435_761) & 0xffff_ffff
    );
    let created = "2026-01-01T00:00:00Z";
    let mut job = serde_json::to_value(job)?;
    job["metadata"]["uid"] = json!(uid);
    job["metadata"]["creationTimestamp"] = json!(created);
    job["metadata"]["resourceVersion"] = json!((2 * n + 10).to_string());
    let mut unit = serde_json::to_value(unit)?;
    let job_name = job["metadata"]["name"].clone();
    unit["metadata"]["uid"] = json!(format!("{n:08x}-1111-4000-8000-{n:012}"));
    unit["metadata"]["creationTimestamp"] = json!(created);
    unit["metadata"]["resourceVersion"] = json!((2 * n + 11).to_string());
    unit["metadata"]["finalizers"] = json!([keys::QUOTA_FINALIZER]);
    unit["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1", "kind": "Job",
        "name": job_name, "uid": uid, "controller": true, "blockOwnerDeletion": true }]);
    unit["spec"]["consumerRef"]["uid"] = json!(uid);
    unit["status"] = json!({ "phase": "Enqueued" });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").context("no Job adapter")?;
    let job = JobRecord::from_object(adapter, WatchedJob::from_value(&job)?)
        .context("the job names no unit")?;
    Ok([
        Input::Job("Job", Change::Applied(Box::new(job))),
        Input::Unit(Change::Applied(Box::new(UnitRecord::from_unit(
            serde_json::from_value(unit)?,
        )))),
    ])
}

async fn run(cli: Cli) -> Result<std::convert::Infallible> {
    let start_kib = status_kib("VmRSS")?;
    let config = SchedulerConfig::from_yaml(&load::scheduler_config(cli.queues))?;
    let core = Core::new(&config, &Registry::with_builtins())?;
    let (written_tx, written_rx) = mpsc::unbounded_channel();
    let count = Arc::new(AtomicU64::new(0));
    let answer = Answer {
        written: written_tx,
        count: count.clone(),
        rv: AtomicU64::new(1_000_000_000),
    };
    let settings = Settings {
        namespace: keys::SYSTEM_NAMESPACE.into(),
        orphan_grace: Duration::from_secs(60),
        cycle_batch: Duration::from_millis(20),
        status_interval: Duration::from_secs(2),
        job_events: true,
        strict_default: None,
        jitter_salt: 7,
        estimates: cli.estimates.then(|| EstimateSettings::new(config.clone())),
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let controller = Controller::new(
        core,
        settings,
        vec!["queueunits", "queues", "elasticquotas", "Job"],
        answer,
        Leadership::fixed(true),
        Metrics::register(&mut registry),
        Readiness::new(&[CACHES_SYNCED, FIRST_CYCLE]),
    );
    let (input_tx, input_rx) = mpsc::channel(4096);
    let (_leading_tx, leading_rx) = watch::channel(true);
    let (_query_tx, query_rx) = mpsc::channel(1);
    tokio::spawn(controller.run(
        input_rx,
        written_rx,
        leading_rx,
        query_rx,
        std::future::pending(),
    ));

    let fed = Instant::now();
    for input in cluster(&cli)? {
        input_tx
            .send(input)
            .await
            .context("the controller stopped")?;
    }
    for n in 0..cli.units {
        for input in job_and_unit(&cli, n)? {
            input_tx
                .send(input)
                .await
                .context("the controller stopped")?;
        }
    }
    for input in [
        Input::Quota(Change::Synced),
        Input::Queue(Change::Synced),
        Input::Job("Job", Change::Synced),
        Input::Unit(Change::Synced),
    ] {
        input_tx
            .send(input)
            .await
            .context("the controller stopped")?;
    }
    println!(
        "fed {} units in {:.1} s; VmRSS {:.1} MiB (at start {:.1})",
        cli.units,
        fed.elapsed().as_secs_f64(),
        mib(status_kib("VmRSS")?),
        mib(start_kib),
    );

    let mut last = (count.load(Ordering::Relaxed), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = count.load(Ordering::Relaxed);
        if now != last.0 {
            if now / 10_000 != last.0 / 10_000 || now - last.0 < 100 {
                println!(
                    "  {:.0} s: {now} writes, VmRSS {:.1} MiB",
                    fed.elapsed().as_secs_f64(),
                    mib(status_kib("VmRSS")?)
                );
            }
            last = (now, Instant::now());
        } else if last.1.elapsed() >= cli.quiet {
            break;
        }
        if fed.elapsed() >= cli.max_wait {
            println!(
                "not settled after {:.0} s (--max-wait)",
                fed.elapsed().as_secs_f64()
            );
            break;
        }
    }
    println!(
        "at {:.1} s after the feed began, {} writes; VmRSS / VmHWM {:.1} / {:.1} MiB",
        fed.elapsed().as_secs_f64(),
        last.0,
        mib(status_kib("VmRSS")?),
        mib(status_kib("VmHWM")?),
    );
    // Exits with the state alive: a heap profiler then reports what the
    // settled state holds as its live heap at exit.
    std::process::exit(0)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("controller-memory: {e:#}");
            ExitCode::FAILURE
        }
    }
}
