//! End-to-end for the reserving head (issue 19, docs/quota.md "A reserving
//! head"): in a `Priority` queue a large unit that does not fit reserves at
//! once from a priority on; a smaller job that would fit in the room it
//! waits for is held back behind it; once capacity frees, the large one is
//! released first. On batch Jobs, and with a Kubeflow PyTorchJob as the
//! reserving head (no training operator runs here: its release is its
//! unsuspend, read on the job and its unit). Priority preemption is in
//! `preemption_e2e.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_tests::e2e::{self, kubectl_create_job, wait_phase};
use koord_queue_tests::kinds::{job_and_unit, kind_api, pytorch_job, pytorch_state};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared};
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);
const HIGH: &str = "kq-reserve-high";

async fn setup() -> &'static ControlPlane {
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            scheduler::start_with_frameworks(cp, "reserve-e2e-scheduler", &[(HIGH, 1000)])
                .await
                .unwrap()
        })
        .await;
    cp
}

/// A leaf queue of `max_cpu` whose head reserves at once from priority 1000.
async fn reserving_queue(cp: &ControlPlane, name: &str, max_cpu: &str) -> String {
    e2e::queue_with(
        cp,
        name,
        max_cpu,
        json!({ "queuePolicy": "Priority", "reserveHead": { "abovePriority": 1000 } }),
    )
    .await
    .unwrap()
}

async fn message(client: &kube::Client, ns: &str, kind: &str, name: &str) -> String {
    job_and_unit(client, ns, kind, name)
        .await
        .1
        .and_then(|u| u.status?.message)
        .unwrap_or_default()
}

/// Waits until `kind/name`'s unit message contains `text`.
async fn wait_message(client: &kube::Client, ns: &str, kind: &str, name: &str, text: &str) {
    let waited = fixtures::eventually(LONG, || async {
        Ok(message(client, ns, kind, name).await.contains(text))
    })
    .await;
    if let Err(e) = waited {
        let last = message(client, ns, kind, name).await;
        panic!("{name}'s message never said {text:?}: {e:#}; last: {last:?}");
    }
}

/// When `kind/name`'s unit was released.
async fn released_at(client: &kube::Client, ns: &str, kind: &str, name: &str) -> String {
    let unit = job_and_unit(client, ns, kind, name).await.1;
    let at = unit.and_then(|u| u.status?.last_allocate_time);
    serde_json::to_value(at.expect("a released unit records when"))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// Creates the Job `running` of `yaml` and waits until it runs (it holds
/// the room the reserving head then waits for).
async fn start_running(cp: &ControlPlane, client: &kube::Client, ns: &str, yaml: &str) {
    kubectl_create_job(cp, ns, yaml).await.unwrap();
    wait_phase(client, ns, "running", &[Running], LONG)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_reserving_job_keeps_freed_capacity_and_is_released_first() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let leaf = reserving_queue(cp, "resjob", "4").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();

    // 3 of 4 CPU run for a while.
    start_running(
        cp,
        &client,
        &ns,
        &e2e::job_yaml("running", &leaf, "3", "20s"),
    )
    .await;
    // The large job (2 CPU, priority 1000) does not fit and reserves at once.
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("large", &leaf, "2", "1s", HIGH),
    )
    .await
    .unwrap();
    wait_message(&client, &ns, "Job", "large", "reserving").await;
    // A 1-CPU job would fit (3 + 1 ≤ 4) but waits behind the reserving head.
    kubectl_create_job(cp, &ns, &e2e::job_yaml("small", &leaf, "1", "1s"))
        .await
        .unwrap();
    wait_message(&client, &ns, "Job", "small", "waiting behind").await;
    assert!(e2e::job_suspended(&client, &ns, "small").await.unwrap());
    assert_eq!(
        e2e::phase_of(&client, &ns, "large").await.unwrap(),
        Some(Enqueued)
    );

    // Once `running` ends, the large job goes first; the small one after it.
    wait_phase(&client, &ns, "large", &[Running, Succeed], LONG)
        .await
        .unwrap();
    wait_phase(&client, &ns, "small", &[Succeed], LONG)
        .await
        .unwrap();
    let large = released_at(&client, &ns, "Job", "large").await;
    let small = released_at(&client, &ns, "Job", "small").await;
    // RFC 3339 in UTC: the text orders as the time.
    assert!(
        large <= small,
        "the reserving head is released first: large at {large}, small at {small}"
    );
}

#[tokio::test]
async fn a_reserving_pytorchjob_is_not_passed_by_a_smaller_job() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let leaf = reserving_queue(cp, "respt", "4").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    start_running(
        cp,
        &client,
        &ns,
        &e2e::job_yaml("running", &leaf, "3", "20s"),
    )
    .await;

    // A PyTorchJob of a 1-CPU master and a 1-CPU worker at priority 1000.
    kind_api(&client, &ns, "PyTorchJob")
        .create(
            &PostParams::default(),
            &pytorch_job("trainer", &leaf, 1, HIGH),
        )
        .await
        .unwrap();
    wait_message(&client, &ns, "PyTorchJob", "trainer", "reserving").await;
    kubectl_create_job(cp, &ns, &e2e::job_yaml("small", &leaf, "1", "1s"))
        .await
        .unwrap();
    wait_message(&client, &ns, "Job", "small", "waiting behind").await;
    assert_eq!(
        pytorch_state(&client, &ns, "trainer").await,
        (Some(Enqueued), true)
    );

    // `running` ends: the PyTorchJob is released (unsuspended) while the
    // small job still waits (2 + 1 ≤ 4 lets it follow at once after).
    fixtures::eventually(LONG, || async {
        Ok(!pytorch_state(&client, &ns, "trainer").await.1)
    })
    .await
    .expect("the PyTorchJob is released once capacity frees");
    wait_phase(&client, &ns, "small", &[Running, Succeed], LONG)
        .await
        .unwrap();
    let trainer_at = released_at(&client, &ns, "PyTorchJob", "trainer").await;
    let small_at = released_at(&client, &ns, "Job", "small").await;
    assert!(trainer_at <= small_at, "{trainer_at} then {small_at}");
}

/// [`e2e::job_yaml`] whose Job ends at the latest after `deadline` seconds.
fn bounded_job(name: &str, quota: &str, cpu: &str, run_for: &str, deadline: u32) -> String {
    e2e::with_deadline(&e2e::job_yaml(name, quota, cpu, run_for), deadline)
}

/// EASY backfill: behind a reserving head, a job whose deadline ends before
/// the head can start (the bounded running job's end) is released; one
/// whose deadline ends later waits, and so does one without a deadline.
#[tokio::test]
async fn a_job_that_ends_before_the_head_can_start_is_backfilled() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    // 5 CPU: the two jobs held back would fit beside the backfilled one, so
    // only the reservation keeps them back.
    let leaf = reserving_queue(cp, "resfill", "5").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    // 3 of 5 CPU, ending within 60 s of its release (it completes at 20 s).
    start_running(
        cp,
        &client,
        &ns,
        &bounded_job("running", &leaf, "3", "20s", 60),
    )
    .await;
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("large", &leaf, "3", "1s", HIGH),
    )
    .await
    .unwrap();
    wait_message(&client, &ns, "Job", "large", "reserving").await;
    for yaml in [
        bounded_job("long", &leaf, "1", "1s", 3600),
        e2e::job_yaml("unbounded", &leaf, "1", "1s"),
        bounded_job("short", &leaf, "1", "1s", 30),
    ] {
        kubectl_create_job(cp, &ns, &yaml).await.unwrap();
    }
    // The short one passes (it ends before `running` must have), the
    // others wait behind the head.
    wait_phase(&client, &ns, "short", &[Running, Succeed], LONG)
        .await
        .unwrap();
    for waiting in ["long", "unbounded"] {
        wait_message(&client, &ns, "Job", waiting, "waiting behind").await;
        assert!(e2e::job_suspended(&client, &ns, waiting).await.unwrap());
    }
    assert!(e2e::job_suspended(&client, &ns, "large").await.unwrap());
    let unit = job_and_unit(&client, &ns, "Job", "short").await.1.unwrap();
    assert_eq!(unit.spec.max_run_seconds, Some(30));
    // The head still goes before the two that waited.
    wait_phase(&client, &ns, "large", &[Running, Succeed], LONG)
        .await
        .unwrap();
    let large = released_at(&client, &ns, "Job", "large").await;
    for later in ["long", "unbounded"] {
        wait_phase(&client, &ns, later, &[Running, Succeed], LONG)
            .await
            .unwrap();
        let at = released_at(&client, &ns, "Job", later).await;
        assert!(large <= at, "large at {large}, {later} at {at}");
    }
}
