//! End-to-end for fairness across the tree (issue 44, docs/quota.md
//! "Across the tree"): a reserving head stopped by its parent's max holds
//! back a sibling queue's small job; a high-priority job preempts a
//! borrowing lower-priority job of a sibling quota when the parent is full
//! (`spec.preemption.withinParent`), never the sibling's job within its min.
//! Reclaim for a guaranteed job spares a senior job whose run ends soon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_api::{Queue, keys};
use koord_queue_tests::e2e::{self, kubectl_create_job, wait_phase};
use koord_queue_tests::kinds::job_and_unit;
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);
const HIGH: &str = "kq-siblings-high";
const LOW: &str = "kq-siblings-low";

async fn setup() -> &'static ControlPlane {
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            scheduler::start_with_frameworks(
                cp,
                "siblings-e2e-scheduler",
                &[(HIGH, 1000), (LOW, 10)],
            )
            .await
            .unwrap()
        })
        .await;
    cp
}

/// Parent `<name>` (min = max `cpu`) over leaves `<name>-a` and `<name>-b`
/// of the given mins (max `cpu`), each Queue's spec merged with its `spec`.
/// Returns the two leaves.
async fn siblings(
    cp: &ControlPlane,
    name: &str,
    cpu: &str,
    (min_a, spec_a): (&str, serde_json::Value),
    (min_b, spec_b): (&str, serde_json::Value),
) -> (String, String) {
    let client = cp.client().await.unwrap();
    e2e::create_quota(&client, name, None, true, cpu, cpu, None)
        .await
        .unwrap();
    let queues: Api<Queue> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    let mut leaves = Vec::new();
    for (suffix, min, spec) in [("a", min_a, spec_a), ("b", min_b, spec_b)] {
        let leaf = format!("{name}-{suffix}");
        e2e::create_quota(&client, &leaf, Some(name), false, min, cpu, None)
            .await
            .unwrap();
        fixtures::eventually(Duration::from_secs(15), || async {
            Ok(queues.get_opt(&leaf).await?.is_some())
        })
        .await
        .unwrap();
        queues
            .patch(
                &leaf,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .unwrap();
        leaves.push(leaf);
    }
    // Let the scheduler see the queues' new settings.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (leaves[0].clone(), leaves[1].clone())
}

async fn message(client: &kube::Client, ns: &str, name: &str) -> String {
    job_and_unit(client, ns, "Job", name)
        .await
        .1
        .and_then(|u| u.status?.message)
        .unwrap_or_default()
}

/// Waits until `name`'s message contains every one of `texts`; on failure,
/// says every message it was seen with.
async fn wait_message(client: &kube::Client, ns: &str, name: &str, texts: &[&str]) {
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let waited = fixtures::eventually(LONG, || async {
        let m = message(client, ns, name).await;
        let found = texts.iter().all(|t| m.contains(t));
        if let Ok(mut seen) = seen.lock()
            && seen.last() != Some(&m)
        {
            seen.push(m);
        }
        Ok(found)
    })
    .await;
    if let Err(e) = waited {
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        panic!("{name}'s message never said {texts:?}: {e:#}; seen: {seen:#?}");
    }
}

#[tokio::test]
async fn a_siblings_small_job_waits_behind_another_queues_reserving_head() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let reserving = json!({ "queuePolicy": "Priority", "reserveHead": { "abovePriority": 1000 } });
    let (a, b) = siblings(
        cp,
        "sibres",
        "4",
        ("0", reserving),
        ("0", json!({ "queuePolicy": "Priority" })),
    )
    .await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    // 3 of the parent's 4 CPU run in b for a while.
    kubectl_create_job(cp, &ns, &e2e::job_yaml("running", &b, "3", "20s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "running", &[Running], LONG)
        .await
        .unwrap();
    // a's large job (2 CPU, priority 1000) does not fit under the parent and
    // reserves at once.
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("large", &a, "2", "1s", HIGH),
    )
    .await
    .unwrap();
    wait_message(&client, &ns, "large", &["reserving"]).await;
    // b's small job would fit (3 + 1 ≤ 4) but waits behind a's head, and
    // its message names it (a unit's name is its job's with a suffix) and
    // its queue.
    kubectl_create_job(cp, &ns, &e2e::job_yaml("small", &b, "1", "1s"))
        .await
        .unwrap();
    wait_message(
        &client,
        &ns,
        "small",
        &[
            &format!("waiting behind {ns}/large-"),
            &format!(" of queue {a}, which reserves cpu under quota sibres"),
        ],
    )
    .await;
    assert!(e2e::job_suspended(&client, &ns, "small").await.unwrap());
    // Once `running` ends, both run: the head was not passed.
    wait_phase(&client, &ns, "large", &[Running, Succeed], LONG)
        .await
        .unwrap();
    wait_phase(&client, &ns, "small", &[Running, Succeed], LONG)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_high_priority_job_preempts_a_borrowing_lower_priority_siblings_job() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let preempting = json!({ "queuePolicy": "Priority",
        "preemption": { "withinParent": "LowerPriority", "minRunSeconds": 0 } });
    let (a, b) = siblings(
        cp,
        "sibpre",
        "4",
        ("0", preempting),
        ("2", json!({ "queuePolicy": "Priority" })),
    )
    .await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    // b runs 2 CPU within its min and borrows 2 more: the parent is full.
    for name in ["within-min", "borrowing"] {
        kubectl_create_job(
            cp,
            &ns,
            &e2e::job_yaml_with_priority(name, &b, "2", "300s", LOW),
        )
        .await
        .unwrap();
        wait_phase(&client, &ns, name, &[Running], LONG)
            .await
            .unwrap();
    }
    // a's high-priority job borrows (a's min is 0) and the parent's max
    // stops it: it preempts b's borrowing job, never the one within b's min.
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("hero", &a, "2", "1s", HIGH),
    )
    .await
    .unwrap();
    wait_phase(&client, &ns, "hero", &[Running, Succeed], LONG)
        .await
        .unwrap();
    let sent_back = job_and_unit(&client, &ns, "Job", "borrowing")
        .await
        .1
        .and_then(|u| u.status)
        .and_then(|s| s.requeue_state)
        .map_or(0, |r| r.count);
    // Of b's two jobs of equal priority, the one released last goes first
    // (the victim order: lowest priority, then most recently released).
    assert!(sent_back >= 1, "the borrowing job was preempted");
    assert_eq!(
        e2e::phase_of(&client, &ns, "within-min").await.unwrap(),
        Some(Running),
        "a job within its quota's min is never preempted"
    );
}

/// Reclaim and reservations agree (docs/quota.md): a guaranteed job of low
/// priority reclaims a borrowing job of high priority only when that job's
/// run is not bounded to end soon — the bounded one ends by itself, so the
/// guaranteed job takes the unbounded one even though the bounded one was
/// released last (the order reclaim otherwise follows).
#[tokio::test]
async fn reclaim_spares_a_senior_job_whose_run_ends_soon() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let priority = json!({ "queuePolicy": "Priority" });
    let (a, b) = siblings(
        cp,
        "sibspare",
        "10",
        ("4", priority.clone()),
        ("6", priority),
    )
    .await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    // a runs 6 CPU, 2 above its min: first an unbounded job, then one that
    // its controller ends within 60 s (+ the pod's grace: within 2 minutes).
    // Released in this order: `bounded` is the most recently released.
    e2e::run_in_order(
        cp,
        &client,
        &ns,
        &[
            (
                "unbounded",
                e2e::job_yaml_with_priority("unbounded", &a, "3", "60s", HIGH),
            ),
            (
                "bounded",
                e2e::with_deadline(
                    &e2e::job_yaml_with_priority("bounded", &a, "3", "40s", HIGH),
                    60,
                ),
            ),
        ],
        LONG,
    )
    .await
    .unwrap();
    // b's job lies within b's min but only 4 CPU are free: 2 are reclaimed.
    kubectl_create_job(
        cp,
        &ns,
        &e2e::job_yaml_with_priority("guaranteed", &b, "6", "5s", LOW),
    )
    .await
    .unwrap();
    wait_phase(&client, &ns, "guaranteed", &[Running, Succeed], LONG)
        .await
        .unwrap();
    // Sent back once (its unit's requeue count: a condition or message could
    // already be the next release's by the time it is read).
    let taken = e2e::status_of(&client, &ns, "unbounded").await.unwrap();
    assert_eq!(
        taken.requeue_state.map_or(0, |r| r.count),
        1,
        "the unbounded job was reclaimed: {:?}",
        taken.message
    );
    let spared = e2e::status_of(&client, &ns, "bounded").await.unwrap();
    assert_eq!(spared.phase, Some(Running), "{:?}", spared.message);
    assert_eq!(spared.requeue_state.map_or(0, |r| r.count), 0);
}
