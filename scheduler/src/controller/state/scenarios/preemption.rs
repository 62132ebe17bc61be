//! Preemption inside a quota driven through the whole controller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Scenario, summary};
use crate::controller::records::{JobRecord, UnitRecord};
use crate::controller::sources::{Change, Input};
use crate::controller::state::backoff::PREEMPTED;
use crate::controller::writes::Write;
use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{QueueUnit, keys};
use serde_json::json;

/// A queue that preempts inside its quota: a high-priority unit that does
/// not fit sends the lower-priority running unit back with the reason
/// `Preempted`, which keeps its quota until its job is held; then the
/// preemptor is released.
#[test]
fn a_higher_priority_unit_preempts_inside_its_quota() {
    let mut s = Scenario::new(
        json!({ "preemption": { "withinQuota": "LowerPriority", "minRunSeconds": 0 } }),
    );
    // u (priority 0, 2 cpu of q's 4) runs; a second unit of 4 cpu and
    // priority 100 arrives.
    s.job(false, json!({ "active": 1, "ready": 1 }));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }], "lastAllocateTime": "2026-01-01T00:00:00Z" }),
        true,
    );
    s.take();
    let hero: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "hero", "namespace": "ns", "resourceVersion": "90",
                      "creationTimestamp": "2026-01-01T00:01:00Z",
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "h", "uid": "uid-h" }] },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "h", "namespace": "ns" },
                  "queue": "q", "resource": { "cpu": "4" }, "priority": 100 },
        "status": { "phase": "Enqueued" },
    }))
    .unwrap();
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "h", "namespace": "ns", "uid": "uid-h",
                      "creationTimestamp": "2026-01-01T00:01:00Z",
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: "hero" } },
        "spec": { "suspend": true },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let record = JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(hero),
    ))));
    s.cycle();
    let writes = s.take();
    let backoff = writes.iter().find_map(|w| match w {
        Write::Backoff {
            unit,
            reason,
            message,
            ..
        } => Some((unit.to_string(), *reason, message.clone())),
        _ => None,
    });
    let (victim, reason, message) = backoff.expect("the low-priority unit is sent back");
    assert_eq!((victim.as_str(), reason), ("ns/u", PREEMPTED));
    assert!(
        message.contains("preempted by ns/hero (priority 100"),
        "{message}"
    );
    assert_eq!(
        s.controller
            .metrics
            .reclaims
            .get_or_create(&crate::controller::metrics::ReasonLabels { reason: PREEMPTED })
            .get(),
        1
    );
    // The victim's job is held (its watch event) and its unit gone to
    // backoff: the hero is released.
    s.job(true, json!({}));
    s.cycle();
    assert!(summary(&s.take()).contains(&"Release Dequeued".to_string()));
}
