//! End-to-end for Pods queued on their own (issue 20), acting as a tenant
//! (a ServiceAccount token with a tenant's rights) in a namespace that
//! queues pods: a pod is held by a scheduling gate — kube-scheduler leaves
//! it unplaced — released when its quota allows, runs on a kwok node and
//! frees its quota when it completes. The tenant cannot lift the gate,
//! remove the label the scheduler follows, grow the pod or name its node;
//! a queued Job's pods pass ungated as its children.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_queue_api::jobs::pod::SCHEDULING_GATE;
use koord_queue_api::queue_unit::QueueUnitPhase::{self, *};
use koord_queue_api::{QueueUnit, keys};
use koord_queue_tests::control_plane::RUN_FOR_ANNOTATION;
use koord_queue_tests::e2e::{self, create_quota, gated, job_yaml, refusal};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, tenant, webhook};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
            scheduler::start_leader(cp, scheduler::test_args("pods-e2e-scheduler"))
                .await
                .unwrap()
        })
        .await;
    cp
}

fn pod(name: &str, quota: &str, cpu: &str, run_for: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name,
            "labels": { keys::QUOTA_NAME_LABEL: quota },
            "annotations": { RUN_FOR_ANNOTATION: run_for } },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox",
                "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }] }
    }))
    .unwrap()
}

/// The unit of pod `name` (named by its annotation), read as admin.
async fn unit_of(admin: &kube::Client, ns: &str, name: &str) -> Option<QueueUnit> {
    let pod = Api::<Pod>::namespaced(admin.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    let unit = pod
        .metadata
        .annotations?
        .remove(keys::QUEUE_UNIT_ANNOTATION)?;
    Api::<QueueUnit>::namespaced(admin.clone(), ns)
        .get_opt(&unit)
        .await
        .unwrap()
}

async fn wait_unit(admin: &kube::Client, ns: &str, name: &str, phases: &[QueueUnitPhase]) {
    fixtures::eventually(LONG, || async {
        Ok(unit_of(admin, ns, name)
            .await
            .and_then(|u| u.status?.phase)
            .is_some_and(|p| phases.contains(&p)))
    })
    .await
    .unwrap_or_else(|e| panic!("pod {name} never reached {phases:?}: {e:#}"));
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_tenants_pods_wait_gated_run_in_turn_and_cannot_walk_around_the_queue() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name("podq");
    create_quota(&admin, &quota, None, false, "2", "2", None)
        .await
        .unwrap();
    let ns = fixtures::unique_name("pods");
    let tenant_client = tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    tenant::queue_pods(cp, &ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(tenant_client.clone(), &ns);
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);

    // Two 1.5-CPU pods on a 2-CPU quota: the first runs, the second waits
    // behind its gate, unplaced.
    let first = pods
        .create(&PostParams::default(), &pod("first", &quota, "1500m", "8s"))
        .await
        .unwrap();
    assert!(gated(&first), "held at creation: {:?}", first.spec);
    assert_eq!(
        first.metadata.labels.as_ref().unwrap()[keys::QUEUED_LABEL],
        "true"
    );
    wait_unit(&admin, &ns, "first", &[Running, Dequeued]).await;
    pods.create(
        &PostParams::default(),
        &pod("second", &quota, "1500m", "1s"),
    )
    .await
    .unwrap();
    wait_unit(&admin, &ns, "second", &[Enqueued]).await;
    fixtures::eventually(LONG, || async {
        let p = admin_pods.get("first").await?;
        Ok(!gated(&p) && phase(&p) == "Running")
    })
    .await
    .expect("the released pod is placed on a kwok node and runs");
    let second = admin_pods.get("second").await.unwrap();
    assert!(gated(&second));
    assert!(second.spec.as_ref().unwrap().node_name.is_none());
    let unit = unit_of(&admin, &ns, "second").await.unwrap();
    assert_eq!(unit.spec.resource["cpu"].0, "1500m");

    // The tenant cannot lift the gate, drop the label, grow the pod, or
    // create a pod that names its node.
    let ungate = json!({ "spec": { "schedulingGates": [
        { "$patch": "delete", "name": SCHEDULING_GATE }] } });
    let message = refusal(
        pods.patch("second", &PatchParams::default(), &Patch::Strategic(ungate))
            .await,
    );
    assert!(message.contains("queued"), "{message}");
    let unlabel = json!({ "metadata": { "labels": { keys::QUEUED_LABEL: null } } });
    let message = refusal(
        pods.patch("first", &PatchParams::default(), &Patch::Merge(unlabel))
            .await,
    );
    assert!(message.contains(keys::QUEUED_LABEL), "{message}");
    let mut placed = pod("placed", &quota, "100m", "1s");
    placed.spec.as_mut().unwrap().node_name = Some("anything".into());
    let message = refusal(pods.create(&PostParams::default(), &placed).await);
    assert!(message.contains("spec.nodeName"), "{message}");
    assert!(admin_pods.get_opt("placed").await.unwrap().is_none());

    // The first completes and frees the quota: the second is released, runs
    // and completes too.
    wait_unit(&admin, &ns, "first", &[Succeed]).await;
    wait_unit(&admin, &ns, "second", &[Running, Dequeued, Succeed]).await;
    fixtures::eventually(LONG, || async {
        Ok(phase(&admin_pods.get("second").await?) == "Succeeded")
    })
    .await
    .expect("the second pod runs once released and completes");
    wait_unit(&admin, &ns, "second", &[Succeed]).await;
    let unit = unit_of(&admin, &ns, "second").await.unwrap();
    assert!(unit.status.unwrap().admissions.is_empty(), "quota freed");

    // A queued Job's pods pass as its children, ungated.
    let client = admin.clone();
    e2e::kubectl_create_job(cp, &ns, &job_yaml("train", &quota, "1", "1s"))
        .await
        .unwrap();
    e2e::wait_phase(&client, &ns, "train", &[Succeed], LONG)
        .await
        .unwrap();
    let job_pods = admin_pods
        .list(&kube::api::ListParams::default().labels("job-name=train"))
        .await
        .unwrap();
    assert!(!job_pods.items.is_empty());
    for p in &job_pods.items {
        assert!(!gated(p), "a Job's pod passes as its child");
        assert!(
            p.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key(keys::QUEUE_UNIT_ANNOTATION))
        );
    }
}

/// Sending a pod back deletes it (a released pod cannot be gated again): a
/// higher-priority pod preempts a running one in its quota.
#[tokio::test]
async fn a_preempted_pod_is_deleted_and_its_quota_serves_the_preemptor() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    for (name, value) in [("kq-pod-low", 10), ("kq-pod-high", 1000)] {
        let class: PriorityClass =
            serde_json::from_value(json!({ "metadata": { "name": name }, "value": value }))
                .unwrap();
        let _ = Api::<PriorityClass>::all(admin.clone())
            .create(&PostParams::default(), &class)
            .await;
    }
    let quota = e2e::queue_with(
        cp,
        "podpre",
        "2",
        json!({ "preemption": { "withinQuota": "LowerPriority", "minRunSeconds": 0 } }),
    )
    .await
    .unwrap();
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    tenant::label_queue_pods(&admin, &ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let mut low = pod("low", &quota, "1500m", "300s");
    low.spec.as_mut().unwrap().priority_class_name = Some("kq-pod-low".into());
    pods.create(&PostParams::default(), &low).await.unwrap();
    wait_unit(&admin, &ns, "low", &[Running, Dequeued]).await;
    let mut high = pod("high", &quota, "1500m", "1s");
    high.spec.as_mut().unwrap().priority_class_name = Some("kq-pod-high".into());
    pods.create(&PostParams::default(), &high).await.unwrap();
    fixtures::eventually(LONG, || async { Ok(pods.get_opt("low").await?.is_none()) })
        .await
        .expect("the preempted pod is deleted");
    wait_unit(&admin, &ns, "high", &[Running, Dequeued, Succeed]).await;
}

/// A waiting pod whose gate is lifted behind the queue's back (here by a
/// client the webhook lets through, as while it is down): the scheduler
/// cannot gate it again, so it deletes it and says so on an Event.
#[tokio::test]
async fn a_pod_released_outside_the_queue_is_deleted() {
    use k8s_openapi::api::events::v1::Event;
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name("podout");
    create_quota(&admin, &quota, None, false, "1", "1", None)
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&admin, true).await.unwrap();
    tenant::label_queue_pods(&admin, &ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    pods.create(&PostParams::default(), &pod("holder", &quota, "1", "300s"))
        .await
        .unwrap();
    wait_unit(&admin, &ns, "holder", &[Running, Dequeued]).await;
    pods.create(&PostParams::default(), &pod("waiter", &quota, "1", "1s"))
        .await
        .unwrap();
    wait_unit(&admin, &ns, "waiter", &[Enqueued]).await;
    let bypass = webhook::scheduler_client(cp).await.unwrap();
    let ungate = json!({ "spec": { "schedulingGates": [
        { "$patch": "delete", "name": SCHEDULING_GATE }] } });
    Api::<Pod>::namespaced(bypass, &ns)
        .patch("waiter", &PatchParams::default(), &Patch::Strategic(ungate))
        .await
        .unwrap();
    fixtures::eventually(LONG, || async {
        Ok(pods.get_opt("waiter").await?.is_none())
    })
    .await
    .expect("the pod released outside the queue is deleted");
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    fixtures::eventually(LONG, || async {
        Ok(events
            .list(&Default::default())
            .await?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("HeldAgain")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("cannot be held again"))
            }))
    })
    .await
    .expect("an Event says why the pod was deleted");
}
