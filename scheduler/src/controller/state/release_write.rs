//! What a release writes: the release of a unit the core admitted —
//! Reserved while the admission checks that select it run, else the queue's
//! release phase — with one admission per pod set, and the same release sent
//! again when the answer to the first was lost. Decided by `decide.rs` (and
//! the cycle, `release.rs`); kept apart so that the lifecycle table there
//! reads as the steps of a unit, not the fields of one write.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::Resources;
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, CheckState, QueueUnitPhase};

use super::view::{UnitView, strict_timeout};
use super::{job_ref, queue_of};
use crate::controller::clock::wall_time;
use crate::controller::records::{JobRecord, Labels, QueueRecord, UnitRecord};
use crate::controller::writes::Write;
use crate::core::Decision;

/// The release of a unit the core decided to admit: Reserved while the
/// admission checks of its queue that select it run, else released into the
/// queue's release phase (SchedReady under strict dequeue, else Dequeued).
pub(super) fn release(v: &UnitView<'_>, job: &JobRecord, decision: &Decision) -> Write {
    let rec = v.rec;
    let quota = queue_of(rec);
    let since = Time(wall_time(v.now_ms));
    let checks: Vec<AdmissionCheckState> = v
        .queue
        .map(|q| q.checks.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|c| selector_matches(c.label_selector.as_ref(), &rec.labels))
        .map(|c| AdmissionCheckState {
            name: c.name.clone(),
            state: CheckState::Pending,
            last_transition_time: Some(since.clone()),
            message: None,
        })
        .collect();
    let how = if decision.guaranteed {
        " (within its guaranteed minimum)"
    } else {
        " (borrowing idle capacity)"
    };
    let (phase, message) = if checks.is_empty() {
        (
            release_phase(v.queue, v.strict_default),
            format!(
                "released: {} reserved in quota {quota}{how}",
                decision.resources
            ),
        )
    } else {
        let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        (
            QueueUnitPhase::Reserved,
            format!(
                "quota reserved ({} in quota {quota}{how}); waiting for admission checks: {}",
                decision.resources,
                names.join(", ")
            ),
        )
    };
    Write::Release {
        unit: v.key.clone(),
        job: job_ref(job),
        admissions: Some(admissions(rec, &decision.resources)),
        attempts: Some(rec.attempts + 1),
        phase,
        checks: (!checks.is_empty()).then_some(checks),
        guard: !rec.guarded,
        message,
    }
}

/// The release of a unit whose first release has an unknown outcome, sent
/// again whole from the record (which holds it as sent): every field is a
/// fixed value, so it lands the same whether the first one did or not.
pub(super) fn release_again(v: &UnitView<'_>, job: &JobRecord, phase: QueueUnitPhase) -> Write {
    let rec = v.rec;
    let reserved = phase == QueueUnitPhase::Reserved;
    let what = if reserved {
        "quota reserved in queue"
    } else {
        "released from queue"
    };
    Write::Release {
        unit: v.key.clone(),
        job: job_ref(job),
        admissions: (!rec.held.is_zero()).then(|| admissions(rec, &rec.held)),
        attempts: Some(rec.attempts),
        phase,
        checks: reserved.then(|| rec.checks.clone()),
        guard: !rec.guarded,
        message: format!(
            "{what} {} (sent again: the answer to the first attempt was lost)",
            queue_of(rec)
        ),
    }
}

/// The phase a released job enters: SchedReady under strict dequeue.
pub(super) fn release_phase(
    queue: Option<&QueueRecord>,
    strict_default: Option<Duration>,
) -> QueueUnitPhase {
    if strict_timeout(queue, strict_default).is_some() {
        QueueUnitPhase::SchedReady
    } else {
        QueueUnitPhase::Dequeued
    }
}

/// Admissions of a release: one per pod set with its resources. When the
/// pod sets' resources do not add up to what is held (e.g. an Argo workflow,
/// sized by annotation), the first set carries the total, so the admissions
/// always sum to exactly what the unit holds.
pub(super) fn admissions(rec: &UnitRecord, total: &Resources) -> Vec<Admission> {
    let mut sum = Resources::new();
    let mut out: Vec<Admission> = rec
        .pod_sets
        .iter()
        .map(|(name, count, resources)| {
            sum.add(resources);
            Admission {
                name: name.to_string(),
                replicas: *count,
                running: 0,
                resources: resources.to_list(),
            }
        })
        .collect();
    if out.is_empty() {
        out.push(Admission {
            name: "main".into(),
            replicas: 1,
            running: 0,
            resources: Default::default(),
        });
    }
    if &sum != total {
        for a in &mut out {
            a.resources.clear();
        }
        out[0].resources = total.to_list();
    }
    out
}

/// Whether `labels` satisfy a Kubernetes label selector; no selector matches all.
pub(super) fn selector_matches(selector: Option<&LabelSelector>, labels: &Labels) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let match_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v.as_str()));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        let listed = |v: &str| values.iter().any(|x| x == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => value.is_none_or(|v| !listed(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    match_labels && expressions
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use koord_queue_api::{QueueUnit, ResourceListExt as _, Resources};
    use serde_json::json;

    use super::admissions;
    use crate::controller::records::UnitRecord;

    fn unit(pod_sets: serde_json::Value) -> UnitRecord {
        let unit: QueueUnit = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": "u", "namespace": "ns" },
            "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                       "namespace": "ns" },
                      "queue": "q", "resource": { "cpu": "5" }, "podSet": pod_sets },
        }))
        .unwrap();
        UnitRecord::from_unit(unit)
    }

    fn set(name: &str, count: i32, cpu: &str) -> serde_json::Value {
        json!({ "name": name, "count": count, "template": { "spec": { "containers": [
            { "name": "c", "resources": { "requests": { "cpu": cpu } } }] } } })
    }

    fn cpu(admission: &koord_queue_api::queue_unit::Admission) -> i64 {
        Resources::from_list(&admission.resources)
            .unwrap()
            .get("cpu")
    }

    #[test]
    fn a_single_sets_admission_carries_the_total_and_several_sets_their_own() {
        let total =
            Resources::from_list(&serde_json::from_value(json!({ "cpu": "5" })).unwrap()).unwrap();
        // One set: its resources are not kept; the admission has the total.
        let one = unit(json!([set("main", 2, "2")]));
        assert!(one.pod_sets[0].2.is_zero());
        let a = admissions(&one, &total);
        assert_eq!((a.len(), a[0].replicas, cpu(&a[0])), (1, 2, 5000));
        // Two sets that add up: each its own.
        let two = unit(json!([set("driver", 1, "1"), set("workers", 2, "2")]));
        let a = admissions(&two, &total);
        assert_eq!(a.iter().map(cpu).collect::<Vec<_>>(), [1000, 4000]);
        // Two sets that do not: the first carries the total.
        let off = unit(json!([set("driver", 1, "1"), set("workers", 1, "1")]));
        let a = admissions(&off, &total);
        assert_eq!(a.iter().map(cpu).collect::<Vec<_>>(), [5000, 0]);
    }
}
