//! What each quota and the root held over time: an integral per time
//! bucket (so the report shows mean usage, not samples that miss short
//! peaks), the peak, and the integral of what each quota borrowed beyond
//! its effective min (its share of a fair-sharing parent's pool).

use serde::Serialize;

/// At most this many buckets: past it, buckets are merged in pairs (their
/// width doubles), so a run of any length keeps a bounded series.
const MAX_BUCKETS: usize = 512;

/// A node of the usage tree: the root (index 0) or a quota.
#[derive(Clone, Debug)]
struct Node {
    parent: Option<usize>,
    used: Vec<i64>,
    since: i64,
    /// Integral (amount × ms) per bucket and resource: `[bucket * R + r]`.
    series: Vec<f64>,
    peak: Vec<i64>,
    min_eff: Vec<i64>,
    /// Integral of `max(0, used - min_eff)` per resource.
    borrowed: Vec<f64>,
}

/// The usage of every quota over time, kept as units start and stop holding.
#[derive(Clone, Debug)]
pub(crate) struct Usage {
    start_ms: i64,
    width_ms: i64,
    resources: usize,
    nodes: Vec<Node>,
}

/// One node's usage over a run, per resource (the report's input).
#[derive(Clone, Debug, Serialize)]
pub struct NodeUsage {
    /// Mean held per bucket: `[bucket][resource]`.
    pub mean: Vec<Vec<f64>>,
    /// Peak held per resource.
    pub peak: Vec<i64>,
    /// Mean held over the whole run per resource.
    pub overall: Vec<f64>,
    /// Mean held beyond the effective min per resource.
    pub borrowed: Vec<f64>,
    /// Effective min per resource.
    pub min_effective: Vec<i64>,
}

/// Usage of the root and every quota over a run.
#[derive(Clone, Debug, Serialize)]
pub struct UsageSeries {
    /// Start of the first bucket (ms).
    pub start_ms: i64,
    /// Width of a bucket (ms).
    pub bucket_ms: i64,
    /// Number of buckets.
    pub buckets: usize,
    /// Index 0 the root, then the quotas in the order given.
    pub nodes: Vec<NodeUsage>,
}

impl Usage {
    /// A tracker from `start_ms` with buckets of `width_ms` (at least 1 ms);
    /// `parents[i]` is quota `i`'s parent among the quotas (`None`: the
    /// root), `min_eff[i]` its effective min per resource.
    pub fn new(
        start_ms: i64,
        width_ms: i64,
        resources: usize,
        parents: &[Option<usize>],
        min_eff: Vec<Vec<i64>>,
    ) -> Self {
        let node = |parent, min_eff: Vec<i64>| Node {
            parent,
            used: vec![0; resources],
            since: start_ms,
            series: Vec::new(),
            peak: vec![0; resources],
            min_eff,
            borrowed: vec![0.0; resources],
        };
        let mut nodes = vec![node(None, vec![0; resources])];
        for (p, m) in parents.iter().zip(min_eff) {
            // Quota i is node i + 1; its parent quota p is node p + 1.
            nodes.push(node(Some(p.map_or(0, |p| p + 1)), m));
        }
        Self {
            start_ms,
            width_ms: width_ms.max(1),
            resources,
            nodes,
        }
    }

    /// Adds `sign × amount` (resource index, amount) to quota `quota`'s
    /// path and the root at `t`.
    pub fn change(&mut self, quota: Option<usize>, amount: &[(usize, i64)], sign: i64, t: i64) {
        let mut node = Some(quota.map_or(0, |q| q + 1));
        let mut depth = 0;
        while let Some(n) = node {
            self.accumulate(n, t);
            let Some(nd) = self.nodes.get_mut(n) else {
                break;
            };
            for &(r, a) in amount {
                if let Some(u) = nd.used.get_mut(r) {
                    *u += sign * a;
                    nd.peak[r] = nd.peak[r].max(*u);
                }
            }
            node = if n == 0 { None } else { nd.parent };
            // A cycle in the parents (the core refuses to charge such a
            // quota, but the objects may hold one) ends at the root.
            depth += 1;
            if depth > self.nodes.len() {
                break;
            }
        }
    }

    /// Brings node `n`'s integrals up to `t`.
    fn accumulate(&mut self, n: usize, t: i64) {
        let bucket = |at: i64, w: i64, s: i64| usize::try_from((at - s) / w).unwrap_or(0);
        if bucket(t.max(self.start_ms), self.width_ms, self.start_ms) >= MAX_BUCKETS {
            self.coarsen_until(t);
        }
        let (w, s, r) = (self.width_ms, self.start_ms, self.resources);
        let Some(nd) = self.nodes.get_mut(n) else {
            return;
        };
        let from = nd.since.max(s);
        if t <= from {
            nd.since = nd.since.max(t);
            return;
        }
        for k in 0..r {
            let over = (nd.used[k] - nd.min_eff[k]).max(0);
            nd.borrowed[k] += over as f64 * (t - from) as f64;
        }
        if nd.used.iter().any(|u| *u != 0) {
            let mut at = from;
            while at < t {
                let b = bucket(at, w, s);
                let end = (s + (b as i64 + 1) * w).min(t);
                if nd.series.len() < (b + 1) * r {
                    nd.series.resize((b + 1) * r, 0.0);
                }
                for k in 0..r {
                    nd.series[b * r + k] += nd.used[k] as f64 * (end - at) as f64;
                }
                at = end;
            }
        }
        nd.since = t;
    }

    /// Doubles the bucket width until `t` falls within [`MAX_BUCKETS`].
    fn coarsen_until(&mut self, t: i64) {
        let r = self.resources;
        while (t - self.start_ms) / self.width_ms >= MAX_BUCKETS as i64 {
            self.width_ms *= 2;
            for nd in &mut self.nodes {
                let buckets = nd.series.len() / r.max(1);
                let mut merged = vec![0.0; buckets.div_ceil(2) * r];
                for b in 0..buckets {
                    for k in 0..r {
                        merged[(b / 2) * r + k] += nd.series[b * r + k];
                    }
                }
                nd.series = merged;
            }
        }
    }

    /// The series up to `end_ms`.
    pub fn finish(mut self, end_ms: i64) -> UsageSeries {
        let end = end_ms.max(self.start_ms + 1);
        for n in 0..self.nodes.len() {
            self.accumulate(n, end);
        }
        let (w, r) = (self.width_ms, self.resources);
        let buckets = usize::try_from((end - self.start_ms - 1) / w + 1).unwrap_or(0);
        let span = (end - self.start_ms) as f64;
        let nodes = self
            .nodes
            .into_iter()
            .map(|nd| {
                let mut mean = vec![vec![0.0; r]; buckets];
                let mut total = vec![0.0; r];
                for (b, row) in mean.iter_mut().enumerate() {
                    let width = ((self.start_ms + (b as i64 + 1) * w).min(end)
                        - (self.start_ms + b as i64 * w)) as f64;
                    for (k, cell) in row.iter_mut().enumerate() {
                        let v = nd.series.get(b * r + k).copied().unwrap_or(0.0);
                        total[k] += v;
                        *cell = if width > 0.0 { v / width } else { 0.0 };
                    }
                }
                NodeUsage {
                    mean,
                    peak: nd.peak,
                    overall: total.iter().map(|v| v / span).collect(),
                    borrowed: nd.borrowed.iter().map(|v| v / span).collect(),
                    min_effective: nd.min_eff,
                }
            })
            .collect();
        UsageSeries {
            start_ms: self.start_ms,
            bucket_ms: w,
            buckets,
            nodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn integrals_follow_the_path_and_buckets_merge() {
        // Quota 0 under the root, quota 1 under quota 0; one resource.
        let mut u = Usage::new(0, 10, 1, &[None, Some(0)], vec![vec![2], vec![0]]);
        u.change(Some(1), &[(0, 4)], 1, 0);
        u.change(Some(1), &[(0, 4)], -1, 10);
        let s = u.clone().finish(20);
        assert_eq!(s.buckets, 2);
        for node in &s.nodes {
            assert_eq!(node.mean[0][0], 4.0);
            assert_eq!(node.mean[1][0], 0.0);
            assert_eq!(node.peak[0], 4);
            assert_eq!(node.overall[0], 2.0);
        }
        // Quota 0 borrowed 2 beyond its min for half the run.
        assert_eq!(s.nodes[1].borrowed[0], 1.0);
        // A long run keeps at most 512 buckets, the integral intact.
        u.change(Some(1), &[(0, 1)], 1, 10);
        let s = u.finish(100_000);
        assert!(s.buckets <= 512, "{}", s.buckets);
        let total: f64 = s.nodes[0]
            .mean
            .iter()
            .enumerate()
            .map(|(b, row)| {
                let start = b as i64 * s.bucket_ms;
                let w = ((b as i64 + 1) * s.bucket_ms).min(100_000) - start;
                row[0] * w as f64
            })
            .sum();
        assert!((total - (40.0 + 99_990.0)).abs() < 1e-6, "{total}");
    }
}
