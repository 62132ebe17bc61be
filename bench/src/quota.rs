//! CPU held per leaf quota, parent quota and the root, checked against the
//! maxima at every increase, with a time integral per leaf (usage %).

use serde::Serialize;

use super::shape::{LEAF_MAX_CPU, Shape};

/// Maxima (millicores) to check against; `None`: only account.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Max of every leaf.
    pub leaf: i64,
    /// Max of each parent.
    pub parents: Vec<i64>,
    /// Root capacity.
    pub root: i64,
}

impl Limits {
    /// The shape's limits: leaf max 120 CPU, parent min = max, root capacity.
    pub fn of(shape: &Shape) -> Self {
        Self {
            leaf: i64::from(LEAF_MAX_CPU) * 1000,
            parents: shape
                .parents
                .iter()
                .map(|p| i64::from(p.cpu) * 1000)
                .collect(),
            root: i64::from(shape.root_cpu) * 1000,
        }
    }
}

/// A quota found above its max.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// Seconds since the start of the phase.
    pub at_seconds: f64,
    /// `leaf`, `parent` or `root`.
    pub level: &'static str,
    /// Quota name.
    pub quota: String,
    /// Held CPU at that moment.
    pub used_cpu: f64,
    /// The max.
    pub max_cpu: f64,
    /// The object whose increase exceeded it (`namespace/name`).
    pub object: String,
    /// QueueUnit check: CPU that units of jobs already seen complete still
    /// held in that quota at that moment. Running-jobs check (chaos run):
    /// CPU of counted jobs whose completion had been written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_jobs_cpu: Option<f64>,
}

/// Held CPU at every level.
#[derive(Clone, Debug)]
pub struct Usage {
    limits: Option<Limits>,
    parent_of: Vec<usize>,
    leaf_names: Vec<String>,
    parent_names: Vec<String>,
    leaf: Vec<i64>,
    parent: Vec<i64>,
    root: i64,
    /// Millicore-seconds held per leaf.
    leaf_integral: Vec<f64>,
    leaf_since: Vec<f64>,
    /// Peak held CPU per leaf (millicores).
    pub leaf_peak: Vec<i64>,
    /// Peak held at the root (millicores).
    pub root_peak: i64,
    /// Root usage after every change: (seconds, millicores).
    pub root_timeline: Vec<(f64, i64)>,
    /// Each leaf's usage after each of its changes: whether a waiting job's
    /// own quotas had room (`idle.rs`).
    pub leaf_timelines: Vec<Vec<(f64, i64)>>,
    /// Each parent's usage after each change under it.
    pub parent_timelines: Vec<Vec<(f64, i64)>>,
    /// Violations seen (the first 50 in detail).
    pub violations: Vec<Violation>,
    /// Number of violations.
    pub violation_count: usize,
}

impl Usage {
    /// Empty usage for `shape`; `limits: None` only accounts.
    pub fn new(shape: &Shape, limits: Option<Limits>) -> Self {
        let leaves = shape.leaves.len();
        Self {
            limits,
            parent_of: shape.leaves.iter().map(|l| l.parent).collect(),
            leaf_names: shape.leaves.iter().map(|l| l.name.clone()).collect(),
            parent_names: shape.parents.iter().map(|p| p.name.clone()).collect(),
            leaf: vec![0; leaves],
            parent: vec![0; shape.parents.len()],
            root: 0,
            leaf_integral: vec![0.0; leaves],
            leaf_since: vec![0.0; leaves],
            leaf_peak: vec![0; leaves],
            root_peak: 0,
            root_timeline: Vec::new(),
            leaf_timelines: vec![Vec::new(); leaves],
            parent_timelines: vec![Vec::new(); shape.parents.len()],
            violations: Vec::new(),
            violation_count: 0,
        }
    }

    /// Changes leaf `l`'s held CPU by `delta` millicores at `t` seconds; an
    /// increase is checked against every level's max. Returns the
    /// violations it found (also counted and kept here).
    pub fn change(&mut self, l: usize, delta: i64, t: f64, object: &str) -> Vec<Violation> {
        let mut new = Vec::new();
        if delta == 0 || l >= self.leaf.len() {
            return new;
        }
        let p = self.parent_of[l];
        self.leaf_integral[l] += self.leaf[l] as f64 * (t - self.leaf_since[l]).max(0.0);
        self.leaf_since[l] = t;
        self.leaf[l] += delta;
        self.parent[p] += delta;
        self.root += delta;
        self.leaf_peak[l] = self.leaf_peak[l].max(self.leaf[l]);
        self.root_peak = self.root_peak.max(self.root);
        self.root_timeline.push((t, self.root));
        self.leaf_timelines[l].push((t, self.leaf[l]));
        if let Some(timeline) = self.parent_timelines.get_mut(p) {
            timeline.push((t, self.parent[p]));
        }
        if delta < 0 {
            return new;
        }
        let Some(limits) = &self.limits else {
            return new;
        };
        let mut found = Vec::new();
        if self.leaf[l] > limits.leaf {
            found.push((
                "leaf",
                self.leaf_names[l].clone(),
                self.leaf[l],
                limits.leaf,
            ));
        }
        if let Some(max) = limits.parents.get(p)
            && self.parent[p] > *max
        {
            found.push(("parent", self.parent_names[p].clone(), self.parent[p], *max));
        }
        if self.root > limits.root {
            found.push(("root", "root".to_string(), self.root, limits.root));
        }
        for (level, quota, used, max) in found {
            self.violation_count += 1;
            let v = Violation {
                at_seconds: t,
                level,
                quota,
                used_cpu: used as f64 / 1000.0,
                max_cpu: max as f64 / 1000.0,
                object: object.to_string(),
                finished_jobs_cpu: None,
            };
            if self.violations.len() < 50 {
                self.violations.push(v.clone());
            }
            new.push(v);
        }
        new
    }

    /// Leaf `l`'s parent index.
    pub fn parent_of(&self, l: usize) -> usize {
        self.parent_of.get(l).copied().unwrap_or(0)
    }

    /// Held millicores of leaf `l` now.
    pub fn leaf_now(&self, l: usize) -> i64 {
        self.leaf.get(l).copied().unwrap_or(0)
    }

    /// Held millicores at the root now.
    pub fn root_now(&self) -> i64 {
        self.root
    }

    /// Millicore-seconds held by each leaf from 0 to `end` seconds.
    pub fn leaf_integrals(&self, end: f64) -> Vec<f64> {
        self.leaf_integral
            .iter()
            .zip(&self.leaf)
            .zip(&self.leaf_since)
            .map(|((i, now), since)| i + *now as f64 * (end - since).max(0.0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_every_level_and_integrates() -> anyhow::Result<()> {
        let shape = Shape::new("t", 60, 6, 2, crate::shape::CLASSES)?;
        let mut usage = Usage::new(&shape, Some(Limits::of(&shape)));
        // Parent cohort-0 has 3 leaves: min = max = 60 CPU.
        usage.change(0, 50_000, 0.0, "a");
        usage.change(1, 10_000, 1.0, "b");
        assert_eq!(usage.violation_count, 0);
        usage.change(2, 1_000, 2.0, "c");
        assert_eq!(usage.violation_count, 1);
        assert_eq!(usage.violations[0].level, "parent");
        usage.change(2, -1_000, 2.0, "c");
        usage.change(0, 71_000, 3.0, "d");
        // Leaf 0 at 121 > 120, parent at 131 > 60, root at 131 > 120.
        assert_eq!(usage.violation_count, 4);
        let integrals = usage.leaf_integrals(4.0);
        assert!((integrals[0] - (50_000.0 * 3.0 + 121_000.0)).abs() < 1e-6);
        Ok(())
    }
}
