//! End-to-end with the real LeaderWorkerSet controller (issue 20): kube-
//! controller-manager, kube-scheduler, kwok nodes, LWS v0.9.0's controller
//! and webhooks, Koord-Queue's webhook and scheduler. A LeaderWorkerSet of
//! two replicas of three 1-CPU pods in a quota of 4 CPU: its controller
//! makes the leaders and their workers, each replica is one unit, the one
//! that fits is released whole and runs on kwok nodes, the other waits gated;
//! deleting the LeaderWorkerSet takes its pods and so its units.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::QueueUnit;
use koord_queue_api::jobs::pod_group::*;
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_api::resources::{ResourceListExt, Resources};
use koord_queue_tests::control_plane::RUN_FOR_ANNOTATION;
use koord_queue_tests::e2e::{gated, requested_by, tenant_with_quota};
use koord_queue_tests::framework;
use koord_queue_tests::{fixtures, shared};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use serde_json::json;

const LONG: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_leaderworkerset_is_queued_replica_by_replica_with_its_real_controller() {
    let cp = shared::tier2().await.unwrap();
    let admin = cp.client().await.unwrap();
    let _queueing = framework::start_queueing(
        cp,
        &["leaderworkerset.x-k8s.io_leaderworkersets.yaml"],
        "lws-e2e-scheduler",
    )
    .await
    .unwrap();
    let mut lws_controller = framework::LWS.start(cp).await.unwrap();

    let (quota, ns, _tenant) = tenant_with_quota(cp, "lws", "4").await.unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
        "leaderworkersets",
    );
    let lws_api = Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &resource);
    let lws: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": { "name": "llama", "namespace": ns },
        "spec": { "replicas": 2, "leaderWorkerTemplate": { "size": 3, "workerTemplate": {
            // kwok completes a pod at once unless told how long it runs
            // (a serving pod runs on).
            "metadata": { "labels": { keys::QUOTA_NAME_LABEL: quota },
                          "annotations": { RUN_FOR_ANNOTATION: "10m" } },
            "spec": { "containers": [{ "name": "main", "image": "vllm",
                "resources": { "requests": { "cpu": "1", "memory": "64Mi" } } }] } } } }
    }))
    .unwrap();
    lws_api.create(&PostParams::default(), &lws).await.unwrap();

    // The controller makes both replicas' six pods; one replica runs whole,
    // the other waits whole behind its gates.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let group_of = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LWS_GROUP_INDEX_LABEL).cloned())
            .unwrap_or_default()
    };
    let outcome = fixtures::eventually(LONG, || async {
        let listed = pods.list(&ListParams::default()).await?.items;
        if listed.len() < 6 {
            return Ok(false);
        }
        let running: Vec<&Pod> = listed
            .iter()
            .filter(|p| {
                !gated(p) && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .collect();
        Ok(running.len() == 3 && running.iter().all(|p| group_of(p) == group_of(running[0])))
    })
    .await;
    lws_controller.process.check_alive().unwrap();
    let listed = pods.list(&ListParams::default()).await.unwrap().items;
    let summary: Vec<String> = listed
        .iter()
        .map(|p| {
            format!(
                "{} group={} gated={} phase={:?}",
                p.metadata.name.clone().unwrap_or_default(),
                group_of(p),
                gated(p),
                p.status.as_ref().and_then(|s| s.phase.clone())
            )
        })
        .collect();
    outcome.unwrap_or_else(|e| {
        panic!(
            "one replica never ran whole: {e:#}\npods: {summary:#?}\n--- lws-controller\n{}",
            lws_controller.process.log_tail(40)
        )
    });
    let released = listed.iter().find(|p| !gated(p)).map(group_of).unwrap();
    let waiting = if released == "0" { "1" } else { "0" };
    for p in &listed {
        assert_eq!(gated(p), group_of(p) == waiting, "{summary:#?}");
    }
    let units: Api<QueueUnit> = Api::namespaced(admin.clone(), &ns);
    let phase = |name: String| {
        let units = units.clone();
        async move { units.get(&name).await.ok().and_then(|u| u.status?.phase) }
    };
    fixtures::eventually(LONG, || async {
        Ok(
            phase(format!("llama-{released}-group")).await == Some(Running)
                && phase(format!("llama-{waiting}-group")).await == Some(Enqueued),
        )
    })
    .await
    .expect("the running replica's unit Running, the other's Enqueued");
    // The running replica's pods, as the LWS controller made them, ask for
    // what its unit reserved.
    let made: Vec<_> = listed
        .iter()
        .filter(|p| group_of(p) == released)
        .cloned()
        .collect();
    let reserved = units
        .get(&format!("llama-{released}-group"))
        .await
        .unwrap()
        .spec
        .resource;
    assert_eq!(
        requested_by(&made).unwrap(),
        Resources::from_list(&reserved).unwrap()
    );
    let unit = units.get(&format!("llama-{waiting}-group")).await.unwrap();
    assert_eq!(
        unit.spec.resource["cpu"].0, "3",
        "sized from the LeaderWorkerSet"
    );

    // The LeaderWorkerSet goes: its StatefulSets and pods are collected, and
    // with its pods each group's unit.
    lws_api
        .delete("llama", &DeleteParams::foreground())
        .await
        .unwrap();
    fixtures::eventually(LONG, || async {
        Ok(units.list(&ListParams::default()).await?.items.is_empty())
    })
    .await
    .expect("the groups' units are deleted with their pods");
}
