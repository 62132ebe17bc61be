//! Foundation checks against a real etcd + kube-apiserver (tier 1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use koord_queue_api::queue_unit::{QueueUnitPhase, QueueUnitStatus};
use koord_queue_api::{QueueUnit, QueueUnitSpec};
use koord_queue_tests::{fixtures, shared};
use kube::api::{Api, Patch, PatchParams, PostParams};

fn sample_unit(name: &str, namespace: &str) -> QueueUnit {
    let mut unit = QueueUnit::new(
        name,
        QueueUnitSpec {
            consumer_ref: ObjectReference {
                api_version: Some("batch/v1".into()),
                kind: Some("Job".into()),
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            priority: Some(7),
            queue: "team-a".into(),
            resource: BTreeMap::from([(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            )]),
            ..Default::default()
        },
    );
    unit.metadata.namespace = Some(namespace.into());
    unit
}

#[tokio::test]
async fn queue_unit_crd_round_trip_with_status_and_printer_columns() {
    let cp = shared::tier1().await.unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    let api: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);

    let created = api
        .create(&PostParams::default(), &sample_unit("unit-a", &ns))
        .await
        .unwrap();
    assert_eq!(created.spec.queue, "team-a");
    assert!(created.status.is_none(), "status is not set on create");

    // The status subresource: a status patch changes only the status.
    let status = QueueUnitStatus {
        phase: Some(QueueUnitPhase::Enqueued),
        message: Some("waiting for quota team-a".into()),
        position: Some(3),
        conditions: QueueUnitPhase::waiting_conditions(
            "QuotaExceeded",
            "waiting for quota team-a",
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ),
        ),
        ..Default::default()
    };
    let patched = api
        .patch_status(
            "unit-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .unwrap();
    let got = patched.status.unwrap();
    assert_eq!(got.phase, Some(QueueUnitPhase::Enqueued));
    assert_eq!(got.position, Some(3));

    // A status change through the main resource is ignored.
    let ignored = api
        .patch(
            "unit-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "phase": "Running" } })),
        )
        .await
        .unwrap();
    assert_eq!(
        ignored.status.unwrap().phase,
        Some(QueueUnitPhase::Enqueued)
    );

    // `kubectl get qu` uses the short name and shows the printer columns.
    let table = cp.kubectl(&["get", "qu", "-n", &ns]).await.unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "PHASE", "QUEUE", "PRIORITY", "REASON", "JOBTYPE", "MESSAGE", "AGE"
        ]
    );
    let row = lines.next().unwrap();
    for cell in [
        "unit-a",
        "Enqueued",
        "team-a",
        "7",
        // Why it waits: the QuotaReserved condition's reason.
        "QuotaExceeded",
        "Job",
        "waiting for quota team-a",
    ] {
        assert!(row.contains(cell), "{cell:?} missing from {row:?}");
    }
    // The plural short name works too.
    assert!(
        cp.kubectl(&["get", "qus", "-n", &ns])
            .await
            .unwrap()
            .contains("unit-a")
    );

    // An invalid phase is rejected by the schema.
    let invalid = api
        .patch_status(
            "unit-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "phase": "Bogus" } })),
        )
        .await;
    assert!(invalid.is_err(), "an unknown phase must be rejected");
}

#[tokio::test]
async fn suspended_job_is_stored_suspended() {
    let cp = shared::tier1().await.unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client, &ns);
    let job: Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": "held" },
        "spec": {
            "suspend": true,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox" }]
            }}
        }
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let stored = jobs.get("held").await.unwrap();
    assert_eq!(stored.spec.unwrap().suspend, Some(true));
}

#[tokio::test]
async fn queues_and_elastic_quotas_are_served() {
    let cp = shared::tier1().await.unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    let quota: koord_queue_api::ElasticQuota = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": { "name": "team-a", "labels": {
            "quota.scheduling.koordinator.sh/parent": "org"
        }},
        "spec": { "min": { "cpu": "4" }, "max": { "cpu": "10", "memory": "20Gi" } }
    }))
    .unwrap();
    let quotas: Api<koord_queue_api::ElasticQuota> = Api::namespaced(client.clone(), &ns);
    let stored = quotas.create(&PostParams::default(), &quota).await.unwrap();
    assert_eq!(stored.parent_name(), "org");
    assert!(!stored.is_parent());

    let queue: koord_queue_api::Queue = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": { "name": fixtures::unique_name("queue") },
        "spec": { "queuePolicy": "Block", "priority": 5 }
    }))
    .unwrap();
    let queues: Api<koord_queue_api::Queue> =
        Api::namespaced(client, koord_queue_api::keys::SYSTEM_NAMESPACE);
    let stored = queues.create(&PostParams::default(), &queue).await.unwrap();
    assert_eq!(
        stored.spec.queue_policy,
        koord_queue_api::QueuePolicy::Block
    );
    let table = cp
        .kubectl(&["get", "queues.scheduling.x-k8s.io", "-n", "koord-queue"])
        .await
        .unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "POLICY", "PRIORITY", "PENDING", "ADMITTED", "STOPPED", "AGE"
        ]
    );
}
