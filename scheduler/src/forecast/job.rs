//! A job of a forward simulation: its total request, its priority
//! resolved, its run bound as the scheduler computes it, its names shared (a
//! million jobs name a few hundred namespaces and quotas).

use std::collections::BTreeMap;
use std::sync::Arc;

use koord_queue_api::Resources;
use koord_queue_core::UnitDef;

/// A job of the simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name (of the job and its unit).
    pub name: Box<str>,
    /// Its quota (label), if any.
    pub quota: Option<Arc<str>>,
    /// The queue its unit names: its quota's, else the one it names (as the
    /// webhook routes it).
    pub queue: Arc<str>,
    /// Priority.
    pub priority: i32,
    /// Its class in the report: the PriorityClass, else `priority <n>`.
    pub class: Arc<str>,
    /// Submission time (ms).
    pub submit_ms: i64,
    /// How long it runs once released (ms), its bound applied.
    pub run_ms: i64,
    /// Whether its bound ends it before it is done.
    pub bounded_out: bool,
    /// What the core is told: the longest it holds quota once released
    /// (its bound plus its pods' grace period).
    pub max_run_ms: Option<i64>,
    /// Total request of its pod sets.
    pub request: Resources,
    /// Labels of its unit (shared: jobs of a trace repeat a few sets).
    pub labels: Arc<BTreeMap<String, String>>,
    /// Its submission to its release in the real system, when the trace
    /// says.
    pub observed_wait_ms: Option<i64>,
    /// When its unit was first seen waiting in the real system, when the
    /// trace says (see [`super::Latency::admit_observed`]).
    pub observed_admit_ms: Option<i64>,
}

impl Job {
    /// `namespace/name`, the key the core knows the unit by.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The job of a unit the scheduler's core knows (`def`, as the
    /// controller's `UnitState::def` makes it): for an estimate from the
    /// scheduler's state. It runs `run_ms` once released (a runtime learned
    /// from its queue), at most its bound; its class in the report is
    /// `class`.
    pub fn from_unit_def(def: &UnitDef, run_ms: i64, class: &str) -> Self {
        let (run_ms, bounded_out) = Self::bounded(run_ms, def.max_run_ms);
        Self {
            namespace: Arc::from(def.namespace.as_str()),
            name: Box::from(def.name.as_str()),
            quota: def.quota.as_deref().map(Arc::from),
            queue: Arc::from(def.queue.as_str()),
            priority: def.priority,
            class: Arc::from(class),
            submit_ms: def.created_ms,
            run_ms,
            bounded_out,
            max_run_ms: def.max_run_ms,
            request: def.request.clone(),
            labels: Arc::new(def.labels.clone()),
            observed_wait_ms: None,
            observed_admit_ms: None,
        }
    }

    /// How long a job of runtime `run_ms` runs under bound `max_run_ms`,
    /// and whether the bound ends it.
    pub fn bounded(run_ms: i64, max_run_ms: Option<i64>) -> (i64, bool) {
        let run_ms = run_ms.max(0);
        match max_run_ms {
            Some(bound) if bound < run_ms => (bound.max(0), true),
            _ => (run_ms, false),
        }
    }

    /// The unit as the core is told of it (as `UnitState::def` tells it).
    pub fn unit_def(&self) -> UnitDef {
        UnitDef {
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            queue: self.queue.to_string(),
            priority: self.priority,
            created_ms: self.submit_ms,
            request: self.request.clone(),
            quota: self.quota.as_deref().map(str::to_string),
            labels: BTreeMap::clone(&self.labels),
            max_run_ms: self.max_run_ms,
        }
    }
}
