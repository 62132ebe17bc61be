//! No way around the queue through a job's children (issue 37, routes 1 and
//! 2): acting as a tenant — a ServiceAccount with every verb on jobs and
//! pods in its own namespace, which queues pods — on the real API server
//! with kube-controller-manager (the Job controller makes the pods) and kwok
//! nodes. A child is counted against its own owner's unit, in number as in
//! size, and the `koord-queue/` keys of a child are the webhook's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::jobs::pod::SCHEDULING_GATE;
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_tests::control_plane::RUN_FOR_ANNOTATION;
use koord_queue_tests::e2e::{self, create_quota, refusal};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, tenant, webhook};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
            scheduler::start_leader(cp, scheduler::test_args("children-e2e-scheduler"))
                .await
                .unwrap()
        })
        .await;
    cp
}

/// A tenant in a fresh namespace that queues pods, and a quota of `cpu`.
async fn tenant_queuing_pods(
    cp: &ControlPlane,
    prefix: &str,
    cpu: &str,
) -> (String, String, kube::Client) {
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name(prefix);
    create_quota(&admin, &quota, None, false, cpu, cpu, None)
        .await
        .unwrap();
    let ns = fixtures::unique_name(prefix);
    let client = tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    tenant::queue_pods(cp, &ns).await.unwrap();
    (quota, ns, client)
}

fn job(name: &str, quota: &str, pods: i32, cpu: &str, run_for: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
        "spec": { "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {
                "metadata": { "annotations": { RUN_FOR_ANNOTATION: run_for } },
                "spec": { "restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "busybox",
                    "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }] } } }
    }))
    .unwrap()
}

/// A pod that names `owner` (a Job) as its controller.
fn claiming_pod(name: &str, owner: &Job, cpu: &str, gated: bool, annotations: Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "annotations": annotations,
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                "name": owner.metadata.name, "uid": owner.metadata.uid, "controller": true }] },
        "spec": { "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox",
            "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }] }
    });
    if gated {
        // Koord-Queue's own gate: a fully held child passes while its
        // owner waits, and is checked again when the gate goes.
        pod["spec"]["schedulingGates"] = json!([{ "name": SCHEDULING_GATE }]);
    }
    serde_json::from_value(pod).unwrap()
}

/// The unit of Job `name` once it reached one of `phases`.
async fn wait_job_unit(
    admin: &kube::Client,
    ns: &str,
    name: &str,
    phases: &[koord_queue_api::queue_unit::QueueUnitPhase],
) {
    e2e::wait_phase(admin, ns, name, phases, LONG)
        .await
        .unwrap_or_else(|e| panic!("job {name} never reached {phases:?}: {e:#}"));
}

/// Pods the Job controller made for `job` that run.
async fn running_pods_of(admin: &kube::Client, ns: &str, job: &str) -> usize {
    Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

/// Route 1: with a released Job of 2 pods × 1 cpu filling its quota (max 2),
/// pods the tenant makes claiming that Job are refused: its unit pays for 2
/// pods and 2 run. Each of them would have fit the size check alone.
#[tokio::test]
async fn extra_pods_claiming_a_released_job_are_refused() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, client) = tenant_queuing_pods(cp, "extra", "2").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let hog = jobs
        .create(&PostParams::default(), &job("hog", &quota, 2, "1", "300s"))
        .await
        .unwrap();
    wait_job_unit(&admin, &ns, "hog", &[Running, Dequeued]).await;
    fixtures::eventually(LONG, || async {
        Ok(running_pods_of(&admin, &ns, "hog").await == 2)
    })
    .await
    .expect("the Job controller runs the released job's 2 pods");
    // Its pods carry the uid that pays for them, set by the webhook.
    let charged = Api::<Pod>::namespaced(admin.clone(), &ns)
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            keys::CHARGED_TO_LABEL,
            hog.metadata.uid.as_deref().unwrap()
        )))
        .await
        .unwrap();
    assert_eq!(charged.items.len(), 2, "the job's pods are charged to it");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        let message = refusal(
            pods.create(
                &PostParams::default(),
                &claiming_pod(&format!("extra-{i}"), &hog, "1", false, json!({})),
            )
            .await,
        );
        assert!(
            message.contains("pays for 2 pods and 2 run already"),
            "extra pod {i}: {message}"
        );
    }
    assert!(
        Api::<Pod>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|p| !p
                .metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with("extra-")),
        "no extra pod exists"
    );
}

/// Route 2: a gated pod claiming a *waiting* Job and naming a released
/// job's unit in `koord-queue/queue-unit` is admitted without that
/// annotation (the webhook's keys are its own), and removing its gate is
/// refused: its owner's unit holds nothing.
#[tokio::test]
async fn a_held_child_cannot_run_on_another_jobs_unit() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, client) = tenant_queuing_pods(cp, "borrow", "2").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let running = jobs
        .create(
            &PostParams::default(),
            &job("running", &quota, 2, "1", "300s"),
        )
        .await
        .unwrap();
    wait_job_unit(&admin, &ns, "running", &[Running, Dequeued]).await;
    let waiting = jobs
        .create(
            &PostParams::default(),
            &job("waiting", &quota, 1, "1", "1s"),
        )
        .await
        .unwrap();
    wait_job_unit(&admin, &ns, "waiting", &[Enqueued]).await;
    let released_unit =
        running.metadata.annotations.as_ref().unwrap()[keys::QUEUE_UNIT_ANNOTATION].clone();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let forged =
        json!({ keys::QUEUE_UNIT_ANNOTATION: released_unit, keys::QUEUE_ANNOTATION: quota });
    let child = pods
        .create(
            &PostParams::default(),
            &claiming_pod("sneaky", &waiting, "1", true, forged),
        )
        .await
        .expect("a held child of a waiting job is admitted");
    let annotations = child.metadata.annotations.clone().unwrap_or_default();
    assert!(
        !annotations.contains_key(keys::QUEUE_UNIT_ANNOTATION)
            && !annotations.contains_key(keys::QUEUE_ANNOTATION),
        "the tenant's koord-queue/ annotations are removed: {annotations:?}"
    );
    assert_eq!(
        child.metadata.labels.as_ref().unwrap()[keys::CHARGED_TO_LABEL],
        waiting.metadata.uid.clone().unwrap(),
        "charged to its own owner"
    );

    // Removing its gate, as the tenant did, is refused.
    let remove_gates: json_patch::Patch =
        serde_json::from_value(json!([{ "op": "remove", "path": "/spec/schedulingGates" }]))
            .unwrap();
    let message = refusal(
        pods.patch(
            "sneaky",
            &PatchParams::default(),
            &Patch::<()>::Json(remove_gates),
        )
        .await,
    );
    assert!(message.contains("does not hold quota"), "{message}");
    // Nor can the annotation be put back.
    let annotate =
        json!({ "metadata": { "annotations": { keys::QUEUE_UNIT_ANNOTATION: released_unit } } });
    let message = refusal(
        pods.patch("sneaky", &PatchParams::default(), &Patch::Merge(annotate))
            .await,
    );
    assert!(message.contains("are Koord-Queue's"), "{message}");
    let sneaky = Api::<Pod>::namespaced(admin.clone(), &ns)
        .get("sneaky")
        .await
        .unwrap();
    assert!(
        sneaky
            .spec
            .unwrap()
            .scheduling_gates
            .is_some_and(|g| !g.is_empty()),
        "still gated"
    );
}

/// A tenant bound to Kubernetes' built-in `edit` role — pods, Deployments,
/// StatefulSets and Jobs in its namespace — where the namespace queues jobs
/// but not pods: a bare pod and a Deployment's pods are refused (they would
/// run outside the queue), a Job's pods run as its children once it is
/// released. What `edit` can do is stated in docs/security.md "Namespaces".
#[tokio::test]
async fn the_edit_role_runs_pods_only_as_a_queued_jobs_children() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name("edit");
    create_quota(&admin, &quota, None, false, "2", "2", None)
        .await
        .unwrap();
    let ns = fixtures::unique_name("edit");
    let client = tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "tenant-edit" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit" },
        "subjects": [{ "kind": "ServiceAccount", "name": tenant::TENANT, "namespace": ns }] }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "bare" },
        "spec": { "containers": [{ "name": "main", "image": "busybox",
            "resources": { "requests": { "cpu": "1" } } }] } }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // The RoleBinding takes a moment to reach the authorizer.
    let deadline = std::time::Instant::now() + LONG;
    let message = loop {
        match pods.create(&PostParams::default(), &pod).await {
            Err(kube::Error::Api(e))
                if e.message.contains("cannot create resource")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => break refusal(other),
        }
    };
    assert!(message.contains("would run outside the queue"), "{message}");

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "main", "image": "busybox",
                    "resources": { "requests": { "cpu": "4" } } }] } } } }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("edit may create a Deployment");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), &ns);
    fixtures::eventually(LONG, || async {
        Ok(replica_sets
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|rs| {
                rs.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.type_ == "ReplicaFailure"
                                && c.message
                                    .as_deref()
                                    .is_some_and(|m| m.contains("would run outside the queue"))
                        })
                    })
            }))
    })
    .await
    .expect("the ReplicaSet's pod is refused");
    assert!(
        Api::<Pod>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .is_empty(),
        "no pod of the Deployment runs"
    );

    // A Job runs, queued: its pod passes as its child.
    Api::<Job>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &job("batch", &quota, 1, "1", "300s"),
        )
        .await
        .unwrap();
    wait_job_unit(&admin, &ns, "batch", &[Running, Dequeued]).await;
    fixtures::eventually(LONG, || async {
        Ok(running_pods_of(&admin, &ns, "batch").await == 1)
    })
    .await
    .expect("the released Job's pod runs");
}
