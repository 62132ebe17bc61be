//! The fair-sharing scenario's settings and its plan: one parent quota
//! (min = max), three children with weights 1:1:2 and a small min each,
//! and per child one sequence of jobs of 1–2 CPU running a few seconds —
//! the same sequence for every child, and more jobs than the parent could
//! run for one child alone in the time given.

use std::time::Duration;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::shape::{LEAF_MAX_CPU, Leaf, Parent, PlannedJob, Shape};

/// Name of the parent quota.
pub const PARENT: &str = "fair";

/// One child quota (tenant).
#[derive(Clone, Debug, Serialize)]
pub struct Child {
    /// ElasticQuota name (its namespace is `bench-<name>`).
    pub name: String,
    /// Its min, CPU.
    pub min_cpu: u32,
    /// Its fair-share weight.
    pub weight: f64,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Settings of the scenario.
#[derive(Clone, Debug, Serialize)]
pub struct FairnessConfig {
    /// The parent's min = max, CPU; also the root capacity. At most the
    /// children's max ([`LEAF_MAX_CPU`], which `phase::prepare` gives
    /// every leaf), so that the parent is what binds.
    pub parent_cpu: u32,
    /// The children.
    pub children: Vec<Child>,
    /// Smallest and largest CPU of a job (whole CPUs).
    pub job_cpu: (u32, u32),
    /// Shortest job runtime.
    #[serde(rename = "job_runtime_min_ms", serialize_with = "millis")]
    pub runtime_min: Duration,
    /// Longest job runtime.
    #[serde(rename = "job_runtime_max_ms", serialize_with = "millis")]
    pub runtime_max: Duration,
    /// Jobs each tenant keeps created and not yet released, at all times.
    pub backlog: usize,
    /// How long the tenants keep their backlog (from the first create).
    #[serde(rename = "submit_for_ms", serialize_with = "millis")]
    pub submit_for: Duration,
    /// The start of the run left out of the figures.
    #[serde(rename = "warmup_ms", serialize_with = "millis")]
    pub warmup: Duration,
    /// How often each child's running CPU is sampled.
    #[serde(rename = "sample_every_ms", serialize_with = "millis")]
    pub sample_every: Duration,
    /// Moving window of the plotted shares.
    #[serde(rename = "plot_window_ms", serialize_with = "millis")]
    pub plot_window: Duration,
    /// How long the jobs left when the tenants stop may take to finish.
    #[serde(rename = "drain_ms", serialize_with = "millis")]
    pub drain: Duration,
    /// A spec merged into each child's Queue (`--queue-spec`), e.g. its
    /// preemption: the scenario with preemption on (issue 44).
    pub queue_spec: Option<serde_json::Value>,
}

impl Default for FairnessConfig {
    fn default() -> Self {
        let child = |name: &str, weight: f64| Child {
            name: name.to_string(),
            min_cpu: 10,
            weight,
        };
        Self {
            parent_cpu: 120,
            children: vec![
                child("fair-a", 1.0),
                child("fair-b", 1.0),
                child("fair-c", 2.0),
            ],
            job_cpu: (1, 2),
            runtime_min: Duration::from_secs(4),
            runtime_max: Duration::from_secs(8),
            backlog: 20,
            submit_for: Duration::from_secs(120),
            warmup: Duration::from_secs(30),
            sample_every: Duration::from_millis(500),
            plot_window: Duration::from_secs(10),
            drain: Duration::from_secs(180),
            queue_spec: None,
        }
    }
}

/// splitmix64: the plan's sizes, the same on every machine.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl FairnessConfig {
    /// Refuses settings the scenario cannot measure.
    pub fn validate(&self) -> Result<()> {
        if self.children.len() < 2 {
            bail!("fairness: at least two children");
        }
        if self.parent_cpu > LEAF_MAX_CPU {
            bail!(
                "fairness: the parent's {} CPU exceed the children's max ({LEAF_MAX_CPU})",
                self.parent_cpu
            );
        }
        let mins: u32 = self.children.iter().map(|c| c.min_cpu).sum();
        if mins >= self.parent_cpu {
            bail!(
                "fairness: the children's mins ({mins} CPU) leave nothing to borrow under {} CPU",
                self.parent_cpu
            );
        }
        if let Some(c) = self
            .children
            .iter()
            .find(|c| !(c.weight.is_finite() && c.weight > 0.0))
        {
            bail!("fairness: weight of {} must be positive", c.name);
        }
        let (lo, hi) = self.job_cpu;
        if lo == 0 || lo > hi {
            bail!("fairness: job CPU range {lo}..={hi}");
        }
        if self.runtime_min.is_zero() || self.runtime_min > self.runtime_max {
            bail!("fairness: job runtime range");
        }
        if self.backlog == 0 {
            bail!("fairness: --backlog at least 1");
        }
        if self.sample_every.is_zero() {
            bail!("fairness: sample interval");
        }
        if self.warmup >= self.submit_for {
            bail!(
                "fairness: the warm-up ({:?}) leaves no steady window in {:?}",
                self.warmup,
                self.submit_for
            );
        }
        Ok(())
    }

    /// The capacity above the children's mins, CPU.
    pub fn borrowable_cpu(&self) -> u32 {
        self.parent_cpu - self.children.iter().map(|c| c.min_cpu).sum::<u32>()
    }

    /// Each child's share of the borrowed capacity under weighted fair
    /// sharing (every child wants more than its share): weight / Σ weights.
    pub fn target_shares(&self) -> Vec<f64> {
        let total: f64 = self.children.iter().map(|c| c.weight).sum();
        self.children.iter().map(|c| c.weight / total).collect()
    }

    /// CPU and runtime of the `seq`-th job of every child.
    pub fn job_size(&self, seq: usize) -> (u32, Duration) {
        let h = mix(seq as u64);
        let (lo, hi) = self.job_cpu;
        let cpu = lo + u32::try_from(h % u64::from(hi - lo + 1)).unwrap_or(0);
        let span = u64::try_from((self.runtime_max - self.runtime_min).as_millis()).unwrap_or(0);
        let runtime = self.runtime_min + Duration::from_millis((h >> 32) % (span + 1));
        (cpu, runtime)
    }

    /// Jobs planned per child: enough for one child that got the whole
    /// parent for the whole submission time with its smallest, shortest
    /// jobs, plus its backlog — a tenant never runs out.
    pub fn jobs_per_child(&self) -> usize {
        let slots = (self.parent_cpu / self.job_cpu.0) as usize;
        let rounds =
            (self.submit_for.as_secs_f64() / self.runtime_min.as_secs_f64()).ceil() as usize;
        slots * (rounds + 1) + self.backlog
    }

    /// The plan as a benchmark [`Shape`]: the parent, the children as
    /// leaves (namespace `bench-<name>`), `jobs_per_child` jobs
    /// `job-<seq>` each (class 0: one priority for all).
    pub fn plan(&self) -> Shape {
        let per_child = self.jobs_per_child();
        let leaves: Vec<Leaf> = self
            .children
            .iter()
            .map(|c| Leaf {
                name: c.name.clone(),
                parent: 0,
                namespace: format!("bench-{}", c.name),
                counts: [per_child, 0, 0],
            })
            .collect();
        let mut jobs = Vec::with_capacity(per_child * leaves.len());
        for leaf in 0..leaves.len() {
            for seq in 0..per_child {
                let (cpu, runtime) = self.job_size(seq);
                jobs.push(PlannedJob {
                    name: format!("job-{seq}"),
                    leaf,
                    class: 0,
                    seq,
                    cpu,
                    runtime,
                });
            }
        }
        let parents = vec![Parent {
            name: PARENT.to_string(),
            cpu: self.parent_cpu,
        }];
        Shape::from_parts("fairness", parents, leaves, self.parent_cpu, jobs)
    }
}

/// `--fair-sharing`: the runs, in order (`both`: off, the baseline, then on).
pub fn parse_modes(value: &str) -> Result<Vec<bool>> {
    Ok(match value.trim() {
        "on" => vec![true],
        "off" => vec![false],
        "both" => vec![false, true],
        other => bail!("--fair-sharing {other:?}: on, off or both"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_scenario_is_valid_and_weighted_one_one_two() -> Result<()> {
        let config = FairnessConfig::default();
        config.validate()?;
        assert_eq!(config.borrowable_cpu(), 90);
        assert_eq!(config.target_shares(), vec![0.25, 0.25, 0.5]);
        Ok(())
    }

    #[test]
    fn plan_is_one_parent_three_children_with_identical_job_sequences() {
        let config = FairnessConfig::default();
        let shape = config.plan();
        assert_eq!(shape.parents.len(), 1);
        assert_eq!(shape.parents[0].name, PARENT);
        assert_eq!(shape.root_cpu, 120);
        let names: Vec<&str> = shape.leaves.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["fair-a", "fair-b", "fair-c"]);
        assert!(shape.leaves.iter().all(|l| l.parent == 0));
        let n = config.jobs_per_child();
        assert_eq!(shape.jobs.len(), 3 * n);
        for seq in [0, 1, n / 2, n - 1] {
            let sizes: Vec<(u32, Duration)> = (0..3)
                .map(|l| {
                    let j = &shape.jobs[l * n + seq];
                    assert_eq!((j.leaf, j.seq), (l, seq));
                    (j.cpu, j.runtime)
                })
                .collect();
            assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{sizes:?}");
        }
        let i = shape.job_index("bench-fair-c", "job-7");
        assert_eq!(i, Some(2 * n + 7));
        assert_eq!(shape.leaf_index("fair-b"), Some(1));
    }

    #[test]
    fn job_sizes_cover_their_ranges_and_average_in_the_middle() {
        let config = FairnessConfig::default();
        let sizes: Vec<(u32, Duration)> = (0..4000).map(|s| config.job_size(s)).collect();
        assert!(sizes.iter().all(|(c, _)| (1..=2).contains(c)));
        assert!(
            sizes
                .iter()
                .all(|(_, r)| *r >= config.runtime_min && *r <= config.runtime_max)
        );
        let ones = sizes.iter().filter(|(c, _)| *c == 1).count();
        assert!(
            (1800..=2200).contains(&ones),
            "{ones} of 4000 jobs of 1 CPU"
        );
        let mean = sizes.iter().map(|(_, r)| r.as_secs_f64()).sum::<f64>() / 4000.0;
        assert!((5.8..=6.2).contains(&mean), "mean runtime {mean}");
        // Deterministic.
        assert_eq!(config.job_size(17), FairnessConfig::default().job_size(17));
    }

    #[test]
    fn a_tenant_cannot_run_out_of_planned_jobs() {
        let config = FairnessConfig::default();
        // One child with the whole parent, 1-CPU jobs of the shortest
        // runtime, back to back for the whole submission time.
        let most = 120.0 * config.submit_for.as_secs_f64() / config.runtime_min.as_secs_f64();
        assert!(config.jobs_per_child() as f64 >= most + 120.0 + config.backlog as f64);
    }

    #[test]
    fn settings_that_cannot_be_measured_are_refused() {
        let mut c = FairnessConfig::default();
        c.children[2].min_cpu = 100;
        assert!(c.validate().is_err(), "mins leave nothing to borrow");
        let c = FairnessConfig {
            parent_cpu: LEAF_MAX_CPU + 1,
            ..FairnessConfig::default()
        };
        assert!(c.validate().is_err(), "the children's max would bind");
        let base = FairnessConfig::default();
        let c = FairnessConfig {
            warmup: base.submit_for,
            ..FairnessConfig::default()
        };
        assert!(c.validate().is_err(), "no steady window");
        let mut c = FairnessConfig::default();
        c.children[0].weight = 0.0;
        assert!(c.validate().is_err(), "weight 0");
        let c = FairnessConfig {
            job_cpu: (2, 1),
            ..FairnessConfig::default()
        };
        assert!(c.validate().is_err(), "empty CPU range");
    }

    #[test]
    fn modes() -> Result<()> {
        assert_eq!(parse_modes("both")?, vec![false, true]);
        assert_eq!(parse_modes(" on")?, vec![true]);
        assert_eq!(parse_modes("off")?, vec![false]);
        assert!(parse_modes("yes").is_err());
        Ok(())
    }
}
