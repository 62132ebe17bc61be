//! Crashing and restarting the scheduler in the middle of reclaim, of
//! admission checks and of strict dequeue (tier 2, kwok nodes of 32 CPU):
//! the restarted scheduler rebuilds its state from the API alone, loses no
//! job, never holds more than a quota allows and leaks no quota (architecture §3
//! rule 2).
//!
//! The tests take turns (one lock for the binary): each runs and crashes its
//! own scheduler, and two leaders on different Leases would both schedule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_queue_api::QueueUnit;
use koord_queue_api::queue_unit::{CheckState, QueueUnitPhase, QueueUnitPhase::*};
use koord_queue_tests::e2e::{
    self, UsageMonitor, create_quota, describe_units, job_yaml, job_yaml_on_nodes,
    kubectl_create_job, status_of, wait_phase,
};
use koord_queue_tests::scheduler::{self, SchedulerReplica};
use koord_queue_tests::{ControlPlane, fixtures, metrics, shared, webhook};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::{Mutex, MutexGuard, OnceCell};

const LONG: Duration = Duration::from_secs(60);

/// The control plane with the webhook registered, and this test's turn.
async fn setup() -> (&'static ControlPlane, MutexGuard<'static, ()>) {
    static TURN: Mutex<()> = Mutex::const_new(());
    static WEBHOOK: OnceCell<()> = OnceCell::const_new();
    let turn = TURN.lock().await;
    let cp = shared::tier2().await.unwrap();
    WEBHOOK
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
        })
        .await;
    (cp, turn)
}

/// Waits until job `name`'s unit is in one of `phases`; the units of the
/// namespace are listed on failure.
async fn reach(client: &kube::Client, ns: &str, name: &str, phases: &[QueueUnitPhase]) {
    reach_within(client, ns, name, phases, LONG).await;
}

async fn reach_within(
    client: &kube::Client,
    ns: &str,
    name: &str,
    phases: &[QueueUnitPhase],
    timeout: Duration,
) {
    if let Err(e) = wait_phase(client, ns, name, phases, timeout).await {
        panic!("{e:#}\nunits:\n{}", describe_units(client, ns).await);
    }
}

async fn status(client: &kube::Client, ns: &str, job: &str) -> koord_queue_api::QueueUnitStatus {
    status_of(client, ns, job).await.unwrap()
}

async fn suspended(client: &kube::Client, ns: &str, job: &str) -> bool {
    e2e::job_suspended(client, ns, job).await.unwrap()
}

/// Job `job` is sent back: TimeoutBackoff holding nothing, its job suspended
/// again and its pods gone.
async fn sent_back(client: &kube::Client, ns: &str, job: &str) -> koord_queue_api::QueueUnitStatus {
    reach(client, ns, job, &[TimeoutBackoff]).await;
    let status = status(client, ns, job).await;
    assert!(
        status.admissions.is_empty(),
        "{job}: no quota held in backoff"
    );
    assert!(
        status
            .requeue_state
            .as_ref()
            .and_then(|r| r.requeue_at.as_ref())
            .is_some(),
        "{job}: a requeue time"
    );
    fixtures::eventually(Duration::from_secs(10), || async {
        e2e::job_suspended(client, ns, job).await
    })
    .await
    .unwrap_or_else(|_| panic!("{job}: suspended again"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    fixtures::eventually(Duration::from_secs(20), || async {
        Ok(pods
            .list(&ListParams::default().labels(&format!("job-name={job}")))
            .await?
            .items
            .is_empty())
    })
    .await
    .unwrap_or_else(|_| panic!("{job}: its pods are gone"));
    status
}

/// Every job finished and released exactly what it held: every unit
/// Succeed with no admissions, nothing held in `ns`, and the scheduler's own
/// view of each of `quotas` back to zero.
async fn nothing_held(
    client: &kube::Client,
    ns: &str,
    jobs: &[&str],
    quotas: &[&str],
    scheduler: &SchedulerReplica,
) {
    for job in jobs {
        reach_within(client, ns, job, &[Succeed], Duration::from_secs(180)).await;
        let status = status(client, ns, job).await;
        assert!(status.admissions.is_empty(), "{job} holds nothing");
    }
    assert_eq!(e2e::held_cpu(client, ns, quotas).await.unwrap(), 0);
    for quota in quotas {
        metrics::wait_scheduler_quota_used(
            scheduler.admin_addr,
            quota,
            "cpu",
            0.0,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn a_restart_during_reclaim_loses_no_job_and_leaks_no_quota() {
    let (cp, _turn) = setup().await;
    let client = cp.client().await.unwrap();
    let args = || scheduler::test_args("restart-reclaim");
    let first = scheduler::start_leader(cp, args()).await.unwrap();
    // The design's worked example: capacity 10 (the parent's max), A min 4,
    // B min 6.
    create_quota(&client, "rr", None, true, "10", "10", None)
        .await
        .unwrap();
    create_quota(&client, "rr-a", Some("rr"), false, "4", "10", None)
        .await
        .unwrap();
    create_quota(&client, "rr-b", Some("rr"), false, "6", "10", None)
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(
        client.clone(),
        ns.clone(),
        vec!["rr-a".into(), "rr-b".into()],
    );

    // A borrows: three 3-CPU jobs run (9 CPU, 5 beyond A's min).
    for name in ["a1", "a2", "a3"] {
        kubectl_create_job(cp, &ns, &job_yaml(name, "rr-a", "3", "20s"))
            .await
            .unwrap();
        reach(&client, &ns, name, &[Running]).await;
        // Distinct release times (the API keeps seconds): reclaim order.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }

    // B's 6-CPU job is guaranteed and needs 5 CPU back: two of A's jobs are
    // reclaimed. Crash the scheduler the moment the first victim is sent
    // back, while the guaranteed job still waits (or is being released).
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    let first_victim = tokio::spawn(async move {
        let stream = watcher(units, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(unit) = stream.try_next().await? {
            let status = unit.status.unwrap_or_default();
            if status.phase == Some(TimeoutBackoff) {
                return anyhow::Ok((
                    unit.spec.consumer_ref.name.unwrap_or_default(),
                    status.message.unwrap_or_default(),
                ));
            }
        }
        anyhow::bail!("the watch ended")
    });
    // Let the watch start before the guaranteed job exists.
    tokio::time::sleep(Duration::from_millis(500)).await;
    kubectl_create_job(cp, &ns, &job_yaml("b1", "rr-b", "6", "10s"))
        .await
        .unwrap();
    let (victim, message) = tokio::time::timeout(LONG, first_victim)
        .await
        .expect("a victim is sent back")
        .unwrap()
        .unwrap();
    first.kill().await.unwrap();
    let b1_at_crash = e2e::phase_of(&client, &ns, "b1").await.unwrap();
    tracing::info!(%victim, ?b1_at_crash, "scheduler crashed during reclaim");
    assert!(
        ["a2", "a3"].contains(&victim.as_str()),
        "the most recently released of A are reclaimed, not {victim}"
    );
    assert!(message.contains("reclaimed"), "{victim}: {message}");

    let second = scheduler::start_leader(cp, args()).await.unwrap();
    // The guaranteed job is released (once), and A keeps its min.
    reach(&client, &ns, "b1", &[Running, Succeed]).await;
    assert_eq!(status(&client, &ns, "b1").await.attempts, Some(1));
    let a1 = status(&client, &ns, "a1").await;
    assert!(
        matches!(a1.phase, Some(Running | Succeed)) && a1.requeue_state.is_none(),
        "a1 is within A's min and never reclaimed: {a1:?}"
    );
    for name in ["a2", "a3"] {
        let status = status(&client, &ns, name).await;
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Evicted" && c.reason == "Reclaimed"),
            "{name} was reclaimed: {status:?}"
        );
    }

    // Nothing lost: the victims come back after their backoff and complete.
    nothing_held(
        &client,
        &ns,
        &["a1", "a2", "a3", "b1"],
        &["rr-a", "rr-b", "rr"],
        &second,
    )
    .await;
    assert!(
        monitor.max() <= 10_000,
        "held {}m CPU of a 10 CPU capacity",
        monitor.max()
    );
    second.stop().await.unwrap();
}

#[tokio::test]
async fn a_restart_during_admission_checks_keeps_reservations_and_backoffs() {
    let (cp, _turn) = setup().await;
    let client = cp.client().await.unwrap();
    let args = || scheduler::test_args("restart-checks");
    let first = scheduler::start_leader(cp, args()).await.unwrap();
    let queue = e2e::queue_with(
        cp,
        "rc",
        "6",
        json!({ "admissionChecks": [{ "name": "provision" }] }),
    )
    .await
    .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec![queue.clone()]);

    // Two units reserve 4 of 6 CPU; their checks are pending.
    for name in ["c1", "c2"] {
        kubectl_create_job(cp, &ns, &job_yaml(name, &queue, "2", "3s"))
            .await
            .unwrap();
        reach(&client, &ns, name, &[Reserved]).await;
    }

    // Crash; a 4-CPU job arrives while no scheduler runs (the webhook
    // queues it), then the new scheduler starts.
    first.kill().await.unwrap();
    kubectl_create_job(cp, &ns, &job_yaml("big", &queue, "4", "3s"))
        .await
        .unwrap();
    let second = scheduler::start_leader(cp, args()).await.unwrap();
    reach(&client, &ns, "big", &[Enqueued]).await;

    // The reservations survive: still Reserved, counted (4 + 4 > 6, so the
    // big job is not released), their jobs held, their checks pending.
    metrics::wait_scheduler_quota_used(second.admin_addr, &queue, "cpu", 4000.0, LONG)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["c1", "c2"] {
        let status = status(&client, &ns, name).await;
        assert_eq!(status.phase, Some(Reserved), "{name}");
        assert!(!status.admissions.is_empty(), "{name} still holds quota");
        assert_eq!(status.admission_checks.len(), 1, "{name}");
        assert_eq!(status.admission_checks[0].state, CheckState::Pending);
        assert!(suspended(&client, &ns, name).await, "{name} still held");
    }
    assert_eq!(
        e2e::phase_of(&client, &ns, "big").await.unwrap(),
        Some(Enqueued),
        "4 CPU reserved + 4 > 6: the big job waits\n{}",
        describe_units(&client, &ns).await
    );
    assert!(suspended(&client, &ns, "big").await);

    // Ready: released and run by the new scheduler, exactly once.
    e2e::set_check(&client, &ns, "c1", CheckState::Ready)
        .await
        .unwrap();
    reach(&client, &ns, "c1", &[Dequeued, Running, Succeed]).await;
    assert_eq!(status(&client, &ns, "c1").await.attempts, Some(1));

    // Retry: quota freed, backoff; the big job gets the room.
    e2e::set_check(&client, &ns, "c2", CheckState::Retry)
        .await
        .unwrap();
    let backoff = sent_back(&client, &ns, "c2").await;
    let requeue = backoff.requeue_state.unwrap();
    assert_eq!(requeue.count, 1);
    let requeue_at = requeue.requeue_at.unwrap().0;
    reach(&client, &ns, "big", &[Reserved]).await;

    // Crash during the backoff: its end comes from the API (requeueAt).
    let third = scheduler::crash_and_restart(cp, &second, args())
        .await
        .unwrap();
    e2e::set_check(&client, &ns, "big", CheckState::Ready)
        .await
        .unwrap();
    reach(&client, &ns, "c2", &[Reserved]).await;
    assert!(
        k8s_openapi::jiff::Timestamp::now() >= requeue_at,
        "c2 not back before requeueAt"
    );
    let status2 = status(&client, &ns, "c2").await;
    assert_eq!(status2.admission_checks[0].state, CheckState::Pending);
    assert_eq!(status2.requeue_state.unwrap().count, 1);
    e2e::set_check(&client, &ns, "c2", CheckState::Ready)
        .await
        .unwrap();

    nothing_held(&client, &ns, &["c1", "c2", "big"], &[&queue], &third).await;
    assert!(
        monitor.max() <= 6_000,
        "held {}m CPU under a 6 CPU quota",
        monitor.max()
    );
    third.stop().await.unwrap();
}

/// Sets label `key=value` on node `node`, or removes `key` (`None`).
async fn label_node(client: &kube::Client, node: &str, key: &str, value: Option<&str>) {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { key: value } } })),
        )
        .await
        .unwrap();
}

/// Job `job`'s pod exists and the cluster scheduler could not bind it.
async fn pod_pending_unschedulable(client: &kube::Client, ns: &str, job: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    fixtures::eventually(LONG, || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("job-name={job}")))
            .await?;
        Ok(list.items.iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                    })
                })
        }))
    })
    .await
    .unwrap_or_else(|_| panic!("{job}: its pod waits unschedulable"));
}

#[tokio::test]
async fn a_restart_during_strict_dequeue_finishes_what_was_started() {
    let (cp, _turn) = setup().await;
    let client = cp.client().await.unwrap();
    let args = || scheduler::test_args("restart-strict");
    let first = scheduler::start_leader(cp, args()).await.unwrap();
    // Pods stay pending until a node carries this label: "fit" once the test
    // labels a node, "unfit" never.
    let label = format!(
        "koord-queue.test/{}",
        fixtures::unique_name("restart-strict")
    );
    let fit_queue = e2e::queue_with(
        cp,
        "rsf",
        "10",
        json!({ "strictDequeue": { "timeoutSeconds": 300 } }),
    )
    .await
    .unwrap();
    let unfit_queue = e2e::queue_with(
        cp,
        "rsu",
        "10",
        json!({ "strictDequeue": { "timeoutSeconds": 12 } }),
    )
    .await
    .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let quotas = [fit_queue.as_str(), unfit_queue.as_str()];

    kubectl_create_job(
        cp,
        &ns,
        &job_yaml_on_nodes("fit", &fit_queue, "2", "3s", &label, "yes"),
    )
    .await
    .unwrap();
    kubectl_create_job(
        cp,
        &ns,
        &job_yaml_on_nodes("unfit", &unfit_queue, "2", "1s", &label, "never"),
    )
    .await
    .unwrap();
    for job in ["fit", "unfit"] {
        reach(&client, &ns, job, &[SchedReady]).await;
        pod_pending_unschedulable(&client, &ns, job).await;
    }

    // Crash while both wait for their pods to be bound.
    let second = scheduler::crash_and_restart(cp, &first, args())
        .await
        .unwrap();
    let fit = status(&client, &ns, "fit").await;
    assert_eq!(fit.phase, Some(SchedReady), "fit still waits for its pod");
    assert!(!fit.admissions.is_empty(), "fit still holds its quota");
    metrics::wait_scheduler_quota_used(second.admin_addr, &fit_queue, "cpu", 2000.0, LONG)
        .await
        .unwrap();

    // The pod can be bound now: SchedSucceed, Running, Succeed.
    let node = cp.nodes().first().expect("a fake node").clone();
    label_node(&client, &node, &label, Some("yes")).await;
    let seen = e2e::phases_until(&client, &ns, "fit", Succeed, LONG)
        .await
        .unwrap();
    let pos = |p| seen.iter().position(|s| *s == p);
    assert!(
        pos(SchedSucceed).is_some(),
        "SchedSucceed reached: {seen:?}"
    );
    assert!(
        pos(SchedSucceed) < pos(Running) && pos(Running) < pos(Succeed),
        "{seen:?}"
    );
    assert_eq!(status(&client, &ns, "fit").await.attempts, Some(1));

    // The unfit job's timer ran on from its release: SchedFailed, sent back.
    let unfit = sent_back(&client, &ns, "unfit").await;
    assert!(
        unfit
            .message
            .as_deref()
            .unwrap_or("")
            .contains("SchedFailed"),
        "{unfit:?}"
    );
    assert!(
        unfit
            .conditions
            .iter()
            .any(|c| c.type_ == "Evicted" && c.reason == "SchedulingTimeout"),
        "{unfit:?}"
    );

    // A crash in the middle of sending a job back: SchedFailed is written
    // first, then the job is held, then TimeoutBackoff. "cut1" crashed
    // before its job was held, "cut2" after. The new scheduler finishes both.
    for job in ["cut1", "cut2"] {
        kubectl_create_job(
            cp,
            &ns,
            &job_yaml_on_nodes(job, &unfit_queue, "2", "1s", &label, "never"),
        )
        .await
        .unwrap();
        reach(&client, &ns, job, &[SchedReady]).await;
    }
    second.kill().await.unwrap();
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    for job in ["cut1", "cut2"] {
        let unit = e2e::unit_of_job(&client, &ns, job).await.unwrap().unwrap();
        units
            .patch_status(
                unit.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": {
                    "phase": "SchedFailed",
                    "message": "SchedFailed: 0 of 1 pods bound after 12s; suspended again, quota released; back in queue rsu-q at 2026-01-01T00:00:00Z (attempt 1)",
                } })),
            )
            .await
            .unwrap();
    }
    Api::<Job>::namespaced(client.clone(), &ns)
        .patch(
            "cut2",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspend": true } })),
        )
        .await
        .unwrap();
    let third = scheduler::start_leader(cp, args()).await.unwrap();
    for job in ["cut1", "cut2"] {
        let status = sent_back(&client, &ns, job).await;
        assert_eq!(status.requeue_state.unwrap().count, 1, "{job}");
        assert!(
            status
                .message
                .as_deref()
                .unwrap_or("")
                .contains("SchedFailed"),
            "{job}: {:?}",
            status.message
        );
    }

    // Nothing lost: once a node can take them, the jobs sent back return
    // after their backoff and complete; then nothing is held.
    let other = cp.nodes().get(1).expect("a second fake node").clone();
    label_node(&client, &other, &label, Some("never")).await;
    nothing_held(
        &client,
        &ns,
        &["fit", "unfit", "cut1", "cut2"],
        &quotas,
        &third,
    )
    .await;
    for node in [&node, &other] {
        label_node(&client, node, &label, None).await;
    }
    third.stop().await.unwrap();
}
