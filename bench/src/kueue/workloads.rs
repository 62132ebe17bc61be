//! The quota check of the Kueue phase on the API's own record, as the
//! QueueUnit checker does it for Koord-Queue: a watch on Kueue's Workloads
//! recomputes the CPU each ClusterQueue holds (a Workload holds what
//! `status.admission.podSetAssignments[].resourceUsage` says while its
//! `QuotaReserved` condition is true and it is not `Finished`), checks every
//! level against the same maxima at each increase, counts Workloads that
//! finished, and counts the entries into each condition (`Evicted` by
//! reason: the preemptions).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::Resources;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use super::super::quota::{Limits, Usage, Violation};
use super::super::shape::Shape;

/// Kueue's Workload, in the version v0.17.0 stores.
pub fn workload_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        super::GROUP,
        super::VERSION,
        "Workload",
    ))
}

#[derive(Debug, Default)]
struct Seen {
    leaf: Option<usize>,
    held: i64,
    /// Conditions true when last seen (`Evicted` carries its reason).
    conditions: Vec<String>,
    finished: bool,
}

#[derive(Debug)]
struct State {
    workloads: HashMap<String, Seen>,
    usage: Usage,
    finished: usize,
    last_finished: f64,
    entered: BTreeMap<String, usize>,
}

/// The Workload watch.
pub struct WorkloadChecker {
    state: Mutex<State>,
    shape: Arc<Shape>,
    t0: Instant,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for WorkloadChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadChecker").finish_non_exhaustive()
    }
}

/// True conditions of a Workload, `Evicted` and `Preempted` as
/// `<type>:<reason>`.
fn true_conditions(status: &Value) -> Vec<String> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| {
            let type_ = c["type"].as_str()?;
            Some(match type_ {
                "Evicted" | "Preempted" => {
                    format!("{type_}:{}", c["reason"].as_str().unwrap_or_default())
                }
                _ => type_.to_string(),
            })
        })
        .collect()
}

/// Millicores of CPU the admission of `status` assigns.
fn admitted_cpu(status: &Value) -> i64 {
    status["admission"]["podSetAssignments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            serde_json::from_value::<BTreeMap<String, Quantity>>(a["resourceUsage"].clone()).ok()
        })
        .filter_map(|list| Resources::from_list(&list).ok())
        .map(|r| r.get("cpu"))
        .sum()
}

impl WorkloadChecker {
    /// Starts watching with `client`; times count from `t0`. `check`
    /// enables the max checks.
    pub fn start(shape: Arc<Shape>, client: kube::Client, t0: Instant, check: bool) -> Arc<Self> {
        let limits = check.then(|| Limits::of(&shape));
        let checker = Arc::new(Self {
            state: Mutex::new(State {
                workloads: HashMap::new(),
                usage: Usage::new(&shape, limits),
                finished: 0,
                last_finished: 0.0,
                entered: BTreeMap::new(),
            }),
            shape,
            t0,
            task: Mutex::new(None),
        });
        let this = checker.clone();
        let task = tokio::spawn(async move {
            let api: Api<DynamicObject> = Api::all_with(client, &workload_resource());
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            loop {
                match stream.try_next().await {
                    Ok(Some(watcher::Event::Apply(w) | watcher::Event::InitApply(w))) => {
                        this.on_workload(&w, false)
                    }
                    Ok(Some(watcher::Event::Delete(w))) => this.on_workload(&w, true),
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(error) => tracing::warn!(%error, "workload watch"),
                }
            }
        });
        if let Ok(mut slot) = checker.task.lock() {
            *slot = Some(task);
        }
        checker
    }

    /// Stops the watch.
    pub fn stop(&self) {
        if let Ok(mut slot) = self.task.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
    }

    fn on_workload(&self, w: &DynamicObject, deleted: bool) {
        let t = self.t0.elapsed().as_secs_f64();
        let key = format!(
            "{}/{}",
            w.metadata.namespace.as_deref().unwrap_or_default(),
            w.metadata.name.as_deref().unwrap_or_default()
        );
        let status = &w.data["status"];
        let conditions = if deleted {
            Vec::new()
        } else {
            true_conditions(status)
        };
        let has = |c: &str| conditions.iter().any(|x| x == c);
        let finished = has("Finished");
        let held = if has("QuotaReserved") && !finished {
            admitted_cpu(status)
        } else {
            0
        };
        let leaf = status["admission"]["clusterQueue"]
            .as_str()
            .and_then(|cq| self.shape.leaf_index(cq));
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let st = &mut *guard;
        let seen = st.workloads.entry(key.clone()).or_default();
        for c in &conditions {
            if !seen.conditions.contains(c) {
                *st.entered.entry(c.clone()).or_default() += 1;
            }
        }
        seen.conditions = conditions;
        if finished && !seen.finished {
            seen.finished = true;
            st.finished += 1;
            st.last_finished = t;
        }
        // The quota is held where it was admitted; a readmission elsewhere
        // frees the old place first.
        let mut changes = Vec::new();
        if seen.held != 0 && (leaf != seen.leaf || held == 0) {
            if let Some(l) = seen.leaf {
                changes.push((l, -seen.held));
            }
            seen.held = 0;
        }
        if let Some(l) = leaf
            && held != seen.held
        {
            changes.push((l, held - seen.held));
            seen.held = held;
        }
        if leaf.is_some() {
            seen.leaf = leaf;
        }
        for (l, delta) in changes {
            let _: Vec<Violation> = st.usage.change(l, delta, t, &key);
        }
    }

    /// Workloads that finished.
    pub fn finished(&self) -> usize {
        self.state.lock().map(|s| s.finished).unwrap_or(0)
    }

    /// When the last Workload finished (seconds since the start).
    pub fn last_finished_at(&self) -> f64 {
        self.state.lock().map(|s| s.last_finished).unwrap_or(0.0)
    }

    /// The accounting and its violations.
    pub fn usage(&self) -> Option<Usage> {
        self.state.lock().ok().map(|s| s.usage.clone())
    }

    /// The violations (every one counts: a Workload's quota is freed only
    /// once Kueue saw its job finish) and their number.
    pub fn violation_examples(&self) -> (Vec<Violation>, usize) {
        self.state
            .lock()
            .map(|s| {
                (
                    s.usage.violations.iter().take(50).cloned().collect(),
                    s.usage.violation_count,
                )
            })
            .unwrap_or_default()
    }

    /// How many times Workloads entered each condition.
    pub fn condition_entries(&self) -> BTreeMap<String, usize> {
        self.state
            .lock()
            .map(|s| s.entered.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn admitted_cpu_and_conditions_of_a_workload_status() {
        let status = json!({
            "admission": { "clusterQueue": "cq-0-0", "podSetAssignments": [
                { "name": "main", "resourceUsage": { "cpu": "5", "memory": "1Gi" } },
                { "name": "w", "resourceUsage": { "cpu": "500m" } },
            ]},
            "conditions": [
                { "type": "QuotaReserved", "status": "True", "reason": "QuotaReserved" },
                { "type": "Admitted", "status": "True", "reason": "Admitted" },
                { "type": "Evicted", "status": "True", "reason": "Preempted" },
                { "type": "Finished", "status": "False", "reason": "x" },
            ],
        });
        assert_eq!(admitted_cpu(&status), 5500);
        assert_eq!(
            true_conditions(&status),
            vec!["QuotaReserved", "Admitted", "Evicted:Preempted"]
        );
        assert_eq!(admitted_cpu(&json!({})), 0);
    }
}
