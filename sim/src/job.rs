//! A trace's job as the simulation keeps it: its total request, its
//! priority resolved, its run bound as the scheduler computes it, its names
//! shared (a million jobs name a few hundred namespaces and quotas).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use koord_queue_api::Resources;
use koord_queue_api::resources::parse_quantity;
use koord_queue_scheduler::controller::records::{DEFAULT_GRACE_SECONDS, max_run_ms};

pub use koord_queue_scheduler::forecast::Job;

use crate::trace::TraceJob;

/// Makes [`Job`]s of trace lines, sharing repeated names.
#[derive(Debug, Default)]
pub struct JobBuilder {
    names: HashMap<Box<str>, Arc<str>>,
    labels: HashMap<BTreeMap<String, String>, Arc<BTreeMap<String, String>>>,
    priorities: HashMap<String, i32>,
}

impl JobBuilder {
    /// A builder resolving priority classes by `priorities` (name → value).
    pub fn new(priorities: HashMap<String, i32>) -> Self {
        Self {
            names: HashMap::new(),
            labels: HashMap::new(),
            priorities,
        }
    }

    fn labels(&mut self, labels: &BTreeMap<String, String>) -> Arc<BTreeMap<String, String>> {
        if let Some(shared) = self.labels.get(labels) {
            return shared.clone();
        }
        let shared = Arc::new(labels.clone());
        self.labels.insert(labels.clone(), shared.clone());
        shared
    }

    fn name(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(name);
        self.names.insert(Box::from(name), shared.clone());
        shared
    }

    /// The job of trace line `t` (the `index`th job, named `job-<index>`
    /// when it has no name).
    pub fn build(&mut self, t: &TraceJob, index: usize) -> Result<Job, String> {
        let quota = t.quota.as_deref().filter(|q| !q.is_empty());
        let queue = quota.or(t.queue.as_deref().filter(|q| !q.is_empty()));
        let Some(queue) = queue else {
            return Err("names neither a quota nor a queue".into());
        };
        if t.runtime_ms < 0 {
            return Err(format!("negative runtime_ms {}", t.runtime_ms));
        }
        let mut request = Resources::new();
        let mut grace = None::<i64>;
        for (i, ps) in t.pod_sets.iter().enumerate() {
            if ps.count < 0 {
                return Err(format!("pod_sets[{i}]: negative count {}", ps.count));
            }
            for (resource, q) in &ps.requests {
                let one =
                    parse_quantity(resource, &q.0).map_err(|e| format!("pod_sets[{i}]: {e}"))?;
                let total = one.saturating_mul(ps.count);
                request.set(
                    resource.clone(),
                    request.get(resource).saturating_add(total),
                );
            }
            let g = ps.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS).max(0);
            grace = Some(grace.map_or(g, |m| m.max(g)));
        }
        let priority = match (t.priority, &t.priority_class) {
            (Some(p), _) => p,
            (None, Some(class)) => *self
                .priorities
                .get(class)
                .ok_or_else(|| format!("priority class {class:?} is not among the objects"))?,
            (None, None) => 0,
        };
        let class = match &t.priority_class {
            Some(c) => self.name(c),
            None => self.name(&format!("priority {priority}")),
        };
        let deadline_ms = t
            .run_bound_seconds
            .filter(|s| *s > 0)
            .map(|s| s.saturating_mul(1000));
        // The trace's bound ends the job; the core is told it with the
        // pods' grace period (`max_run_ms`).
        let (run_ms, bounded_out) = Job::bounded(t.runtime_ms, deadline_ms);
        let name = match &t.name {
            Some(n) if !n.is_empty() => n.clone(),
            _ => format!("job-{index}"),
        };
        Ok(Job {
            namespace: self.name(&t.namespace),
            name: name.into_boxed_str(),
            quota: quota.map(|q| self.name(q)),
            queue: self.name(queue),
            priority,
            class,
            submit_ms: t.submit_ms,
            run_ms,
            bounded_out,
            max_run_ms: max_run_ms(t.run_bound_seconds, grace.unwrap_or(DEFAULT_GRACE_SECONDS)),
            request,
            labels: self.labels(&t.labels),
            observed_wait_ms: t
                .observed
                .as_ref()
                .and_then(|o| o.release_ms)
                .map(|r| r - t.submit_ms),
            observed_admit_ms: t.observed.as_ref().and_then(|o| o.admitted_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use super::JobBuilder;
    use crate::trace::{Quantity, TraceJob, TracePodSet};

    fn pods(count: i64, cpu: &str) -> TracePodSet {
        TracePodSet {
            count,
            requests: [("cpu".to_string(), Quantity(cpu.into()))].into(),
            ..Default::default()
        }
    }

    #[test]
    fn pod_sets_sum_and_the_bound_is_the_schedulers() {
        let mut b = JobBuilder::new(HashMap::from([("high".to_string(), 100)]));
        let t = TraceJob {
            namespace: "ns".into(),
            quota: Some("a".into()),
            priority_class: Some("high".into()),
            runtime_ms: 90_000,
            run_bound_seconds: Some(60),
            pod_sets: vec![pods(2, "500m"), pods(3, "1")],
            ..Default::default()
        };
        let job = b.build(&t, 7).unwrap();
        assert_eq!(job.request.get("cpu"), 4000);
        assert_eq!(job.priority, 100);
        assert_eq!(&*job.name, "job-7");
        assert_eq!(&*job.queue, "a");
        // Ended by its bound; the core hears the bound plus the grace period.
        assert_eq!((job.run_ms, job.bounded_out), (60_000, true));
        assert_eq!(job.max_run_ms, Some(90_000));
    }

    #[test]
    fn a_unit_of_the_core_is_a_job_and_back() {
        let def = koord_queue_core::UnitDef::new("ns", "u")
            .with_quota("a")
            .with_queue("a")
            .created_at(5)
            .requesting("cpu", 2000)
            .running_at_most(60_000);
        let job = super::Job::from_unit_def(&def, 30_000, "high");
        assert_eq!(job.unit_def(), def);
        assert_eq!((job.run_ms, &*job.class), (30_000, "high"));
    }

    #[test]
    fn a_job_needs_a_place_and_known_class() {
        let mut b = JobBuilder::default();
        assert!(b.build(&TraceJob::default(), 0).is_err());
        let t = TraceJob {
            queue: Some("q".into()),
            priority_class: Some("nope".into()),
            ..Default::default()
        };
        assert!(b.build(&t, 0).unwrap_err().contains("nope"));
    }
}
