//! [`next_step`] alone: records in, the intended write and its effect on
//! quota out — no controller, no writer, no API server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{QueueUnit, keys};
use serde_json::{Value, json};

use super::{Intent, OnSubmit, Step, desired_membership, next_step};
use crate::controller::records::{JobRecord, Key, UnitRecord};
use crate::controller::state::unit::Membership;
use crate::controller::state::view::UnitView;
use crate::controller::writes::Write;

const NOW_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn unit(status: Value) -> UnitRecord {
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "u", "namespace": "ns", "resourceVersion": "2",
                      "creationTimestamp": "2026-01-01T00:00:00Z",
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                                            "name": "j", "uid": "uid-j" }] },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "ns" },
                  "queue": "q", "resource": { "cpu": "2" }, "priority": 0 },
        "status": status,
    }))
    .unwrap();
    UnitRecord::from_unit(unit)
}

fn job(held: bool, status: Value) -> JobRecord {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "j", "namespace": "ns", "uid": "uid-j",
                      "creationTimestamp": "2026-01-01T00:00:00Z",
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: "u" } },
        "spec": { "suspend": held },
        "status": status,
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap()
}

/// The step for `rec` and `job`, in short: the write's operation (with its
/// phase or reason) and its effect on quota.
fn decide(rec: &UnitRecord, job: Option<&JobRecord>, suspended_again: bool) -> Step {
    decide_with_pods(rec, job, suspended_again, false)
}

/// [`decide`] where `pods_alive` says whether a pod the unit paid for is
/// alive (running, or terminating).
fn decide_with_pods(
    rec: &UnitRecord,
    job: Option<&JobRecord>,
    suspended_again: bool,
    pods_alive: bool,
) -> Step {
    let key: Key = "ns/u".into();
    next_step(&UnitView {
        key: &key,
        rec,
        job,
        queue: None,
        pods: None,
        pods_alive,
        suspended_again,
        found_released: false,
        unconfirmed: false,
        members_released_at: None,
        strict_default: None,
        now_ms: NOW_MS,
        room_free: false,
        jitter_salt: 7,
    })
}

fn summary(step: &Step) -> Option<(String, OnSubmit)> {
    step.intent.as_ref().map(|i| {
        let what = match &i.write {
            Write::Phase { phase, .. } => format!("Phase {phase}"),
            Write::Backoff { reason, .. } => format!("Backoff {reason}"),
            Write::Release { phase, .. } => format!("Release {phase}"),
            other => other.operation().to_string(),
        };
        (what, i.on_submit)
    })
}

#[test]
fn each_step_says_what_it_does_to_quota() {
    use OnSubmit::{Free, Keep};
    let running = json!({ "active": 1, "startTime": "2026-01-01T00:00:00Z" });
    let succeeded = json!({ "succeeded": 1, "startTime": "2026-01-01T00:00:00Z",
        "completionTime": "2026-01-01T00:01:00Z",
        "conditions": [{ "type": "Complete", "status": "True" }] });
    let check = |state: &str| {
        json!({ "phase": "Reserved", "admissionChecks": [{ "name": "c", "state": state,
            "lastTransitionTime": "2026-01-01T00:00:00Z" }] })
    };
    type Row = (
        &'static str,
        Value,
        Option<JobRecord>,
        bool,
        Option<(&'static str, OnSubmit)>,
    );
    let table: Vec<Row> = vec![
        (
            "a dequeued unit whose job runs is marked Running",
            json!({ "phase": "Dequeued" }),
            Some(job(false, running.clone())),
            false,
            Some(("Phase Running", Keep)),
        ),
        (
            "a finished job frees its quota as its phase is written",
            json!({ "phase": "Running" }),
            Some(job(false, succeeded)),
            false,
            Some(("Phase Succeed", Free)),
        ),
        (
            "a job suspended again frees its quota and waits again",
            json!({ "phase": "Running" }),
            Some(job(true, json!({}))),
            true,
            Some(("Phase Enqueued", Free)),
        ),
        (
            "a held job of a fresh release is the release not seen yet: nothing",
            json!({ "phase": "Dequeued" }),
            Some(job(true, json!({}))),
            false,
            None,
        ),
        (
            "a unit whose job is gone is deleted",
            json!({ "phase": "Running" }),
            None,
            false,
            Some(("delete_unit", Keep)),
        ),
        (
            "an Enqueued unit whose job was released outside is held again",
            json!({ "phase": "Enqueued" }),
            Some(job(false, running)),
            false,
            Some(("hold_job", Keep)),
        ),
        (
            "a backoff that is over returns the unit to its queue",
            json!({ "phase": "TimeoutBackoff", "requeueState": { "count": 1, "requeueAt": "2025-12-31T23:59:00Z" } }),
            Some(job(true, json!({}))),
            false,
            Some(("Phase Enqueued", Free)),
        ),
        (
            "a backoff still running waits",
            json!({ "phase": "TimeoutBackoff", "requeueState": { "count": 1, "requeueAt": "2026-01-01T00:10:00Z" } }),
            Some(job(true, json!({}))),
            false,
            None,
        ),
        (
            "a failed admission check sends the unit back",
            check("Retry"),
            Some(job(true, json!({}))),
            false,
            Some(("Backoff AdmissionCheck", Free)),
        ),
        (
            "ready checks release the reserved quota",
            check("Ready"),
            Some(job(true, json!({}))),
            false,
            Some(("Release Dequeued", Keep)),
        ),
        (
            "pending checks keep the quota reserved",
            check("Pending"),
            Some(job(true, json!({}))),
            false,
            None,
        ),
        (
            "a cut-short strict send-back is finished",
            json!({ "phase": "SchedFailed", "message": "SchedFailed: 0 of 1 pods bound after 300s" }),
            Some(job(false, json!({}))),
            false,
            Some(("Backoff SchedulingTimeout", Free)),
        ),
    ];
    for (name, status, job, again, want) in table {
        let rec = unit(status);
        let got = summary(&decide(&rec, job.as_ref(), again));
        let want = want.map(|(w, q)| (w.to_string(), q));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn a_backoff_is_scheduled_from_the_clock_it_was_given() {
    let rec = unit(
        json!({ "phase": "Reserved", "admissionChecks": [{ "name": "c",
        "state": "Rejected", "lastTransitionTime": "2026-01-01T00:00:00Z" }] }),
    );
    let step = decide(&rec, Some(&job(true, json!({}))), false);
    let Some(Intent {
        write: Write::Backoff {
            requeue_at, count, ..
        },
        ..
    }) = step.intent
    else {
        panic!("expected a backoff, got {:?}", step.intent);
    };
    assert_eq!(count, 1);
    let delay = requeue_at.0.as_millisecond() - NOW_MS;
    // 10 s, ±10 % jitter.
    assert!((9_000..11_000).contains(&delay), "delay {delay} ms");
    // The same inputs decide the same step.
    let again = decide(&rec, Some(&job(true, json!({}))), false);
    assert!(
        matches!(again.intent, Some(Intent { write: Write::Backoff { requeue_at: r, .. }, .. }) if r == requeue_at)
    );
}

#[test]
fn an_adopted_unit_left_waiting_is_enqueued_after_the_cycle() {
    let mut rec = unit(json!({}));
    rec.phase = None;
    let step = decide(&rec, Some(&job(true, json!({}))), false);
    assert!(step.intent.is_none());
    assert!(step.enqueue_after_cycle);
}

#[test]
fn a_sent_back_unit_whose_job_still_runs_keeps_holding_until_it_is_held() {
    let rec = unit(json!({ "phase": "TimeoutBackoff" }));
    let running = json!({ "active": 1, "startTime": "2026-01-01T00:00:00Z" });
    assert_eq!(
        desired_membership(&rec, Some(&job(false, running)), false),
        Membership::Holding
    );
    assert_eq!(
        desired_membership(&rec, Some(&job(true, json!({}))), false),
        Membership::Absent
    );
}

#[test]
fn a_release_cut_short_by_a_leader_change_is_finished_not_redone() {
    let key: Key = "ns/u".into();
    let rec = unit(json!({ "phase": "Dequeued", "attempts": 1 }));
    let held = job(true, json!({}));
    let view = |found_released| UnitView {
        key: &key,
        rec: &rec,
        job: Some(&held),
        queue: None,
        pods: None,
        pods_alive: false,
        suspended_again: true,
        found_released,
        unconfirmed: false,
        members_released_at: None,
        strict_default: None,
        now_ms: NOW_MS,
        room_free: false,
        jitter_salt: 7,
    };
    // Found released, never seen running: the hold is lifted, the attempt kept.
    let step = next_step(&view(true));
    assert!(
        matches!(
            &step.intent,
            Some(Intent {
                write: Write::Release {
                    attempts: None,
                    admissions: None,
                    ..
                },
                on_submit: OnSubmit::Keep
            })
        ),
        "{:?}",
        step.intent
    );
    // Seen running since, then held: suspended again, it waits again.
    assert_eq!(
        summary(&next_step(&view(false))),
        Some(("Phase Enqueued".to_string(), OnSubmit::Free))
    );
}

#[test]
fn a_release_whose_answer_was_lost_is_sent_again_whole_and_keeps_its_quota() {
    let key: Key = "ns/u".into();
    let view = |rec: &'static UnitRecord, job: &'static JobRecord, unconfirmed| UnitView {
        key: &key,
        rec,
        job: Some(job),
        queue: None,
        pods: None,
        pods_alive: false,
        suspended_again: false,
        found_released: true,
        unconfirmed,
        members_released_at: None,
        strict_default: None,
        now_ms: NOW_MS,
        room_free: false,
        jitter_salt: 7,
    };
    fn leak<T>(v: T) -> &'static T {
        Box::leak(Box::new(v))
    }
    let admitted =
        json!([{ "name": "main", "replicas": 1, "running": 0, "resources": { "cpu": "2" } }]);
    let held = leak(job(true, json!({})));
    for phase in ["Dequeued", "Reserved"] {
        let rec = leak(unit(
            json!({ "phase": phase, "attempts": 3, "admissions": admitted,
            "admissionChecks": [{ "name": "c", "state": "Pending" }] }),
        ));
        let step = next_step(&view(rec, held, true));
        let Some(Intent {
            write:
                Write::Release {
                    admissions: Some(admissions),
                    attempts: Some(3),
                    phase: sent,
                    checks,
                    ..
                },
            on_submit: OnSubmit::Keep,
        }) = &step.intent
        else {
            panic!("{phase}: {:?}", step.intent);
        };
        assert_eq!(sent.to_string(), phase);
        assert_eq!(admissions.len(), 1, "{admissions:?}");
        assert_eq!(checks.is_some(), phase == "Reserved", "{checks:?}");
    }
    // Its job runs: the release landed whole (the hold is lifted last).
    let rec = leak(unit(
        json!({ "phase": "Dequeued", "attempts": 3, "admissions": admitted }),
    ));
    let running = leak(job(
        false,
        json!({ "active": 1, "startTime": "2026-01-01T00:00:00Z" }),
    ));
    assert_eq!(
        summary(&next_step(&view(rec, running, true))),
        Some(("Phase Running".to_string(), OnSubmit::Keep))
    );
}

/// Quota is held while anything it paid for runs (issue 37): each row is a
/// unit whose pods are alive (running, terminating, or orphaned by their
/// job's deletion) or gone, and the step it gets — a write that would free
/// the quota keeps it while the pods are alive.
#[test]
fn quota_is_held_while_pods_it_paid_for_are_alive() {
    use OnSubmit::{Free, Keep};
    let running = json!({ "active": 1, "startTime": "2026-01-01T00:00:00Z" });
    let deleting = |mut rec: UnitRecord, guarded: bool| {
        rec.deleting = true;
        rec.guarded = guarded;
        rec
    };
    let guarded = |mut rec: UnitRecord| {
        rec.guarded = true;
        rec
    };
    let backoff_over = json!({ "phase": "TimeoutBackoff", "requeueState": { "count": 1, "requeueAt": "2025-12-31T23:59:00Z" } });
    type Row = (
        &'static str,
        UnitRecord,
        Option<JobRecord>,
        bool,
        Option<(&'static str, OnSubmit)>,
    );
    let table: Vec<Row> = vec![
        (
            "suspended again while its pods terminate: it keeps holding",
            unit(json!({ "phase": "Running" })),
            Some(job(true, json!({}))),
            true,
            None,
        ),
        (
            "its job deleted with propagation Orphan while its pods run: kept",
            unit(json!({ "phase": "Running" })),
            None,
            true,
            None,
        ),
        (
            "its job gone and its pods too: deleted",
            unit(json!({ "phase": "Running" })),
            None,
            false,
            Some(("delete_unit", Keep)),
        ),
        (
            "finished while a pod runs: it waits for the pod",
            unit(json!({ "phase": "Running" })),
            Some(job(
                false,
                json!({ "conditions": [{ "type": "Failed", "status": "True" }] }),
            )),
            true,
            None,
        ),
        (
            "a backoff over while the sent-back job's pods terminate keeps the quota",
            unit(backoff_over),
            Some(job(true, json!({}))),
            true,
            Some(("Phase Enqueued", Keep)),
        ),
        (
            "a cut-short send-back finished while its pods run keeps the quota",
            unit(
                json!({ "phase": "SchedFailed", "message": "SchedFailed: 0 of 1 pods bound after 300s" }),
            ),
            Some(job(false, json!({}))),
            true,
            Some(("Backoff SchedulingTimeout", Keep)),
        ),
        (
            "deleting with the finalizer while its pods terminate: it holds",
            deleting(unit(json!({ "phase": "Running" })), true),
            None,
            true,
            None,
        ),
        (
            "deleting with the finalizer, its pods gone: the finalizer comes off",
            deleting(unit(json!({ "phase": "Running" })), true),
            None,
            false,
            Some(("remove_finalizer", Free)),
        ),
        (
            "deleting without the finalizer: nothing to take off",
            deleting(unit(json!({ "phase": "Running" })), false),
            None,
            false,
            None,
        ),
        (
            "finished with the finalizer, its pods gone: the finalizer comes off at once",
            guarded(unit(json!({ "phase": "Succeed" }))),
            Some(job(
                false,
                json!({ "conditions": [{ "type": "Complete", "status": "True" }] }),
            )),
            false,
            Some(("remove_finalizer", Free)),
        ),
        (
            "finished with the finalizer while a pod still terminates: it stays",
            guarded(unit(json!({ "phase": "Failed" }))),
            Some(job(
                false,
                json!({ "conditions": [{ "type": "Failed", "status": "True" }] }),
            )),
            true,
            None,
        ),
        (
            "deleting while its job runs: the job is held again first",
            deleting(unit(json!({ "phase": "Running" })), true),
            Some(job(false, running)),
            true,
            Some(("hold_job", Keep)),
        ),
    ];
    for (name, rec, job, pods_alive, want) in table {
        let got = summary(&decide_with_pods(&rec, job.as_ref(), true, pods_alive));
        let want = want.map(|(w, q)| (w.to_string(), q));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn a_unit_whose_pods_are_alive_holds_whatever_its_phase() {
    let held = job(true, json!({}));
    for status in [
        json!({ "phase": "Enqueued" }),
        json!({ "phase": "TimeoutBackoff" }),
        json!({ "phase": "Succeed" }),
        json!({ "phase": "Running" }),
    ] {
        let rec = unit(status.clone());
        assert_eq!(
            desired_membership(&rec, Some(&held), true),
            Membership::Holding,
            "{status}"
        );
        assert_eq!(desired_membership(&rec, None, true), Membership::Holding);
    }
    let mut gone = unit(json!({ "phase": "Running" }));
    gone.deleting = true;
    assert_eq!(desired_membership(&gone, None, true), Membership::Holding);
    assert_eq!(desired_membership(&gone, None, false), Membership::Absent);
}

#[test]
fn a_held_job_whose_pods_ran_is_not_taken_for_a_release_cut_short() {
    // Found released at start and never seen running, but its pods are
    // alive: the release reached it, and its owner suspended it since.
    let key: Key = "ns/u".into();
    let rec = unit(json!({ "phase": "Dequeued", "attempts": 1 }));
    let held = job(true, json!({}));
    let step = next_step(&UnitView {
        key: &key,
        rec: &rec,
        job: Some(&held),
        queue: None,
        pods: None,
        pods_alive: true,
        suspended_again: true,
        found_released: true,
        unconfirmed: false,
        members_released_at: None,
        strict_default: None,
        now_ms: NOW_MS,
        room_free: false,
        jitter_salt: 7,
    });
    assert!(step.intent.is_none(), "{:?}", step.intent);
}

#[test]
fn a_drained_queue_sends_back_what_holds_quota_and_a_held_one_does_not() {
    use crate::controller::records::QueueRecord;
    let queue = |stop: &str| {
        let q: koord_queue_api::Queue = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
            "metadata": { "name": "q", "namespace": "koord-queue" },
            "spec": { "stopPolicy": stop },
        }))
        .unwrap();
        QueueRecord::from_queue(&q)
    };
    let key: Key = "ns/u".into();
    let running = json!({ "active": 1, "startTime": "2026-01-01T00:00:00Z" });
    let step = |rec: &UnitRecord, job: &JobRecord, queue: &QueueRecord, pods_alive| {
        summary(&next_step(&UnitView {
            key: &key,
            rec,
            job: Some(job),
            queue: Some(queue),
            pods: None,
            pods_alive,
            suspended_again: false,
            found_released: false,
            unconfirmed: false,
            members_released_at: None,
            strict_default: None,
            now_ms: NOW_MS,
            room_free: false,
            jitter_salt: 7,
        }))
    };
    let rec = unit(json!({ "phase": "Running" }));
    let job = job(false, running);
    let drain = queue("HoldAndDrain");
    // Sent back; its quota freed with the write, or with its last pod.
    assert_eq!(
        step(&rec, &job, &drain, false),
        Some(("Backoff QueueDrained".to_string(), OnSubmit::Free))
    );
    assert_eq!(
        step(&rec, &job, &drain, true),
        Some(("Backoff QueueDrained".to_string(), OnSubmit::Keep))
    );
    // A unit reserving for its admission checks gives the reservation back.
    let reserved = unit(
        json!({ "phase": "Reserved", "admissionChecks": [{ "name": "c",
        "state": "Pending", "lastTransitionTime": "2026-01-01T00:00:00Z" }] }),
    );
    assert_eq!(
        step(&reserved, &job, &drain, false),
        Some(("Backoff QueueDrained".to_string(), OnSubmit::Free))
    );
    // Hold alone lets released jobs run on.
    assert_eq!(step(&rec, &job, &queue("Hold"), false), None);
}

#[test]
fn a_unit_sent_back_for_its_room_returns_when_the_room_is_free() {
    // Sent back by a reclaim, its backoff runs for another ten minutes.
    let later = "2026-01-01T00:10:00Z";
    let backoff = |reason: &str| {
        unit(
            json!({ "phase": "TimeoutBackoff", "requeueState": { "count": 1, "requeueAt": later },
            "conditions": [{ "type": "QuotaReserved", "status": "False", "reason": reason,
                "lastTransitionTime": "2026-01-01T00:00:00Z" }] }),
        )
    };
    let held = job(true, json!({}));
    let key: Key = "ns/u".into();
    let step = |rec: &UnitRecord, room_free: bool| {
        next_step(&UnitView {
            key: &key,
            rec,
            job: Some(&held),
            queue: None,
            pods: None,
            pods_alive: false,
            suspended_again: true,
            found_released: false,
            unconfirmed: false,
            members_released_at: None,
            strict_default: None,
            now_ms: NOW_MS,
            room_free,
            jitter_salt: 7,
        })
    };
    let reclaimed = backoff("Reclaimed");
    assert!(super::super::lifecycle::sent_back_for_room(&reclaimed));
    // Its room is taken: it waits out the backoff (looked at each tick).
    let waiting = step(&reclaimed, false);
    assert!(waiting.intent.is_none() && waiting.timed);
    // Its room is free: back in its queue at once, holding nothing.
    let back = step(&reclaimed, true);
    assert_eq!(
        summary(&back),
        Some(("Phase Enqueued".to_string(), OnSubmit::Free))
    );
    let Some(Intent {
        write: Write::Phase { message, .. },
        ..
    }) = back.intent
    else {
        panic!("a phase write");
    };
    assert!(message.starts_with("the room it was sent back for is free again"));
    // A unit sent back for another reason (its pods did not start) is not
    // one whose room was taken: the controller never says its room is free.
    assert!(super::super::lifecycle::sent_back_for_room(&backoff(
        "Preempted"
    )));
    assert!(!super::super::lifecycle::sent_back_for_room(&backoff(
        "SchedulingTimeout"
    )));
}
