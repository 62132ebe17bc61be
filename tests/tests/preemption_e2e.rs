//! End-to-end priority preemption inside a quota (`spec.preemption.withinQuota:
//! LowerPriority`, docs/quota.md): a high-priority job that does not fit
//! sends back just enough lower-priority released jobs of its quota — batch
//! Jobs, and a Kubeflow PyTorchJob held again by its own suspend field (no
//! training operator runs here: its hold is read on the job and its unit) —
//! and runs, the quota never holding more than its max. Pods preempted one by
//! one are in `pods_e2e.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnitPhase::{Running, Succeed, TimeoutBackoff};
use koord_queue_tests::e2e::{self, UsageMonitor, kubectl_create_job, wait_phase};
use koord_queue_tests::kinds::{job_and_unit, kind_api, pytorch_job, pytorch_state};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);
const LOW: &str = "kq-preempt-low";
const HIGH: &str = "kq-preempt-high";

/// A queue of `max_cpu` that preempts lower priorities within its quota at once.
async fn preempting_queue(cp: &ControlPlane, name: &str, max_cpu: &str) -> String {
    e2e::queue_with(
        cp,
        name,
        max_cpu,
        json!({ "preemption": { "withinQuota": "LowerPriority", "minRunSeconds": 0 } }),
    )
    .await
    .unwrap()
}

async fn setup() -> &'static ControlPlane {
    // The scheduler replica lives as long as the test binary.
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            let classes = [(LOW, 10), (HIGH, 1000)];
            scheduler::start_with_frameworks(cp, "preemption-e2e-scheduler", &classes)
                .await
                .unwrap()
        })
        .await;
    cp
}

/// Two low-priority Jobs of 2 CPU run in a 4-CPU quota; a high-priority
/// one of 2 CPU preempts the most recently released (the fewest victims),
/// whose unit goes to TimeoutBackoff with the reason Preempted and whose
/// job gets an Event naming the preemptor, and runs.
#[tokio::test]
async fn a_higher_priority_job_preempts_lower_ones_in_its_quota() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let leaf = preempting_queue(cp, "pre", "4").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec![leaf.clone()]);
    // Distinct release times: the most recent goes first.
    let lows = ["low-a", "low-b"].map(|name| {
        (
            name,
            e2e::job_yaml_with_priority(name, &leaf, "2", "1h", LOW),
        )
    });
    e2e::run_in_order(cp, &client, &ns, &lows, LONG)
        .await
        .unwrap();
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("hero", &leaf, "2", "1h", HIGH),
    )
    .await
    .unwrap();
    wait_phase(&client, &ns, "hero", &[Running], LONG)
        .await
        .unwrap();
    let b = e2e::status_of(&client, &ns, "low-b").await.unwrap();
    assert_eq!(b.phase, Some(TimeoutBackoff), "{b:?}");
    assert!(
        b.message
            .as_deref()
            .unwrap_or_default()
            .contains("preempted by"),
        "{b:?}"
    );
    assert!(
        b.conditions.iter().any(|c| c.reason == "Preempted"),
        "{:?}",
        b.conditions
    );
    assert_eq!(
        e2e::phase_of(&client, &ns, "low-a").await.unwrap(),
        Some(Running)
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(events
            .list(&Default::default())
            .await?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Preempted")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("low-b")
                    && e.note.as_deref().unwrap_or_default().contains("/hero")
            }))
    })
    .await
    .expect("an Event on the victim names the preemptor");
    assert!(
        monitor.max() <= 4000,
        "quota held {} m > 4 CPU",
        monitor.max()
    );
}

/// Priority preemption on a Kubeflow kind: a high-priority Job that does
/// not fit preempts a released lower-priority PyTorchJob of its quota,
/// which is held again (`runPolicy.suspend` and the annotation) and sent
/// back with the reason Preempted.
#[tokio::test]
async fn a_higher_priority_job_preempts_a_pytorchjob() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let leaf = preempting_queue(cp, "prept", "4").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    kind_api(&client, &ns, "PyTorchJob")
        .create(
            &PostParams::default(),
            &pytorch_job("trainer", &leaf, 2, LOW),
        )
        .await
        .unwrap();
    fixtures::eventually(LONG, || async {
        Ok(!pytorch_state(&client, &ns, "trainer").await.1)
    })
    .await
    .expect("the PyTorchJob is released (3 of 4 CPU)");
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("hero", &leaf, "2", "1s", HIGH),
    )
    .await
    .unwrap();
    wait_phase(&client, &ns, "hero", &[Running, Succeed], LONG)
        .await
        .unwrap();
    let (job, unit) = job_and_unit(&client, &ns, "PyTorchJob", "trainer").await;
    assert_eq!(job["spec"]["runPolicy"]["suspend"], json!(true), "{job}");
    assert_eq!(
        job["metadata"]["annotations"][keys::SUSPEND_ANNOTATION],
        json!("true")
    );
    let status = unit.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(TimeoutBackoff), "{status:?}");
    assert!(
        status.conditions.iter().any(|c| c.reason == "Preempted"),
        "{:?}",
        status.conditions
    );
}
