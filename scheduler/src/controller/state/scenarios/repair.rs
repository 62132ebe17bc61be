//! A held job whose unit does not appear gets it from the scheduler — once
//! the webhook has passed it by, not while it works off a backlog in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{QueueUnit, keys};
use serde_json::json;

use super::Scenario;
use crate::controller::records::{JobRecord, UnitRecord};
use crate::controller::sources::{Change, Input};
use crate::controller::writes::Write;

/// Held job `name`, created at `created` (a time of the scenario's first
/// hour: the scenario starts at 01:00), naming unit `u-<name>`.
fn held_job(s: &mut Scenario, name: &str, created: &str) {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                      "creationTimestamp": created,
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: format!("u-{name}") } },
        "spec": { "suspend": true },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let record = JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
}

/// The webhook's unit of job `name` appears.
fn unit_appears(s: &mut Scenario, name: &str) {
    s.rv += 1;
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": format!("u-{name}"), "namespace": "ns",
                      "resourceVersion": s.rv.to_string(),
                      "creationTimestamp": "2026-01-01T01:00:00Z",
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                                            "name": name, "uid": format!("uid-{name}") }] },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": name,
                                   "namespace": "ns" },
                  "queue": "q", "resource": { "cpu": "1" }, "priority": 0 },
    }))
    .unwrap();
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(unit),
    ))));
}

/// The jobs whose unit the scheduler asked to create since the last call.
fn recreated(s: &mut Scenario) -> Vec<String> {
    s.take()
        .iter()
        .filter_map(|w| match w {
            Write::RecreateUnit { job, .. } => Some(job.name.clone()),
            _ => None,
        })
        .collect()
}

/// Moves the clock on by `seconds` and runs housekeeping.
fn after(s: &mut Scenario, seconds: u64) {
    s.advance(Duration::from_secs(seconds));
    s.tick();
}

#[test]
fn a_webhook_working_off_a_backlog_is_not_raced() {
    let mut s = Scenario::new(json!({}));
    held_job(&mut s, "a", "2026-01-01T00:58:00Z");
    held_job(&mut s, "b", "2026-01-01T00:58:30Z");
    held_job(&mut s, "c", "2026-01-01T00:59:30Z");
    s.tick();
    // Past the grace (60 s), the webhook is still creating units, of jobs
    // created before `a` plus less than the grace: it is behind, not stuck.
    after(&mut s, 55);
    unit_appears(&mut s, "b");
    after(&mut s, 10);
    assert_eq!(recreated(&mut s), Vec::<String>::new());
    // It has passed `a` by a grace period (`c` is 90 s younger): `a`'s unit
    // was lost, and is created from the job.
    unit_appears(&mut s, "c");
    after(&mut s, 2);
    assert_eq!(recreated(&mut s), ["a"]);
}

#[test]
fn a_webhook_that_stopped_creating_units_is_stood_in_for() {
    let mut s = Scenario::new(json!({}));
    held_job(&mut s, "a", "2026-01-01T00:59:00Z");
    s.tick();
    after(&mut s, 30);
    unit_appears(&mut s, "b");
    // No unit appeared for a grace period after the last one: the webhook
    // is gone (killed with its backlog), whatever the jobs' ages.
    after(&mut s, 40);
    assert_eq!(recreated(&mut s), Vec::<String>::new());
    after(&mut s, 22);
    assert_eq!(recreated(&mut s), ["a"]);
}
