//! Tests of the controller's state machine that need no API server, one
//! file per concept; the whole controller driven by inputs is in
//! `scenarios/`, the lifecycle table in `decide_tests.rs`.

mod adoption;
mod backoff;
mod selectors;
mod unit_state;
mod visibility;

use koord_queue_api::QueueUnit;
use serde_json::json;

use super::UnitState;
use crate::controller::records::UnitRecord;

/// A unit as a starting scheduler finds it: Reserved, checks pending.
pub(super) fn found_reserved() -> UnitState {
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "u", "namespace": "ns" },
        "spec": {
            "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j" },
            "queue": "q", "resource": { "cpu": "2" },
        },
        "status": {
            "phase": "Reserved",
            "admissions": [{ "name": "main", "replicas": 1, "resources": { "cpu": "2" } }],
            "admissionChecks": [{ "name": "provision", "state": "Pending" }],
        },
    }))
    .expect("a valid unit");
    UnitState::new(UnitRecord::from_unit(unit))
}
