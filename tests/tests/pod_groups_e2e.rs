//! End-to-end for pod groups and LeaderWorkerSet groups (issue 20), on the
//! real control plane with kube-scheduler and kwok nodes: the members of a
//! group are held by the scheduling gate, share one QueueUnit sized for the
//! group, stay unplaced until the whole group can start, and are released
//! together. A tenant cannot grow a group past its size, move a pod to
//! another group, or lift a member's gate. There is no LWS controller here
//! (its module is not served by the Go module proxy): the LeaderWorkerSet is
//! a real object of the upstream CRD, and its pods are created as its
//! controller creates them (its labels and size annotation).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::jobs::pod::SCHEDULING_GATE;
use koord_queue_api::jobs::pod_group::*;
use koord_queue_api::queue_unit::QueueUnitPhase::{self, *};
use koord_queue_api::{QueueUnit, keys};
use koord_queue_tests::control_plane::RUN_FOR_ANNOTATION;
use koord_queue_tests::e2e::{create_quota, gated, refusal};
use koord_queue_tests::{ControlPlane, fixtures, job_crds, scheduler, shared, tenant, webhook};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            let admin = cp.client().await.unwrap();
            let crds = job_crds::upstream_crds(&["leaderworkerset.x-k8s.io_leaderworkersets.yaml"])
                .unwrap();
            fixtures::apply_crds(&admin, &crds).await.unwrap();
            webhook::start_and_register(cp).await.unwrap();
            scheduler::start_leader(cp, scheduler::test_args("pod-groups-e2e-scheduler"))
                .await
                .unwrap()
        })
        .await;
    cp
}

fn member(name: &str, labels: Value, annotations: Value, cpu: &str) -> Pod {
    let mut annotations = annotations;
    annotations[RUN_FOR_ANNOTATION] = json!("6s");
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": labels, "annotations": annotations },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox",
                "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }] }
    }))
    .unwrap()
}

/// A member of plain group `group` of `size` pods in `quota`.
fn grouped(name: &str, group: &str, size: i32, quota: &str, cpu: &str) -> Pod {
    member(
        name,
        json!({ keys::QUOTA_NAME_LABEL: quota, POD_GROUP_LABEL: group }),
        json!({ POD_GROUP_SIZE_ANNOTATION: size.to_string() }),
        cpu,
    )
}

async fn unit(admin: &kube::Client, ns: &str, name: &str) -> Option<QueueUnit> {
    Api::<QueueUnit>::namespaced(admin.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// Waits until unit `name` is in one of `phases`; on a timeout, says what
/// the namespace's units and pods are (a CI run once found the group's unit
/// never Enqueued, and the bare timeout told nothing).
async fn wait_unit(admin: &kube::Client, ns: &str, name: &str, phases: &[QueueUnitPhase]) {
    let waited = fixtures::eventually(LONG, || async {
        Ok(unit(admin, ns, name)
            .await
            .and_then(|u| u.status?.phase)
            .is_some_and(|p| phases.contains(&p)))
    })
    .await;
    if let Err(e) = waited {
        let units = Api::<QueueUnit>::namespaced(admin.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|u| (u.metadata.name, u.spec.consumer_ref, u.status))
                    .collect::<Vec<_>>()
            });
        let pods = Api::<Pod>::namespaced(admin.clone(), ns)
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|p| (p.metadata.name, p.metadata.labels, p.metadata.annotations))
                    .collect::<Vec<_>>()
            });
        panic!("unit {name} never reached {phases:?}: {e:#}\nunits: {units:#?}\npods: {pods:#?}");
    }
}

/// Waits until every pod of `names` is ungated.
async fn wait_released(pods: &Api<Pod>, names: &[&str]) {
    fixtures::eventually(LONG, || async {
        for name in names {
            if gated(&pods.get(name).await?) {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
    .unwrap_or_else(|e| panic!("{names:?} were never all released: {e:#}"));
}

#[tokio::test]
async fn a_tenants_pod_group_is_one_unit_released_whole_and_cannot_grow() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name("groupq");
    create_quota(&admin, &quota, None, false, "4", "4", None)
        .await
        .unwrap();
    let ns = fixtures::unique_name("groups");
    let tenant_client = tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    tenant::queue_pods(cp, &ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(tenant_client.clone(), &ns);
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let create = |p: Pod| {
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &p).await }
    };

    // Two of a gang of three: one unit for the group, sized for three; it
    // reserves no quota and both members stay gated until the third exists.
    for name in ["gang-0", "gang-1"] {
        let p = create(grouped(name, "gang", 3, &quota, "1")).await.unwrap();
        assert!(gated(&p), "held at creation");
        let annotations = p.metadata.annotations.unwrap();
        assert_eq!(annotations[keys::QUEUE_UNIT_ANNOTATION], "gang-group");
    }
    wait_unit(&admin, &ns, "gang-group", &[Enqueued]).await;
    let u = unit(&admin, &ns, "gang-group").await.unwrap();
    let status = u.status.clone().unwrap();
    assert!(
        status.admissions.is_empty(),
        "an incomplete gang holds no quota"
    );
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("all 3 pods of the group")),
        "{:?}",
        status.message
    );
    assert_eq!(u.spec.consumer_ref.kind.as_deref(), Some(GROUP_KIND));
    assert_eq!(u.spec.consumer_ref.name.as_deref(), Some("gang"));
    assert_eq!(u.spec.resource["cpu"].0, "3");
    assert!(
        u.metadata.owner_references.unwrap_or_default().is_empty(),
        "no member owns the group's unit"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["gang-0", "gang-1"] {
        assert!(
            gated(&admin_pods.get(name).await.unwrap()),
            "{name}: the gang is released whole"
        );
    }

    // A member cannot leave its group, nor have its gate lifted.
    let message = refusal(
        pods.patch(
            "gang-1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { POD_GROUP_LABEL: "other" } } })),
        )
        .await,
    );
    assert!(message.contains(POD_GROUP_LABEL), "{message}");
    let ungate = json!({ "spec": { "schedulingGates": [
        { "$patch": "delete", "name": SCHEDULING_GATE }] } });
    let message = refusal(
        pods.patch("gang-0", &PatchParams::default(), &Patch::Strategic(ungate))
            .await,
    );
    assert!(message.contains("queued"), "{message}");

    // The third member: the whole gang is released and runs on kwok nodes.
    create(grouped("gang-2", "gang", 3, &quota, "1"))
        .await
        .unwrap();
    wait_released(&admin_pods, &["gang-0", "gang-1", "gang-2"]).await;
    // A fourth member is beyond the group's size: it stays gated.
    create(grouped("gang-3", "gang", 3, &quota, "1"))
        .await
        .unwrap();
    wait_unit(&admin, &ns, "gang-group", &[Running, Succeed]).await;
    assert!(
        gated(&admin_pods.get("gang-3").await.unwrap()),
        "beyond the size"
    );

    // A group sized by its first member (2 × 500m): once its unit exists a
    // larger member, or one that says another size, is refused at once.
    create(grouped("big-0", "big", 2, &quota, "500m"))
        .await
        .unwrap();
    wait_unit(&admin, &ns, "big-group", &[Enqueued]).await;
    assert_eq!(
        unit(&admin, &ns, "big-group").await.unwrap().spec.resource["cpu"].0,
        "1"
    );
    let message = refusal(create(grouped("big-1", "big", 2, &quota, "2")).await);
    assert!(
        message.contains("cannot join pod group big") && message.contains("more than the"),
        "{message}"
    );
    let message = refusal(create(grouped("big-1", "big", 5, &quota, "500m")).await);
    assert!(
        message.contains("queued with 2 pods and this pod says 5"),
        "{message}"
    );
    create(grouped("big-2", "big", 2, &quota, "500m"))
        .await
        .unwrap();
    wait_released(&admin_pods, &["big-0", "big-2"]).await;

    // The gang completes: its unit succeeds and frees the quota.
    wait_unit(&admin, &ns, "gang-group", &[Succeed]).await;
    let u = unit(&admin, &ns, "gang-group").await.unwrap();
    assert!(u.status.unwrap().admissions.is_empty(), "quota freed");
}

/// A LeaderWorkerSet's group of three (a 1-CPU leader, two 2-CPU workers)
/// is one unit sized from the LeaderWorkerSet's templates, not from the
/// pods; an incomplete group reserves nothing, a complete one waits whole
/// for quota and is released together.
#[tokio::test]
async fn a_leaderworkerset_group_is_sized_from_its_templates_and_released_together() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let quota = fixtures::unique_name("lwsq");
    create_quota(&admin, &quota, None, false, "8", "8", None)
        .await
        .unwrap();
    let ns = fixtures::unique_name("lws");
    // Not a namespace that queues pods: LWS pods are reviewed by their own hook.
    let _tenant = tenant::tenant_namespace(cp, &ns, None).await.unwrap();
    let template = |cpu: &str| {
        json!({ "spec": { "containers": [{ "name": "main", "image": "vllm",
            "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } }] } })
    };
    let lws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": { "name": "llama", "namespace": ns },
        "spec": { "replicas": 2, "leaderWorkerTemplate": {
            "size": 3, "leaderTemplate": template("1"), "workerTemplate": template("2") } }
    }))
    .unwrap();
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    );
    Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &resource)
        .create(&PostParams::default(), &lws)
        .await
        .unwrap();
    // The pods as the LWS controller makes them (its identity: not a tenant).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let lws_pod = |group: u32, worker: u32, cpu: &str| {
        let name = if worker == 0 {
            format!("llama-{group}")
        } else {
            format!("llama-{group}-{worker}")
        };
        // The labels of the LWS StatefulSets' templates: a leader's names
        // its place ("0") but not its group, a worker's its group but not its
        // place; LWS's own pod webhook (not installed here) adds the rest
        // from the pod's name, as Koord-Queue's reads it.
        let labels = if worker == 0 {
            json!({ keys::QUOTA_NAME_LABEL: quota, LWS_NAME_LABEL: "llama", LWS_WORKER_INDEX_LABEL: "0" })
        } else {
            json!({ keys::QUOTA_NAME_LABEL: quota, LWS_NAME_LABEL: "llama",
                LWS_GROUP_INDEX_LABEL: group.to_string() })
        };
        member(&name, labels, json!({ LWS_SIZE_ANNOTATION: "3" }), cpu)
    };
    for (worker, cpu) in [(0, "1"), (1, "2")] {
        let p = pods
            .create(&PostParams::default(), &lws_pod(0, worker, cpu))
            .await
            .unwrap();
        assert!(gated(&p));
        // The leader is labelled with its group, which lists its members.
        assert_eq!(p.metadata.labels.unwrap()[LWS_GROUP_INDEX_LABEL], "0");
    }
    // Two of its three pods exist: the replica reserves nothing yet.
    wait_unit(&admin, &ns, "llama-0-group", &[Enqueued]).await;
    let u = unit(&admin, &ns, "llama-0-group").await.unwrap();
    assert_eq!(u.spec.resource["cpu"].0, "5", "leader 1 + 2 workers × 2");
    let sets: Vec<(String, i32)> = u
        .spec
        .pod_set
        .iter()
        .map(|s| (s.name.clone(), s.count))
        .collect();
    assert_eq!(sets, [("leader".to_string(), 1), ("worker".to_string(), 2)]);
    // The second replica is a unit of its own: whole, it gets 5 of the 8 CPU
    // and its three pods are released together.
    for (worker, cpu) in [(0, "1"), (1, "2"), (2, "2")] {
        pods.create(&PostParams::default(), &lws_pod(1, worker, cpu))
            .await
            .unwrap();
    }
    wait_released(&pods, &["llama-1", "llama-1-1", "llama-1-2"]).await;
    // Replica 0 complete now needs 5 CPU where 3 are left: it waits whole.
    pods.create(&PostParams::default(), &lws_pod(0, 2, "2"))
        .await
        .unwrap();
    wait_unit(&admin, &ns, "llama-0-group", &[Enqueued]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in ["llama-0", "llama-0-1", "llama-0-2"] {
        assert!(
            gated(&pods.get(name).await.unwrap()),
            "{name}: no quota for replica 0 yet"
        );
    }
    // A pod naming a LeaderWorkerSet that does not exist is refused.
    let mut forged = lws_pod(0, 3, "1");
    forged
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LWS_NAME_LABEL.into(), "nope".into());
    forged.metadata.name = Some("nope-0-3".into());
    let message = refusal(pods.create(&PostParams::default(), &forged).await);
    assert!(
        message.contains("LeaderWorkerSet") && message.contains("does not exist"),
        "{message}"
    );
    // Replica 1 completes (its pods "run" 6 s): replica 0 gets the quota.
    wait_unit(&admin, &ns, "llama-1-group", &[Succeed]).await;
    wait_released(&pods, &["llama-0", "llama-0-1", "llama-0-2"]).await;
}
