//! End-to-end with the real JobSet controller (issue 20): kube-controller-
//! manager (the Job controller), kube-scheduler, kwok nodes, JobSet
//! v0.12.0's controller and webhooks, Koord-Queue's webhook and scheduler.
//! A tenant's JobSet is held at creation; once released its controller
//! creates its Jobs, which pass unqueued as its proven children, their pods
//! run on kwok nodes and complete, the JobSet completes and its unit frees
//! the quota. A second JobSet that does not fit waits held, and runs after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
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

const LONG: Duration = Duration::from_secs(90);

/// A JobSet of a leader Job (1 pod) and 2 worker Jobs of 2 pods, 1 CPU a
/// pod (5 CPU), whose pods run `run_for`.
fn jobset(name: &str, quota: &str, run_for: &str) -> DynamicObject {
    let job = |pods: i32| {
        json!({ "spec": { "parallelism": pods, "completions": pods, "template": {
            "metadata": { "annotations": { RUN_FOR_ANNOTATION: run_for } },
            "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox",
                "resources": { "requests": { "cpu": "1", "memory": "64Mi" } } }] } } } })
    };
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
        "spec": { "replicatedJobs": [
            { "name": "leader", "replicas": 1, "template": job(1) },
            { "name": "workers", "replicas": 2, "template": job(2) } ] }
    }))
    .unwrap()
}

fn suspended(js: &DynamicObject) -> bool {
    js.data.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true)
}

#[tokio::test]
async fn a_released_jobset_runs_its_jobs_on_kwok_nodes_and_frees_its_quota() {
    let cp = shared::tier2().await.unwrap();
    let admin = cp.client().await.unwrap();
    let _queueing = framework::start_queueing(
        cp,
        &["jobset.x-k8s.io_jobsets.yaml"],
        "jobset-e2e-scheduler",
    )
    .await
    .unwrap();
    let mut controller = framework::JOBSET.start(cp).await.unwrap();

    let (quota, ns, tenant_client) = tenant_with_quota(cp, "jobset", "6").await.unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let jobsets = Api::<DynamicObject>::namespaced_with(tenant_client, &ns, &resource);
    // Created in the same second, the two tie: which one the scheduler
    // releases first is its to choose, so both run long enough for the
    // other to be seen waiting.
    for name in ["first", "second"] {
        let created = jobsets
            .create(&PostParams::default(), &jobset(name, &quota, "4s"))
            .await
            .unwrap();
        assert!(suspended(&created), "{name} held at creation");
    }
    let unit_of = |name: &'static str| {
        let (admin, resource, ns) = (&admin, &resource, &ns);
        async move { unit_of_object(admin, resource, ns, name).await.unwrap() }
    };
    let wait = |name: &'static str, phases: &'static [QueueUnitPhase]| {
        let (admin, resource, ns) = (&admin, &resource, &ns);
        async move {
            wait_object_phase(admin, resource, ns, name, phases, LONG)
                .await
                .unwrap()
        }
    };
    // 5 + 5 CPU in 6: one runs, the other waits held.
    let (first, second) = released_first(&admin, &resource, &ns, ("first", "second"), LONG)
        .await
        .unwrap();
    // The webhook stores a unit after admitting its JobSet, and the first
    // may be released before the second's unit is stored or adopted: wait
    // for it to be seen waiting rather than read it once.
    wait(second, &[Enqueued]).await;
    let u = unit_of(second).await.unwrap();
    assert_eq!(u.spec.resource["cpu"].0, "5", "every replicated Job's pods");
    let selector = format!("jobset.sigs.k8s.io/jobset-name={first}");

    // Its controller makes its three Jobs (suspended while the JobSet is)
    // and starts them once it is released: they pass as its children (no
    // unit of their own), and their pods run and complete.
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    fixtures::eventually(LONG, || async {
        let listed = jobs
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        Ok(listed.len() == 3
            && listed
                .iter()
                .all(|j| j.spec.as_ref().and_then(|s| s.suspend) != Some(true)))
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "the JobSet controller made no Jobs: {e:#}\n{}",
            controller.process.log_tail(30)
        )
    });
    for job in jobs
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
    {
        let annotations = job.metadata.annotations.unwrap_or_default();
        assert!(
            !annotations.contains_key(keys::QUEUE_UNIT_ANNOTATION),
            "a child, not queued"
        );
        assert_ne!(
            job.spec.unwrap().suspend,
            Some(true),
            "a released JobSet's Job runs"
        );
    }
    // Its Jobs' pods asked, summed, for what its unit reserved.
    // The Job controller makes them after the Jobs start, each reviewed as
    // its Job's child: wait for all five rather than assume they are there.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), &ns);
    fixtures::eventually(LONG, || async {
        Ok(pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .len()
            == 5)
    })
    .await
    .expect("1 leader and 2 x 2 worker pods");
    let made = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    let reserved = unit_of(first).await.unwrap().spec.resource;
    assert_eq!(
        requested_by(&made).unwrap(),
        Resources::from_list(&reserved).unwrap()
    );
    wait(first, &[Succeed]).await;
    assert!(
        unit_of(first)
            .await
            .unwrap()
            .status
            .unwrap()
            .admissions
            .is_empty(),
        "quota freed"
    );
    // The quota freed, the second runs and completes too.
    wait(second, &[Succeed]).await;
    controller.process.check_alive().unwrap();
}
