//! The figures of a fair-sharing run from its samples: each child's
//! running CPU as the job runtime sees it, every sample interval. What a
//! child borrows is what it runs above its min (`max(0, used − min)`); its
//! share of the borrowed capacity over a window is the CPU-seconds it
//! borrowed there over the CPU-seconds all children borrowed (the samples
//! are equally spaced, so sums stand for time integrals).

use serde::Serialize;

/// One sample.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the first create.
    pub t: f64,
    /// Running CPU per child, millicores.
    pub used_m: Vec<i64>,
    /// Jobs per child created and not yet released.
    pub waiting: Vec<usize>,
}

/// CPU (cores) each child borrows in `sample`: what runs above its min.
pub fn borrowed(sample: &Sample, mins_cpu: &[f64]) -> Vec<f64> {
    sample
        .used_m
        .iter()
        .zip(mins_cpu)
        .map(|(used, min)| (*used as f64 / 1000.0 - min).max(0.0))
        .collect()
}

/// The steady-state window: the samples taken from `from` to `to` seconds
/// (both included). `samples` are in time order.
pub fn window(samples: &[Sample], from: f64, to: f64) -> &[Sample] {
    let start = samples.partition_point(|s| s.t < from);
    let end = samples.partition_point(|s| s.t <= to);
    &samples[start..end.max(start)]
}

/// Jain's fairness index of `x`: (Σx)² / (n·Σx²) — 1 when all are equal,
/// 1/n when one has everything. `None` for no values or all zero.
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || squares <= 0.0 {
        return None;
    }
    Some(sum * sum / (x.len() as f64 * squares))
}

/// The figures of one window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    /// Samples in the window.
    pub samples: usize,
    /// Each child's share of the borrowed CPU-seconds (0..1; all 0 when
    /// nothing was borrowed).
    pub shares: Vec<f64>,
    /// Each child's time-averaged running CPU.
    pub mean_used_cpu: Vec<f64>,
    /// Each child's time-averaged borrowed CPU.
    pub mean_borrowed_cpu: Vec<f64>,
    /// Time-averaged running CPU of all children over the parent's max.
    pub utilization: f64,
    /// Jain's index of the weighted shares (share / weight).
    pub jain_weighted: Option<f64>,
    /// Largest |share − target| of a child, as a fraction (0.05: 5 points).
    pub max_deviation: f64,
}

/// The figures of `samples` (one window) for children of `mins_cpu` and
/// `weights` under a parent of `parent_cpu`, against `targets` (the shares
/// weighted fair sharing gives).
pub fn figures(
    samples: &[Sample],
    mins_cpu: &[f64],
    weights: &[f64],
    targets: &[f64],
    parent_cpu: f64,
) -> Figures {
    let n = mins_cpu.len();
    let mut used = vec![0.0; n];
    let mut lent = vec![0.0; n];
    for s in samples {
        for (k, b) in borrowed(s, mins_cpu).into_iter().enumerate() {
            lent[k] += b;
            used[k] += s.used_m.get(k).copied().unwrap_or(0) as f64 / 1000.0;
        }
    }
    let count = samples.len().max(1) as f64;
    let total: f64 = lent.iter().sum();
    let shares: Vec<f64> = lent
        .iter()
        .map(|b| if total > 0.0 { b / total } else { 0.0 })
        .collect();
    let weighted: Vec<f64> = shares.iter().zip(weights).map(|(s, w)| s / w).collect();
    let max_deviation = shares
        .iter()
        .zip(targets)
        .map(|(s, t)| (s - t).abs())
        .fold(0.0, f64::max);
    let mean_used_cpu: Vec<f64> = used.iter().map(|u| u / count).collect();
    let utilization = if parent_cpu > 0.0 && !samples.is_empty() {
        mean_used_cpu.iter().sum::<f64>() / parent_cpu
    } else {
        0.0
    };
    Figures {
        samples: samples.len(),
        mean_borrowed_cpu: lent.iter().map(|b| b / count).collect(),
        mean_used_cpu,
        utilization,
        jain_weighted: if total > 0.0 { jain(&weighted) } else { None },
        max_deviation,
        shares,
    }
}

/// Each child's share of the borrowed capacity over time: at every sample,
/// over the `span` seconds up to it (a moving window, for the plot).
/// Samples where nothing was borrowed in the window are left out.
pub fn shares_over_time(samples: &[Sample], mins_cpu: &[f64], span: f64) -> Vec<(f64, Vec<f64>)> {
    let n = mins_cpu.len();
    let lent: Vec<Vec<f64>> = samples.iter().map(|s| borrowed(s, mins_cpu)).collect();
    let mut out = Vec::with_capacity(samples.len());
    let mut sums = vec![0.0; n];
    let mut first = 0;
    for (k, s) in samples.iter().enumerate() {
        for (c, b) in lent[k].iter().enumerate() {
            sums[c] += b;
        }
        while first <= k && samples[first].t <= s.t - span {
            for (c, b) in lent[first].iter().enumerate() {
                sums[c] -= b;
            }
            first += 1;
        }
        let total: f64 = sums.iter().sum();
        if total > 1e-9 {
            out.push((s.t, sums.iter().map(|b| (b / total).max(0.0)).collect()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINS: [f64; 3] = [10.0, 10.0, 10.0];
    const WEIGHTS: [f64; 3] = [1.0, 1.0, 2.0];
    const TARGETS: [f64; 3] = [0.25, 0.25, 0.5];

    fn sample(t: f64, cpu: [f64; 3]) -> Sample {
        Sample {
            t,
            used_m: cpu.iter().map(|c| (c * 1000.0) as i64).collect(),
            waiting: vec![20; 3],
        }
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[0.25, 0.25, 0.25]), Some(1.0));
        let one_has_all = jain(&[1.0, 0.0, 0.0]).unwrap_or(0.0);
        assert!((one_has_all - 1.0 / 3.0).abs() < 1e-12);
        // (0.5 + 0.25)² / (2 · (0.25 + 0.0625)) = 0.9
        assert!((jain(&[0.5, 0.25]).unwrap_or(0.0) - 0.9).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn weighted_fair_split_scores_one() {
        // 90 CPU borrowed 22.5 / 22.5 / 45 above mins of 10.
        let samples: Vec<Sample> = (0..10)
            .map(|k| sample(k as f64 * 0.5, [32.5, 32.5, 55.0]))
            .collect();
        let f = figures(&samples, &MINS, &WEIGHTS, &TARGETS, 120.0);
        assert_eq!(f.samples, 10);
        for (s, t) in f.shares.iter().zip(TARGETS) {
            assert!((s - t).abs() < 1e-9, "{:?}", f.shares);
        }
        assert!((f.jain_weighted.unwrap_or(0.0) - 1.0).abs() < 1e-9);
        assert!((f.utilization - 1.0).abs() < 1e-9);
        assert!(f.max_deviation < 1e-9);
        assert_eq!(f.mean_borrowed_cpu, vec![22.5, 22.5, 45.0]);
    }

    #[test]
    fn first_come_split_is_unfair_and_below_min_borrows_nothing() {
        // a takes all that is borrowed; b runs below its min (borrows 0,
        // not -4); c at its min.
        let samples = vec![
            sample(0.0, [100.0, 6.0, 10.0]),
            sample(0.5, [100.0, 6.0, 10.0]),
        ];
        let f = figures(&samples, &MINS, &WEIGHTS, &TARGETS, 120.0);
        assert_eq!(f.shares, vec![1.0, 0.0, 0.0]);
        assert!((f.jain_weighted.unwrap_or(0.0) - 1.0 / 3.0).abs() < 1e-9);
        assert!((f.utilization - 116.0 / 120.0).abs() < 1e-9);
        assert!((f.max_deviation - 0.75).abs() < 1e-9);
    }

    #[test]
    fn shares_are_of_borrowed_cpu_seconds_not_a_mean_of_ratios() {
        // 1 s: a borrows 10 of 10; 1 s: a 10 and c 80 of 90. Over the two,
        // a 20 of 100 CPU-seconds, c 80 (a mean of ratios would say 55 %).
        let samples = vec![
            sample(0.0, [20.0, 10.0, 10.0]),
            sample(1.0, [20.0, 10.0, 90.0]),
        ];
        let f = figures(&samples, &MINS, &WEIGHTS, &TARGETS, 120.0);
        assert!((f.shares[0] - 0.2).abs() < 1e-9);
        assert!((f.shares[2] - 0.8).abs() < 1e-9);
    }

    #[test]
    fn nothing_borrowed_gives_no_index() {
        let samples = vec![sample(0.0, [5.0, 10.0, 0.0])];
        let f = figures(&samples, &MINS, &WEIGHTS, &TARGETS, 120.0);
        assert_eq!(f.shares, vec![0.0; 3]);
        assert_eq!(f.jain_weighted, None);
        let empty = figures(&[], &MINS, &WEIGHTS, &TARGETS, 120.0);
        assert_eq!((empty.samples, empty.utilization), (0, 0.0));
    }

    #[test]
    fn the_window_skips_the_warm_up_and_the_drain() {
        let samples: Vec<Sample> = (0..=20)
            .map(|k| sample(k as f64 * 0.5, [20.0, 20.0, 20.0]))
            .collect();
        let w = window(&samples, 3.0, 8.0);
        assert_eq!(w.first().map(|s| s.t), Some(3.0));
        assert_eq!(w.last().map(|s| s.t), Some(8.0));
        assert_eq!(w.len(), 11);
        assert!(window(&samples, 11.0, 12.0).is_empty());
        assert!(window(&samples, 5.0, 4.0).is_empty());
    }

    #[test]
    fn moving_shares_follow_a_change_within_the_span() {
        // a borrows everything for 10 s, then c does.
        let samples: Vec<Sample> = (0..40)
            .map(|k| {
                let t = k as f64 * 0.5;
                if t < 10.0 {
                    sample(t, [40.0, 10.0, 10.0])
                } else {
                    sample(t, [10.0, 10.0, 40.0])
                }
            })
            .collect();
        let over = shares_over_time(&samples, &MINS, 2.0);
        assert_eq!(over.len(), 40);
        let at = |t: f64| {
            over.iter()
                .find(|(x, _)| (*x - t).abs() < 1e-9)
                .map(|(_, s)| s.clone())
        };
        assert_eq!(at(9.5), Some(vec![1.0, 0.0, 0.0]));
        // At 11 s the window (9, 11] holds 9.5 and 10.0 … 11.0: 1 of 4 for a.
        let mid = at(11.0).unwrap_or_default();
        assert!(
            (mid[0] - 0.25).abs() < 1e-9 && (mid[2] - 0.75).abs() < 1e-9,
            "{mid:?}"
        );
        assert_eq!(at(12.5), Some(vec![0.0, 0.0, 1.0]));
    }
}
