//! End-to-end with the real Kubeflow Trainer v2 controller (issue 20):
//! kube-controller-manager (the Job controller), kube-scheduler, kwok
//! nodes, Trainer v2.3.0's and JobSet v0.12.0's controllers and webhooks,
//! Koord-Queue's webhook and scheduler. A tenant's TrainJob is held at
//! creation and sized from its ClusterTrainingRuntime with its own
//! `numNodes` and `resourcesPerNode`; once released the Trainer builds its
//! JobSet (which passes as its child), the JobSet controller its Job, whose
//! pods run on kwok nodes and ask for what the unit reserved; the TrainJob
//! completes and frees the quota, and a second TrainJob that waited runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnitPhase::{self, *};
use koord_queue_api::resources::{ResourceListExt, Resources};
use koord_queue_tests::control_plane::RUN_FOR_ANNOTATION;
use koord_queue_tests::e2e::{
    released_first, requested_by, tenant_with_quota, unit_of_object, wait_object_phase,
};
use koord_queue_tests::{fixtures, framework, shared};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(120);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", kind),
        plural,
    )
}

/// A runtime of one trainer Job (`node`, 1 node by default, a 500m CPU
/// container named `node` as the Trainer's runtimes name it) whose pods run
/// `run_for`.
fn runtime(name: &str, run_for: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": { "name": name },
        "spec": {
            "mlPolicy": { "numNodes": 1 },
            "template": { "spec": { "replicatedJobs": [{ "name": "node", "template": {
                "metadata": { "labels": { "trainer.kubeflow.org/trainjob-ancestor-step": "trainer" } },
                "spec": { "template": {
                    "metadata": { "annotations": { RUN_FOR_ANNOTATION: run_for } },
                    "spec": { "restartPolicy": "Never", "containers": [{
                        "name": "node", "image": "busybox",
                        "resources": { "requests": { "cpu": "500m", "memory": "64Mi" } } }] } } } } }] } },
        },
    }))
    .unwrap()
}

/// A TrainJob of `runtime` on 2 nodes of 1 CPU each (its override of the
/// runtime's 500m).
fn trainjob(name: &str, quota: &str, runtime: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
        "spec": { "runtimeRef": { "name": runtime },
                  "trainer": { "numNodes": 2, "resourcesPerNode": { "requests": { "cpu": "1" } } } },
    }))
    .unwrap()
}

fn suspended(tj: &DynamicObject) -> bool {
    tj.data.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
}

#[tokio::test]
async fn a_released_trainjob_builds_its_jobset_whose_pods_run_what_its_unit_reserved() {
    let cp = shared::tier2().await.unwrap();
    let admin = cp.client().await.unwrap();
    let _queueing = framework::start_queueing(
        cp,
        &[
            "jobset.x-k8s.io_jobsets.yaml",
            "trainer.kubeflow.org_trainjobs.yaml",
            "trainer.kubeflow.org_trainingruntimes.yaml",
            "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        ],
        "trainer-e2e-scheduler",
    )
    .await
    .unwrap();
    let mut jobset_controller = framework::JOBSET.start(cp).await.unwrap();
    let mut trainer = framework::TRAINER.start(cp).await.unwrap();
    let logs = |trainer: &framework::Controller, jobset: &framework::Controller| {
        format!(
            "--- trainer-controller\n{}\n--- jobset-controller\n{}",
            trainer.process.log_tail(30),
            jobset.process.log_tail(15)
        )
    };

    let runtime_name = fixtures::unique_name("torch-kq");
    Api::<DynamicObject>::all_with(
        admin.clone(),
        &resource("ClusterTrainingRuntime", "clustertrainingruntimes"),
    )
    .create(&PostParams::default(), &runtime(&runtime_name, "4s"))
    .await
    .unwrap();
    // 2 + 2 CPU in 3: one runs, the other waits held.
    let (quota, ns, tenant_client) = tenant_with_quota(cp, "trainjob", "3").await.unwrap();
    let kind = resource("TrainJob", "trainjobs");
    let trainjobs = Api::<DynamicObject>::namespaced_with(tenant_client, &ns, &kind);
    for name in ["first", "second"] {
        let created = trainjobs
            .create(
                &PostParams::default(),
                &trainjob(name, &quota, &runtime_name),
            )
            .await
            .unwrap();
        assert!(suspended(&created), "{name} held at creation");
    }
    let wait = |name: &'static str, phases: &'static [QueueUnitPhase]| {
        let (admin, kind, ns) = (&admin, &kind, &ns);
        async move { wait_object_phase(admin, kind, ns, name, phases, LONG).await }
    };
    // Both are created in the same second: the one released first is the
    // running one; the other is seen waiting.
    let (first, second) = match released_first(&admin, &kind, &ns, ("first", "second"), LONG).await
    {
        Ok(pair) => pair,
        Err(e) => panic!("{e:#}\n{}", logs(&trainer, &jobset_controller)),
    };
    let unit = |name: &'static str| {
        let (admin, kind, ns) = (&admin, &kind, &ns);
        async move {
            unit_of_object(admin, kind, ns, name)
                .await
                .unwrap()
                .expect("a TrainJob's unit")
        }
    };
    // The webhook stores a unit after admitting its TrainJob, and the first
    // may be released before the second's unit is stored or adopted: wait
    // for it to be seen waiting rather than read it once.
    wait(second, &[Enqueued]).await.unwrap();
    let waiting = unit(second).await;
    let reserved = Resources::from_list(&waiting.spec.resource).unwrap();
    assert_eq!(reserved.get("cpu"), 2000, "2 nodes of the TrainJob's 1 CPU");

    // The Trainer builds the JobSet, the JobSet controller its Job; the
    // JobSet is its child (no unit of its own) and the pods ask, together,
    // for what the unit reserved.
    let jobset_kind = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let jobsets = Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &jobset_kind);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let selector = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={first}"));
    if let Err(e) = fixtures::eventually(LONG, || async {
        Ok(pods.list(&selector).await?.items.len() == 2)
    })
    .await
    {
        panic!(
            "the released TrainJob's pods never came: {e:#}\n{}",
            logs(&trainer, &jobset_controller)
        );
    }
    let js = jobsets.get(first).await.unwrap();
    assert!(
        !js.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(keys::QUEUE_UNIT_ANNOTATION),
        "the TrainJob's JobSet is its child, not queued"
    );
    let made = requested_by(&pods.list(&selector).await.unwrap().items).unwrap();
    assert_eq!(
        made,
        Resources::from_list(&unit(first).await.spec.resource).unwrap(),
        "the unit reserved what the Trainer's pods ask for"
    );

    if let Err(e) = wait(first, &[Succeed]).await {
        panic!("{e:#}\n{}", logs(&trainer, &jobset_controller));
    }
    assert!(
        unit(first).await.status.unwrap().admissions.is_empty(),
        "quota freed"
    );
    // The quota freed, the second runs and completes too.
    if let Err(e) = wait(second, &[Succeed]).await {
        panic!("{e:#}\n{}", logs(&trainer, &jobset_controller));
    }
    trainer.process.check_alive().unwrap();
    jobset_controller.process.check_alive().unwrap();
}
