//! A distribution of times: mean and nearest-rank percentiles.

use serde::{Deserialize, Serialize};

/// Times (seconds) summarized.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// How many.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Dist {
    /// The distribution of `ms` (milliseconds), in seconds.
    pub fn of_ms(mut ms: Vec<i64>) -> Self {
        if ms.is_empty() {
            return Self::default();
        }
        ms.sort_unstable();
        let n = ms.len();
        // Nearest rank: the smallest value with at least p% at or below it.
        let rank = |p: usize| ms[(n * p).div_ceil(100).clamp(1, n) - 1] as f64 / 1000.0;
        let sum: i128 = ms.iter().map(|v| i128::from(*v)).sum();
        Self {
            count: n,
            mean: sum as f64 / n as f64 / 1000.0,
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: ms[n - 1] as f64 / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Dist;

    #[test]
    fn nearest_rank() {
        let d = Dist::of_ms((1..=100).map(|s| s * 1000).collect());
        assert_eq!((d.p50, d.p90, d.p99, d.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(d.mean, 50.5);
        assert_eq!(Dist::of_ms(vec![]).count, 0);
        assert_eq!(Dist::of_ms(vec![3000]).p99, 3.0);
    }
}
