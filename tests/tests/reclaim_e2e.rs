//! The design's worked example (§4.4) step by step on kwok nodes: guaranteed
//! jobs reclaim what others borrow, the most recently released first; totals
//! never exceed the capacity; every job eventually completes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_tests::e2e::{
    self, UsageMonitor, create_quota, job_yaml, kubectl_create_job, wait_phase,
};
use koord_queue_tests::{fixtures, scheduler, shared, webhook};
use kube::api::{Api, ListParams};

const LONG: Duration = Duration::from_secs(60);

async fn reclaimed(client: &kube::Client, ns: &str, job: &str) {
    if let Err(e) = wait_phase(client, ns, job, &[TimeoutBackoff], LONG).await {
        let units = Api::<koord_queue_api::QueueUnit>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap();
        let states: Vec<String> = units
            .items
            .iter()
            .map(|u| {
                format!(
                    "{}: {:?}",
                    u.spec.consumer_ref.name.clone().unwrap_or_default(),
                    u.status.as_ref().map(|s| (s.phase, s.message.clone()))
                )
            })
            .collect();
        panic!("{e:#}; units: {states:#?}");
    }
    let status = e2e::unit_of_job(client, ns, job)
        .await
        .unwrap()
        .unwrap()
        .status
        .unwrap();
    assert!(status.admissions.is_empty(), "{job}: quota freed");
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or("")
            .contains("reclaimed"),
        "{job}: {:?}",
        status.message
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Evicted" && c.reason == "Reclaimed")
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    fixtures::eventually(Duration::from_secs(10), || async {
        Ok(jobs.get(job).await?.spec.unwrap().suspend == Some(true))
    })
    .await
    .expect("the reclaimed job is suspended again");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    fixtures::eventually(Duration::from_secs(20), || async {
        Ok(pods
            .list(&ListParams::default().labels(&format!("job-name={job}")))
            .await?
            .items
            .is_empty())
    })
    .await
    .expect("its pods are gone");
}

#[tokio::test]
async fn the_worked_example_reclaims_borrowed_quota() {
    let cp = shared::tier2().await.unwrap();
    webhook::start_and_register(cp).await.unwrap();
    let _scheduler = scheduler::start_leader(cp, scheduler::test_args("reclaim-scheduler"))
        .await
        .unwrap();
    let client = cp.client().await.unwrap();
    // Capacity 10 CPU (the parent's max); team-a min 4, team-b min 6.
    create_quota(&client, "wex", None, true, "10", "10", None)
        .await
        .unwrap();
    create_quota(&client, "wex-a", Some("wex"), false, "4", "10", None)
        .await
        .unwrap();
    create_quota(&client, "wex-b", Some("wex"), false, "6", "10", None)
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(
        client.clone(),
        ns.clone(),
        vec!["wex-a".into(), "wex-b".into()],
    );

    // 1. A: three 3-CPU jobs, released in order a1, a2, a3 (9 CPU; A borrows 5).
    let a = ["a1", "a2", "a3"].map(|name| (name, job_yaml(name, "wex-a", "3", "40s")));
    e2e::run_in_order(cp, &client, &ns, &a, LONG).await.unwrap();
    // 2. B: 4 CPU, guaranteed: A's most recently released job (a3) is reclaimed.
    kubectl_create_job(cp, &ns, &job_yaml("b1", "wex-b", "4", "20s"))
        .await
        .unwrap();
    reclaimed(&client, &ns, "a3").await;
    wait_phase(&client, &ns, "b1", &[Running], LONG)
        .await
        .unwrap();
    assert_eq!(
        e2e::phase_of(&client, &ns, "a2").await.unwrap(),
        Some(Running)
    );
    // 3. B: 2 CPU, still guaranteed: A's next most recent (a2) is reclaimed.
    kubectl_create_job(cp, &ns, &job_yaml("b2", "wex-b", "2", "20s"))
        .await
        .unwrap();
    reclaimed(&client, &ns, "a2").await;
    wait_phase(&client, &ns, "b2", &[Running], LONG)
        .await
        .unwrap();
    assert_eq!(
        e2e::phase_of(&client, &ns, "a1").await.unwrap(),
        Some(Running),
        "A keeps its min"
    );
    // 4. A: 1 CPU within its min (3 + 1 <= 4): released.
    kubectl_create_job(cp, &ns, &job_yaml("a4", "wex-a", "1", "20s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "a4", &[Running], LONG)
        .await
        .unwrap();
    // 5. A: 3 CPU, borrowing with no idle capacity: waits, nothing reclaimed.
    kubectl_create_job(cp, &ns, &job_yaml("a5", "wex-a", "3", "5s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "a5", &[Enqueued], LONG)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        e2e::phase_of(&client, &ns, "a5").await.unwrap(),
        Some(Enqueued)
    );
    for name in ["a1", "a4", "b1", "b2"] {
        assert_eq!(
            e2e::phase_of(&client, &ns, name).await.unwrap(),
            Some(Running),
            "{name} untouched"
        );
    }

    // Nothing is lost: once capacity frees up every job completes.
    for name in ["a1", "a2", "a3", "a4", "a5", "b1", "b2"] {
        wait_phase(&client, &ns, name, &[Succeed], Duration::from_secs(180))
            .await
            .unwrap();
    }
    assert!(
        monitor.max() <= 10_000,
        "held {}m CPU of a 10 CPU capacity",
        monitor.max()
    );
}
