//! Runtimes learned from finished units: how long a unit of each queue held
//! its quota, from its release to its end. The estimate of a unit without a
//! run bound is the median of its queue's last finished units — the median,
//! not the mean, so that a few jobs that crashed at once or hung to their
//! deadline do not move every estimate — else of the cluster's.
//!
//! Kept in memory: after a restart the estimates of unbounded units wait
//! for units to finish again.

use std::collections::{HashMap, VecDeque};

/// Finished units remembered per queue (and for the cluster).
pub const REMEMBERED: usize = 32;

/// The last runtimes of one queue, newest last.
#[derive(Clone, Debug, Default)]
struct Recent(VecDeque<i64>);

impl Recent {
    fn push(&mut self, runtime_ms: i64) {
        if self.0.len() == REMEMBERED {
            self.0.pop_front();
        }
        self.0.push_back(runtime_ms);
    }

    fn median(&self) -> Option<i64> {
        let mut sorted: Vec<i64> = self.0.iter().copied().collect();
        sorted.sort_unstable();
        sorted.get(sorted.len() / 2).copied()
    }
}

/// Runtimes learned per queue.
#[derive(Clone, Debug, Default)]
pub struct Runtimes {
    by_queue: HashMap<String, Recent>,
    cluster: Recent,
    /// Medians, refreshed when a runtime is learned (read for every unit of
    /// every estimate).
    medians: HashMap<String, i64>,
    cluster_median: Option<i64>,
}

impl Runtimes {
    /// A unit of `queue` held its quota `runtime_ms` (negative: a clock
    /// step; ignored).
    pub fn learn(&mut self, queue: &str, runtime_ms: i64) {
        if runtime_ms < 0 {
            return;
        }
        let recent = self.by_queue.entry(queue.to_string()).or_default();
        recent.push(runtime_ms);
        if let Some(m) = recent.median() {
            self.medians.insert(queue.to_string(), m);
        }
        self.cluster.push(runtime_ms);
        self.cluster_median = self.cluster.median();
    }

    /// The runtime expected of a unit of `queue`: its queue's median, else
    /// the cluster's, else unknown.
    pub fn expected(&self, queue: &str) -> Option<i64> {
        self.medians.get(queue).copied().or(self.cluster_median)
    }

    /// Whether no runtime was learned yet.
    pub fn is_empty(&self) -> bool {
        self.cluster.0.is_empty()
    }

    /// The queue's own median, if it has finished units.
    pub fn of_queue(&self, queue: &str) -> Option<i64> {
        self.medians.get(queue).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_queue_else_of_the_cluster_else_unknown() {
        let mut r = Runtimes::default();
        assert_eq!(r.expected("a"), None);
        assert!(r.is_empty());
        for ms in [10_000, 1_000_000, 20_000] {
            r.learn("a", ms);
        }
        assert_eq!(r.expected("a"), Some(20_000), "the median, not the mean");
        assert_eq!(r.of_queue("b"), None);
        assert_eq!(r.expected("b"), Some(20_000), "the cluster's");
        r.learn("b", 5_000);
        assert_eq!(r.expected("b"), Some(5_000));
        r.learn("b", -1);
        assert_eq!(
            r.expected("b"),
            Some(5_000),
            "a clock step is not a runtime"
        );
    }

    #[test]
    fn only_the_last_units_count() {
        let mut r = Runtimes::default();
        for _ in 0..REMEMBERED {
            r.learn("a", 1_000);
        }
        for _ in 0..=REMEMBERED / 2 {
            r.learn("a", 9_000);
        }
        assert_eq!(r.expected("a"), Some(9_000));
    }
}
