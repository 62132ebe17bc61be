//! The benchmark's shape: Kueue's scheduler-performance baseline (5 cohorts ×
//! 6 ClusterQueues of nominal 20 CPU / borrowing limit 100; small, medium and
//! large workloads) mapped onto ElasticQuotas, and the list of jobs.
//!
//! It lives here, and the benchmark (`koord-queue-bench`) re-exports it, so
//! that the benchmark and the simulator (`import shape`, `import/shape.rs`)
//! replay one stream from one definition.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Serialize;

/// Label on every benchmark job (and, copied by the webhook, its QueueUnit):
/// the job's class.
pub const CLASS_LABEL: &str = "koord-queue-bench/class";

/// The labels by which a queue system other than Koord-Queue (Kueue, in
/// the comparison) takes a job: one names its queue, one its priority
/// class, whose name is the job's class's. Koord-Queue reads neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLabels {
    /// The label that names the queue, and the queue it names.
    pub queue: (&'static str, &'static str),
    /// The label that names the priority class.
    pub priority_class: &'static str,
}

/// A workload class of Kueue's shapes.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Class {
    /// Name, also the PriorityClass name.
    pub name: &'static str,
    /// Share of each queue's jobs (Kueue's baseline: 350 / 100 / 50 of 500).
    pub share: f64,
    /// Time between two creations in one queue.
    #[serde(serialize_with = "millis")]
    pub interval: Duration,
    /// How long a released job runs.
    #[serde(serialize_with = "millis")]
    pub runtime: Duration,
    /// PriorityClass value.
    pub priority: i32,
    /// CPU request of its single pod.
    pub cpu: u32,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Kueue's three classes (test/performance/scheduler/configs/baseline).
pub const CLASSES: [Class; 3] = [
    Class {
        name: "small",
        share: 0.7,
        interval: Duration::from_millis(100),
        runtime: Duration::from_millis(200),
        priority: 50,
        cpu: 1,
    },
    Class {
        name: "medium",
        share: 0.2,
        interval: Duration::from_millis(500),
        runtime: Duration::from_millis(500),
        priority: 100,
        cpu: 5,
    },
    Class {
        name: "large",
        share: 0.1,
        interval: Duration::from_millis(1200),
        runtime: Duration::from_millis(1000),
        priority: 200,
        cpu: 20,
    },
];

/// Kueue's large-scale classes (test/performance/scheduler/configs/large-scale:
/// per ClusterQueue 35 small jobs every 60 ms that run 150 ms, 11 medium
/// every 300 ms that run 350 ms and 4 large every 700 ms that run 700 ms):
/// the same sizes and priorities as [`CLASSES`], faster streams and runs.
pub const LARGE_SCALE_CLASSES: [Class; 3] = [
    Class {
        name: "small",
        share: 0.7,
        interval: Duration::from_millis(60),
        runtime: Duration::from_millis(150),
        priority: 50,
        cpu: 1,
    },
    Class {
        name: "medium",
        share: 0.22,
        interval: Duration::from_millis(300),
        runtime: Duration::from_millis(350),
        priority: 100,
        cpu: 5,
    },
    Class {
        name: "large",
        share: 0.08,
        interval: Duration::from_millis(700),
        runtime: Duration::from_millis(700),
        priority: 200,
        cpu: 20,
    },
];

/// Jobs from which a `--scale` is Kueue's large scale (1,000 queues in 10
/// cohorts, [`LARGE_SCALE_CLASSES`]).
pub const LARGE_SCALE_JOBS: usize = 50_000;

/// Leaf quotas of Kueue's large scale (10 cohorts of 100 ClusterQueues).
pub const LARGE_SCALE_QUEUES: usize = 1000;

/// Guaranteed CPU of a leaf quota (Kueue: nominal quota).
pub const LEAF_MIN_CPU: u32 = 20;
/// Maximum CPU of a leaf quota (Kueue: nominal 20 + borrowing limit 100).
pub const LEAF_MAX_CPU: u32 = 120;

/// CPU of a large job in [`Shape::one_large_class`]: one and a half times a
/// leaf's min, so a large job always borrows and its parent's max is what
/// stops it, and two fit in the three large leaves' mins.
pub const ONE_LARGE_CPU: u32 = 30;
/// Runtime of a large job in [`Shape::one_large_class`]: one every 1.2 s for
/// 0.5 s is 12.5 CPU, within its leaf's min on average.
pub const ONE_LARGE_RUNTIME: Duration = Duration::from_millis(500);
/// Runtime of a small job in [`Shape::one_large_class`]: 1 CPU every 100 ms
/// for 2 s is 20 CPU, with the medium class's 5 a quarter above a leaf's min.
pub const ONE_LARGE_SMALL_RUNTIME: Duration = Duration::from_millis(2000);

/// A leaf quota (one Kueue ClusterQueue) and its namespace.
#[derive(Clone, Debug, Serialize)]
pub struct Leaf {
    /// ElasticQuota name.
    pub name: String,
    /// Index of its parent in [`Shape::parents`].
    pub parent: usize,
    /// Namespace of its jobs.
    pub namespace: String,
    /// Jobs per class (same order as [`Shape::classes`]).
    pub counts: [usize; 3],
}

/// A parent quota (one Kueue cohort).
#[derive(Clone, Debug, Serialize)]
pub struct Parent {
    /// ElasticQuota name.
    pub name: String,
    /// Its min = max, CPU: the sum of its leaves' min (Kueue: the cohort's nominal quota).
    pub cpu: u32,
}

/// One job of the plan.
#[derive(Clone, Debug)]
pub struct PlannedJob {
    /// Job name.
    pub name: String,
    /// Index of its leaf.
    pub leaf: usize,
    /// Index of its class in [`Shape::classes`].
    pub class: usize,
    /// Place in its `(leaf, class)` arrival sequence.
    pub seq: usize,
    /// CPU request of its single pod (its class's in Kueue's shape).
    pub cpu: u32,
    /// How long it runs once released (its class's runtime in Kueue's
    /// shape).
    pub runtime: Duration,
}

/// The whole benchmark shape.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Scale label (`1k`, `15k`, `50k`, …).
    pub scale: String,
    /// Its classes: [`CLASSES`], or [`LARGE_SCALE_CLASSES`] at Kueue's
    /// large scale. A job's `class` indexes them.
    pub classes: [Class; 3],
    /// Parent quotas.
    pub parents: Vec<Parent>,
    /// Leaf quotas.
    pub leaves: Vec<Leaf>,
    /// Root capacity (CPU): the sum of the leaves' min.
    pub root_cpu: u32,
    /// Every job.
    pub jobs: Vec<PlannedJob>,
    /// Labels every job manifest carries for another queue system (the
    /// Kueue phase of the comparison); `None`: Koord-Queue's jobs.
    pub queue_labels: Option<QueueLabels>,
    /// Each job's `activeDeadlineSeconds` is its class's runtime times this,
    /// rounded up to whole seconds (`--run-bound-factor`): the bound a
    /// reserving head backfills by. `None`: unbounded, as in Kueue's shape.
    pub run_bound_factor: Option<f64>,
    index: HashMap<(String, String), usize>,
    leaf_index: HashMap<String, usize>,
}

/// What a `--scale` value stands for.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    /// Jobs in all.
    pub jobs: usize,
    /// Leaf quotas (Kueue ClusterQueues).
    pub queues: usize,
    /// Parent quotas (Kueue cohorts).
    pub cohorts: usize,
    /// The jobs' classes.
    pub classes: [Class; 3],
}

/// The scale of a `--scale` value: `1k`, `15k` (Kueue's baseline: 30 queues
/// in 5 cohorts, [`CLASSES`]) or `50k` (Kueue's large scale: 1,000 queues in
/// 10 cohorts, [`LARGE_SCALE_CLASSES`]); any other `<n>` or `<n>k` is the
/// baseline below [`LARGE_SCALE_JOBS`] and the large scale from there.
pub fn parse_scale(scale: &str) -> Result<Scale> {
    let s = scale.trim().to_lowercase();
    let jobs = match s.strip_suffix('k') {
        Some(n) => n.parse::<f64>().map(|n| (n * 1000.0).round() as usize),
        None => s.parse::<f64>().map(|n| n.round() as usize),
    };
    let Ok(jobs) = jobs else {
        bail!("--scale {scale:?}: expected e.g. 1k, 15k, 50k or a number of jobs");
    };
    if jobs == 0 {
        bail!("--scale {scale:?}: at least one job");
    }
    Ok(if jobs >= LARGE_SCALE_JOBS {
        Scale {
            jobs,
            queues: LARGE_SCALE_QUEUES,
            cohorts: 10,
            classes: LARGE_SCALE_CLASSES,
        }
    } else {
        Scale {
            jobs,
            queues: 30,
            cohorts: 5,
            classes: CLASSES,
        }
    })
}

/// The shapes by name, as `--shape` takes them.
pub const SHAPES: [&str; 2] = ["baseline", "one-large-class"];

/// The shape named `kind` ([`SHAPES`]) at `scale`, its jobs, queues and
/// cohorts overridable (the queues and cohorts of Kueue's baseline only).
pub fn named(
    kind: &str,
    scale: &str,
    jobs: Option<usize>,
    queues: Option<usize>,
    cohorts: Option<usize>,
) -> Result<Shape> {
    let s = parse_scale(scale)?;
    match kind {
        "baseline" => Shape::new(
            scale,
            jobs.unwrap_or(s.jobs),
            queues.unwrap_or(s.queues),
            cohorts.unwrap_or(s.cohorts),
            s.classes,
        ),
        "one-large-class" if queues.is_none() && cohorts.is_none() => {
            Shape::one_large_class(scale, jobs.unwrap_or(s.jobs))
        }
        "one-large-class" => bail!("the one-large-class shape has its own queues and parent"),
        other => bail!("--shape {other:?}: expected one of {SHAPES:?}"),
    }
}

impl Shape {
    /// `jobs` jobs over `queues` leaf quotas in `cohorts` parents; each
    /// queue's jobs split into `classes` by their shares (70 / 20 / 10 % in
    /// Kueue's baseline).
    pub fn new(
        scale: &str,
        jobs: usize,
        queues: usize,
        cohorts: usize,
        classes: [Class; 3],
    ) -> Result<Self> {
        if queues == 0 || cohorts == 0 || cohorts > queues {
            bail!("need 1 <= cohorts <= queues (got {cohorts} cohorts, {queues} queues)");
        }
        if jobs < queues {
            bail!("need at least one job per queue ({jobs} jobs, {queues} queues)");
        }
        let mut leaves = Vec::with_capacity(queues);
        let mut parent_leaves = vec![0u32; cohorts];
        for q in 0..queues {
            let parent = q * cohorts / queues;
            parent_leaves[parent] += 1;
            let n = jobs / queues + usize::from(q < jobs % queues);
            let small = ((n as f64) * classes[0].share).round() as usize;
            let medium = ((n as f64) * classes[1].share).round() as usize;
            let large = n.saturating_sub(small + medium);
            let name = format!("cq-{parent}-{q}");
            leaves.push(Leaf {
                namespace: format!("bench-{name}"),
                name,
                parent,
                counts: [small, medium, large],
            });
        }
        let parents = parent_leaves
            .iter()
            .enumerate()
            .map(|(i, n)| Parent {
                name: format!("cohort-{i}"),
                cpu: n * LEAF_MIN_CPU,
            })
            .collect();
        let mut planned = Vec::with_capacity(jobs);
        for (l, leaf) in leaves.iter().enumerate() {
            for (c, class) in classes.iter().enumerate() {
                for seq in 0..leaf.counts[c] {
                    planned.push(PlannedJob {
                        name: format!("{}-{seq}", class.name),
                        leaf: l,
                        class: c,
                        seq,
                        cpu: class.cpu,
                        runtime: class.runtime,
                    });
                }
            }
        }
        let root_cpu = u32::try_from(queues).unwrap_or(u32::MAX) * LEAF_MIN_CPU;
        Ok(Self {
            classes,
            ..Self::from_parts(scale, parents, leaves, root_cpu, planned)
        })
    }

    /// Issue 44's shape: one parent holding the whole capacity (30 leaves ×
    /// [`LEAF_MIN_CPU`], as in Kueue's shape), three *large* queues with only
    /// large jobs of [`ONE_LARGE_CPU`] CPU that run [`ONE_LARGE_RUNTIME`] —
    /// each asks less than its leaf's min on average, but one job alone
    /// borrows beyond it, so the parent's max is what stops it — and 27
    /// *small* queues with small jobs that run [`ONE_LARGE_SMALL_RUNTIME`]
    /// and medium ones, each asking a quarter more than its min. The stream
    /// asks about 20 % more than the parent holds, and every sequence lasts
    /// about as long. Without a reservation that holds across the parent,
    /// the many small queues' borrowing takes every core a large job waits
    /// for.
    pub fn one_large_class(scale: &str, jobs: usize) -> Result<Self> {
        const LEAVES: usize = 30;
        const LARGE_LEAVES: [usize; 3] = [0, 10, 20];
        // Jobs a second of a small queue (10 small + 2 medium) and of a
        // large queue (1 / 1.2 s), so that all sequences end together.
        let per_second = 27.0 * 12.0 + 3.0 / 1.2;
        let seconds = jobs as f64 / per_second;
        if jobs < 100 {
            bail!("the one-large-class shape needs at least 100 jobs (got {jobs})");
        }
        let count = |class: usize| {
            (seconds * 1000.0 / CLASSES[class].interval.as_millis() as f64).round() as usize
        };
        let mut leaves = Vec::with_capacity(LEAVES);
        for q in 0..LEAVES {
            let large = LARGE_LEAVES.contains(&q);
            let (name, counts) = if large {
                (format!("large-{q}"), [0, 0, count(2).max(1)])
            } else {
                (format!("small-{q}"), [count(0).max(1), count(1), 0])
            };
            leaves.push(Leaf {
                namespace: format!("bench-{name}"),
                name,
                parent: 0,
                counts,
            });
        }
        let cpu = u32::try_from(LEAVES).unwrap_or(u32::MAX) * LEAF_MIN_CPU;
        let parents = vec![Parent {
            name: "cohort-0".to_string(),
            cpu,
        }];
        let mut planned = Vec::new();
        for (l, leaf) in leaves.iter().enumerate() {
            for (c, class) in CLASSES.iter().enumerate() {
                for seq in 0..leaf.counts[c] {
                    let (cpu, runtime) = match c {
                        0 => (class.cpu, ONE_LARGE_SMALL_RUNTIME),
                        2 => (ONE_LARGE_CPU, ONE_LARGE_RUNTIME),
                        _ => (class.cpu, class.runtime),
                    };
                    planned.push(PlannedJob {
                        name: format!("{}-{seq}", class.name),
                        leaf: l,
                        class: c,
                        seq,
                        cpu,
                        runtime,
                    });
                }
            }
        }
        Ok(Self::from_parts(scale, parents, leaves, cpu, planned))
    }

    /// A shape of any tree and jobs (another scenario than Kueue's, e.g.
    /// the fair-sharing run): `jobs` refer to `leaves` by index, `leaves`
    /// to `parents`, and classes to [`CLASSES`].
    pub fn from_parts(
        scale: &str,
        parents: Vec<Parent>,
        leaves: Vec<Leaf>,
        root_cpu: u32,
        jobs: Vec<PlannedJob>,
    ) -> Self {
        let index = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| ((leaves[j.leaf].namespace.clone(), j.name.clone()), i))
            .collect();
        let leaf_index = leaves
            .iter()
            .enumerate()
            .map(|(i, l)| (l.name.clone(), i))
            .collect();
        Self {
            scale: scale.to_string(),
            classes: CLASSES,
            parents,
            root_cpu,
            leaves,
            jobs,
            queue_labels: None,
            run_bound_factor: None,
            index,
            leaf_index,
        }
    }

    /// The same shape with jobs queued by another queue system: its
    /// `labels` added to every job.
    pub fn with_queue_labels(&self, labels: QueueLabels) -> Self {
        Self {
            queue_labels: Some(labels),
            ..self.clone()
        }
    }

    /// The same shape with every job's run bounded by `factor` times its
    /// class's runtime.
    pub fn with_run_bounds(self, factor: Option<f64>) -> Self {
        Self {
            run_bound_factor: factor,
            ..self
        }
    }

    /// The same shape `factor` times slower: every class's arrival interval
    /// and runtime, and every job's runtime, times `factor` (at least 1).
    /// What each queue asks of its quota stays the same (rate × runtime),
    /// while the arrivals per second fall by `factor`: on a machine whose
    /// API server cannot take the shape's rate, a released job's quota is
    /// held for seconds of API latency beyond its runtime, which multiplies
    /// what every queue asks and overturns the shape's design (issue 44's
    /// shape: the large class asks less than its quotas' min only while a
    /// hold is about its runtime).
    pub fn slowed(mut self, factor: f64) -> Self {
        let factor = factor.max(1.0);
        let scale = |d: Duration| Duration::from_secs_f64(d.as_secs_f64() * factor);
        for class in &mut self.classes {
            class.interval = scale(class.interval);
            class.runtime = scale(class.runtime);
        }
        for job in &mut self.jobs {
            job.runtime = scale(job.runtime);
        }
        self
    }

    /// `activeDeadlineSeconds` of a job of `class`, if runs are bounded:
    /// at least 1 (the API's minimum).
    pub fn run_bound_seconds(&self, class: &Class) -> Option<i64> {
        let factor = self.run_bound_factor?;
        let seconds = (class.runtime.as_secs_f64() * factor).ceil();
        // A float to whole seconds: `as` saturates, and the bound is small.
        Some((seconds as i64).max(1))
    }

    /// `activeDeadlineSeconds` of job `job`, if runs are bounded: its
    /// runtime (its class's, unless the shape gives it another) times the
    /// factor, at least 1.
    pub fn job_run_bound_seconds(&self, job: &PlannedJob) -> Option<i64> {
        let factor = self.run_bound_factor?;
        let seconds = (job.runtime.as_secs_f64() * factor).ceil();
        Some((seconds as i64).max(1))
    }

    /// Index of job `namespace/name`.
    pub fn job_index(&self, namespace: &str, name: &str) -> Option<usize> {
        self.index
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Index of leaf quota `name`.
    pub fn leaf_index(&self, name: &str) -> Option<usize> {
        self.leaf_index.get(name).copied()
    }

    /// Number of jobs per class.
    pub fn class_counts(&self) -> [usize; 3] {
        let mut counts = [0; 3];
        for leaf in &self.leaves {
            for (c, n) in leaf.counts.iter().enumerate() {
                counts[c] += n;
            }
        }
        counts
    }

    /// The Job manifest of job `i`; `suspended` sets `spec.suspend: true`
    /// (the floor, where no webhook holds it).
    pub fn job_manifest(&self, i: usize, suspended: bool) -> serde_json::Value {
        let job = &self.jobs[i];
        let class = &self.classes[job.class];
        let leaf = &self.leaves[job.leaf];
        let mut manifest = serde_json::json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job.name,
                "namespace": leaf.namespace,
                "labels": {
                    koord_queue_api::keys::QUOTA_NAME_LABEL: leaf.name,
                    CLASS_LABEL: class.name,
                },
            },
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": { "labels": { CLASS_LABEL: class.name } },
                    "spec": {
                        "priorityClassName": class.name,
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "main",
                            "image": "busybox",
                            "resources": { "requests": { "cpu": job.cpu.to_string() } },
                        }],
                    },
                },
            },
        });
        if suspended {
            manifest["spec"]["suspend"] = serde_json::Value::Bool(true);
        }
        if let Some(bound) = self.job_run_bound_seconds(job) {
            manifest["spec"]["activeDeadlineSeconds"] = bound.into();
        }
        if let (Some(queue_labels), Some(labels)) = (
            self.queue_labels,
            manifest["metadata"]["labels"].as_object_mut(),
        ) {
            let (queue_label, queue) = queue_labels.queue;
            labels.insert(queue_label.to_string(), queue.into());
            labels.insert(queue_labels.priority_class.to_string(), class.name.into());
        }
        manifest
    }
}

/// A slow-down factor for [`Shape::slowed`] from the command line: at least
/// 1 (a faster shape would ask for more arrivals a second than its
/// sequences are made for).
pub fn parse_slow_down(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(k) if k.is_finite() && k >= 1.0 => Ok(k),
        _ => Err(format!("{text:?}: expected a number of at least 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::{CLASS_LABEL, CLASSES, QueueLabels, Result, Shape, parse_scale};

    #[test]
    fn baseline_matches_kueue() -> Result<()> {
        let s = parse_scale("15k")?;
        let shape = Shape::new("15k", s.jobs, s.queues, s.cohorts, s.classes)?;
        assert_eq!(shape.jobs.len(), 15_000);
        assert_eq!(shape.leaves.len(), 30);
        assert_eq!(shape.parents.len(), 5);
        assert!(shape.parents.iter().all(|p| p.cpu == 120));
        assert_eq!(shape.root_cpu, 600);
        assert!(shape.leaves.iter().all(|l| l.counts == [350, 100, 50]));
        assert_eq!(shape.class_counts(), [10_500, 3_000, 1_500]);
        let i = shape.job_index("bench-cq-4-29", "large-49");
        assert!(i.is_some_and(|i| shape.jobs[i].class == 2));
        Ok(())
    }

    #[test]
    fn other_scales() -> Result<()> {
        let shape = super::named("baseline", "1k", None, None, None)?;
        assert_eq!(shape.jobs.len(), 1000);
        assert_eq!(shape.classes[0].interval, CLASSES[0].interval);
        let s = parse_scale("50k")?;
        assert_eq!((s.jobs, s.queues, s.cohorts), (50_000, 1000, 10));
        let shape = super::named("baseline", "50k", None, None, None)?;
        // Kueue's large-scale generator: per ClusterQueue 35 small jobs
        // every 60 ms, 11 medium every 300 ms and 4 large every 700 ms.
        assert!(shape.leaves.iter().all(|l| l.counts == [35, 11, 4]));
        let ms = |c: usize| shape.classes[c].interval.as_millis();
        assert_eq!((ms(0), ms(1), ms(2)), (60, 300, 700));
        let large = shape.jobs.iter().find(|j| j.class == 2);
        assert!(large.is_some_and(|j| j.runtime.as_millis() == 700 && j.cpu == 20));
        assert_eq!(shape.root_cpu, 20_000);
        assert!(shape.parents.iter().all(|p| p.cpu == 2000));
        assert!(parse_scale("x").is_err());
        Ok(())
    }

    #[test]
    fn another_queue_systems_labels_name_its_queue_and_the_class() -> Result<()> {
        let shape = Shape::new("t", 300, 30, 5, CLASSES)?;
        let labels = |s: &Shape| s.job_manifest(0, false)["metadata"]["labels"].clone();
        assert!(labels(&shape)["q.example/queue"].is_null());
        let queued = shape.with_queue_labels(QueueLabels {
            queue: ("q.example/queue", "bench"),
            priority_class: "q.example/priority",
        });
        let l = labels(&queued);
        assert_eq!(l["q.example/queue"], "bench");
        assert_eq!(l["q.example/priority"], CLASSES[queued.jobs[0].class].name);
        assert_eq!(l[CLASS_LABEL], CLASSES[queued.jobs[0].class].name);
        Ok(())
    }

    #[test]
    fn one_large_class_has_three_large_queues_among_small_ones() -> Result<()> {
        let shape = super::named("one-large-class", "15k", None, None, None)?;
        assert_eq!(shape.parents.len(), 1);
        assert_eq!(shape.leaves.len(), 30);
        let large: Vec<_> = shape.leaves.iter().filter(|l| l.counts[2] > 0).collect();
        assert_eq!(large.len(), 3);
        assert!(large.iter().all(|l| l.counts[0] == 0 && l.counts[1] == 0));
        let jobs = shape.jobs.len();
        assert!((14_900..=15_100).contains(&jobs), "{jobs} jobs");
        // Every sequence lasts about as long: the last small job and the
        // last large one are created within two seconds of each other.
        let last = |c: usize| {
            let n = shape.leaves.iter().map(|l| l.counts[c]).max().unwrap_or(0) as f64;
            n * CLASSES[c].interval.as_secs_f64()
        };
        assert!((last(0) - last(2)).abs() < 2.0);
        assert!(
            shape
                .jobs
                .iter()
                .filter(|j| j.class == 2)
                .all(|j| j.cpu == super::ONE_LARGE_CPU)
        );
        assert!(super::named("one-large-class", "15k", None, Some(4), None).is_err());
        assert!(super::named("other", "15k", None, None, None).is_err());
        Ok(())
    }

    #[test]
    fn a_slowed_shape_keeps_its_jobs_and_what_each_asks() -> Result<()> {
        let shape = super::named("one-large-class", "15k", Some(3000), None, None)?;
        let slow = shape.clone().slowed(10.0).with_run_bounds(Some(3.0));
        assert_eq!(slow.jobs.len(), shape.jobs.len());
        for (a, b) in shape.classes.iter().zip(&slow.classes) {
            assert_eq!(b.interval, a.interval * 10);
            assert_eq!(b.runtime, a.runtime * 10);
        }
        let large = slow.jobs.iter().find(|j| j.class == 2).unwrap();
        assert_eq!(large.runtime, super::ONE_LARGE_RUNTIME * 10);
        assert_eq!(slow.job_run_bound_seconds(large), Some(15));
        // A factor under 1 leaves the shape as it is.
        assert_eq!(
            shape.clone().slowed(0.5).classes[0].interval,
            shape.classes[0].interval
        );
        Ok(())
    }

    #[test]
    fn run_bounds_round_up_each_class_runtime() -> Result<()> {
        let shape = Shape::new("t", 300, 30, 5, CLASSES)?;
        assert!(shape.job_manifest(0, false)["spec"]["activeDeadlineSeconds"].is_null());
        let bounded = shape.with_run_bounds(Some(5.0));
        let bounds: Vec<_> = CLASSES
            .iter()
            .map(|c| bounded.run_bound_seconds(c))
            .collect();
        // 200 ms, 500 ms and 1 s, five times, in whole seconds.
        assert_eq!(bounds, [Some(1), Some(3), Some(5)]);
        let large = bounded
            .jobs
            .iter()
            .position(|j| j.class == 2)
            .ok_or_else(|| anyhow::anyhow!("no large job"))?;
        assert_eq!(
            bounded.job_manifest(large, false)["spec"]["activeDeadlineSeconds"],
            5
        );
        Ok(())
    }
}
