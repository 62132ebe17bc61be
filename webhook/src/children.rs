//! The pods a queued job's unit pays for (docs/security.md "A child is
//! counted against its owner's unit"). A proven child pod is no larger than
//! a pod its unit was sized with, and the unit's pod sets also say how many
//! may run: a running child is admitted only while the children already
//! running on that unit, and it, fit the unit's pod sets.
//!
//! The webhook labels every proven child pod with the uid of the queued job
//! that pays for it ([`keys::CHARGED_TO_LABEL`]), so that the pods one unit
//! pays for are one label selector away, whatever controller made them and
//! however deep (a JobSet's Jobs' pods are charged to the JobSet). The label
//! is the webhook's: a child cannot change it, and a tenant's value on a new
//! pod is replaced.
//!
//! Admissions of one unit's children are serialized in this replica, and a
//! child admitted a moment ago that a list does not show yet is still
//! counted ([`ChildLedger`]). Two webhook replicas admitting children of one
//! unit at the same instant can each admit one before seeing the other's;
//! the overshoot is bounded by the number of replicas minus one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use koord_queue_api::jobs::pod_group::SetLimit;
use koord_queue_api::jobs::{json, pod_spec_requests};
use koord_queue_api::{Resources, keys};
use serde_json::Value;

/// How long an admitted child is counted without a list showing it: the
/// API server stores a pod well within this after the webhook's answer.
pub(crate) const LEDGER_TTL: Duration = Duration::from_secs(30);

/// A pod charged to a unit, as a list shows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Listed {
    /// Its name.
    pub name: String,
    /// The uid of the admission request that created it
    /// ([`keys::ADMISSION_ANNOTATION`]): a pod created with `generateName`
    /// has no name when it is admitted.
    pub admission: Option<String>,
    /// Whether it runs on its unit now: not finished (a terminating pod
    /// still runs) and not held by a scheduling gate.
    pub runs: bool,
    /// What it requests.
    pub requests: Resources,
}

/// The pods of a pod list (JSON objects).
pub(crate) fn listed(pods: &[Value]) -> Vec<Listed> {
    pods.iter()
        .map(|p| {
            let finished = matches!(
                json::get_path(p, &["status", "phase"]).and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            );
            let gated = json::get_path(p, &["spec", "schedulingGates"])
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty());
            Listed {
                name: json::get_path(p, &["metadata", "name"])
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                admission: koord_queue_api::jobs::annotation(p, keys::ADMISSION_ANNOTATION)
                    .map(str::to_string),
                runs: !finished && !gated,
                // A stored pod's spec is readable; one that is not counts
                // as requesting nothing but still takes its place.
                requests: p
                    .get("spec")
                    .and_then(|s| pod_spec_requests(s).ok())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// A child admitted here that a list may not show yet.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Admitted {
    /// The admission request's uid (a create: the pod carries it).
    pub admission: String,
    /// The pod's name when it was known (an update lifting its gate).
    pub name: Option<String>,
    /// What it requests.
    pub requests: Resources,
}

impl Admitted {
    /// Whether `pod` of a list is this admission, stored.
    fn shown_by(&self, pod: &Listed) -> bool {
        pod.admission.as_deref() == Some(self.admission.as_str())
            || (pod.runs && self.name.as_deref() == Some(pod.name.as_str()))
    }
}

/// Whether `running` and `new` together fit `sets`: every pod placed in a
/// set whose pods are at least as large, no set given more pods than its
/// count. Else why not, for the user.
///
/// Pods are placed most constrained first (the fewest sets they fit), each
/// in the smallest set with room that fits it. Pods made from the sets'
/// own templates — what a controller makes — are always placed; a greedy
/// placement can only be stricter than an exact matching, never looser.
pub(crate) fn fits_sets(
    sets: &[SetLimit],
    running: &[Resources],
    new: &Resources,
) -> Result<(), String> {
    let total: i64 = sets.iter().map(|s| i64::from(s.count.max(0))).sum();
    let count = i64::try_from(running.len())
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    if count > total {
        return Err(format!(
            "its unit pays for {total} pods and {} run already",
            running.len()
        ));
    }
    let fits = |pod: &Resources, set: &SetLimit| {
        koord_queue_api::jobs::guard::exceeds(pod, &set.per_pod).is_empty()
    };
    let mut pods: Vec<&Resources> = running.iter().collect();
    pods.push(new);
    pods.sort_by_key(|pod| sets.iter().filter(|s| fits(pod, s)).count());
    // Sets smallest first: by the sum of their amounts, then by name.
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by_key(|&i| {
        let size: i128 = sets[i].per_pod.iter().map(|(_, v)| i128::from(v)).sum();
        (size, sets[i].role.clone())
    });
    let mut room: Vec<i64> = sets.iter().map(|s| i64::from(s.count.max(0))).collect();
    for pod in pods {
        let Some(&i) = order.iter().find(|&&i| room[i] > 0 && fits(pod, &sets[i])) else {
            return Err(format!(
                "its unit's pod sets ({}) have no room left for a pod of {pod} beside the {} \
                 running",
                describe(sets),
                running.len()
            ));
        };
        room[i] -= 1;
    }
    Ok(())
}

/// Whether `running` and `new` together stay within `amount`, for a unit
/// whose pod sets are an amount rather than pods (a Workflow's stated
/// `koord-queue/min-resources`: Argo makes its pods step by step, in
/// parallel where its template says). Else why not.
pub(crate) fn fits_amount(
    amount: &Resources,
    running: &[Resources],
    new: &Resources,
) -> Result<(), String> {
    let mut asked = new.clone();
    for pod in running {
        asked.add(pod);
    }
    if koord_queue_api::jobs::guard::exceeds(&asked, amount).is_empty() {
        return Ok(());
    }
    Err(format!(
        "its unit holds {amount} and the {} pods running on it ask, with this one, {asked}",
        running.len()
    ))
}

/// Whether the unit's pod sets say nothing of its pods (templates without
/// containers): it is then an amount ([`fits_amount`]).
pub(crate) fn sized_as_amount(unit: &koord_queue_api::QueueUnit) -> bool {
    unit.spec.pod_set.iter().any(|set| {
        set.template
            .spec
            .as_ref()
            .is_none_or(|spec| spec.containers.is_empty())
    })
}

fn describe(sets: &[SetLimit]) -> String {
    sets.iter()
        .map(|s| format!("{} x {} {}", s.count, s.role, s.per_pod))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Gives a created child the webhook's keys and no one else's: every
/// `koord-queue/` label and annotation is removed (a tenant's would name a
/// unit or a queue the child has nothing to do with), and a pod is labelled
/// with `pod` = (the uid that pays for it, its admission request's uid).
pub(crate) fn own_keys(child: &mut Value, pod: Option<(&str, &str)>) {
    for field in ["labels", "annotations"] {
        if let Some(map) = child
            .pointer_mut(&format!("/metadata/{field}"))
            .and_then(Value::as_object_mut)
        {
            map.retain(|key, _| !key.starts_with(keys::KEY_PREFIX));
        }
    }
    if let Some((charged_to, admission)) = pod {
        json::set_path(
            child,
            &["metadata", "labels", keys::CHARGED_TO_LABEL],
            Value::String(charged_to.to_string()),
        );
        koord_queue_api::jobs::set_annotation(child, keys::ADMISSION_ANNOTATION, admission);
    }
}

/// The `koord-queue/` labels and annotations of `object`: on a child, the
/// webhook's, which no update may change.
pub(crate) fn own_keys_of(object: &Value) -> Vec<(String, Value)> {
    ["labels", "annotations"]
        .iter()
        .filter_map(|field| json::get_path(object, &["metadata", field])?.as_object())
        .flat_map(|map| map.iter())
        .filter(|(key, _)| key.starts_with(keys::KEY_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The label selector of the pods charged to the job of uid `uid`.
pub(crate) fn selector(uid: &str) -> String {
    format!("{}={uid}", keys::CHARGED_TO_LABEL)
}

/// Children admitted by this replica, per paying uid, until a list shows
/// them; and one lock per paying uid, so that two admissions of one unit's
/// children are counted one after the other.
#[derive(Debug, Default)]
pub struct ChildLedger {
    units: Mutex<HashMap<String, UnitEntry>>,
}

#[derive(Debug, Default)]
struct UnitEntry {
    lock: Arc<tokio::sync::Mutex<()>>,
    admitted: Vec<(Admitted, Instant)>,
}

impl ChildLedger {
    /// The lock of `uid`'s admissions.
    pub(crate) fn lock(&self, uid: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut units = self.units.lock().unwrap_or_else(PoisonError::into_inner);
        units.entry(uid.to_string()).or_default().lock.clone()
    }

    /// What runs on `uid`'s unit: the running pods of `listed` but `except`
    /// (the pod being admitted), and the children admitted here within
    /// [`LEDGER_TTL`] that the list does not show yet.
    pub(crate) fn running(
        &self,
        uid: &str,
        listed: &[Listed],
        except: &str,
        now: Instant,
    ) -> Vec<Resources> {
        let mut running: Vec<Resources> = listed
            .iter()
            .filter(|p| p.runs && p.name != except)
            .map(|p| p.requests.clone())
            .collect();
        let mut units = self.units.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = units.get_mut(uid) {
            entry.admitted.retain(|(a, at)| {
                now.duration_since(*at) < LEDGER_TTL && !listed.iter().any(|p| a.shown_by(p))
            });
            running.extend(entry.admitted.iter().map(|(a, _)| a.requests.clone()));
        }
        running
    }

    /// Records `child` admitted now for `uid`.
    pub(crate) fn admitted(&self, uid: &str, child: Admitted, now: Instant) {
        let mut units = self.units.lock().unwrap_or_else(PoisonError::into_inner);
        units
            .entry(uid.to_string())
            .or_default()
            .admitted
            .push((child, now));
    }

    /// Forgets the entry of `uid` once it holds nothing: no admission waits
    /// on its lock and no recent child is counted.
    pub(crate) fn tidy(&self, uid: &str, now: Instant) {
        let mut units = self.units.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = units.get_mut(uid) {
            entry
                .admitted
                .retain(|(_, at)| now.duration_since(*at) < LEDGER_TTL);
            if entry.admitted.is_empty() && Arc::strong_count(&entry.lock) == 1 {
                units.remove(uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res(cpu: i64) -> Resources {
        let mut r = Resources::new();
        r.set("cpu", cpu);
        r
    }

    fn set(role: &str, count: i32, cpu: i64) -> SetLimit {
        SetLimit {
            role: role.into(),
            count,
            per_pod: res(cpu),
        }
    }

    #[test]
    fn a_created_child_keeps_only_the_webhooks_keys() {
        let mut pod = json!({ "metadata": {
            "labels": { "app": "x", "koord-queue/queued": "true", "koord-queue/charged-to": "forged" },
            "annotations": { "koord-queue/queue-unit": "someone-elses", "note": "kept" } } });
        own_keys(&mut pod, Some(("uid-1", "req-1")));
        assert_eq!(
            pod["metadata"],
            json!({ "labels": { "app": "x", "koord-queue/charged-to": "uid-1" },
                    "annotations": { "note": "kept", "koord-queue/admission": "req-1" } })
        );
        let mut job = json!({ "metadata": { "annotations": { "koord-queue/queue": "q" } } });
        own_keys(&mut job, None);
        assert_eq!(job["metadata"], json!({ "annotations": {} }));
        assert!(own_keys_of(&job).is_empty());
        assert_eq!(own_keys_of(&pod).len(), 2);
    }

    #[test]
    fn a_workflows_pods_share_its_amount() {
        let amount = res(4000);
        assert!(fits_amount(&amount, &[res(1000), res(2000)], &res(1000)).is_ok());
        let refused = fits_amount(&amount, &[res(2000), res(2000)], &res(500)).unwrap_err();
        assert!(
            refused.contains("the 2 pods running on it ask"),
            "{refused}"
        );
        let mut unit = koord_queue_api::QueueUnit::new("wf", Default::default());
        unit.spec.pod_set = vec![
            serde_json::from_value(json!({ "name": "workflow", "count": 1, "template": {} }))
                .unwrap(),
        ];
        assert!(sized_as_amount(&unit));
    }

    #[test]
    fn a_pod_beyond_the_units_count_does_not_fit() {
        let sets = [set("main", 2, 1000)];
        assert!(fits_sets(&sets, &[res(1000)], &res(1000)).is_ok());
        let refused = fits_sets(&sets, &[res(1000), res(1000)], &res(1000)).unwrap_err();
        assert!(
            refused.contains("pays for 2 pods and 2 run already"),
            "{refused}"
        );
    }

    #[test]
    fn each_set_takes_its_own_pods() {
        // A launcher of 1 cpu and two 4-cpu workers: a third large pod has
        // no room even though the launcher's slot is free.
        let sets = [set("launcher", 1, 1000), set("worker", 2, 4000)];
        let running = [res(4000), res(4000)];
        assert!(fits_sets(&sets, &running, &res(4000)).is_err());
        assert!(fits_sets(&sets, &running, &res(500)).is_ok());
        // A small pod placed first does not take a worker's slot.
        assert!(fits_sets(&sets, &[res(1000), res(4000)], &res(4000)).is_ok());
        assert!(fits_sets(&sets, &[res(500)], &res(4000)).is_ok());
    }

    #[test]
    fn finished_and_gated_pods_do_not_run_but_terminating_ones_do() {
        let pods = vec![
            json!({ "metadata": { "name": "done" }, "status": { "phase": "Succeeded" },
                    "spec": { "containers": [] } }),
            json!({ "metadata": { "name": "gated" },
                    "spec": { "schedulingGates": [{ "name": "x" }], "containers": [] } }),
            json!({ "metadata": { "name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z" },
                    "status": { "phase": "Running" },
                    "spec": { "containers": [{ "name": "c",
                        "resources": { "requests": { "cpu": "2" } } }] } }),
            json!({ "metadata": { "name": "me" }, "spec": { "containers": [] } }),
        ];
        let ledger = ChildLedger::default();
        let running = ledger.running("u", &listed(&pods), "me", Instant::now());
        assert_eq!(running, vec![res(2000)]);
    }

    fn admitted(admission: &str, name: Option<&str>) -> Admitted {
        Admitted {
            admission: admission.into(),
            name: name.map(str::to_string),
            requests: res(1000),
        }
    }

    fn pod(name: &str, admission: &str, gated: bool) -> Listed {
        Listed {
            name: name.into(),
            admission: Some(admission.into()),
            runs: !gated,
            requests: res(1000),
        }
    }

    #[test]
    fn the_ledger_counts_admitted_children_until_listed_or_expired() {
        let ledger = ChildLedger::default();
        let t0 = Instant::now();
        // A generateName create: matched by its admission uid, not its name.
        ledger.admitted("u", admitted("req-1", None), t0);
        assert_eq!(ledger.running("u", &[], "x", t0).len(), 1);
        assert_eq!(
            ledger
                .running("u", &[pod("job-abcde", "req-1", false)], "x", t0)
                .len(),
            1
        );
        assert_eq!(
            ledger.running("u", &[], "x", t0).len(),
            0,
            "listed once: forgotten"
        );
        // An update lifting a gate: counted until the list shows it running.
        ledger.admitted("u", admitted("req-2", Some("p2")), t0);
        assert_eq!(
            ledger
                .running("u", &[pod("p2", "req-0", true)], "x", t0)
                .len(),
            1
        );
        assert_eq!(
            ledger
                .running("u", &[pod("p2", "req-0", false)], "x", t0)
                .len(),
            1
        );
        assert_eq!(ledger.running("u", &[], "x", t0).len(), 0);
        // Expired.
        ledger.admitted("u", admitted("req-3", None), t0);
        let later = t0 + LEDGER_TTL + Duration::from_secs(1);
        assert_eq!(ledger.running("u", &[], "x", later).len(), 0);
        ledger.tidy("u", later);
        assert!(ledger.units.lock().unwrap().is_empty());
    }
}
