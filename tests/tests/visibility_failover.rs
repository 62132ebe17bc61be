//! Every replica answers the visibility API (issue 39): a standby answers
//! from its own state as the leader does — the same backlog, the same
//! places, the reason the leader published — and, when the leader dies and
//! it takes over, goes on answering, now from what it decides. Asked
//! directly as the aggregation layer asks (the front proxy's certificate,
//! the user in headers), so each replica is asked by itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::queue_unit::QueueUnitPhase::{Enqueued, Running};
use koord_queue_tests::e2e::{self, job_yaml, kubectl_create_job, wait_phase};
use koord_queue_tests::visibility::{self, names, queue_path};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, webhook};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

/// What a replica answers for `path`, asked directly as the aggregation
/// layer asks (the front proxy's certificate, the user in headers).
fn ask_directly(cp: &ControlPlane, replica: &scheduler::SchedulerReplica, path: &str) -> Value {
    let pki = cp.pki();
    let cert = std::fs::read_to_string(&pki.front_proxy_cert).unwrap();
    let key = std::fs::read_to_string(&pki.front_proxy_key).unwrap();
    let mut conn = koord_queue_tests::https::Connection::open(
        replica.visibility_addr.expect("served"),
        pki.ca.cert_pem(),
        Some((&cert, &key)),
    )
    .unwrap();
    let (code, body) = conn
        .get(
            path,
            &[
                ("X-Remote-User", koord_queue_tests::pki::ADMIN_USER),
                ("X-Remote-Group", "system:masters"),
            ],
        )
        .unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn a_standby_answers_as_the_leader_and_goes_on_answering_when_it_leads() {
    let cp = shared::tier2().await.unwrap();
    webhook::start_and_register(cp).await.unwrap();
    let lease = "visibility-failover";
    let args = || visibility::with_visibility(scheduler::test_args(lease), cp).unwrap();
    let leader = scheduler::start_leader(cp, args()).await.unwrap();
    let standby = scheduler::start(cp, args()).await.unwrap();
    assert!(!standby.is_leader());
    let admin = cp.client().await.unwrap();
    let (quota, ns, _) = e2e::tenant_with_quota(cp, "failover", "1").await.unwrap();
    let jobs = ["j1", "j2", "j3", "j4"];
    for job in jobs {
        kubectl_create_job(cp, &ns, &job_yaml(job, &quota, "1", "1h"))
            .await
            .unwrap();
        // Distinct creation seconds: the serving order is the creation order.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    wait_phase(&admin, &ns, "j1", &[Running], LONG)
        .await
        .unwrap();
    let mut units = Vec::new();
    for job in jobs {
        if job != "j1" {
            wait_phase(&admin, &ns, job, &[Enqueued], LONG)
                .await
                .unwrap();
        }
        let unit = e2e::unit_of_job(&admin, &ns, job)
            .await
            .unwrap()
            .expect("a unit");
        units.push(unit.metadata.name.unwrap());
    }
    let path = queue_path(&quota);
    fixtures::eventually(LONG, || {
        let (cp, standby, path) = (cp, standby.clone(), path.clone());
        let expected = units[1..].to_vec();
        async move { Ok(names(&ask_directly(cp, &standby, &path)) == expected) }
    })
    .await
    .expect("the standby lists the backlog in the leader's order");
    // The leader published each unit's reason: the standby gives it too.
    fixtures::eventually(LONG, || {
        let (cp, standby, path) = (cp, standby.clone(), path.clone());
        async move {
            let list = ask_directly(cp, &standby, &path);
            Ok(list["items"][0]["reason"]["type"] == "QuotaExceeded")
        }
    })
    .await
    .expect("the standby reads the published reason");
    let from_leader = ask_directly(cp, &leader, &path);
    let from_standby = ask_directly(cp, &standby, &path);
    let positions = |l: &Value| -> Vec<Value> {
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["position"].clone())
            .collect()
    };
    assert_eq!(positions(&from_leader), positions(&from_standby));
    assert_eq!(
        from_standby["items"][0]["reason"]["type"], from_leader["items"][0]["reason"]["type"],
        "the standby gives the reason the leader published"
    );
    // A leader change: the standby leads and still answers the same.
    leader.kill().await.unwrap();
    fixtures::eventually(LONG, || {
        let s = standby.clone();
        async move { Ok(s.is_leader()) }
    })
    .await
    .expect("the standby takes over");
    assert_eq!(names(&ask_directly(cp, &standby, &path)), units[1..]);
    // And it answers from what it decides now: a new job queues last.
    kubectl_create_job(cp, &ns, &job_yaml("j5", &quota, "1", "1h"))
        .await
        .unwrap();
    wait_phase(&admin, &ns, "j5", &[Enqueued], LONG)
        .await
        .unwrap();
    let j5 = e2e::unit_of_job(&admin, &ns, "j5")
        .await
        .unwrap()
        .expect("a unit");
    let list = ask_directly(cp, &standby, &path);
    assert_eq!(names(&list).last(), j5.metadata.name.as_ref());
    assert_eq!(list["items"][3]["position"], 4);
}
