//! The rules that keep a queued job inside what its QueueUnit holds, as pure
//! functions over the adapters (docs/security.md):
//!
//! - **The hold.** Every marker [`JobAdapter::hold`] sets (an annotation, a
//!   native field) is part of the hold: an update that changes any marker and
//!   leaves the job less than fully held — a field set to `false`, to `null`,
//!   or removed; the annotation removed — lifts it ([`loosens_hold`]).
//! - **The size.** What a job would run is its pod sets: per set a pod count
//!   and the request of one pod. An update may shrink them, never grow them
//!   ([`growth`]): a count up, a per-pod request up, a pod set that appears.
//! - **Children.** An object a managed job's controller creates (an MPIJob's
//!   launcher Job, a RayJob's RayCluster and submitter Job) runs on its owner's
//!   unit. Each adapter says which children it makes, by kind and name, and how
//!   much of its own size each may use ([`JobAdapter::child_budget`]);
//!   [`exceeds`] compares a child's size with that budget.

use serde_json::{Map, Value};

use super::json::{get_path, set_path};
use super::{AdapterError, JobAdapter, PodSetInfo};
use crate::resources::Resources;

/// The values of the hold markers of `job`, in the adapter's order (`None`
/// for an absent or `null` marker).
fn markers<'a>(adapter: &dyn JobAdapter, job: &'a Value) -> Vec<Option<&'a Value>> {
    adapter
        .hold_fields()
        .iter()
        .map(|path| get_path(job, path))
        .collect()
}

/// Whether every marker of the hold is set on `job` as [`JobAdapter::hold`]
/// sets it.
pub fn fully_held(adapter: &dyn JobAdapter, job: &Value) -> bool {
    // Hold a copy of the markers only: jobs can be large.
    let mut projection = Value::Object(Map::new());
    for (path, value) in adapter.hold_fields().iter().zip(markers(adapter, job)) {
        if let Some(value) = value {
            set_path(&mut projection, path, value.clone());
        }
    }
    let before = markers(adapter, &projection)
        .into_iter()
        .map(|v| v.cloned())
        .collect::<Vec<_>>();
    adapter.hold(&mut projection);
    let after = markers(adapter, &projection)
        .into_iter()
        .map(|v| v.cloned())
        .collect::<Vec<_>>();
    before == after
}

/// Whether the update `old` → `new` lifts (part of) the hold: it changes a
/// marker and `new` is not fully held. Re-holding (setting markers) and
/// leaving the markers alone do not lift it.
pub fn loosens_hold(adapter: &dyn JobAdapter, old: &Value, new: &Value) -> bool {
    markers(adapter, old) != markers(adapter, new) && !fully_held(adapter, new)
}

/// What `new` runs beyond `old`, in words (`None` when it runs no more): a
/// pod set that appears with pods, more pods in a set, or a larger request
/// per pod for any resource. Pod sets are matched by name.
pub fn growth(old: &[PodSetInfo], new: &[PodSetInfo]) -> Option<String> {
    let mut grown = Vec::new();
    for set in new.iter().filter(|s| s.count > 0) {
        let Some(before) = old.iter().find(|o| o.name == set.name) else {
            grown.push(format!(
                "pod set {} appears with {} pods",
                set.name, set.count
            ));
            continue;
        };
        if set.count > before.count {
            grown.push(format!(
                "pod set {}: {} → {} pods",
                set.name, before.count, set.count
            ));
        }
        for (resource, now, was) in exceeds(&set.per_pod, &before.per_pod) {
            grown.push(format!(
                "pod set {}: {resource} per pod {} → {}",
                set.name,
                crate::resources::format_quantity(&resource, was).0,
                crate::resources::format_quantity(&resource, now).0
            ));
        }
    }
    (!grown.is_empty()).then(|| grown.join(", "))
}

/// The resources of `amount` above `limit`: `(resource, amount, limit)`.
/// A resource `limit` does not name counts as 0 there.
pub fn exceeds(amount: &Resources, limit: &Resources) -> Vec<(String, i64, i64)> {
    amount
        .iter()
        .filter(|(name, v)| *v > limit.get(name))
        .map(|(name, v)| (name.to_string(), v, limit.get(name)))
        .collect()
}

/// The size growth of an update, read with the adapter: `Ok(None)` when `new`
/// runs no more than `old`. An unreadable `new` is an error (refused by the
/// caller); an unreadable `old` (stored before a stricter reader) makes any
/// readable `new` acceptable only if it has no pods.
pub fn update_growth(
    adapter: &dyn JobAdapter,
    old: &Value,
    new: &Value,
) -> Result<Option<String>, AdapterError> {
    let new_sets = adapter.pod_sets(new)?;
    let old_sets = adapter.pod_sets(old).unwrap_or_default();
    Ok(growth(&old_sets, &new_sets))
}

/// Total resources of the pod sets named in `names` (every set when `names`
/// is empty).
pub fn pod_sets_total(sets: &[PodSetInfo], names: &[&str]) -> Resources {
    let mut total = Resources::new();
    for set in sets
        .iter()
        .filter(|s| names.is_empty() || names.contains(&s.name.as_str()))
    {
        total.add(&set.per_pod.scaled(i64::from(set.count)));
    }
    total
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::jobs;

    fn set(name: &str, count: i32, cpu: i64) -> PodSetInfo {
        PodSetInfo {
            name: name.into(),
            count,
            template: json!({}),
            per_pod: Resources::from_iter([("cpu".to_string(), cpu)]),
        }
    }

    #[test]
    fn growth_names_what_grows() {
        let old = [set("a", 2, 1000), set("b", 1, 500)];
        assert_eq!(growth(&old, &old), None);
        assert_eq!(growth(&old, &[set("a", 1, 1000)]), None, "shrinking");
        assert_eq!(growth(&old, &[set("c", 0, 9000)]), None, "an empty set");
        assert_eq!(
            growth(&old, &[set("a", 6, 1000)]).unwrap(),
            "pod set a: 2 → 6 pods"
        );
        assert_eq!(
            growth(&old, &[set("b", 1, 2000)]).unwrap(),
            "pod set b: cpu per pod 500m → 2"
        );
        assert_eq!(
            growth(&old, &[set("c", 1, 1)]).unwrap(),
            "pod set c appears with 1 pods"
        );
        let mut gpu = set("a", 2, 1000);
        gpu.per_pod.set("nvidia.com/gpu", 1);
        assert!(growth(&old, &[gpu]).unwrap().contains("nvidia.com/gpu"));
    }

    /// Every adapter's hold sets exactly its markers, and every way of
    /// touching a marker of a held job that leaves it not fully held lifts.
    #[test]
    fn markers_are_the_hold() {
        for adapter in jobs::all() {
            let mut held = json!({"metadata": {"name": "x"}, "spec": {}});
            adapter.hold(&mut held);
            assert!(fully_held(*adapter, &held), "{}", adapter.kind().kind);
            for path in adapter.hold_fields() {
                for replacement in [
                    None,
                    Some(json!(null)),
                    Some(json!(false)),
                    Some(json!("false")),
                ] {
                    let mut new = held.clone();
                    match &replacement {
                        None => remove(&mut new, path),
                        Some(v) => set_path(&mut new, path, v.clone()),
                    }
                    assert!(
                        loosens_hold(*adapter, &held, &new),
                        "{} {path:?} → {replacement:?}",
                        adapter.kind().kind
                    );
                }
            }
            // Re-holding a released job, or changing nothing, is no lift.
            let mut released = held.clone();
            adapter.release(&mut released);
            assert!(!loosens_hold(*adapter, &released, &held));
            assert!(!loosens_hold(*adapter, &held, &held));
            assert!(!loosens_hold(*adapter, &released, &released));
        }
    }

    fn remove(value: &mut Value, path: &[&str]) {
        let (last, parents) = path.split_last().unwrap();
        let mut current = value;
        for key in parents {
            match current.get_mut(*key) {
                Some(v) => current = v,
                None => return,
            }
        }
        if let Some(map) = current.as_object_mut() {
            map.remove(*last);
        }
    }

    #[test]
    fn exceeds_lists_resources_over_the_limit() {
        let r = |cpu: i64, gpu: i64| {
            Resources::from_iter([
                ("cpu".to_string(), cpu),
                ("nvidia.com/gpu".to_string(), gpu),
            ])
        };
        assert!(exceeds(&r(1000, 0), &r(1000, 1)).is_empty());
        assert_eq!(
            exceeds(
                &r(2000, 1),
                &Resources::from_iter([("cpu".to_string(), 1000)])
            ),
            vec![
                ("cpu".to_string(), 2000, 1000),
                ("nvidia.com/gpu".to_string(), 1, 0)
            ]
        );
    }
}
