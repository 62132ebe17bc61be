//! Advanced lifecycle end to end (tier 2, kwok nodes of 32 CPU): admission
//! checks, strict dequeue, the running timeout and backoff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::QueueUnit;
use koord_queue_api::queue_unit::{CheckState, QueueUnitPhase, QueueUnitPhase::*};
use koord_queue_tests::e2e::{self, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, webhook};
use kube::api::Api;
use serde_json::json;
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
            scheduler::start_leader(cp, scheduler::test_args("lifecycle-scheduler"))
                .await
                .unwrap()
        })
        .await;
    cp
}

async fn unit(client: &kube::Client, ns: &str, job: &str) -> QueueUnit {
    e2e::unit_of_job(client, ns, job).await.unwrap().unwrap()
}

async fn set_check(client: &kube::Client, ns: &str, job: &str, state: CheckState) {
    e2e::set_check(client, ns, job, state).await.unwrap();
}

async fn suspended(client: &kube::Client, ns: &str, job: &str) -> bool {
    e2e::job_suspended(client, ns, job).await.unwrap()
}

async fn queue_with(cp: &ControlPlane, name: &str, spec: serde_json::Value) -> String {
    e2e::queue_with(cp, name, "40", spec).await.unwrap()
}

#[tokio::test]
async fn admission_checks_hold_release_and_send_back() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let queue = queue_with(
        cp,
        "chk",
        json!({ "admissionChecks": [{ "name": "provision" }] }),
    )
    .await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();

    // Pending: quota reserved, the job stays held.
    kubectl_create_job(cp, &ns, &job_yaml("checked", &queue, "2", "2s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "checked", &[Reserved], LONG)
        .await
        .unwrap();
    let status = unit(&client, &ns, "checked").await.status.unwrap();
    assert_eq!(status.admission_checks.len(), 1);
    assert_eq!(status.admission_checks[0].state, CheckState::Pending);
    assert!(
        !status.admissions.is_empty(),
        "quota is reserved while checks run"
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "QuotaReserved" && c.status == "True")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        suspended(&client, &ns, "checked").await,
        "held while checks are pending"
    );

    // Ready: released, runs, completes.
    set_check(&client, &ns, "checked", CheckState::Ready).await;
    wait_phase(&client, &ns, "checked", &[Dequeued, Running, Succeed], LONG)
        .await
        .unwrap();
    wait_phase(&client, &ns, "checked", &[Succeed], LONG)
        .await
        .unwrap();
    // The conditions follow the phase: finished, no longer holding quota.
    let done = unit(&client, &ns, "checked").await.status.unwrap();
    let condition = |type_: &str| {
        done.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    assert_eq!(
        condition("Finished"),
        Some(("True".into(), "Succeeded".into())),
        "{:?}",
        done.conditions
    );
    assert_eq!(
        condition("QuotaReserved"),
        Some(("False".into(), "Finished".into()))
    );

    // Rejected and Retry: quota freed, backoff, then checks afresh.
    for (job, state) in [
        ("rejected", CheckState::Rejected),
        ("retried", CheckState::Retry),
    ] {
        kubectl_create_job(cp, &ns, &job_yaml(job, &queue, "2", "1s"))
            .await
            .unwrap();
        wait_phase(&client, &ns, job, &[Reserved], LONG)
            .await
            .unwrap();
        set_check(&client, &ns, job, state).await;
        wait_phase(&client, &ns, job, &[TimeoutBackoff], LONG)
            .await
            .unwrap();
        let status = unit(&client, &ns, job).await.status.unwrap();
        assert!(
            status.admissions.is_empty(),
            "{job}: no quota held in backoff"
        );
        assert!(status.admission_checks.is_empty(), "{job}: checks reset");
        let requeue = status.requeue_state.unwrap();
        assert_eq!(requeue.count, 1);
        let requeue_at = requeue.requeue_at.clone().unwrap().0;
        let wait =
            requeue_at.as_millisecond() - k8s_openapi::jiff::Timestamp::now().as_millisecond();
        assert!(
            (3_000..=11_500).contains(&wait),
            "{job}: backoff of about 10 s, {wait} ms left"
        );
        assert!(
            status.conditions.iter().any(|c| c.type_ == "Evicted"
                && c.status == "True"
                && c.reason == "AdmissionCheck")
        );
        assert!(suspended(&client, &ns, job).await);
        // Not released before requeueAt; then back in line with the check pending again.
        wait_phase(&client, &ns, job, &[Reserved], Duration::from_secs(30))
            .await
            .unwrap();
        let status = unit(&client, &ns, job).await.status.unwrap();
        assert_eq!(status.admission_checks[0].state, CheckState::Pending);
        assert!(
            k8s_openapi::jiff::Timestamp::now() >= requeue_at,
            "{job}: not back before requeueAt"
        );
        set_check(&client, &ns, job, CheckState::Ready).await;
        wait_phase(&client, &ns, job, &[Succeed], LONG)
            .await
            .unwrap();
    }
}

async fn phases_until(
    client: &kube::Client,
    ns: &str,
    job: &str,
    last: QueueUnitPhase,
    timeout: Duration,
) -> Vec<QueueUnitPhase> {
    e2e::phases_until(client, ns, job, last, timeout)
        .await
        .unwrap()
}

#[tokio::test]
async fn strict_dequeue_succeeds_when_pods_bind_and_fails_when_they_cannot() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let queue = queue_with(
        cp,
        "strict",
        json!({ "strictDequeue": { "timeoutSeconds": 4 } }),
    )
    .await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();

    kubectl_create_job(cp, &ns, &job_yaml("fits", &queue, "1", "3s"))
        .await
        .unwrap();
    let seen = phases_until(&client, &ns, "fits", Succeed, LONG).await;
    let pos = |p| seen.iter().position(|s| *s == p);
    assert!(
        pos(SchedSucceed).is_some(),
        "SchedSucceed reached: {seen:?}"
    );
    assert!(
        pos(SchedSucceed) < pos(Running) && pos(Running) < pos(Succeed),
        "{seen:?}"
    );
    assert!(
        !seen.contains(&Dequeued),
        "strict mode goes through SchedReady, not Dequeued: {seen:?}"
    );

    // More CPU than any node has: unschedulable → SchedFailed → backoff.
    kubectl_create_job(cp, &ns, &job_yaml("too-big", &queue, "33", "1s"))
        .await
        .unwrap();
    let seen = phases_until(&client, &ns, "too-big", TimeoutBackoff, LONG).await;
    assert!(seen.contains(&SchedReady), "{seen:?}");
    assert!(
        seen.contains(&SchedFailed) || seen.last() == Some(&TimeoutBackoff),
        "{seen:?}"
    );
    assert_eq!(seen.last(), Some(&TimeoutBackoff), "{seen:?}");
    let status = unit(&client, &ns, "too-big").await.status.unwrap();
    assert!(status.admissions.is_empty(), "quota freed");
    assert!(status.message.unwrap().contains("SchedFailed"));
    assert!(status.requeue_state.unwrap().requeue_at.is_some());
    fixtures::eventually(Duration::from_secs(10), || async {
        Ok(suspended(&client, &ns, "too-big").await)
    })
    .await
    .expect("re-suspended");
    // Its pods go away with the suspension.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(Duration::from_secs(20), || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels("job-name=too-big"))
            .await?;
        Ok(list.items.is_empty())
    })
    .await
    .expect("the suspended job's pods are gone");
}

#[tokio::test]
async fn a_job_not_running_within_the_timeout_is_sent_back() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let queue = queue_with(cp, "slow", json!({ "runningTimeoutSeconds": 3 })).await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    kubectl_create_job(cp, &ns, &job_yaml("stuck", &queue, "33", "1s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "stuck", &[Dequeued], LONG)
        .await
        .unwrap();
    wait_phase(
        &client,
        &ns,
        "stuck",
        &[TimeoutBackoff],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let status = unit(&client, &ns, "stuck").await.status.unwrap();
    assert!(status.admissions.is_empty());
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Evicted" && c.reason == "RunningTimeout")
    );
    fixtures::eventually(Duration::from_secs(10), || async {
        Ok(suspended(&client, &ns, "stuck").await)
    })
    .await
    .expect("re-suspended");
}
