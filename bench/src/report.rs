//! Statistics of a phase: time to release per class, throughput, quota
//! usage, and the pending / running / finished series of the plot.

use serde::Serialize;

use super::checker::UnitTimes;
use super::runner::JobTimeline;
use super::shape::{LEAF_MIN_CPU, Shape};

/// Distribution of a duration, seconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Distribution {
    /// Samples.
    pub count: usize,
    /// Mean.
    pub mean_s: f64,
    /// Median.
    pub p50_s: f64,
    /// 95th percentile.
    pub p95_s: f64,
    /// 99th percentile.
    pub p99_s: f64,
    /// Largest.
    pub max_s: f64,
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Distribution {
    /// Of `samples`.
    pub fn of(mut samples: Vec<f64>) -> Self {
        samples.sort_by(f64::total_cmp);
        if samples.is_empty() {
            return Self::default();
        }
        Self {
            count: samples.len(),
            mean_s: samples.iter().sum::<f64>() / samples.len() as f64,
            p50_s: percentile(&samples, 0.50),
            p95_s: percentile(&samples, 0.95),
            p99_s: percentile(&samples, 0.99),
            max_s: samples.last().copied().unwrap_or(0.0),
        }
    }
}

/// Each class's name with the samples `sample` gives of its jobs (given
/// each job and its index; `None`: the job gives none).
fn per_class<T>(
    shape: &Shape,
    jobs: &[JobTimeline],
    sample: impl Fn(&JobTimeline, usize) -> Option<T>,
) -> Vec<(&'static str, Vec<T>)> {
    shape
        .classes
        .iter()
        .enumerate()
        .map(|(c, class)| {
            let samples = jobs
                .iter()
                .zip(&shape.jobs)
                .enumerate()
                .filter(|(_, (_, plan))| plan.class == c)
                .filter_map(|(i, (j, _))| sample(j, i))
                .collect();
            (class.name, samples)
        })
        .collect()
}

/// [`per_class`] of sample pairs, as two distributions.
fn per_class_pairs(
    shape: &Shape,
    jobs: &[JobTimeline],
    sample: impl Fn(&JobTimeline, usize) -> Option<(f64, f64)>,
) -> Vec<(&'static str, Distribution, Distribution)> {
    per_class(shape, jobs, sample)
        .into_iter()
        .map(|(class, pairs)| {
            let (a, b): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
            (class, Distribution::of(a), Distribution::of(b))
        })
        .collect()
}

/// Time from the create request to the (last) release, per class, and
/// the same to the first release.
pub fn time_to_release(
    shape: &Shape,
    jobs: &[JobTimeline],
) -> Vec<(&'static str, Distribution, Distribution)> {
    per_class_pairs(shape, jobs, |j, _| {
        let created = j.created?;
        Some((j.releases.last()? - created, j.releases.first()? - created))
    })
}

/// Time from the (last) release to the finish as this runtime saw them,
/// per class: how long a released job kept its quota — its runtime plus
/// the latency of its start and of its completion, which the API server's
/// load stretches. A policy that releases a class while the API is
/// congested has that class hold its quota longer per job (issue 44).
pub fn release_to_finish(shape: &Shape, jobs: &[JobTimeline]) -> Vec<(&'static str, Distribution)> {
    per_class(shape, jobs, |j, _| {
        Some(j.finished? - *j.releases.last()?).filter(|d| *d >= 0.0)
    })
    .into_iter()
    .map(|(class, held)| (class, Distribution::of(held)))
    .collect()
}

/// Each class's time to its first release in two parts: from the create
/// request until the watch saw the job's unit (the API server, the webhook
/// and its backlog: a unit that does not exist yet cannot be put first),
/// and from then until the first release (the queue). `units` holds each
/// job's unit's times by the job's index (`Checker::unit_times`).
pub fn time_to_release_parts(
    shape: &Shape,
    jobs: &[JobTimeline],
    units: &[Option<UnitTimes>],
) -> Vec<(&'static str, Distribution, Distribution)> {
    per_class_pairs(shape, jobs, |j, i| {
        let (created, first) = (j.created?, *j.releases.first()?);
        // The watch may report the unit after the job's release (two
        // watches): the queue then took no time.
        let seen = units
            .get(i)
            .copied()
            .flatten()?
            .seen
            .max(created)
            .min(first);
        Some((seen - created, first - seen))
    })
}

/// One sample of the plot's series.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Created, not running, not finished.
    pub pending: i64,
    /// Released and not finished or suspended.
    pub running: i64,
    /// Finished.
    pub finished: i64,
}

/// Pending / running / finished jobs of class `class` (`None`: all) at
/// `samples` evenly spaced times over `[0, end]`.
pub fn series(
    shape: &Shape,
    jobs: &[JobTimeline],
    class: Option<usize>,
    end: f64,
    samples: usize,
) -> Vec<(f64, Counts)> {
    // (time, d_pending, d_running, d_finished)
    let mut deltas: Vec<(f64, i64, i64, i64)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        if class.is_some_and(|c| shape.jobs[i].class != c) {
            continue;
        }
        let Some(created) = j.created else { continue };
        deltas.push((created, 1, 0, 0));
        for r in &j.releases {
            deltas.push((*r, -1, 1, 0));
        }
        for s in &j.suspensions {
            deltas.push((*s, 1, -1, 0));
        }
        if let Some(f) = j.finished {
            let running = j.releases.len() > j.suspensions.len();
            if running {
                deltas.push((f, 0, -1, 1));
            } else {
                deltas.push((f, -1, 0, 1));
            }
        }
    }
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0));
    let samples = samples.max(2);
    let mut out = Vec::with_capacity(samples);
    let mut now = Counts::default();
    let mut k = 0;
    for s in 0..samples {
        let t = end * s as f64 / (samples - 1) as f64;
        while k < deltas.len() && deltas[k].0 <= t {
            now.pending += deltas[k].1;
            now.running += deltas[k].2;
            now.finished += deltas[k].3;
            k += 1;
        }
        out.push((t, now));
    }
    out
}

/// Releases per second while at least one job was pending (created, not
/// released): how fast the system released work whenever there was work
/// to release.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PendingPeriod {
    /// Seconds during which some job was pending.
    pub pending_seconds: f64,
    /// Releases within those seconds.
    pub releases: usize,
    /// Their rate.
    pub releases_per_s: f64,
}

/// The pending-period release rate of `jobs`.
pub fn pending_period(jobs: &[JobTimeline]) -> PendingPeriod {
    let mut deltas: Vec<(f64, i64, usize)> = Vec::new();
    for j in jobs {
        let Some(created) = j.created else { continue };
        deltas.push((created, 1, 0));
        for r in &j.releases {
            deltas.push((*r, -1, 1));
        }
        for s in &j.suspensions {
            deltas.push((*s, 1, 0));
        }
        if let Some(f) = j.finished
            && j.releases.len() <= j.suspensions.len()
        {
            deltas.push((f, -1, 0));
        }
    }
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut pending, mut since, mut seconds, mut releases) = (0i64, 0.0, 0.0, 0usize);
    for (t, d, r) in deltas {
        if pending > 0 {
            seconds += t - since;
            releases += r;
        }
        pending += d;
        since = t;
    }
    PendingPeriod {
        pending_seconds: seconds,
        releases,
        releases_per_s: if seconds > 0.0 {
            releases as f64 / seconds
        } else {
            0.0
        },
    }
}

/// CPU usage per leaf as Kueue reports it: time-averaged held CPU over the
/// monitoring period as a percentage of the leaf's guaranteed (nominal) CPU;
/// and the same over all leaves.
pub fn usage_percent(shape: &Shape, integrals: &[f64], seconds: f64) -> (f64, Vec<(String, f64)>) {
    if seconds <= 0.0 {
        return (0.0, Vec::new());
    }
    let nominal = f64::from(LEAF_MIN_CPU) * 1000.0 * seconds;
    let per_leaf: Vec<(String, f64)> = shape
        .leaves
        .iter()
        .zip(integrals)
        .map(|(l, i)| (l.name.clone(), 100.0 * i / nominal))
        .collect();
    let all = 100.0 * integrals.iter().sum::<f64>() / (nominal * shape.leaves.len() as f64);
    (all, per_leaf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions() {
        let d = Distribution::of((1..=100).map(f64::from).collect());
        assert_eq!(d.p50_s, 50.0);
        assert_eq!(d.p95_s, 95.0);
        assert_eq!(d.p99_s, 99.0);
        assert_eq!(d.max_s, 100.0);
        assert!((d.mean_s - 50.5).abs() < 1e-9);
    }

    #[test]
    fn series_and_pending_period() -> anyhow::Result<()> {
        let shape = Shape::new("t", 30, 30, 5, crate::shape::CLASSES)?;
        let mut jobs = vec![JobTimeline::default(); 30];
        jobs[0] = JobTimeline::seen(0.0, &[1.0], &[], Some(2.0));
        jobs[1] = JobTimeline::seen(0.5, &[1.5, 4.0], &[3.0], Some(5.0));
        let s = series(&shape, &jobs, None, 6.0, 7);
        let at = |t: usize| (s[t].1.pending, s[t].1.running, s[t].1.finished);
        assert_eq!(at(1), (1, 1, 0));
        assert_eq!(at(2), (0, 1, 1));
        assert_eq!(at(3), (1, 0, 1));
        assert_eq!(at(6), (0, 0, 2));
        // Released at 1, finished at 2; released again at 4, finished at 5:
        // each held its quota 1 s from its last release; the others none.
        let held = release_to_finish(&shape, &jobs);
        assert_eq!(held.iter().map(|(_, d)| d.count).sum::<usize>(), 2);
        assert!(held.iter().all(|(_, d)| d.count == 0 || d.max_s == 1.0));
        // Created at 0 and 0.5, units seen at 0.25 and 1.0, first released
        // at 1 and 1.5; a unit seen after its job's release counts as seen then.
        let mut units = vec![None; 30];
        units[0] = Some(UnitTimes {
            seen: 0.25,
            ..UnitTimes::default()
        });
        units[1] = Some(UnitTimes {
            seen: 1.0,
            ..UnitTimes::default()
        });
        units[2] = Some(UnitTimes {
            seen: 9.0,
            ..UnitTimes::default()
        });
        jobs[2] = JobTimeline::seen(1.0, &[3.0], &[], None);
        let parts = time_to_release_parts(&shape, &jobs, &units);
        let total = |d: &Distribution| d.mean_s * d.count as f64;
        let to_unit: f64 = parts.iter().map(|(_, t, _)| total(t)).sum();
        let in_queue: f64 = parts.iter().map(|(_, _, q)| total(q)).sum();
        assert_eq!(parts.iter().map(|(_, t, _)| t.count).sum::<usize>(), 3);
        // To the unit: 0.25 + 0.5 + 2.0 (clamped to the release); in the
        // queue: 0.75 + 0.5 + 0.
        assert!((to_unit - 2.75).abs() < 1e-9, "{to_unit}");
        assert!((in_queue - 1.25).abs() < 1e-9, "{in_queue}");
        jobs[2] = JobTimeline::default();
        let p = pending_period(&jobs);
        // Pending during [0, 1.5) and [3, 4): 2.5 s, 3 releases within.
        assert!((p.pending_seconds - 2.5).abs() < 1e-9);
        assert_eq!(p.releases, 3);
        Ok(())
    }
}
