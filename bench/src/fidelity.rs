//! The simulator against the real system (issue 40): the run phase's job
//! stream written as a simulator trace — the shape's jobs as the
//! simulator's own importer makes them (`koord_queue_sim::import::shape`),
//! each submitted when its create was sent and with the release and finish
//! the job runtime saw (`observed`) — with the cluster objects the phase
//! set up; the API's latencies measured from the run's own data, as medians
//! and as they moved over the run; and the simulations of that trace —
//! without latency, with the medians, with the run's API replayed (the
//! latency profile and each job's admission as seen) — compared with what
//! happened (the simulator's fidelity section).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use koord_queue_sim::cluster::Cluster;
use koord_queue_sim::engine::{Latency, LatencyBucket, LatencyProfile, Settings};
use koord_queue_sim::import::{objects::to_yaml, shape as shape_import};
use koord_queue_sim::report::{self, Fidelity};
use koord_queue_sim::trace::{Observed, TraceJob, write_trace};
use serde::Serialize;
use serde_json::{Value, json};

use crate::checker::UnitTimes;
use crate::plot::{Line, Panel, render};
use crate::report::percentile;
use crate::runner::JobTimeline;
use crate::shape::{CLASSES, Shape};

fn ms(seconds: f64) -> i64 {
    // Run times are minutes: far within range.
    (seconds * 1000.0).round() as i64
}

/// The run as a trace, ordered by submission: each job of the shape that
/// was created, submitted at its create (ms since the phase's start), with
/// its first release and its finish as the job runtime saw them and when
/// its unit was first seen (`units`, by job).
pub fn trace(
    shape: &Shape,
    timelines: &[JobTimeline],
    units: &[Option<UnitTimes>],
) -> Vec<TraceJob> {
    let mut jobs: Vec<TraceJob> = shape_import::trace(shape)
        .into_iter()
        .filter_map(|mut job| {
            let i = shape.job_index(&job.namespace, job.name.as_deref()?)?;
            let t = timelines.get(i)?;
            job.submit_ms = ms(t.created?);
            job.observed = Some(Observed {
                release_ms: t.releases.first().map(|r| ms(*r)),
                finish_ms: t.finished.map(ms),
                admitted_ms: units.get(i).copied().flatten().map(|u| ms(u.seen)),
            });
            Some(job)
        })
        .collect();
    jobs.sort_by_key(|j| j.submit_ms);
    jobs
}

/// The API's latencies as the simulator's [`Latency`] takes them, measured
/// from one run (medians over its jobs, ms), with what each median was
/// taken over.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Measured {
    /// Job create sent → its QueueUnit seen by a watch (the webhook's
    /// admission and unit create, the watch's delivery): `admit_ms`.
    pub admit_ms: i64,
    /// Jobs measured for `admit_ms`.
    pub admit_jobs: usize,
    /// The job's completion sent → seen by a watch (the scheduler's sees
    /// it about as soon, and frees the quota): `free_ms`.
    pub free_ms: i64,
    /// Jobs measured for `free_ms`.
    pub free_jobs: usize,
    /// What a release holds beyond the runtime and `free_ms`: the unit seen
    /// released → seen Succeed, less the runtime and that job's completion
    /// round trip (jobs released once). It is the release write, its watch
    /// delivery to the job's controller and the pods' start: `start_ms`.
    pub start_ms: i64,
    /// Jobs measured for `start_ms`.
    pub start_jobs: usize,
    /// The mean of the same start latencies: what a job holds on average
    /// (by Little's law, what sets the throughput), against the median
    /// the simulation is given.
    pub start_mean_ms: i64,
    /// The spread of `start_ms` over those jobs, its 90th percentile less
    /// its 10th: `spread_ms`.
    pub start_spread_ms: i64,
    /// The same latencies as they moved over the run: medians per bucket
    /// of [`PROFILE_BUCKET_MS`] by the moment each step began (the create
    /// sent, the unit seen released, the completion sent), where a bucket
    /// has at least [`PROFILE_MIN_SAMPLES`].
    pub profile: LatencyProfile,
    /// The spread of the start latencies around their bucket's median
    /// (90th less 10th percentile): the spread left once the profile says
    /// how the latency moved.
    pub start_spread_in_bucket_ms: i64,
}

/// Width of a bucket of the measured latency profile: short enough to
/// follow the backlog's rise and fall over a run of a few minutes, long
/// enough to hold hundreds of jobs at the baseline's rates.
pub const PROFILE_BUCKET_MS: i64 = 10_000;

/// Fewest samples a bucket's median is taken over; a bucket with fewer
/// leaves that latency to the run's median.
pub const PROFILE_MIN_SAMPLES: usize = 5;

impl Measured {
    /// As the simulator's settings take them (eviction: a release's write
    /// path, `start_ms`; a requeue adds nothing measured).
    pub fn latency(&self) -> Latency {
        Latency {
            admit_ms: self.admit_ms,
            start_ms: self.start_ms,
            free_ms: self.free_ms,
            evict_ms: self.start_ms,
            requeue_ms: 0,
            spread_ms: self.start_spread_ms,
            profile: None,
            admit_observed: false,
        }
    }

    /// The run's API replayed as far as it was measured: each job admitted
    /// when its unit was seen, the start and free latencies of the profile,
    /// the spread left within its buckets.
    pub fn profiled_latency(&self) -> Latency {
        Latency {
            spread_ms: self.start_spread_in_bucket_ms,
            profile: Some(Arc::new(self.profile.clone())),
            admit_observed: true,
            ..self.latency()
        }
    }
}

/// Samples of one latency (s), each at the moment its step began (s since
/// the phase's start).
#[derive(Default)]
struct Samples(Vec<(f64, f64)>);

impl Samples {
    fn push(&mut self, at: f64, value: f64) {
        self.0.push((at, value));
    }

    fn values(&self) -> Vec<f64> {
        self.0.iter().map(|(_, v)| *v).collect()
    }

    /// Each bucket's samples, by bucket index (samples before 0 are left out).
    fn by_bucket(&self) -> std::collections::BTreeMap<usize, Vec<f64>> {
        let mut out: std::collections::BTreeMap<usize, Vec<f64>> = Default::default();
        for &(at, v) in &self.0 {
            if let Ok(b) = usize::try_from(ms(at).div_euclid(PROFILE_BUCKET_MS)) {
                out.entry(b).or_default().push(v);
            }
        }
        out
    }

    /// The median of each bucket with enough samples (ms, not below 0).
    fn medians(&self) -> std::collections::BTreeMap<usize, i64> {
        self.by_bucket()
            .into_iter()
            .filter(|(_, v)| v.len() >= PROFILE_MIN_SAMPLES)
            .map(|(b, v)| (b, median_ms(v).0.max(0)))
            .collect()
    }

    /// The spread of the samples around their bucket's median (ms), over
    /// the buckets with a median.
    fn spread_in_buckets(&self) -> i64 {
        let mut residuals = Vec::new();
        for v in self.by_bucket().into_values() {
            if v.len() < PROFILE_MIN_SAMPLES {
                continue;
            }
            let median = median_ms(v.clone()).0 as f64 / 1000.0;
            residuals.extend(v.into_iter().map(|x| x - median));
        }
        median_ms(residuals).2.max(0)
    }
}

/// The profile of three latencies' bucket medians.
fn profile(admit: &Samples, start: &Samples, free: &Samples) -> LatencyProfile {
    let (admit, start, free) = (admit.medians(), start.medians(), free.medians());
    let last = [&admit, &start, &free]
        .iter()
        .filter_map(|m| m.keys().next_back().copied())
        .max();
    let buckets = match last {
        Some(last) => (0..=last)
            .map(|b| LatencyBucket {
                admit_ms: admit.get(&b).copied(),
                start_ms: start.get(&b).copied(),
                free_ms: free.get(&b).copied(),
            })
            .collect(),
        None => Vec::new(),
    };
    LatencyProfile {
        start_ms: 0,
        bucket_ms: PROFILE_BUCKET_MS,
        buckets,
    }
}

/// The median of `v` (s) in ms, how many it was taken over, and the spread
/// (90th less 10th percentile, ms).
fn median_ms(mut v: Vec<f64>) -> (i64, usize, i64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (0, 0, 0);
    }
    let spread = ms(percentile(&v, 0.9)) - ms(percentile(&v, 0.1));
    (ms(percentile(&v, 0.5)), n, spread)
}

/// The latencies of a run: its jobs' `timelines` (the job runtime's) and
/// their units' `units` (the QueueUnit watch's), by job.
pub fn measure(shape: &Shape, timelines: &[JobTimeline], units: &[Option<UnitTimes>]) -> Measured {
    let (mut admit, mut free, mut start) =
        (Samples::default(), Samples::default(), Samples::default());
    for (i, t) in timelines.iter().enumerate() {
        let unit = units.get(i).copied().flatten();
        if let (Some(created), Some(u)) = (t.created, unit) {
            admit.push(created, u.seen - created);
        }
        let round_trip = match (t.completion_sent, t.finished) {
            (Some(sent), Some(seen)) => Some((sent, seen - sent)),
            _ => None,
        };
        if let Some((sent, trip)) = round_trip {
            free.push(sent, trip);
        }
        let runtime = shape.jobs.get(i).map(|j| j.runtime.as_secs_f64());
        if let (Some(u), Some((_, trip)), Some(runtime), 1) =
            (unit, round_trip, runtime, t.releases.len())
            && let (Some(released), Some(succeeded)) = (u.released, u.succeeded)
        {
            start.push(released, succeeded - released - runtime - trip);
        }
    }
    let profile = profile(&admit, &start, &free);
    let start_spread_in_bucket_ms = start.spread_in_buckets();
    let (admit_ms, admit_jobs, _) = median_ms(admit.values());
    let (free_ms, free_jobs, _) = median_ms(free.values());
    let start_values = start.values();
    let start_mean_ms = if start_values.is_empty() {
        0
    } else {
        ms(start_values.iter().sum::<f64>() / start_values.len() as f64)
    };
    let (start_ms, start_jobs, start_spread_ms) = median_ms(start_values);
    Measured {
        admit_ms: admit_ms.max(0),
        admit_jobs,
        free_ms: free_ms.max(0),
        free_jobs,
        start_ms: start_ms.max(0),
        start_jobs,
        start_spread_ms: start_spread_ms.max(0),
        start_mean_ms,
        profile,
        start_spread_in_bucket_ms,
    }
}

/// Runs of each simulation with a latency spread, with consecutive seeds:
/// near saturation the seed alone moves a class's mean by a fifth, so one
/// run is one draw; eight take ~5 s at 15,000 jobs.
pub const FIDELITY_SEEDS: u64 = 8;

/// The simulations of the trace with one setting: their fidelity (each
/// job by its mean release over the runs) and each job's mean simulated
/// release (ms, its start latency included; `None` where a run never
/// released it), in the trace's order.
struct Simulated {
    fidelity: Option<Fidelity>,
    releases: Vec<Option<i64>>,
    seconds: f64,
}

fn simulate(
    cluster: &Cluster,
    trace: &[TraceJob],
    settings: Settings,
    seeds: u64,
) -> Result<Simulated> {
    let started = std::time::Instant::now();
    let latency = settings.latency.clone();
    let stream = || Ok(trace.iter().cloned().map(Ok));
    let seeded = koord_queue_sim::run_seeds(cluster, stream, settings, seeds)?;
    let (jobs, runs) = (seeded.first.jobs(), &seeded.releases);
    let fidelity = report::fidelity::of_runs(jobs, runs, &latency);
    Ok(Simulated {
        fidelity,
        releases: report::fidelity::mean_starts(runs, &latency),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Mean time to release per second of submission, for the plot.
fn per_second(points: impl Iterator<Item = (i64, i64)>) -> Vec<(f64, f64)> {
    let mut buckets: std::collections::BTreeMap<i64, (f64, usize)> = Default::default();
    for (submit, release) in points {
        let b = buckets.entry(submit.div_euclid(1000)).or_default();
        b.0 += (release - submit) as f64 / 1000.0;
        b.1 += 1;
    }
    buckets
        .into_iter()
        .map(|(s, (sum, n))| (s as f64 + 0.5, sum / n as f64))
        .collect()
}

/// The simulations a fidelity run compares with the real one.
struct Runs {
    zero: Simulated,
    measured: Simulated,
    profiled: Simulated,
}

/// Each job's submission and release, real and simulated three ways (ms;
/// empty where none), as CSV: the material to compare orders by queue,
/// class or time.
fn releases_csv(trace: &[TraceJob], runs: &Runs) -> String {
    let cell = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut out = String::from(
        "namespace,name,quota,class,submit_ms,real_release_ms,no_latency_ms,median_latencies_ms,latency_profile_ms\n",
    );
    for (i, j) in trace.iter().enumerate() {
        let sim = |s: &Simulated| cell(s.releases.get(i).copied().flatten());
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}\n",
            j.namespace,
            j.name.as_deref().unwrap_or(""),
            j.quota.as_deref().unwrap_or(""),
            j.priority_class.as_deref().unwrap_or(""),
            j.submit_ms,
            cell(j.observed.as_ref().and_then(|o| o.release_ms)),
            sim(&runs.zero),
            sim(&runs.measured),
            sim(&runs.profiled),
        ));
    }
    out
}

/// Per class: the mean time to release of the jobs submitted in each
/// second, real and simulated (without latency, with the run's medians,
/// with its latency profile).
fn plot(trace: &[TraceJob], runs: &Runs, subtitle: &str) -> String {
    let x_max = trace
        .iter()
        .map(|j| j.submit_ms as f64 / 1000.0)
        .fold(1.0, f64::max)
        .ceil()
        // The last second's point sits in its middle.
        + 1.0;
    let panels: Vec<Panel> = CLASSES
        .iter()
        .map(|class| {
            let of_class = |j: &&TraceJob| j.priority_class.as_deref() == Some(class.name);
            let real = per_second(
                trace
                    .iter()
                    .filter(of_class)
                    .filter_map(|j| Some((j.submit_ms, j.observed.as_ref()?.release_ms?))),
            );
            let simulated = |s: &Simulated| {
                per_second(
                    trace
                        .iter()
                        .zip(&s.releases)
                        .filter(|(j, _)| of_class(j))
                        .filter_map(|(j, r)| Some((j.submit_ms, (*r)?))),
                )
            };
            Panel {
                title: format!(
                    "{} jobs: mean time to release by second of submission",
                    class.name
                ),
                y_label: "s".into(),
                lines: vec![
                    Line {
                        label: "real".into(),
                        color: "#d62728",
                        points: real,
                        dashed: false,
                    },
                    Line {
                        label: "simulated: API replayed".into(),
                        color: "#2ca02c",
                        points: simulated(&runs.profiled),
                        dashed: false,
                    },
                    Line {
                        label: "simulated: medians".into(),
                        color: "#1f77b4",
                        points: simulated(&runs.measured),
                        dashed: true,
                    },
                    Line {
                        label: "simulated: no latency".into(),
                        color: "#7f7f7f",
                        points: simulated(&runs.zero),
                        dashed: true,
                    },
                ],
            }
        })
        .collect();
    render(
        "The simulator against the real system: Kueue's baseline shape",
        subtitle,
        &panels,
        x_max,
    )
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

/// Writes the run phase's trace (`trace.jsonl`), objects (`cluster.yaml`)
/// and latency profile (`latency-profile.json`) into `dir`, simulates the
/// trace with no latency, with the run's median latencies and with its
/// profile (the scheduler's `cycle_batch_ms`), and writes the comparison
/// (`fidelity.json`, `fidelity.svg`, each job's releases in
/// `releases.csv`); returns its JSON.
pub fn write_and_compare(
    dir: &Path,
    shape: &Shape,
    queue_spec: Option<&Value>,
    cycle_batch_ms: i64,
    timelines: &[JobTimeline],
    units: &[Option<UnitTimes>],
) -> Result<Value> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let jobs = trace(shape, timelines, units);
    let mut text = Vec::new();
    write_trace(&mut text, &jobs)?;
    write(&dir.join("trace.jsonl"), text)?;
    let yaml = to_yaml(&shape_import::objects(shape, 1.0, queue_spec))?;
    write(&dir.join("cluster.yaml"), &yaml)?;
    let cluster = Cluster::from_yaml(&[yaml])?;
    let measured = measure(shape, timelines, units);
    write(
        &dir.join("latency-profile.json"),
        serde_json::to_string_pretty(&measured.profile)? + "\n",
    )?;
    let settings = |latency: Latency| Settings {
        cycle_batch_ms,
        latency,
        ..Settings::default()
    };
    let runs = Runs {
        // Without latency there is no spread for a seed to draw.
        zero: simulate(&cluster, &jobs, settings(Latency::default()), 1)?,
        measured: simulate(
            &cluster,
            &jobs,
            settings(measured.latency()),
            FIDELITY_SEEDS,
        )?,
        profiled: simulate(
            &cluster,
            &jobs,
            settings(measured.profiled_latency()),
            FIDELITY_SEEDS,
        )?,
    };
    let l = measured.latency();
    let command = |spread_ms: i64, profile: &str| {
        format!(
            "koord-queue-simulate run --objects {dir}/cluster.yaml --trace {dir}/trace.jsonl --cycle-batch {cycle_batch_ms}ms --admit-latency {}ms --start-latency {}ms --free-latency {}ms --evict-latency {}ms --latency-spread {spread_ms}ms --seeds {FIDELITY_SEEDS}{profile}",
            l.admit_ms,
            l.start_ms,
            l.free_ms,
            l.evict_ms,
            dir = dir.display()
        )
    };
    let profile_flag = format!(
        " --latency-profile {} --admit-observed",
        dir.join("latency-profile.json").display()
    );
    let json = json!({
        "jobs": jobs.len(),
        "latencies_measured": measured,
        "latency_definitions": "medians over the run's jobs: admit = job create sent → its QueueUnit first seen by a watch; free = the job's completion sent → seen by the job runtime's watch; start = unit seen released → seen Succeed, less the runtime and that job's completion round trip (jobs released once); evict is taken as start (the same write path), requeue as 0; spread = start's 90th less its 10th percentile; the profile: the same medians per 10 s by when the step began (create sent, unit seen released, completion sent), its spread the start latencies' around their bucket's median, each job admitted when its unit was seen (--admit-observed); with a spread, each simulation is run with 8 seeds and each job compared by its mean release",
        "simulate_command": command(l.spread_ms, ""),
        "simulate_command_profiled": command(measured.start_spread_in_bucket_ms, &profile_flag),
        "with_latency_profile": runs.profiled.fidelity,
        "with_measured_latencies": runs.measured.fidelity,
        "without_latency": runs.zero.fidelity,
        "simulation_seconds": [runs.zero.seconds, runs.measured.seconds, runs.profiled.seconds],
        "goals": "per class |relative error| of the mean time to release ≤ 0.15; release order Spearman ≥ 0.9",
    });
    write(
        &dir.join("fidelity.json"),
        serde_json::to_string_pretty(&json)? + "\n",
    )?;
    let subtitle = format!(
        "{} jobs; medians measured: admit {} ms, start {} ms, free {} ms; API replayed = latency profile + admissions as seen; {FIDELITY_SEEDS} seeds each",
        jobs.len(),
        l.admit_ms,
        l.start_ms,
        l.free_ms
    );
    write(&dir.join("fidelity.svg"), plot(&jobs, &runs, &subtitle))?;
    write(&dir.join("releases.csv"), releases_csv(&jobs, &runs))?;
    Ok(json)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::{measure, trace};
    use crate::checker::UnitTimes;
    use crate::runner::JobTimeline;
    use crate::shape::Shape;

    #[test]
    fn the_trace_is_the_importers_stream_at_the_real_times() {
        let shape = Shape::new("t", 60, 30, 5, crate::shape::CLASSES).unwrap();
        let mut timelines = vec![JobTimeline::default(); shape.jobs.len()];
        // Job 1 created first, job 0 after it and released; the rest never.
        timelines[0].created = Some(2.5);
        timelines[0].releases = vec![3.0, 9.0];
        timelines[0].finished = Some(10.25);
        timelines[1].created = Some(1.0);
        let mut units = vec![None; shape.jobs.len()];
        units[0] = Some(UnitTimes {
            seen: 2.75,
            released: Some(3.0),
            succeeded: None,
        });
        let t = trace(&shape, &timelines, &units);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].name.as_deref(), Some(shape.jobs[1].name.as_str()));
        assert_eq!((t[0].submit_ms, t[1].submit_ms), (1000, 2500));
        let observed = t[1].observed.clone().unwrap();
        assert_eq!(
            (
                observed.release_ms,
                observed.finish_ms,
                observed.admitted_ms
            ),
            (Some(3000), Some(10_250), Some(2_750))
        );
        assert_eq!(t[0].observed.clone().unwrap().release_ms, None);
        // Sizes, classes and quotas are the importer's.
        let imported = koord_queue_sim::import::shape::trace(&shape);
        let same = imported
            .iter()
            .find(|j| j.name == t[1].name && j.namespace == t[1].namespace)
            .unwrap();
        assert_eq!(same.pod_sets, t[1].pod_sets);
        assert_eq!(same.quota, t[1].quota);
    }

    #[test]
    fn latencies_are_medians_of_the_runs_own_times() {
        let shape = Shape::new("t", 90, 30, 5, crate::shape::CLASSES).unwrap();
        let n = shape.jobs.len();
        let mut timelines = vec![JobTimeline::default(); n];
        let mut units = vec![None; n];
        for i in 0..3 {
            let runtime = shape.jobs[i].runtime.as_secs_f64();
            let k = i as f64;
            let t = &mut timelines[i];
            t.created = Some(10.0);
            t.releases = vec![20.0];
            t.completion_sent = Some(20.0 + runtime);
            // Completion round trips 0.1, 0.2, 0.3 s.
            t.finished = Some(20.0 + runtime + 0.1 * (k + 1.0));
            units[i] = Some(UnitTimes {
                // Admission 0.05, 0.15, 0.25 s.
                seen: 10.05 + 0.1 * k,
                released: Some(19.9),
                // Held runtime + round trip + 0.4 s.
                succeeded: Some(19.9 + runtime + 0.1 * (k + 1.0) + 0.4),
            });
        }
        // A job released twice counts for the admission and the free
        // latency, not for the start.
        let t = &mut timelines[3];
        t.created = Some(0.0);
        t.releases = vec![1.0, 30.0];
        t.completion_sent = Some(31.0);
        t.finished = Some(31.2);
        units[3] = Some(UnitTimes {
            seen: 0.15,
            released: Some(1.0),
            succeeded: Some(40.0),
        });
        let m = measure(&shape, &timelines, &units);
        assert_eq!((m.admit_ms, m.admit_jobs), (150, 4));
        assert_eq!((m.free_ms, m.free_jobs), (200, 4));
        assert_eq!((m.start_ms, m.start_jobs, m.start_mean_ms), (400, 3, 400));
        let l = m.latency();
        assert_eq!((l.admit_ms, l.start_ms, l.free_ms), (150, 400, 200));
        assert!(shape.jobs[0].runtime > Duration::ZERO);
    }

    /// Two buckets of five jobs each: the latencies of each bucket are its
    /// own medians, the run's medians those of all ten, and the spread
    /// within the buckets only what differs inside one.
    #[test]
    fn the_profile_follows_the_latencies_bucket_by_bucket() {
        let shape = Shape::new("t", 90, 30, 5, crate::shape::CLASSES).unwrap();
        let n = shape.jobs.len();
        assert!(n >= 11, "{n}");
        let mut timelines = vec![JobTimeline::default(); n];
        let mut units = vec![None; n];
        for i in 0..10 {
            let runtime = shape.jobs[i].runtime.as_secs_f64();
            // Jobs 0-4 in the first 10 s, 5-9 in the second; the second's
            // latencies are five times the first's, 0.01 s apart inside.
            let (base, factor) = if i < 5 { (1.0, 1.0) } else { (11.0, 5.0) };
            let k = (i % 5) as f64 * 0.01;
            let t = &mut timelines[i];
            t.created = Some(base);
            let released = base + 2.0;
            t.releases = vec![released + 0.05];
            t.completion_sent = Some(released + 0.05 + runtime);
            t.finished = Some(released + 0.05 + runtime + 0.1 * factor + k);
            units[i] = Some(UnitTimes {
                seen: base + 0.2 * factor + k,
                released: Some(released),
                succeeded: Some(released + runtime + 0.1 * factor + k + 0.4 * factor + k),
            });
        }
        // One job alone in the third bucket: too few for a median there.
        timelines[10].created = Some(25.0);
        units[10] = Some(UnitTimes {
            seen: 25.3,
            released: None,
            succeeded: None,
        });
        let m = measure(&shape, &timelines, &units);
        let p = &m.profile;
        assert_eq!((p.start_ms, p.bucket_ms), (0, 10_000));
        // The lone job makes no third bucket.
        assert_eq!(p.buckets.len(), 2, "{p:?}");
        let b = |i: usize| p.buckets[i];
        assert_eq!(
            (b(0).admit_ms, b(0).start_ms, b(0).free_ms),
            (Some(220), Some(420), Some(120))
        );
        assert_eq!(
            (b(1).admit_ms, b(1).start_ms, b(1).free_ms),
            (Some(1_020), Some(2_020), Some(520))
        );
        // The run's medians are over all jobs: the 6th of the 11 admissions
        // is the lone job's 0.3 s.
        assert_eq!(m.admit_ms, 300);
        // Inside a bucket the start latencies are 0.00-0.04 s apart: p90 less
        // p10 of the residuals, against 1.6 s over the run.
        assert_eq!(m.start_spread_in_bucket_ms, 40);
        assert!(m.start_spread_ms >= 1_600, "{}", m.start_spread_ms);
        let l = m.profiled_latency();
        assert_eq!(l.spread_ms, 40);
        assert_eq!(
            (l.start_at(15_000), l.start_at(35_000)),
            (2_020, m.start_ms)
        );
    }

    /// The files a fidelity run writes, from a small stream: the three
    /// simulations compared, the profile the third one read, one CSV row
    /// per job of the trace.
    #[test]
    fn a_fidelity_run_writes_its_comparison_profile_and_releases() {
        let shape = Shape::new("t", 60, 30, 5, crate::shape::CLASSES).unwrap();
        let n = shape.jobs.len();
        let mut timelines = vec![JobTimeline::default(); n];
        let mut units = vec![None; n];
        for i in 0..8 {
            let runtime = shape.jobs[i].runtime.as_secs_f64();
            let created = 0.1 * i as f64;
            let t = &mut timelines[i];
            t.created = Some(created);
            t.releases = vec![created + 1.0];
            t.completion_sent = Some(created + 1.0 + runtime);
            t.finished = Some(created + 1.2 + runtime);
            units[i] = Some(UnitTimes {
                seen: created + 0.3,
                released: Some(created + 0.9),
                succeeded: Some(created + 1.5 + runtime),
            });
        }
        let dir = std::env::temp_dir().join(format!("kq-fidelity-{}", std::process::id()));
        let json = super::write_and_compare(&dir, &shape, None, 20, &timelines, &units).unwrap();
        for key in [
            "with_latency_profile",
            "with_measured_latencies",
            "without_latency",
        ] {
            assert_eq!(json[key]["jobs_compared"], 8, "{key}: {}", json[key]);
        }
        // With latencies, eight seeds; without, one (no spread to draw).
        assert_eq!(json["with_latency_profile"]["runs"], 8);
        assert_eq!(json["with_measured_latencies"]["runs"], 8);
        assert_eq!(json["without_latency"]["runs"], 1);
        assert!(
            json["simulate_command_profiled"]
                .as_str()
                .unwrap()
                .contains("--latency-profile")
        );
        let profile: koord_queue_sim::engine::LatencyProfile = serde_json::from_str(
            &std::fs::read_to_string(dir.join("latency-profile.json")).unwrap(),
        )
        .unwrap();
        // Eight jobs in the first 10 s: admission 0.3 s, start 0.6 s less
        // the 0.2 s round trip, free 0.2 s.
        assert_eq!(profile.buckets.len(), 1);
        let b = profile.buckets[0];
        assert_eq!(
            (b.admit_ms, b.start_ms, b.free_ms),
            (Some(300), Some(400), Some(200))
        );
        let csv = std::fs::read_to_string(dir.join("releases.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 9, "{csv}");
        assert!(lines[0].starts_with("namespace,name,quota,class,submit_ms,real_release_ms"));
        // Every row has all nine columns, a real and three simulated releases.
        for row in &lines[1..] {
            let cells: Vec<&str> = row.split(',').collect();
            assert_eq!(cells.len(), 9, "{row}");
            assert!(cells[5..].iter().all(|c| c.parse::<i64>().is_ok()), "{row}");
        }
        for file in [
            "trace.jsonl",
            "cluster.yaml",
            "fidelity.json",
            "fidelity.svg",
        ] {
            assert!(dir.join(file).is_file(), "{file}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
