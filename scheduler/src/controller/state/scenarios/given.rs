//! Time and leadership are inputs of the controller (issue 38): the
//! scenario's clock moves only by `advance`, and the controller leads or
//! stands by as the last leadership input said — not as a wall clock or a
//! live Lease says meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::{QueueUnit, keys};
use serde_json::json;

use super::{START, Scenario, summary};
use crate::controller::records::UnitRecord;
use crate::controller::sources::{Change, Input};

/// A unit whose job never appeared, created when the scenario starts.
fn orphan(s: &mut Scenario) {
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "u", "namespace": "ns", "resourceVersion": "2",
                      "creationTimestamp": START,
                      "labels": { keys::QUOTA_NAME_LABEL: "q" } },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "ns" },
                  "queue": "q", "resource": { "cpu": "2" }, "priority": 0 },
    }))
    .unwrap();
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(unit),
    ))));
}

/// The orphan grace (60 s in a scenario) is measured on the clock the
/// controller is given: however long the test takes, the unit is deleted
/// once that clock passed the grace, not before.
#[test]
fn an_orphan_unit_is_deleted_when_the_given_clock_passes_its_grace() {
    let mut s = Scenario::new(json!({}));
    orphan(&mut s);
    s.tick();
    assert_eq!(summary(&s.take()), Vec::<String>::new());
    s.advance(Duration::from_secs(59));
    s.tick();
    assert_eq!(summary(&s.take()), Vec::<String>::new(), "within the grace");
    // The scan for missing counterparts runs every 2 s of that clock.
    s.advance(Duration::from_secs(3));
    s.tick();
    assert_eq!(summary(&s.take()), ["delete_unit"]);
}

/// A controller that was told it stands by decides nothing, though its
/// Lease handle (fixed: leading) says otherwise; told it leads again, it
/// looks at every unit and releases what fits.
#[test]
fn leadership_changes_only_by_an_input() {
    let mut s = Scenario::new(json!({}));
    s.controller.on_leadership(false);
    s.job(true, json!({}));
    s.unit(json!({ "phase": "Enqueued" }), true);
    s.cycle();
    assert_eq!(summary(&s.take()), Vec::<String>::new(), "standing by");
    s.controller.on_leadership(true);
    s.cycle();
    assert_eq!(summary(&s.take()), ["Release Dequeued"]);
}
