//! Faults driven through the whole controller: relists, failing kinds, pods
//! that outlive their job, releases whose answer was lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Scenario, summary, waiting_unit};
use crate::controller::records::{JobRecord, PodRecord};
use crate::controller::sources::{Change, Input};
use crate::controller::writes::{Outcome, Write, Written};
use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::keys;
use serde_json::json;

/// A relist that no longer finds a running unit and its job (deleted while
/// the watch was away) frees the quota they held, once; one that finds
/// them changes nothing.
#[test]
fn a_relist_drops_what_was_deleted_meanwhile_and_frees_its_quota_once() {
    use crate::controller::sources::Listed;
    let mut s = Scenario::new(json!({}));
    s.job(false, json!({ "active": 1, "ready": 1 }));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    s.take();
    let used = |s: &Scenario| s.controller.core.cluster_used().get("cpu");
    assert_eq!(used(&s), 2000, "the running unit holds 2 cpu");

    // A relist that finds both keeps both.
    let found: Listed = [("ns".to_string(), "u".to_string())].into();
    s.input(Input::Unit(Change::Relisted(found)));
    let found: Listed = [("ns".to_string(), "j".to_string())].into();
    s.input(Input::Job("Job", Change::Relisted(found)));
    assert_eq!(used(&s), 2000);
    assert!(
        s.take()
            .iter()
            .all(|w| w.unit().is_none() || matches!(w, Write::Visibility { .. }))
    );

    // Both deleted while the watch was away: the job's relist drops it (its
    // unit is then deleted as an orphan of a gone job) and the unit's
    // relist drops the unit; quota is freed and not freed twice.
    s.input(Input::Job("Job", Change::Relisted(Listed::new())));
    assert!(s.controller.jobs.is_empty());
    s.input(Input::Unit(Change::Relisted(Listed::new())));
    s.input(Input::Unit(Change::Relisted(Listed::new())));
    assert!(s.controller.units.is_empty());
    assert_eq!(used(&s), 0, "the deleted unit's quota is free");
    let metrics = |name: &str| {
        s.controller
            .metrics
            .relist_dropped
            .get_or_create(&crate::controller::metrics::SourceLabels {
                source: name.into(),
            })
            .get()
    };
    assert_eq!(metrics("queueunits"), 1);
    assert_eq!(metrics("Job"), 1);
}

/// A job kind whose API fails: its units are kept as their status says —
/// a running unit whose job cannot be seen still holds its quota and is not
/// deleted as the unit of a gone job — until the kind works again.
#[test]
fn a_unit_of_a_failing_kind_is_kept_as_it_is_until_the_kind_works() {
    let mut s = Scenario::new(json!({}));
    s.input(Input::Job(
        "Job",
        Change::Failing(Some("403 Forbidden".into())),
    ));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    s.controller.collect_orphans();
    assert_eq!(
        summary(&s.take()),
        Vec::<String>::new(),
        "nothing decided blind"
    );
    assert_eq!(s.controller.core.cluster_used().get("cpu"), 2000);
    assert!(
        s.controller
            .readiness
            .degraded()
            .iter()
            .any(|d| d.starts_with("Job: ")),
        "{:?}",
        s.controller.readiness.degraded()
    );
    // The kind works again and its job is not there: the unit of a gone job
    // is deleted.
    s.input(Input::Job("Job", Change::Synced));
    assert_eq!(summary(&s.take()), vec!["delete_unit"]);
    assert!(s.controller.readiness.degraded().is_empty());
}

fn pod(name: &str, alive: bool) -> Input {
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

/// Quota is freed when a job's pods are gone, not when the job says it is
/// done or its objects go: a pod that still runs (out its grace period, or
/// past a success the job reported first) keeps the unit's quota.
#[test]
fn quota_is_freed_with_the_last_running_pod() {
    let used = |s: &Scenario| s.controller.core.cluster_used().get("cpu");
    // A job that succeeded while one of its pods still runs.
    let mut s = Scenario::new(json!({}));
    s.input(pod("p1", true));
    s.job(
        false,
        json!({ "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    assert_eq!(
        summary(&s.take()),
        Vec::<String>::new(),
        "waits for its pod"
    );
    assert_eq!(used(&s), 2000);
    s.input(pod("p1", false));
    assert_eq!(summary(&s.take()), vec!["Phase Succeed"]);
    assert_eq!(used(&s), 0);

    // A running job whose unit is deleted (the job too) while its pod runs
    // out its grace period: the quota lingers until the pod is gone.
    let mut s = Scenario::new(json!({}));
    s.input(pod("p1", true));
    s.job(false, json!({ "active": 1 }));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    s.take();
    s.input(Input::Job("Job", Change::Deleted("ns".into(), "j".into())));
    s.input(Input::Unit(Change::Deleted("ns".into(), "u".into())));
    assert_eq!(used(&s), 2000, "the pod still runs");
    s.input(Input::Pod(Change::Deleted("ns".into(), "p1".into())));
    assert_eq!(used(&s), 0, "freed with the pod");
}

/// A job whose pods belong to another object (a RayJob's RayCluster, found
/// by its `ray.io/cluster` label) keeps its quota after it succeeds while
/// that cluster's pods run.
#[test]
fn a_succeeded_job_keeps_its_quota_while_its_pod_group_runs() {
    let used = |s: &Scenario| s.controller.core.cluster_used().get("cpu");
    let mut s = Scenario::new(json!({}));
    let head = |alive| {
        Input::Pod(Change::Applied(Box::new(PodRecord {
            namespace: "ns".into(),
            name: "c1-head".into(),
            job_uid: "uid-cluster".into(),
            scheduled: true,
            unschedulable: None,
            alive,
            group: Some(("ray.io/cluster", "c1".into())),
        })))
    };
    s.input(head(true));
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "j", "namespace": "ns", "uid": "uid-j",
                      "creationTimestamp": "2026-01-01T00:00:00Z",
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: "u" } },
        "spec": { "suspend": false },
        "status": { "conditions": [{ "type": "Complete", "status": "True" }] },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let mut record =
        JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
    record.pod_group = Some(Box::new(("ray.io/cluster", "c1".into())));
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    assert_eq!(summary(&s.take()), Vec::<String>::new());
    assert_eq!(used(&s), 2000, "the cluster still runs");
    s.input(head(false));
    assert_eq!(summary(&s.take()), vec!["Phase Succeed"]);
    assert_eq!(used(&s), 0);
}

/// A release whose answer was lost (the connection broke: it may have
/// landed, its job may run) keeps its quota — a unit that fits only in that
/// quota waits — and is sent again whole until the API server answers:
/// landed, it keeps the quota; refused, the quota is free again.
#[test]
fn a_release_with_an_unknown_outcome_keeps_its_quota_until_the_api_says() {
    fn lost(s: &mut Scenario) -> Vec<Write> {
        let writes: Vec<Write> = std::mem::take(&mut *s.writes.0.lock().unwrap());
        for write in &writes {
            s.controller.on_written(Written {
                write: write.clone(),
                outcome: Outcome::Unknown("connection reset".into()),
            });
        }
        writes
    }
    let released = |writes: &[Write], who: &str| {
        writes
            .iter()
            .any(|w| matches!(w, Write::Release { unit, .. } if &**unit == who))
    };
    for landed in [true, false] {
        let mut s = Scenario::new(json!({}));
        s.job(true, json!({}));
        s.unit(json!({ "phase": "Enqueued" }), true);
        s.take();
        s.cycle();
        assert_eq!(summary(&lost(&mut s)), ["Release Dequeued"], "{landed}");
        // Sent again at once, whole.
        let again: Vec<Write> = s.writes.0.lock().unwrap().clone();
        let Some(Write::Release {
            admissions: Some(admissions),
            attempts: Some(1),
            ..
        }) = again.first()
        else {
            panic!("not sent again whole: {again:?}");
        };
        assert_eq!(
            admissions[0].resources.get("cpu").map(|q| q.0.as_str()),
            Some("2")
        );
        // 3 cpu fits q's 4 only if u's 2 were free.
        waiting_unit(&mut s, "big", "b", "3");
        s.cycle();
        if landed {
            // The second attempt lands; its job runs; u keeps its quota.
            let writes = s.take();
            assert!(!released(&writes, "ns/big"), "{:?}", summary(&writes));
            s.job(false, json!({ "active": 1 }));
            s.cycle();
            let writes = s.take();
            assert!(!released(&writes, "ns/big"), "{:?}", summary(&writes));
        } else {
            let writes = lost(&mut s);
            assert!(!released(&writes, "ns/big"), "{:?}", summary(&writes));
            // The third attempt is refused (the job's hold could not be
            // lifted; the writer put the unit back to Enqueued): the quota
            // is free again, and the cycle releases (u is first in line).
            let writes: Vec<Write> = std::mem::take(&mut *s.writes.0.lock().unwrap());
            for write in writes {
                s.controller.on_written(Written {
                    write,
                    outcome: Outcome::Failed("422 Unprocessable Entity".into()),
                });
            }
            s.cycle();
            let writes = s.take();
            assert!(
                released(&writes, "ns/u") || released(&writes, "ns/big"),
                "{:?}",
                summary(&writes)
            );
        }
    }
}
