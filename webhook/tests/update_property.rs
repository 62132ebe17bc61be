//! Property: no UPDATE the webhook allows makes a queued job's pods need
//! more than its unit holds, or lifts a hold its unit has not earned —
//! whatever the update changes: counts, requests, suspend markers (false,
//! null, removed), owners, labels. Every kind, random updates from tenants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use koord_queue_api::jobs::{self, guard};
use koord_queue_api::{QueueUnit, QueueUnitPhase, QueueUnitStatus, keys};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::*;
use tower::ServiceExt;

fn template(cpu: &str) -> Value {
    json!({ "spec": { "restartPolicy": "Never", "containers": [{ "name": "c", "image": "i",
        "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] } })
}

/// One released-looking sample per kind, and the JSON paths whose change
/// could change its size or its hold.
fn samples() -> Vec<(Value, Vec<Vec<&'static str>>)> {
    let labels = json!({ keys::QUOTA_NAME_LABEL: "team-a" });
    let meta = |name: &str| json!({ "name": name, "namespace": "team-ns", "labels": labels });
    let replica = |n: i32| json!({ "replicas": n, "template": template("1") });
    let annotation = vec!["metadata", "annotations", keys::SUSPEND_ANNOTATION];
    let owner = vec!["metadata", "ownerReferences"];
    let label = vec!["metadata", "labels", keys::QUOTA_NAME_LABEL];
    let cluster = json!({ "headGroupSpec": { "template": template("1") },
        "workerGroupSpecs": [{ "groupName": "w", "replicas": 2, "minReplicas": 0, "maxReplicas": 8,
                               "template": template("1") }] });
    vec![
        (
            json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": meta("job"),
                    "spec": { "parallelism": 2, "template": template("1") } }),
            vec![
                vec!["spec", "parallelism"],
                vec!["spec", "completions"],
                vec!["spec", "suspend"],
                vec!["spec", "template", "spec", "containers"],
                owner.clone(),
                label.clone(),
            ],
        ),
        (
            json!({ "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta("pt"),
                    "spec": { "pytorchReplicaSpecs": { "Master": replica(1), "Worker": replica(2) } } }),
            vec![
                vec!["spec", "pytorchReplicaSpecs", "Worker", "replicas"],
                vec!["spec", "pytorchReplicaSpecs", "Extra"],
                vec![
                    "spec",
                    "pytorchReplicaSpecs",
                    "Worker",
                    "template",
                    "spec",
                    "containers",
                ],
                vec!["spec", "runPolicy", "suspend"],
                annotation.clone(),
                owner.clone(),
                label.clone(),
            ],
        ),
        (
            json!({ "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta("rj"),
                    "spec": { "entrypoint": "x", "rayClusterSpec": cluster } }),
            vec![
                vec!["spec", "rayClusterSpec", "workerGroupSpecs"],
                vec!["spec", "submissionMode"],
                vec!["spec", "submitterPodTemplate"],
                vec!["spec", "suspend"],
                annotation.clone(),
                owner.clone(),
            ],
        ),
        (
            json!({ "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                    "metadata": meta("sp"),
                    "spec": { "type": "Scala", "driver": { "cores": 1, "memory": "1g" },
                              "executor": { "cores": 1, "memory": "1g", "instances": 2 } } }),
            vec![
                vec!["spec", "executor", "instances"],
                vec!["spec", "executor", "cores"],
                vec!["spec", "dynamicAllocation"],
                vec!["spec", "suspend"],
                annotation.clone(),
                label.clone(),
            ],
        ),
        (
            json!({ "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                    "metadata": { "name": "wf", "namespace": "team-ns", "labels": labels,
                                  "annotations": { keys::MIN_RESOURCES_ANNOTATION: "{\"cpu\":\"2\"}" } },
                    "spec": { "entrypoint": "main" } }),
            vec![
                vec!["metadata", "annotations", keys::MIN_RESOURCES_ANNOTATION],
                vec!["spec", "suspend"],
                vec!["status", "phase"],
                owner,
                label,
            ],
        ),
    ]
}

/// The values a random update writes at a path (`None` removes it).
fn values() -> Vec<Option<Value>> {
    vec![
        None,
        Some(Value::Null),
        Some(json!(true)),
        Some(json!(false)),
        Some(json!("true")),
        Some(json!(0)),
        Some(json!(1)),
        Some(json!(3)),
        Some(json!(16)),
        Some(json!("8")),
        Some(json!("{\"cpu\":\"16\"}")),
        Some(json!("HTTPMode")),
        Some(json!("Running")),
        Some(json!([{ "name": "c", "resources": { "requests": { "cpu": "32" } } }])),
        Some(json!([{ "groupName": "w", "replicas": 7, "template": template("1") }])),
        Some(json!({ "replicas": 4, "template": template("2") })),
        Some(json!({ "enabled": true, "initialExecutors": 9 })),
        Some(
            json!([{ "apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "u",
                      "controller": true }]),
        ),
        Some(json!("team-b")),
    ]
}

fn set_or_remove(value: &mut Value, path: &[&str], new: Option<Value>) {
    match new {
        Some(v) => jobs::set_path(value, path, v),
        None => {
            let (last, parents) = path.split_last().unwrap();
            let parent = parents.iter().try_fold(&mut *value, |v, k| v.get_mut(*k));
            if let Some(map) = parent.and_then(Value::as_object_mut) {
                map.remove(*last);
            }
        }
    }
}

async fn allowed(router: &axum::Router, review: Value) -> bool {
    let response = router
        .clone()
        .oneshot(
            Request::post("/mutate")
                .header("content-type", "application/json")
                .body(Body::from(review.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    answer["response"]["allowed"] == json!(true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_allowed_update_outgrows_the_unit_or_lifts_an_unearned_hold(
        kind in 0usize..5,
        released in any::<bool>(),
        changes in prop::collection::vec((0usize..8, 0usize..19), 1..4),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (sample, paths) = samples().swap_remove(kind);
            let adapter = jobs::for_api_version(
                sample["apiVersion"].as_str().unwrap(),
                sample["kind"].as_str().unwrap(),
            ).unwrap();
            // The stored job as admission left it: held, naming its unit.
            let mut old = sample.clone();
            adapter.hold(&mut old);
            jobs::set_annotation(&mut old, keys::QUEUE_UNIT_ANNOTATION, "the-unit");
            jobs::set_annotation(&mut old, keys::QUEUE_ANNOTATION, "team-a");
            if released {
                adapter.release(&mut old);
            }
            let unit_sets = adapter.pod_sets(&old).unwrap();
            let api = Arc::new(MemoryApi::default());
            let mut unit = QueueUnit::new("the-unit", Default::default());
            unit.spec.queue = "team-a".into();
            unit.status = Some(QueueUnitStatus {
                phase: Some(if released { QueueUnitPhase::Running } else { QueueUnitPhase::Enqueued }),
                ..Default::default()
            });
            api.units.lock().unwrap().insert(("team-ns".into(), "the-unit".into()), unit);
            let router = koord_queue_webhook::router(webhook(standard_view(), api), 1 << 20, 64);

            let mut new = old.clone();
            let values = values();
            for (p, v) in &changes {
                set_or_remove(&mut new, &paths[p % paths.len()], values[*v].clone());
            }
            let review = review("UPDATE", new.clone(), Some(old.clone()), "tenant");
            if allowed(&router, review).await {
                let sets = adapter.pod_sets(&new);
                prop_assert!(sets.is_ok(), "allowed an unreadable job: {new}");
                let growth = guard::growth(&unit_sets, &sets.unwrap());
                prop_assert!(growth.is_none(), "allowed growth {growth:?}: {old} → {new}");
                if !released {
                    prop_assert!(guard::fully_held(adapter, &new), "allowed a lift: {old} → {new}");
                }
                let label = |v: &Value| v["metadata"]["labels"][keys::QUOTA_NAME_LABEL].clone();
                prop_assert_eq!(label(&old), label(&new), "allowed moving quota");
            }
            Ok(())
        })?;
    }
}
