//! The benchmark's shapes as a trace and objects: the stream the benchmark
//! creates (`bench-e2e`, its `create_paced` arrival schedule) and the quota
//! tree it sets up (`phase/prepare.rs`), from the one [`Shape`].

use koord_queue_api::{Resources, keys};
use serde_json::Value;

use super::objects::{QuotaSpec, config};
use crate::shape::{CLASS_LABEL, LEAF_MAX_CPU, LEAF_MIN_CPU, Shape};
use crate::trace::{Quantity, TraceJob, TracePodSet};

/// The shape's jobs as the benchmark paces them: each (queue, class)
/// sequence creates a job every class interval, the first one interval
/// after the start; a job runs its class's runtime, bounded as the shape
/// says. Ordered by submission.
pub fn trace(shape: &Shape) -> Vec<TraceJob> {
    let mut jobs: Vec<TraceJob> = shape
        .jobs
        .iter()
        .map(|job| {
            let class = &shape.classes[job.class];
            let leaf = &shape.leaves[job.leaf];
            let interval = i64::try_from(class.interval.as_millis()).unwrap_or(i64::MAX);
            let seq = i64::try_from(job.seq).unwrap_or(i64::MAX);
            TraceJob {
                name: Some(job.name.clone()),
                namespace: leaf.namespace.clone(),
                quota: Some(leaf.name.clone()),
                queue: None,
                priority: Some(class.priority),
                priority_class: Some(class.name.to_string()),
                submit_ms: (seq + 1).saturating_mul(interval),
                runtime_ms: i64::try_from(job.runtime.as_millis()).unwrap_or(i64::MAX),
                run_bound_seconds: shape.job_run_bound_seconds(job),
                pod_sets: vec![TracePodSet {
                    name: Some("main".into()),
                    count: 1,
                    requests: [("cpu".to_string(), Quantity(job.cpu.to_string()))].into(),
                    grace_seconds: None,
                }],
                labels: [(CLASS_LABEL.to_string(), class.name.to_string())].into(),
                observed: None,
            }
        })
        .collect();
    // Stable: jobs created at the same instant keep the shape's order.
    jobs.sort_by_key(|j| j.submit_ms);
    jobs
}

fn cpu(cores: u32) -> Resources {
    let mut r = Resources::new();
    r.set("cpu", i64::from(cores) * 1000);
    r
}

/// The objects the benchmark sets up: each parent (min = max, its leaves'
/// mins), each leaf (min 20, max 120 CPU, serving its namespace), the root
/// capacity in the configuration. `capacity_factor` scales the parents and
/// the root (1: the benchmark's; the shape's stream asks about 18 % more
/// than its parents hold, so its backlog grows all run long). With
/// `queue_spec`, each leaf's Queue too: `Priority`, merged with it (as
/// `bench-e2e --queue-spec` creates them).
pub fn objects(shape: &Shape, capacity_factor: f64, queue_spec: Option<&Value>) -> Vec<Value> {
    let scaled = |cores: u32| {
        let mut r = Resources::new();
        // A factor near 1: the product is far within range.
        r.set(
            "cpu",
            (f64::from(cores) * 1000.0 * capacity_factor).round() as i64,
        );
        r
    };
    let mut docs = vec![config(Some(&scaled(shape.root_cpu)))];
    for parent in &shape.parents {
        docs.push(
            QuotaSpec {
                name: parent.name.clone(),
                is_parent: true,
                min: scaled(parent.cpu),
                max: scaled(parent.cpu),
                ..QuotaSpec::default()
            }
            .to_object(),
        );
    }
    for leaf in &shape.leaves {
        docs.push(
            QuotaSpec {
                name: leaf.name.clone(),
                parent: Some(shape.parents[leaf.parent].name.clone()),
                min: cpu(LEAF_MIN_CPU),
                max: cpu(LEAF_MAX_CPU),
                namespaces: vec![leaf.namespace.clone()],
                ..QuotaSpec::default()
            }
            .to_object(),
        );
    }
    if let Some(extra) = queue_spec {
        for leaf in &shape.leaves {
            let mut spec = serde_json::json!({ "queuePolicy": "Priority" });
            if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                spec.extend(extra.clone());
            }
            docs.push(serde_json::json!({
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "Queue",
                "metadata": { "name": leaf.name, "namespace": keys::SYSTEM_NAMESPACE },
                "spec": spec,
            }));
        }
    }
    docs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{objects, trace};
    use crate::cluster::Cluster;
    use crate::import::objects::to_yaml;
    use crate::shape::{Shape, parse_scale};

    #[test]
    fn the_baseline_is_kueues_stream() {
        let s = parse_scale("1k").unwrap();
        let shape = Shape::new("1k", s.jobs, s.queues, s.cohorts, s.classes).unwrap();
        let t = trace(&shape);
        assert_eq!(t.len(), 1000);
        // A small job every 100 ms per queue, a large one every 1.2 s.
        let first = &t[0];
        assert_eq!((first.submit_ms, first.runtime_ms), (100, 200));
        assert_eq!(first.priority_class.as_deref(), Some("small"));
        let large = t
            .iter()
            .find(|j| j.name.as_deref() == Some("large-1"))
            .unwrap();
        assert_eq!((large.submit_ms, large.priority), (2_400, Some(200)));
        assert!(t.windows(2).all(|w| w[0].submit_ms <= w[1].submit_ms));
        let cluster = Cluster::from_yaml(&[to_yaml(&objects(&shape, 1.0, None)).unwrap()]).unwrap();
        assert_eq!(cluster.quotas.len(), 35);
        // Every leaf has its queue; the run releases everything.
        assert_eq!(cluster.queues.len(), 35);
        let report = crate::simulate(&cluster, &t, crate::engine::Settings::default()).unwrap();
        assert_eq!(report.summary.never_released, 0);
    }
}
