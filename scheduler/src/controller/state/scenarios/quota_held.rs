//! Quota is held while anything it paid for runs (issue 37): a unit's
//! reservation is freed only when the pods of its job are gone — after the
//! job is deleted with any propagation, suspended again or sent back — and
//! a scheduler that restarts meanwhile finds them from the API alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Scenario, summary, waiting_unit};
use crate::controller::records::{JobRecord, PodRecord, QUOTA_FINALIZER, UnitRecord};
use crate::controller::sources::{Change, Input};
use crate::controller::writes::Write;
use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{QueueUnit, keys};
use serde_json::{Value, json};

/// CPU (millicores) the core counts as used.
fn used(s: &Scenario) -> i64 {
    s.controller.core.cluster_used().get("cpu")
}

/// Status of a running unit holding its 2 cpu.
fn running() -> Value {
    json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 2,
        "resources": { "cpu": "2" } }] })
}

/// Unit `u` of job `j` as the API shows it: its consumer uid always; its
/// owner reference unless `owned` is false (the garbage collector removed
/// it: the job was deleted with propagation Orphan); the quota finalizer
/// when `guarded`; being deleted when `deleting`.
fn unit_u(s: &mut Scenario, status: Value, owned: bool, guarded: bool, deleting: bool) {
    s.rv += 1;
    let mut unit = json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "u", "namespace": "ns", "resourceVersion": s.rv.to_string(),
                      "creationTimestamp": "2026-01-01T00:00:00Z",
                      "labels": { keys::QUOTA_NAME_LABEL: "q" } },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                   "namespace": "ns", "uid": "uid-j" },
                  "queue": "q", "resource": { "cpu": "2" }, "priority": 0 },
        "status": status,
    });
    if owned {
        unit["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1", "kind": "Job",
            "name": "j", "uid": "uid-j" }]);
    }
    if guarded {
        unit["metadata"]["finalizers"] = json!([QUOTA_FINALIZER]);
    }
    if deleting {
        unit["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:05:00Z");
    }
    let unit: QueueUnit = serde_json::from_value(unit).unwrap();
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(unit),
    ))));
}

/// Pod `name` of job `j` (found by its uid: its owner reference, or the
/// Job's uid label once orphaned); `alive` while it runs or terminates.
fn job_pod(name: &str, alive: bool) -> Input {
    Input::Pod(Change::Applied(Box::new(PodRecord {
        namespace: "ns".into(),
        name: name.into(),
        job_uid: "uid-j".into(),
        scheduled: true,
        unschedulable: None,
        alive,
        group: None,
    })))
}

fn pod_gone(name: &str) -> Input {
    Input::Pod(Change::Deleted("ns".into(), name.into()))
}

/// The writes of unit `ns/<unit>` in short.
fn writes_of(writes: &[Write], unit: &str) -> Vec<String> {
    let key = format!("ns/{unit}");
    let mine: Vec<Write> = writes
        .iter()
        .filter(|w| w.unit().is_some_and(|u| **u == *key))
        .cloned()
        .collect();
    summary(&mine)
}

/// Job `j` runs two pods on unit `u`'s 2 cpu; unit `w` (4 cpu) waits for
/// the whole quota.
fn running_job_and_a_waiting_one(guarded: bool) -> Scenario {
    let mut s = Scenario::new(json!({}));
    s.input(job_pod("p1", true));
    s.input(job_pod("p2", true));
    s.job(false, json!({ "active": 2, "ready": 2 }));
    unit_u(&mut s, running(), true, guarded, false);
    waiting_unit(&mut s, "w", "w", "4");
    s.cycle();
    assert_eq!(writes_of(&s.take(), "w"), Vec::<String>::new());
    assert_eq!(used(&s), 2000);
    s
}

#[test]
fn an_orphaning_delete_keeps_the_quota_until_the_orphaned_pods_are_gone() {
    let mut s = running_job_and_a_waiting_one(true);
    // `kubectl delete job j --cascade=orphan`: the garbage collector takes
    // the owner references off the unit and the pods (whose records keep
    // the job's uid from its label), then the job goes.
    unit_u(&mut s, running(), false, true, false);
    s.input(Input::Job("Job", Change::Deleted("ns".into(), "j".into())));
    s.cycle();
    let writes = s.take();
    assert_eq!(writes_of(&writes, "u"), Vec::<String>::new(), "u is kept");
    assert_eq!(writes_of(&writes, "w"), Vec::<String>::new(), "w waits");
    assert_eq!(used(&s), 2000, "the orphaned pods run on u's quota");
    s.input(pod_gone("p1"));
    s.cycle();
    assert_eq!(writes_of(&s.take(), "w"), Vec::<String>::new(), "p2 runs");
    // The last one goes: the unit is deleted and its finalizer taken off,
    // its quota freed; then w runs.
    s.input(pod_gone("p2"));
    assert_eq!(writes_of(&s.take(), "u"), ["delete_unit"]);
    assert_eq!(writes_of(&s.take(), "u"), ["remove_finalizer"]);
    assert_eq!(used(&s), 0);
    s.cycle();
    assert_eq!(writes_of(&s.take(), "w"), ["Release Dequeued"]);
}

#[test]
fn a_restarted_scheduler_finds_orphaned_pods_by_the_units_consumer_uid() {
    // A new process lists what the API holds: the orphaned unit (no owner,
    // its consumer uid), the orphaned pods (the job's uid in their
    // labels), no job, and a unit that waits. (A controller decides once
    // every watch has listed; this one decides at once, so the pods come
    // first.)
    let mut s = Scenario::new(json!({}));
    s.input(job_pod("p1", true));
    waiting_unit(&mut s, "w", "w", "4");
    unit_u(&mut s, running(), false, true, false);
    s.cycle();
    let writes = s.take();
    assert_eq!(writes_of(&writes, "u"), Vec::<String>::new());
    assert_eq!(writes_of(&writes, "w"), Vec::<String>::new());
    assert_eq!(used(&s), 2000);
    s.input(pod_gone("p1"));
    assert_eq!(writes_of(&s.take(), "u"), ["delete_unit"]);
    s.cycle();
    assert_eq!(writes_of(&s.take(), "w"), ["Release Dequeued"]);
}

#[test]
fn a_job_suspended_again_keeps_its_quota_while_its_pods_terminate() {
    let mut s = running_job_and_a_waiting_one(true);
    // Its owner suspends it: the Job controller deletes the pods, which
    // run out their grace period (deletionTimestamp set, phase Running).
    s.job(true, json!({}));
    s.cycle();
    let writes = s.take();
    assert_eq!(writes_of(&writes, "u"), Vec::<String>::new(), "u holds");
    assert_eq!(writes_of(&writes, "w"), Vec::<String>::new(), "w waits");
    assert_eq!(used(&s), 2000);
    s.input(pod_gone("p1"));
    s.cycle();
    assert_eq!(writes_of(&s.take(), "u"), Vec::<String>::new(), "p2 runs");
    s.input(pod_gone("p2"));
    assert_eq!(writes_of(&s.take(), "u"), ["Phase Enqueued"]);
    assert_eq!(used(&s), 0, "freed with the last pod");
}

#[test]
fn a_unit_deleted_after_its_job_keeps_the_quota_by_its_finalizer() {
    // Background propagation: the job goes at once, the garbage collector
    // deletes the unit (kept by the finalizer) and the pods (which run out
    // their grace period).
    let mut s = running_job_and_a_waiting_one(true);
    s.input(Input::Job("Job", Change::Deleted("ns".into(), "j".into())));
    unit_u(&mut s, running(), true, true, true);
    s.cycle();
    let writes = s.take();
    assert_eq!(writes_of(&writes, "u"), Vec::<String>::new(), "u holds");
    assert_eq!(writes_of(&writes, "w"), Vec::<String>::new(), "w waits");
    assert_eq!(used(&s), 2000);
    s.input(pod_gone("p1"));
    s.input(pod_gone("p2"));
    assert_eq!(writes_of(&s.take(), "u"), ["remove_finalizer"]);
    assert_eq!(used(&s), 0);
    assert_eq!(summary(&s.take()), Vec::<String>::new(), "taken off once");
    s.input(Input::Unit(Change::Deleted("ns".into(), "u".into())));
    s.cycle();
    assert_eq!(writes_of(&s.take(), "w"), ["Release Dequeued"]);

    // A restart while the pods terminate: the deleting unit, listed, holds.
    let mut s = Scenario::new(json!({}));
    s.input(job_pod("p1", true));
    waiting_unit(&mut s, "w", "w", "4");
    unit_u(&mut s, running(), true, true, true);
    s.cycle();
    assert_eq!(summary(&s.take()), Vec::<String>::new());
    assert_eq!(used(&s), 2000);
    s.input(pod_gone("p1"));
    assert_eq!(writes_of(&s.take(), "u"), ["remove_finalizer"]);
}

#[test]
fn a_deleted_unit_of_a_running_job_holds_the_job_before_it_lets_go() {
    let mut s = running_job_and_a_waiting_one(true);
    unit_u(&mut s, running(), true, true, true);
    assert_eq!(writes_of(&s.take(), "u"), ["hold_job"]);
    assert_eq!(used(&s), 2000, "its pods still run");
    s.job(true, json!({}));
    s.input(pod_gone("p1"));
    s.input(pod_gone("p2"));
    assert_eq!(writes_of(&s.take(), "u"), ["remove_finalizer"]);
    assert_eq!(used(&s), 0);
}

#[test]
fn a_preempted_unit_keeps_its_quota_until_its_pods_are_gone() {
    let mut s = Scenario::new(
        json!({ "preemption": { "withinQuota": "LowerPriority", "minRunSeconds": 0 } }),
    );
    s.input(job_pod("p1", true));
    s.job(false, json!({ "active": 1, "ready": 1 }));
    unit_u(&mut s, running(), true, true, false);
    s.take();
    // A 4-cpu unit of priority 100 preempts u.
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
    assert_eq!(writes_of(&s.take(), "u"), ["Backoff Preempted"]);
    // The victim's job is held; its pod terminates: the hero waits.
    s.job(true, json!({}));
    s.cycle();
    assert_eq!(writes_of(&s.take(), "hero"), Vec::<String>::new());
    assert_eq!(used(&s), 2000);
    s.input(pod_gone("p1"));
    s.cycle();
    assert_eq!(writes_of(&s.take(), "hero"), ["Release Dequeued"]);
}

#[test]
fn a_finished_jobs_childrens_pods_hold_its_quota_until_they_are_gone() {
    // A JobSet's Jobs' pods: owned by the child Jobs, charged by the
    // webhook to the queued JobSet (the unit's job, uid-j).
    let mut s = Scenario::new(json!({}));
    let child_pod = |alive| {
        Input::Pod(Change::Applied(Box::new(
            PodRecord::from_pod(
                &serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": { "name": "js-w-0-abc", "namespace": "ns",
                        "labels": { keys::CHARGED_TO_LABEL: "uid-j" },
                        "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                            "name": "js-w-0", "uid": "uid-child", "controller": true }] },
                    "spec": { "containers": [] },
                    "status": { "phase": if alive { "Running" } else { "Succeeded" } },
                }))
                .unwrap(),
            )
            .unwrap(),
        )))
    };
    s.input(child_pod(true));
    s.job(
        false,
        json!({ "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    unit_u(&mut s, running(), true, true, false);
    waiting_unit(&mut s, "w", "w", "4");
    s.cycle();
    let writes = s.take();
    assert_eq!(
        writes_of(&writes, "u"),
        Vec::<String>::new(),
        "waits for the pod"
    );
    assert_eq!(writes_of(&writes, "w"), Vec::<String>::new());
    assert_eq!(used(&s), 2000);
    s.input(child_pod(false));
    assert_eq!(writes_of(&s.take(), "u"), ["Phase Succeed"]);
    s.cycle();
    assert_eq!(writes_of(&s.take(), "w"), ["Release Dequeued"]);
}
