//! `run`: a trace against one configuration, or two side by side.

use std::fmt::Write as _;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use koord_queue_core::RootCapacity;
use koord_queue_model::{Resources, parse_duration, parse_quantity};
use koord_queue_sim::cluster::Cluster;
use koord_queue_sim::engine::{Latency, LatencyProfile, Settings};
use koord_queue_sim::report::{Report, compare, html};
use koord_queue_sim::trace::{TraceError, trace_jobs};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The cluster's objects: ElasticQuotas, Queues, the scheduler's
    /// configuration, Nodes, PriorityClasses (YAML, multi-document or a
    /// List; repeatable). With --compare: what both configurations share.
    #[arg(long, num_args = 1..)]
    objects: Vec<PathBuf>,
    /// Two configurations (files of objects) to run on the same trace and
    /// compare.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    compare: Vec<PathBuf>,
    /// The trace: one job a line (docs/simulate.md).
    #[arg(long)]
    trace: PathBuf,
    /// Seed of the backoff jitter and of the latency spread.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The JSON report.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The HTML report.
    #[arg(long)]
    html: Option<PathBuf>,
    /// What the terminal's table groups by (the reports have all three).
    #[arg(long, value_enum, default_value = "class")]
    by: By,
    /// A fixed root capacity, e.g. `cpu=600,memory=2Ti` (instead of the
    /// configuration's rootCapacity and the objects').
    #[arg(long)]
    capacity: Option<String>,
    /// The scheduler's --cycle-batch.
    #[arg(long, default_value = "20ms", value_parser = parse_duration)]
    cycle_batch: Duration,
    /// The controller's housekeeping interval.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    housekeeping: Duration,
    /// Submission → the unit waits in its queue.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    admit_latency: Duration,
    /// Release → the job's pods run.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    start_latency: Duration,
    /// A job's end → its quota is free.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    free_latency: Duration,
    /// A reclaim decision → the victim's quota is free.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    evict_latency: Duration,
    /// A backoff's end → the unit waits again.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    requeue_latency: Duration,
    /// The API's spread around the latencies: each job's admission and the
    /// start of each of its holds move by a draw in [-this/2, this/2) from
    /// `--seed`, as a cluster's jobs never arrive or end in the same
    /// millisecond (docs/simulate.md).
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    latency_spread: Duration,
    /// How the admission, start and free latencies moved over a run (JSON,
    /// as `bench-e2e --trace-out` writes it): where it has a figure for the
    /// moment a step begins, that figure replaces the fixed latency.
    #[arg(long)]
    latency_profile: Option<PathBuf>,
    /// A job whose trace says when its unit was first seen waiting
    /// (`observed.admitted_ms`) arrives then, instead of
    /// --admit-latency after its submission.
    #[arg(long)]
    admit_observed: bool,
    /// Runs of the trace, with the seeds --seed, --seed+1, …: the report is
    /// the first run's, its fidelity section compares each job's mean
    /// release over all of them and gives each class the range of the
    /// runs' means (near saturation the seed alone moves them).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    seeds: u64,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl RunArgs {
    fn settings(&self) -> Result<Settings> {
        let profile = match &self.latency_profile {
            Some(path) => Some(Arc::new(read_profile(path)?)),
            None => None,
        };
        Ok(Settings {
            cycle_batch_ms: ms(self.cycle_batch),
            housekeeping_ms: ms(self.housekeeping),
            seed: self.seed,
            latency: Latency {
                admit_ms: ms(self.admit_latency),
                start_ms: ms(self.start_latency),
                free_ms: ms(self.free_latency),
                evict_ms: ms(self.evict_latency),
                requeue_ms: ms(self.requeue_latency),
                spread_ms: ms(self.latency_spread),
                profile,
                admit_observed: self.admit_observed,
            },
            bucket_ms: None,
        })
    }

    fn cluster(&self, extra: Option<&Path>) -> Result<Cluster> {
        let mut texts = Vec::new();
        for path in self.objects.iter().map(PathBuf::as_path).chain(extra) {
            texts.push(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
            );
        }
        let cluster = Cluster::from_yaml(&texts)?;
        Ok(match &self.capacity {
            Some(text) => cluster.with_capacity(RootCapacity::Limited(parse_capacity(text)?)),
            None => cluster,
        })
    }
}

/// A latency profile from its JSON file, checked.
fn read_profile(path: &Path) -> Result<LatencyProfile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let profile: LatencyProfile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a latency profile", path.display()))?;
    profile
        .validate()
        .with_context(|| format!("{}", path.display()))?;
    Ok(profile)
}

/// The groups of the terminal's table.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum By {
    /// Priority class.
    Class,
    /// Queue.
    Queue,
    /// Leaf quota.
    Quota,
}

/// `cpu=600,memory=2Ti`.
fn parse_capacity(text: &str) -> Result<Resources> {
    let mut out = Resources::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            bail!("--capacity {text:?}: expected resource=quantity[,…]");
        };
        out.set(name.trim(), parse_quantity(name.trim(), value.trim())?);
    }
    Ok(out)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs the trace at `path` on `cluster` (read as it runs: a million-job
/// trace is not held whole), telling the wall time on stderr.
fn one(
    cluster: &Cluster,
    path: &Path,
    settings: Settings,
    seeds: u64,
    name: &str,
) -> Result<Report> {
    let started = Instant::now();
    // Opened once here for the error's context, then once per run.
    std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let stream = || {
        let file = std::fs::File::open(path).map_err(TraceError::Io)?;
        Ok(trace_jobs(BufReader::with_capacity(1 << 20, file)))
    };
    let report = koord_queue_sim::simulate_seeds(cluster, stream, settings, seeds)?;
    eprintln!(
        "{name}: {} jobs, {} cycles, {} events simulated in {:.2} s{} (at most {} waiting at once)",
        report.summary.jobs,
        report.summary.cycles,
        report.summary.events,
        started.elapsed().as_secs_f64(),
        if seeds > 1 {
            let last = report.summary.seed.wrapping_add(seeds - 1);
            format!(" ({seeds} runs, seeds {} to {last})", report.summary.seed)
        } else {
            String::new()
        },
        report.summary.peak_waiting
    );
    Ok(report)
}

/// A few lines for the terminal.
fn text_summary(report: &Report, by: By) -> String {
    let mut s = String::new();
    let m = &report.summary;
    let _ = writeln!(
        s,
        "{} jobs: {} released, {} never; sent back: {} reclaimed, {} preempted, {} fair-share",
        m.jobs, m.released, m.never_released, m.reclaimed, m.preempted, m.fair_share_reclaimed
    );
    let (title, groups) = match by {
        By::Class => ("class", &report.by_class),
        By::Queue => ("queue", &report.by_queue),
        By::Quota => ("quota", &report.by_quota),
    };
    let _ = writeln!(
        s,
        "{:<24} {:>8} {:>10} {:>10} {:>10} {:>10}",
        title, "jobs", "mean s", "p50 s", "p90 s", "p99 s"
    );
    for g in groups {
        let t = &g.time_to_release;
        let _ = writeln!(
            s,
            "{:<24} {:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            g.name, g.jobs, t.mean, t.p50, t.p90, t.p99
        );
    }
    if let Some(f) = &report.fidelity {
        let rho = |r: Option<f64>| r.map_or_else(|| "-".to_string(), |r| format!("{r:.3}"));
        let _ = writeln!(
            s,
            "fidelity: {} jobs compared{}; release order Spearman {}, wait order {}",
            f.jobs_compared,
            if f.runs > 1 {
                format!(", each by its mean release over {} runs", f.runs)
            } else {
                String::new()
            },
            rho(f.release_order_spearman),
            rho(f.wait_order_spearman)
        );
        for c in f.by_class.iter().chain([&f.total]) {
            let error = c
                .relative_error
                .map_or_else(|| "-".to_string(), |e| format!("{:+.1}%", e * 100.0));
            let range = c.simulated_range_s.map_or_else(String::new, |[low, high]| {
                format!("; runs {low:.2}-{high:.2} s")
            });
            let _ = writeln!(
                s,
                "  {:<22} mean time to release simulated {:>8.2} s, real {:>8.2} s ({error}{range})",
                c.name, c.simulated_mean_s, c.observed_mean_s
            );
        }
    }
    s
}

/// `run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let trace = args.trace.as_path();
    if let [a, b] = args.compare.as_slice() {
        let (ca, cb) = (args.cluster(Some(a))?, args.cluster(Some(b))?);
        let (na, nb) = (a.display().to_string(), b.display().to_string());
        let ra = one(&ca, trace, args.settings()?, args.seeds, &na)?;
        let rb = one(&cb, trace, args.settings()?, args.seeds, &nb)?;
        print!(
            "A = {na}\n{}B = {nb}\n{}",
            text_summary(&ra, args.by),
            text_summary(&rb, args.by)
        );
        let c = compare::compare(&na, ra, &nb, rb);
        let notable: Vec<_> = c.differences.iter().filter(|d| d.notable).collect();
        println!("{} notable differences (B against A):", notable.len());
        for d in notable {
            println!(
                "  {:<6} {:<20} {:<15} {:>10.2} -> {:>10.2} ({:+.0}%)",
                d.scope,
                d.name,
                d.figure,
                d.a,
                d.b,
                d.change * 100.0
            );
        }
        if let Some(path) = &args.out {
            write(path, &serde_json::to_string_pretty(&c)?)?;
        }
        if let Some(path) = &args.html {
            write(path, &html::comparison(&c))?;
        }
        return Ok(());
    }
    if args.objects.is_empty() {
        bail!("give --objects (or --compare A B)");
    }
    let cluster = args.cluster(None)?;
    let report = one(&cluster, trace, args.settings()?, args.seeds, "run")?;
    print!("{}", text_summary(&report, args.by));
    if let Some(path) = &args.out {
        write(path, &serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(path) = &args.html {
        let title = format!("Koord-Queue simulation: {}", args.trace.display());
        write(path, &html::report(&title, &report))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::read_profile;

    #[test]
    fn a_latency_profile_is_read_checked_and_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(
            &good,
            r#"{"startMs": 0, "bucketMs": 10000, "buckets": [{"startMs": 4000}]}"#,
        )
        .unwrap();
        let p = read_profile(&good).unwrap();
        assert_eq!(p.buckets[0].start_ms, Some(4_000));
        for (name, text, says) in [
            (
                "zero.json",
                r#"{"startMs": 0, "bucketMs": 0, "buckets": []}"#,
                "bucketMs must be positive",
            ),
            (
                "negative.json",
                r#"{"startMs": 0, "bucketMs": 5, "buckets": [{"freeMs": -1}]}"#,
                "negative latency",
            ),
            (
                "typo.json",
                r#"{"startMs": 0, "bucketMs": 5, "bucket": []}"#,
                "not a latency profile",
            ),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", read_profile(&path).unwrap_err());
            assert!(error.contains(says) && error.contains(name), "{error}");
        }
        let missing = format!(
            "{:#}",
            read_profile(&dir.path().join("none.json")).unwrap_err()
        );
        assert!(
            missing.contains("reading") && missing.contains("none.json"),
            "{missing}"
        );
    }
}
