//! Pods queued on their own (issue 20): held by a scheduling gate at
//! creation, the gate and the label the scheduler follows kept by anyone but
//! the scheduler, a queued pod's size fixed (also through `/resize`), and a
//! managed job's pods passing as its children only when proven.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use koord_queue_api::jobs::pod::SCHEDULING_GATE;
use koord_queue_api::{QueueUnitPhase, QueueUnitStatus};
use serde_json::{Value, json};
use support::*;

async fn answer(api: &Arc<MemoryApi>, review: Value) -> Value {
    use axum::body::Body;
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let router = koord_queue_webhook::router(webhook(standard_view(), api.clone()), 1 << 20, 64);
    let response = router
        .oneshot(
            axum::http::Request::post("/mutate")
                .header("content-type", "application/json")
                .body(Body::from(review.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

fn message(response: &Value) -> String {
    response["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn pod(name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": "team-ns",
            "labels": { "quota.scheduling.koordinator.sh/name": "team-a" } },
        "spec": {
            "schedulingGates": [{ "name": "example.com/other" }],
            "containers": [{ "name": "main", "image": "busybox",
                "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] }
    })
}

fn gates(pod: &Value) -> Vec<&str> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["name"].as_str()).collect())
        .unwrap_or_default()
}

fn set_phase(api: &MemoryApi, unit: &str, phase: QueueUnitPhase) {
    api.units
        .lock()
        .unwrap()
        .get_mut(&("team-ns".to_string(), unit.to_string()))
        .unwrap()
        .status = Some(QueueUnitStatus {
        phase: Some(phase),
        ..Default::default()
    });
}

/// Creates `pod` through the webhook; returns it as stored and its unit's name.
async fn queue(api: &Arc<MemoryApi>, pod: &Value) -> (Value, String) {
    let body = answer(api, review("CREATE", pod.clone(), None, "alice")).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let held = api.store(&patched(pod, &body));
    let unit = held["metadata"]["annotations"]["koord-queue/queue-unit"]
        .as_str()
        .unwrap()
        .to_string();
    api.created_unit("team-ns", &unit).await;
    (held, unit)
}

#[tokio::test]
async fn a_pod_is_gated_labelled_and_queued_as_one_pod() {
    let api = Arc::new(MemoryApi::default());
    let (held, unit) = queue(&api, &pod("notebook", "2")).await;
    assert_eq!(gates(&held), ["example.com/other", SCHEDULING_GATE]);
    assert_eq!(held["metadata"]["labels"]["koord-queue/queued"], "true");
    let unit = api.created_unit("team-ns", &unit).await;
    assert_eq!(unit.spec.pod_set.len(), 1);
    assert_eq!(unit.spec.pod_set[0].count, 1);
    assert_eq!(unit.spec.resource["cpu"].0, "2");
    assert_eq!(unit.spec.queue, "team-a");
}

#[tokio::test]
async fn a_pod_naming_its_node_is_refused() {
    let api = Arc::new(MemoryApi::default());
    let mut placed = pod("placed", "1");
    placed["spec"]["nodeName"] = json!("node-1");
    let body = answer(&api, review("CREATE", placed, None, "alice")).await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(message(&body).contains("spec.nodeName"), "{body}");
    assert_eq!(*api.creates.lock().unwrap(), 0);
}

#[tokio::test]
async fn only_the_scheduler_or_a_release_lifts_the_gate() {
    let api = Arc::new(MemoryApi::default());
    let (held, unit) = queue(&api, &pod("notebook", "2")).await;
    let mut ungated = held.clone();
    ungated["spec"]["schedulingGates"] = json!([{ "name": "example.com/other" }]);
    let update = |new: &Value, user: &str| review("UPDATE", new.clone(), Some(held.clone()), user);

    let body = answer(&api, update(&ungated, "alice")).await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(message(&body).contains("queued"), "{body}");
    assert_eq!(
        answer(&api, update(&ungated, SCHEDULER)).await["response"]["allowed"],
        true
    );

    // Another system's gate is its own business; the hold stays.
    let mut others_gone = held.clone();
    others_gone["spec"]["schedulingGates"] = json!([{ "name": SCHEDULING_GATE }]);
    assert_eq!(
        answer(&api, update(&others_gone, "alice")).await["response"]["allowed"],
        true
    );

    // The label the scheduler follows the pod by stays, held or released.
    let mut unlabelled = held.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("koord-queue/queued");
    set_phase(&api, &unit, QueueUnitPhase::Running);
    let body = answer(&api, update(&unlabelled, "alice")).await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(message(&body).contains("koord-queue/queued"), "{body}");
    // Once released, removing the gate is anyone's (kube-scheduler's view
    // of it is the scheduler's write anyway).
    assert_eq!(
        answer(&api, update(&ungated, "alice")).await["response"]["allowed"],
        true
    );
}

#[tokio::test]
async fn a_queued_pod_does_not_grow_through_resize() {
    let api = Arc::new(MemoryApi::default());
    let (held, unit) = queue(&api, &pod("notebook", "2")).await;
    set_phase(&api, &unit, QueueUnitPhase::Running);
    let mut bigger = held.clone();
    bigger["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("8");
    let mut resize = review("UPDATE", bigger, Some(held.clone()), "alice");
    resize["request"]["subResource"] = json!("resize");
    let body = answer(&api, resize).await;
    assert_eq!(body["response"]["allowed"], false);
    assert!(message(&body).contains("cannot grow"), "{body}");

    let mut smaller = held.clone();
    smaller["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("1");
    let mut resize = review("UPDATE", smaller, Some(held), "alice");
    resize["request"]["subResource"] = json!("resize");
    assert_eq!(answer(&api, resize).await["response"]["allowed"], true);
}

/// A Job's pod: `controller: true` to the Job, named as the Job controller
/// names it, requesting `cpu`.
fn job_pod(job: &Value, name: &str, cpu: &str) -> Value {
    let mut p = pod(name, cpu);
    p["spec"]["schedulingGates"] = json!([]);
    p["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"], "controller": true,
    }]);
    p
}

#[tokio::test]
async fn a_released_jobs_pods_pass_forged_or_oversized_ones_are_queued() {
    let api = Arc::new(MemoryApi::default());
    let job = job("train", Some("team-a"));
    let body = answer(&api, review("CREATE", job.clone(), None, "alice")).await;
    let held = api.store(&patched(&job, &body));
    let unit = held["metadata"]["annotations"]["koord-queue/queue-unit"]
        .as_str()
        .unwrap()
        .to_string();
    api.created_unit("team-ns", &unit).await;

    // While the Job is queued, a pod claiming it is queued itself.
    let early = job_pod(&held, "train-early", "500m");
    let body = answer(&api, review("CREATE", early.clone(), None, "alice")).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(gates(&patched(&early, &body)).contains(&SCHEDULING_GATE));

    set_phase(&api, &unit, QueueUnitPhase::Running);
    // Released: a pod of the Job's size passes ungated.
    let fits = job_pod(&held, "train-abcde", "500m");
    let body = answer(&api, review("CREATE", fits.clone(), None, "job-controller")).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(gates(&patched(&fits, &body)).is_empty(), "{body}");

    // Larger than any pod of the Job, or with another uid: queued.
    let oversized = job_pod(&held, "train-big", "4");
    let body = answer(&api, review("CREATE", oversized.clone(), None, "alice")).await;
    assert!(
        gates(&patched(&oversized, &body)).contains(&SCHEDULING_GATE),
        "{body}"
    );
    let mut forged = job_pod(&held, "train-forged", "500m");
    forged["metadata"]["ownerReferences"][0]["uid"] = json!("not-the-jobs-uid");
    let body = answer(&api, review("CREATE", forged.clone(), None, "alice")).await;
    assert!(
        gates(&patched(&forged, &body)).contains(&SCHEDULING_GATE),
        "{body}"
    );
}
