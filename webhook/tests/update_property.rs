//! Property: no UPDATE the webhook allows makes a queued job's pods need
//! more than its unit holds, or lifts a hold its unit has not earned —
//! whatever the update changes: counts, requests, suspend markers (false,
//! null, removed), owners, labels. Every kind, random updates from tenants.
//!
//! And for pods: a queued pod, a pod group's member and a managed job's
//! child never run more than their unit holds, never lift a hold their unit
//! has not earned, and never change the `koord-queue/` keys the webhook
//! gave them.
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
            unit.spec.consumer_ref.name = sample["metadata"]["name"].as_str().map(str::to_string);
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

/// The pod samples: (the stored pod, the paths an update changes).
const POD_PATHS: [&[&str]; 8] = [
    &["spec", "schedulingGates"],
    &["spec", "containers"],
    &["metadata", "annotations", keys::QUEUE_UNIT_ANNOTATION],
    &["metadata", "labels", keys::QUEUED_LABEL],
    &["metadata", "labels", keys::CHARGED_TO_LABEL],
    &["metadata", "labels", jobs::pod_group::POD_GROUP_LABEL],
    &[
        "metadata",
        "annotations",
        jobs::pod_group::POD_GROUP_SIZE_ANNOTATION,
    ],
    &["metadata", "ownerReferences"],
];

fn pod_values() -> Vec<Option<Value>> {
    vec![
        None,
        Some(Value::Null),
        Some(json!([])),
        Some(json!([{ "name": jobs::pod::SCHEDULING_GATE }])),
        Some(json!([{ "name": "c", "image": "i", "resources": { "requests": { "cpu": "8" } } }])),
        Some(
            json!([{ "name": "c", "image": "i", "resources": { "requests": { "cpu": "500m" } } }]),
        ),
        Some(json!("released-unit")),
        Some(json!("true")),
        Some(json!("uid-team-ns-released")),
        Some(json!("3")),
        Some(
            json!([{ "apiVersion": "batch/v1", "kind": "Job", "name": "released",
                     "uid": "uid-team-ns-released", "controller": true }]),
        ),
    ]
}

fn pod(name: &str, cpu: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": "team-ns",
                          "labels": { keys::QUOTA_NAME_LABEL: "team-a" } },
            "spec": { "containers": [{ "name": "c", "image": "i",
                "resources": { "requests": { "cpu": cpu, "memory": "1Gi" } } }] } })
}

fn koord_keys(object: &Value) -> Vec<(String, Value)> {
    ["labels", "annotations"]
        .iter()
        .filter_map(|f| object["metadata"][f].as_object())
        .flat_map(|m| m.iter())
        // A null in a string map is no key: the API server never sends one.
        .filter(|(k, v)| k.starts_with(keys::KEY_PREFIX) && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A unit for `job` (of `adapter`) named `name`, in `phase`.
fn unit_of(job: &Value, name: &str, phase: QueueUnitPhase) -> QueueUnit {
    let adapter = jobs::for_api_version(
        job["apiVersion"].as_str().unwrap(),
        job["kind"].as_str().unwrap(),
    )
    .unwrap();
    let mut unit = jobs::queue_unit(
        adapter,
        job,
        jobs::UnitPlacement {
            namespace: "team-ns".into(),
            job_name: job["metadata"]["name"].as_str().unwrap().into(),
            unit_name: name.into(),
            queue: "team-a".into(),
            priority_class_name: None,
            priority: 0,
        },
    )
    .unwrap();
    unit.status = Some(QueueUnitStatus {
        phase: Some(phase),
        ..Default::default()
    });
    unit
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn no_allowed_update_of_a_pod_runs_more_than_its_unit_or_moves_its_keys(
        sample in 0usize..3,
        released in any::<bool>(),
        running_siblings in 0usize..3,
        changes in prop::collection::vec((0usize..8, 0usize..11), 1..4),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let api = Arc::new(MemoryApi::default());
            let phase = if released { QueueUnitPhase::Running } else { QueueUnitPhase::Enqueued };
            let pod_adapter = jobs::for_kind("", "Pod").unwrap();
            // Another job's unit, released: what a forged key would name.
            let other = json!({ "apiVersion": "batch/v1", "kind": "Job",
                "metadata": { "name": "released", "namespace": "team-ns" },
                "spec": { "parallelism": 8, "template": template("8") } });
            let other = api.store(&other);
            api.units.lock().unwrap().insert(
                ("team-ns".into(), "released-unit".into()),
                unit_of(&other, "released-unit", QueueUnitPhase::Running),
            );
            // The job whose child the child sample is: 2 pods of 1 cpu.
            let mut owner = json!({ "apiVersion": "batch/v1", "kind": "Job",
                "metadata": { "name": "owner", "namespace": "team-ns",
                    "annotations": { keys::QUEUE_UNIT_ANNOTATION: "owner-unit" } },
                "spec": { "parallelism": 2, "template": template("1") } });
            owner = api.store(&owner);
            let owner_uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
            api.units.lock().unwrap().insert(
                ("team-ns".into(), "owner-unit".into()),
                unit_of(&owner, "owner-unit", phase),
            );
            let siblings: Vec<Value> = (0..running_siblings)
                .map(|i| {
                    let mut p = pod(&format!("sibling-{i}"), "1");
                    p["metadata"]["labels"][keys::CHARGED_TO_LABEL] = json!(owner_uid);
                    p
                })
                .collect();
            api.pods.lock().unwrap().insert("team-ns".into(), siblings);

            let mut old = match sample {
                // A queued pod.
                0 => {
                    let mut p = pod("queued", "1");
                    p["metadata"]["labels"][keys::QUEUED_LABEL] = json!("true");
                    jobs::set_annotation(&mut p, keys::QUEUE_UNIT_ANNOTATION, "queued-unit");
                    jobs::set_annotation(&mut p, keys::QUEUE_ANNOTATION, "team-a");
                    p
                }
                // A pod group's member (a group of 2).
                1 => {
                    let mut p = pod("member", "1");
                    p["metadata"]["labels"][keys::QUEUED_LABEL] = json!("true");
                    p["metadata"]["labels"][jobs::pod_group::POD_GROUP_LABEL] = json!("g");
                    jobs::set_annotation(&mut p, jobs::pod_group::POD_GROUP_SIZE_ANNOTATION, "2");
                    jobs::set_annotation(&mut p, keys::QUEUE_UNIT_ANNOTATION, "g-group");
                    jobs::set_annotation(&mut p, keys::QUEUE_ANNOTATION, "team-a");
                    p
                }
                // The owner's child, as admission left it.
                _ => {
                    let mut p = pod("child", "1");
                    p["metadata"]["labels"] = json!({ keys::CHARGED_TO_LABEL: owner_uid });
                    jobs::set_annotation(&mut p, keys::ADMISSION_ANNOTATION, "req-child");
                    p["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1",
                        "kind": "Job", "name": "owner", "uid": owner_uid, "controller": true }]);
                    p
                }
            };
            pod_adapter.hold(&mut old);
            let own_unit = match sample {
                0 => Some(("queued-unit", unit_of(&old, "queued-unit", phase))),
                1 => Some(("g-group", unit_of(&old, "g-group", phase))),
                _ => None,
            };
            if let Some((name, unit)) = own_unit {
                api.units.lock().unwrap().insert(("team-ns".into(), name.into()), unit);
            }
            if released && sample == 0 {
                pod_adapter.release(&mut old);
            }
            let router = koord_queue_webhook::router(webhook(standard_view(), api), 1 << 20, 64);

            let mut new = old.clone();
            let values = pod_values();
            for (p, v) in &changes {
                let path = POD_PATHS[*p];
                let value = values[*v].clone();
                // Labels and annotations are strings: anything else is
                // refused by the API server before any webhook sees it.
                let string_map = matches!(path.get(1), Some(&"labels" | &"annotations"));
                if string_map && !matches!(value, None | Some(Value::String(_))) {
                    continue;
                }
                set_or_remove(&mut new, path, value);
            }
            let review = review("UPDATE", new.clone(), Some(old.clone()), "tenant");
            if allowed(&router, review).await {
                let size = |p: &Value| jobs::total_resources(&pod_adapter.pod_sets(p).unwrap());
                let sets = pod_adapter.pod_sets(&new);
                prop_assert!(sets.is_ok(), "allowed an unreadable pod: {new}");
                prop_assert!(
                    guard::exceeds(&size(&new), &size(&old)).is_empty(),
                    "allowed growth: {old} → {new}"
                );
                prop_assert_eq!(koord_keys(&old), koord_keys(&new), "allowed moving a key: {}", new);
                let runs = !guard::fully_held(pod_adapter, &new);
                match sample {
                    // A member never lifts its own hold: the group is
                    // released whole, by the scheduler.
                    1 => prop_assert!(!runs || !guard::fully_held(pod_adapter, &old), "member lifted its hold: {}", new),
                    _ if runs && guard::fully_held(pod_adapter, &old) => {
                        prop_assert!(released, "lifted an unearned hold: {old} → {new}");
                        if sample == 2 {
                            prop_assert!(running_siblings < 2, "a third pod runs on a unit of 2: {}", new);
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        })?;
    }
}
