//! End-to-end: the `ResourceQuota` plugin on the full local control plane
//! (tier 2). kube-controller-manager computes each ResourceQuota's
//! `status.used` from the pods kwok runs; the scheduler does not release a
//! job whose pods the namespace's ResourceQuota would reject, even though its
//! ElasticQuota has room, and releases it once the ResourceQuota has room
//! (its pods finished, or its hard limit was raised).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_tests::e2e::{
    self, create_quota_pair, create_resource_quota, job_yaml, kubectl_create_job, wait_phase,
};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, webhook};
use kube::api::{Api, DeleteParams, ListParams};
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(90);

/// Leaf ElasticQuota every job of this suite is charged to: 64 CPU, far more
/// than any namespace ResourceQuota here allows.
const LEAF: &str = "rq-q";

/// Name of the ResourceQuota the tests create.
const RQ: &str = "compute";

async fn setup() -> &'static ControlPlane {
    // The webhook and the scheduler live as long as the test binary.
    static READY: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    READY
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
            let args = scheduler::with_config(
                scheduler::test_args("rq-scheduler"),
                cp,
                &scheduler::config_with_resource_quota(),
            )
            .unwrap();
            let replica = scheduler::start_leader(cp, args).await.unwrap();
            let client = cp.client().await.unwrap();
            create_quota_pair(&client, "rq", LEAF, "64").await.unwrap();
            // Jobs naming the quota are refused until the webhook knows it;
            // the scheduler's Queue for it shows the quota was seen.
            let queues: Api<koord_queue_api::Queue> =
                Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
            fixtures::eventually(Duration::from_secs(30), || async {
                Ok(queues.get_opt(LEAF).await?.is_some())
            })
            .await
            .unwrap();
            replica
        })
        .await;
    cp
}

/// Asserts that job `name` waits, held and without pods, with a message that
/// names the namespace's ResourceQuota and the resource.
async fn waits_for_the_resource_quota(client: &kube::Client, ns: &str, name: &str) {
    wait_phase(client, ns, name, &[Enqueued], LONG)
        .await
        .unwrap();
    let reported = fixtures::eventually(Duration::from_secs(30), || async {
        let message = e2e::message_of(client, ns, name).await?;
        Ok(message.contains("ResourceQuota") && message.contains(ns) && message.contains("cpu"))
    })
    .await;
    let message = e2e::message_of(client, ns, name).await.unwrap();
    assert!(
        reported.is_ok(),
        "{name}: the message names the ResourceQuota, the namespace and the resource: {message:?}"
    );
    assert_eq!(
        e2e::phase_of(client, ns, name).await.unwrap(),
        Some(Enqueued),
        "{name} still waits"
    );
    let job = Api::<Job>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    assert_eq!(job.spec.unwrap().suspend, Some(true), "{name} is held");
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .unwrap();
    assert!(pods.items.is_empty(), "{name} has no pods");
}

/// Events of pods the API server refused (`FailedCreate`, e.g. "exceeded
/// quota"): the plugin exists so that there are none.
async fn failed_creates(client: &kube::Client, ns: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

async fn delete_jobs(client: &kube::Client, ns: &str, names: &[&str]) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    for name in names {
        jobs.delete(name, &DeleteParams::background())
            .await
            .unwrap();
    }
}

/// The second job would take the namespace beyond its ResourceQuota: it
/// waits, says why, and runs once the first job's pods are done.
#[tokio::test]
async fn a_job_the_resource_quota_would_reject_waits_until_it_fits() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_resource_quota(&client, &ns, RQ, &[("requests.cpu", "2")])
        .await
        .unwrap();

    kubectl_create_job(cp, &ns, &job_yaml("first", LEAF, "2", "30s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "first", &[Running], LONG)
        .await
        .unwrap();
    assert_eq!(
        e2e::resource_quota_used(&client, &ns, RQ, "requests.cpu")
            .await
            .unwrap()
            .as_deref(),
        Some("2"),
        "the first job's pod is counted by the ResourceQuota"
    );
    kubectl_create_job(cp, &ns, &job_yaml("second", LEAF, "1", "1s"))
        .await
        .unwrap();
    waits_for_the_resource_quota(&client, &ns, "second").await;

    // The first job's pod finishes, the controller manager frees its share
    // of the ResourceQuota, and the second job is released and completes.
    wait_phase(&client, &ns, "first", &[Succeed], LONG)
        .await
        .unwrap();
    wait_phase(&client, &ns, "second", &[Succeed], LONG)
        .await
        .unwrap();
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get("second")
        .await
        .unwrap();
    let complete = job
        .status
        .unwrap()
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    assert!(complete, "the second job ran to completion");
    assert_eq!(
        failed_creates(&client, &ns).await,
        Vec::<String>::new(),
        "no pod was refused by the ResourceQuota"
    );
}

/// Raising the ResourceQuota's hard limit releases a waiting job without
/// restarting anything.
#[tokio::test]
async fn raising_the_hard_limit_releases_a_waiting_job() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_resource_quota(&client, &ns, RQ, &[("requests.cpu", "1")])
        .await
        .unwrap();

    kubectl_create_job(cp, &ns, &job_yaml("holder", LEAF, "1", "600s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "holder", &[Running], LONG)
        .await
        .unwrap();
    kubectl_create_job(cp, &ns, &job_yaml("waiter", LEAF, "1", "600s"))
        .await
        .unwrap();
    waits_for_the_resource_quota(&client, &ns, "waiter").await;

    e2e::set_resource_quota_hard(&client, &ns, RQ, "requests.cpu", "2")
        .await
        .unwrap();
    wait_phase(&client, &ns, "waiter", &[Running], LONG)
        .await
        .unwrap();
    assert_eq!(
        e2e::phase_of(&client, &ns, "holder").await.unwrap(),
        Some(Running),
        "the first job keeps running"
    );
    assert_eq!(
        failed_creates(&client, &ns).await,
        Vec::<String>::new(),
        "no pod was refused by the ResourceQuota"
    );
    delete_jobs(&client, &ns, &["holder", "waiter"]).await;
}

/// A namespace without a ResourceQuota is limited by its ElasticQuota only:
/// three 2-CPU jobs run at once (a 2-CPU ResourceQuota would allow one).
#[tokio::test]
async fn a_namespace_without_a_resource_quota_is_unaffected() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let names = ["free-a", "free-b", "free-c"];
    for name in names {
        kubectl_create_job(cp, &ns, &job_yaml(name, LEAF, "2", "600s"))
            .await
            .unwrap();
    }
    for name in names {
        wait_phase(&client, &ns, name, &[Running], LONG)
            .await
            .unwrap();
    }
    // The jobs run for ten minutes: all three are running together now.
    for name in names {
        assert_eq!(
            e2e::phase_of(&client, &ns, name).await.unwrap(),
            Some(Running),
            "{name} runs alongside the others"
        );
    }
    delete_jobs(&client, &ns, &names).await;
}
