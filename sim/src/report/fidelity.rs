//! Fidelity: how close the simulation came to what the real system did,
//! when the trace says (`observed.release_ms`). Issue 40's measures: per
//! priority class the simulated and the real mean time to release and their
//! relative error (goal: within 15 %), and the rank correlation of the
//! release order (goal: Spearman ≥ 0.9).
//!
//! A real release is when the job was seen to start (the benchmark's: its
//! job seen unsuspended; SWF's: its start), which is after the scheduler's
//! decision by the release write and the job's start. The simulated release
//! compared with it is therefore the decision plus `--start-latency` (zero
//! by default), the same step the simulation adds before the job runs; with
//! a latency profile, the start latency of the moment of that decision.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{Latency, Simulation};
use crate::job::Job;

/// The fidelity section of a report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    /// Jobs with both a real and a simulated release (the rest are left out).
    pub jobs_compared: usize,
    /// Jobs with a real release the simulation never released.
    pub simulated_never_released: usize,
    /// Simulations compared (`--seeds`): with more than one, a job's
    /// simulated release is its mean over them.
    #[serde(default = "one_run")]
    pub runs: usize,
    /// Added to each simulated release before comparing (`--start-latency`;
    /// with a latency profile, where it has a figure, the figure of the
    /// release's moment instead).
    pub start_latency_ms: i64,
    /// Per priority class.
    pub by_class: Vec<ClassFidelity>,
    /// All compared jobs.
    pub total: ClassFidelity,
    /// Spearman's rank correlation of the simulated and the real release
    /// times (the order in which jobs were released); `None` below two jobs
    /// or when either side has one value only.
    pub release_order_spearman: Option<f64>,
    /// The same of the times to release (the order of the waits): stricter,
    /// as the release order follows the submission order for the most part.
    pub wait_order_spearman: Option<f64>,
}

/// One class's (or all jobs') mean times to release.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassFidelity {
    /// The class.
    pub name: String,
    /// Jobs compared.
    pub jobs: usize,
    /// Mean simulated time to release (s), start latency included.
    pub simulated_mean_s: f64,
    /// Mean real time to release (s).
    pub observed_mean_s: f64,
    /// (simulated − real) / real; `None` when the real mean is 0.
    pub relative_error: Option<f64>,
    /// With several runs: the lowest and the highest of their means (s),
    /// the spread the seed alone gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated_range_s: Option<[f64; 2]>,
}

fn one_run() -> usize {
    1
}

#[derive(Default)]
struct Sums {
    jobs: usize,
    simulated_ms: i128,
    observed_ms: i128,
}

impl Sums {
    fn add(&mut self, simulated_ms: i64, observed_ms: i64) {
        self.jobs += 1;
        self.simulated_ms += i128::from(simulated_ms);
        self.observed_ms += i128::from(observed_ms);
    }

    fn class(self, name: String) -> ClassFidelity {
        let n = self.jobs.max(1) as f64;
        let simulated = self.simulated_ms as f64 / n / 1000.0;
        let observed = self.observed_ms as f64 / n / 1000.0;
        ClassFidelity {
            name,
            jobs: self.jobs,
            simulated_mean_s: simulated,
            observed_mean_s: observed,
            relative_error: (observed > 0.0).then(|| (simulated - observed) / observed),
            simulated_range_s: None,
        }
    }
}

/// The fidelity of a finished run whose trace had observed releases
/// (`None` when none had), each simulated release taken its start latency
/// later (`latency`, the run's; see the module's comment).
pub fn of(sim: &Simulation, latency: &Latency) -> Option<Fidelity> {
    of_runs(sim.jobs(), &[first_releases(sim)], latency)
}

/// Each job's first release in a finished run (decision times, ms), in the
/// order of its jobs: what [`of_runs`] keeps of a run.
pub fn first_releases(sim: &Simulation) -> Vec<Option<i64>> {
    sim.outcomes().iter().map(|o| o.first_release_ms).collect()
}

/// The fidelity of several finished runs of one trace that differ by their
/// seed. Near saturation the seed alone moves a class's mean by a fifth
/// (which job takes a freed core decides who waits next), so one run is a
/// single draw: each job's simulated release is its mean over the runs
/// that all released it, and each class also gets the range of the runs'
/// own means. A job some run never released counts as never released.
/// `runs` are the runs' [`first_releases`] of `jobs`.
pub fn of_runs(jobs: &[Job], runs: &[Vec<Option<i64>>], latency: &Latency) -> Option<Fidelity> {
    if runs.is_empty() {
        return None;
    }
    let mut by_class: BTreeMap<String, Sums> = BTreeMap::new();
    let mut per_run: BTreeMap<String, Vec<Sums>> = BTreeMap::new();
    let mut total = Sums::default();
    let (mut simulated, mut observed) = (Vec::new(), Vec::new());
    let (mut simulated_waits, mut observed_waits) = (Vec::new(), Vec::new());
    let mut never = 0;
    let mut any = false;
    let mut starts = Vec::with_capacity(runs.len());
    for (index, job) in jobs.iter().enumerate() {
        let Some(real_wait) = job.observed_wait_ms else {
            continue;
        };
        any = true;
        if !starts_of(runs, index, latency, &mut starts) {
            never += 1;
            continue;
        }
        let class = per_run
            .entry(job.class.to_string())
            .or_insert_with(|| runs.iter().map(|_| Sums::default()).collect());
        for (sums, start) in class.iter_mut().zip(&starts) {
            sums.add(start - job.submit_ms, real_wait);
        }
        let started = mean(&starts);
        let sim_wait = started - job.submit_ms;
        by_class
            .entry(job.class.to_string())
            .or_default()
            .add(sim_wait, real_wait);
        total.add(sim_wait, real_wait);
        simulated.push(started as f64);
        observed.push((job.submit_ms + real_wait) as f64);
        simulated_waits.push(sim_wait as f64);
        observed_waits.push(real_wait as f64);
    }
    if !any {
        return None;
    }
    let range = |runs_of_class: Vec<Sums>| {
        let means: Vec<f64> = runs_of_class
            .into_iter()
            .map(|s| s.class(String::new()).simulated_mean_s)
            .collect();
        let low = means.iter().copied().fold(f64::INFINITY, f64::min);
        let high = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        [low, high]
    };
    Some(Fidelity {
        jobs_compared: total.jobs,
        simulated_never_released: never,
        runs: runs.len(),
        start_latency_ms: latency.start_ms,
        by_class: by_class
            .into_iter()
            .map(|(name, sums)| {
                let mut class = sums.class(name);
                if runs.len() > 1 {
                    class.simulated_range_s = per_run.remove(&class.name).map(range);
                }
                class
            })
            .collect(),
        total: total.class("total".into()),
        release_order_spearman: spearman(&simulated, &observed),
        wait_order_spearman: spearman(&simulated_waits, &observed_waits),
    })
}

/// Job `index`'s simulated starts (release plus its start latency) in
/// each of `runs`, into `out`; false when some run never released it.
fn starts_of(
    runs: &[Vec<Option<i64>>],
    index: usize,
    latency: &Latency,
    out: &mut Vec<i64>,
) -> bool {
    out.clear();
    for run in runs {
        let release = run.get(index).copied().flatten();
        out.extend(release.map(|r| r + latency.start_at(r)));
    }
    out.len() == runs.len()
}

/// The mean of `values` (ms; 0 for none). Means of milliseconds: a run of a
/// trace is far below i64's range.
fn mean(values: &[i64]) -> i64 {
    let n = values.len().max(1) as i128;
    (values.iter().map(|v| i128::from(*v)).sum::<i128>() / n) as i64
}

/// Each job's mean simulated start over `runs` (as [`of_runs`] compares
/// it), `None` for a job some run never released.
pub fn mean_starts(runs: &[Vec<Option<i64>>], latency: &Latency) -> Vec<Option<i64>> {
    let jobs = runs.iter().map(Vec::len).max().unwrap_or(0);
    let mut starts = Vec::with_capacity(runs.len());
    (0..jobs)
        .map(|i| starts_of(runs, i, latency, &mut starts).then(|| mean(&starts)))
        .collect()
}

/// Ranks of `values`, 1-based, ties given the mean of the ranks they span
/// (the usual convention, so that Spearman's rho is Pearson's of ranks).
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| values[*a].total_cmp(&values[*b]));
    let mut out = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        // Positions i..=j (0-based) share the mean rank.
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

/// Spearman's rank correlation of paired samples: Pearson's correlation of
/// their ranks (ties averaged). `None` for fewer than two pairs, unequal
/// lengths, or a side whose values are all equal (no order to compare).
pub fn spearman(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() != ys.len() || xs.len() < 2 {
        return None;
    }
    let (rx, ry) = (ranks(xs), ranks(ys));
    let n = rx.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let (mut cov, mut vx, mut vy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        let (da, db) = (a - mean, b - mean);
        cov += da * db;
        vx += da * da;
        vy += db * db;
    }
    (vx > 0.0 && vy > 0.0).then(|| cov / (vx * vy).sqrt())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{ranks, spearman};

    #[test]
    fn ties_share_their_mean_rank() {
        assert_eq!(ranks(&[10.0, 30.0, 20.0]), vec![1.0, 3.0, 2.0]);
        assert_eq!(ranks(&[5.0, 1.0, 5.0, 7.0]), vec![2.5, 1.0, 2.5, 4.0]);
    }

    #[test]
    fn spearman_of_known_orders() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        // Any increasing function: the same order.
        let same = spearman(&x, &[1.0, 4.0, 9.0, 16.0, 100.0]).unwrap();
        assert!((same - 1.0).abs() < 1e-12);
        let reversed = spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap();
        assert!((reversed + 1.0).abs() < 1e-12);
        // Two neighbours swapped among five: 1 - 6·Σd²/(n(n²-1)) = 1 - 12/120.
        let swapped = spearman(&x, &[1.0, 3.0, 2.0, 4.0, 5.0]).unwrap();
        assert!((swapped - 0.9).abs() < 1e-12, "{swapped}");
        // Ties: Pearson of the averaged ranks (1,2,3,4) against (1.5,1.5,3,4).
        let tied = spearman(&[1.0, 2.0, 3.0, 4.0], &[0.0, 0.0, 1.0, 2.0]).unwrap();
        let expected = 4.5 / (5.0f64 * 4.5).sqrt();
        assert!((tied - expected).abs() < 1e-12, "{tied} vs {expected}");
    }

    /// One quota of 2 CPU; three 2-CPU jobs of 10 s submitted together: the
    /// simulation releases them at 0, 10 and 20 s (plus the 20 ms cycle
    /// batch); the "real" system is told to have taken 1 s longer each, and
    /// released the last two in the other order.
    #[test]
    fn fidelity_of_a_known_run() {
        use crate::import::objects::{QuotaSpec, config, to_yaml};
        use crate::trace::{Observed, Quantity, TraceJob, TracePodSet};
        let mut two = koord_queue_api::Resources::new();
        two.set("cpu", 2000);
        let quota = QuotaSpec {
            name: "a".into(),
            min: two.clone(),
            max: two.clone(),
            namespaces: vec!["ns".into()],
            ..QuotaSpec::default()
        };
        let yaml = to_yaml(&[config(Some(&two)), quota.to_object()]).unwrap();
        let cluster = crate::cluster::Cluster::from_yaml(&[yaml]).unwrap();
        let job = |name: &str, observed_release: Option<i64>| TraceJob {
            name: Some(name.into()),
            namespace: "ns".into(),
            quota: Some("a".into()),
            priority_class: Some(if name == "j0" { "x" } else { "y" }.into()),
            priority: Some(0),
            submit_ms: 0,
            runtime_ms: 10_000,
            pod_sets: vec![TracePodSet {
                count: 1,
                requests: [("cpu".to_string(), Quantity("2".into()))].into(),
                ..TracePodSet::default()
            }],
            observed: observed_release.map(|r| Observed {
                release_ms: Some(r),
                ..Observed::default()
            }),
            ..TraceJob::default()
        };
        let trace = [
            job("j0", Some(1_020)),
            job("j1", Some(21_020)),
            job("j2", Some(11_020)),
        ];
        let settings = crate::engine::Settings::default();
        let report = crate::simulate(&cluster, &trace, settings.clone()).unwrap();
        let f = report.fidelity.unwrap();
        assert_eq!((f.jobs_compared, f.simulated_never_released), (3, 0));
        assert_eq!(f.by_class.len(), 2);
        let x = &f.by_class[0];
        assert_eq!((x.name.as_str(), x.jobs), ("x", 1));
        assert!((x.simulated_mean_s - 0.02).abs() < 1e-9, "{x:?}");
        assert!((x.observed_mean_s - 1.02).abs() < 1e-9);
        assert!((x.relative_error.unwrap() + 1.0 / 1.02).abs() < 1e-9);
        // Simulated order 0, 1, 2 against the real 0, 2, 1: 1 - 6·2/(3·8).
        assert!((f.release_order_spearman.unwrap() - 0.5).abs() < 1e-9);
        // A start latency of 1 s: each release is compared 1 s later (the
        // first one's now agrees), and each job holds its quota 1 s longer
        // (releases at 0.02, 11.04, 22.06 s, compared at 1.02, 12.04, 23.06).
        let late = crate::engine::Settings {
            latency: crate::engine::Latency {
                start_ms: 1_000,
                ..crate::engine::Latency::default()
            },
            ..settings
        };
        let f = crate::simulate(&cluster, &trace, late)
            .unwrap()
            .fidelity
            .unwrap();
        assert_eq!(f.start_latency_ms, 1_000);
        assert!(f.by_class[0].relative_error.unwrap().abs() < 1e-9);
        assert!(
            (f.total.simulated_mean_s - 12.04).abs() < 1e-9,
            "{:?}",
            f.total
        );
        // A profile: releases decided in [10 s, 20 s) start after 4 s, the
        // rest after the median's 1 s. j0 as before (decided at 0.02 s,
        // compared at 1.02 s, holding until 11.02 s); j1 decided at
        // 11.04 s, compared and holding from 15.04 s, its quota free at
        // 25.04 s; j2 decided at 25.06 s, compared at 26.06 s.
        let profiled = crate::engine::Settings {
            latency: crate::engine::Latency {
                start_ms: 1_000,
                profile: Some(std::sync::Arc::new(crate::engine::LatencyProfile {
                    start_ms: 10_000,
                    bucket_ms: 10_000,
                    buckets: vec![crate::engine::LatencyBucket {
                        start_ms: Some(4_000),
                        ..Default::default()
                    }],
                })),
                ..crate::engine::Latency::default()
            },
            ..settings
        };
        let report = crate::simulate(&cluster, &trace, profiled).unwrap();
        let f = report.fidelity.unwrap();
        let mean = (1.02 + 15.04 + 26.06) / 3.0;
        assert!(
            (f.total.simulated_mean_s - mean).abs() < 1e-9,
            "{:?}",
            f.total
        );
        // A trace without observed times has no fidelity section.
        let bare: Vec<TraceJob> = trace
            .iter()
            .cloned()
            .map(|mut j| {
                j.observed = None;
                j
            })
            .collect();
        let none = crate::simulate(&cluster, &bare, crate::engine::Settings::default()).unwrap();
        assert!(none.fidelity.is_none());
    }

    #[test]
    fn no_order_no_correlation() {
        assert_eq!(spearman(&[1.0], &[1.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[3.0, 3.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[1.0]), None);
    }

    /// Two runs of one trace: each job compared by its mean release, each
    /// class given the range of the runs' means; a job one run never
    /// released is left out as never released, a job without a real
    /// release is not compared.
    #[test]
    fn runs_are_compared_by_each_jobs_mean_release() {
        use std::sync::Arc;
        let job = |name: &str, class: &str, observed: Option<i64>| crate::job::Job {
            namespace: Arc::from("ns"),
            name: Box::from(name),
            quota: None,
            queue: Arc::from("q"),
            priority: 0,
            class: Arc::from(class),
            submit_ms: 0,
            run_ms: 1_000,
            bounded_out: false,
            max_run_ms: None,
            request: Default::default(),
            labels: Default::default(),
            observed_wait_ms: observed,
            observed_admit_ms: None,
        };
        let jobs = [
            job("j0", "x", Some(1_000)),
            job("j1", "x", Some(3_000)),
            job("j2", "y", Some(2_000)),
            job("j3", "y", None),
        ];
        let a = vec![Some(500), Some(2_500), Some(1_000), Some(0)];
        let b = vec![Some(1_500), Some(3_500), None, Some(0)];
        let latency = crate::engine::Latency {
            start_ms: 100,
            ..Default::default()
        };
        let f = super::of_runs(&jobs, &[a.clone(), b], &latency).unwrap();
        assert_eq!(
            (f.runs, f.jobs_compared, f.simulated_never_released),
            (2, 2, 1)
        );
        assert_eq!(f.by_class.len(), 1);
        let x = &f.by_class[0];
        // Means 1,000 and 3,000 ms, each 100 ms of start latency later.
        assert!((x.simulated_mean_s - 2.1).abs() < 1e-9, "{x:?}");
        assert!((x.observed_mean_s - 2.0).abs() < 1e-9);
        let [low, high] = x.simulated_range_s.unwrap();
        assert!(
            (low - 1.6).abs() < 1e-9 && (high - 2.6).abs() < 1e-9,
            "{low} {high}"
        );
        assert!((f.release_order_spearman.unwrap() - 1.0).abs() < 1e-9);
        // One run: no range, every job with a real release compared.
        let one = super::of_runs(&jobs, &[a], &latency).unwrap();
        assert_eq!(
            (one.runs, one.jobs_compared, one.simulated_never_released),
            (1, 3, 0)
        );
        assert!(one.by_class.iter().all(|c| c.simulated_range_s.is_none()));
        assert!(super::of_runs(&jobs, &[], &latency).is_none());
        // The same means, job by job, as the plot and releases.csv take them.
        let b = vec![Some(1_500), Some(3_500), None, Some(0)];
        assert_eq!(
            super::mean_starts(
                &[vec![Some(500), Some(2_500), Some(1_000), Some(0)], b],
                &latency
            ),
            [Some(1_100), Some(3_100), None, Some(100)]
        );
    }
}
