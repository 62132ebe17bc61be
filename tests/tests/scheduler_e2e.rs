//! End-to-end: webhook + scheduler + the full local control plane (tier 2,
//! kwok nodes). Jobs are created with kubectl, held, released when quota
//! allows, run on kwok nodes, complete, and free their quota.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::queue_unit::QueueUnitPhase::{self, *};
use koord_queue_api::{Queue, QueueUnit, keys};
use koord_queue_tests::e2e::{
    self, UsageMonitor, create_quota, create_quota_pair, job_yaml, kubectl_create_job, wait_phase,
};
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, webhook};
use kube::api::{Api, DeleteParams, PostParams};
use tokio::sync::OnceCell;

const LONG: Duration = Duration::from_secs(60);

async fn setup() -> &'static ControlPlane {
    // The scheduler replica lives as long as the test binary.
    static SCHEDULER: OnceCell<scheduler::SchedulerReplica> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    SCHEDULER
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
            scheduler::start_leader(cp, scheduler::test_args("e2e-scheduler"))
                .await
                .unwrap()
        })
        .await;
    cp
}

async fn phases(client: &kube::Client, ns: &str, jobs: &[&str]) -> Vec<Option<QueueUnitPhase>> {
    let mut out = Vec::new();
    for j in jobs {
        out.push(e2e::phase_of(client, ns, j).await.unwrap());
    }
    out
}

/// The design's worked example without the reclaim steps: quotas team-a
/// (min 4, max 10) and team-b (min 6, max 10) under 10 CPU.
#[tokio::test]
async fn jobs_run_when_quota_allows_and_free_it_when_done() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    create_quota(&client, "ex", None, true, "10", "10", None)
        .await
        .unwrap();
    create_quota(&client, "ex-a", Some("ex"), false, "4", "10", None)
        .await
        .unwrap();
    create_quota(&client, "ex-b", Some("ex"), false, "6", "10", None)
        .await
        .unwrap();
    // This is the example without its reclaim steps: B's queue does not reclaim.
    let queues: Api<Queue> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(queues.get_opt("ex-b").await?.is_some())
    })
    .await
    .unwrap();
    queues
        .patch(
            "ex-b",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({ "spec": { "reclaim": false } })),
        )
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(
        client.clone(),
        ns.clone(),
        vec!["ex-a".into(), "ex-b".into()],
    );

    // A submits three 3-CPU jobs: all run (9 of 10 CPU).
    for name in ["a1", "a2", "a3"] {
        kubectl_create_job(cp, &ns, &job_yaml(name, "ex-a", "3", "12s"))
            .await
            .unwrap();
    }
    for name in ["a1", "a2", "a3"] {
        if let Err(e) = wait_phase(&client, &ns, name, &[Running], LONG).await {
            let job = Api::<Job>::namespaced(client.clone(), &ns)
                .get(name)
                .await
                .unwrap();
            panic!(
                "{e:#}: job spec {:?} status {:?}",
                job.spec.unwrap().suspend,
                job.status
            );
        }
    }
    // B submits a 4-CPU job: 9 + 4 > 10, it waits (no reclaim here) and says why.
    kubectl_create_job(cp, &ns, &job_yaml("b1", "ex-b", "4", "2s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "b1", &[Enqueued], LONG)
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(Duration::from_secs(15), || async {
        let unit = e2e::unit_of_job(&client, &ns, "b1").await?.unwrap();
        let status = unit.status.unwrap_or_default();
        let waiting = QueueUnitPhase::waiting_reason(&status.conditions);
        // Within its min, but B's queue does not reclaim what A borrows.
        Ok(waiting == Some("ReclaimOff")
            && status.position.is_none()
            && status
                .message
                .as_deref()
                .is_some_and(|m| m.contains("ex") && m.contains("cpu")))
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "b1 reports why it waits (its condition's reason) and the quota that stops it: {e:#}"
        )
    });
    assert_eq!(
        jobs.get("b1").await.unwrap().spec.unwrap().suspend,
        Some(true)
    );
    // `kubectl describe job` says why it waits and where it is in line.
    fixtures::eventually(Duration::from_secs(15), || async {
        let describe = cp.kubectl(&["describe", "job", "b1", "-n", &ns]).await?;
        Ok(describe.contains("Waiting") && describe.contains("ReclaimOff"))
    })
    .await
    .expect("kubectl describe job shows why it waits");

    // A's jobs finish and free their quota; B's job starts and completes.
    for name in ["a1", "a2", "a3"] {
        wait_phase(&client, &ns, name, &[Succeed], LONG)
            .await
            .unwrap();
    }
    wait_phase(&client, &ns, "b1", &[Running, Succeed], LONG)
        .await
        .unwrap();
    wait_phase(&client, &ns, "b1", &[Succeed], LONG)
        .await
        .unwrap();
    for name in ["a1", "a2", "a3", "b1"] {
        let job = jobs.get(name).await.unwrap();
        let complete = job
            .status
            .unwrap()
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        assert!(complete, "{name} completed");
        let unit = e2e::unit_of_job(&client, &ns, name).await.unwrap().unwrap();
        assert!(
            unit.status.unwrap().admissions.is_empty(),
            "{name} holds no quota once finished"
        );
    }
    assert!(
        monitor.max() <= 10_000,
        "held CPU exceeded the quota: {}m",
        monitor.max()
    );
    assert!(
        monitor.max() >= 9_000,
        "the monitor saw the 9 CPU of A's jobs: {}m",
        monitor.max()
    );
}

/// Block keeps a big head job blocking smaller ones; Priority lets them pass.
#[tokio::test]
async fn block_policy_blocks_and_priority_policy_skips() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    for (parent, leaf, policy) in [("blk", "blk-q", "Block"), ("pri", "pri-q", "Priority")] {
        create_quota(&client, parent, None, true, "0", "10", None)
            .await
            .unwrap();
        create_quota(&client, leaf, Some(parent), false, "0", "10", Some(policy))
            .await
            .unwrap();
    }
    // The scheduler keeps one Queue per quota, with the quota's policy.
    let queues: Api<Queue> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    fixtures::eventually(Duration::from_secs(15), || async {
        let q = queues.get_opt("blk-q").await?;
        Ok(q.is_some_and(|q| q.spec.queue_policy == koord_queue_api::QueuePolicy::Block))
    })
    .await
    .unwrap();

    for q in ["blk", "pri"] {
        kubectl_create_job(
            cp,
            &ns,
            &job_yaml(&format!("{q}-first"), &format!("{q}-q"), "6", "15s"),
        )
        .await
        .unwrap();
        wait_phase(&client, &ns, &format!("{q}-first"), &[Running], LONG)
            .await
            .unwrap();
        kubectl_create_job(
            cp,
            &ns,
            &job_yaml(&format!("{q}-g-big"), &format!("{q}-q"), "8", "1s"),
        )
        .await
        .unwrap();
        wait_phase(&client, &ns, &format!("{q}-g-big"), &[Enqueued], LONG)
            .await
            .unwrap();
        kubectl_create_job(
            cp,
            &ns,
            &job_yaml(&format!("{q}-h-small"), &format!("{q}-q"), "2", "1s"),
        )
        .await
        .unwrap();
    }
    // Priority: the small job passes the big one.
    wait_phase(
        &client,
        &ns,
        "pri-h-small",
        &[Dequeued, Running, Succeed],
        LONG,
    )
    .await
    .unwrap();
    // Block: it stays behind the big head job.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        e2e::phase_of(&client, &ns, "blk-h-small").await.unwrap(),
        Some(Enqueued)
    );
    assert_eq!(
        e2e::phase_of(&client, &ns, "blk-g-big").await.unwrap(),
        Some(Enqueued)
    );
    fixtures::eventually(Duration::from_secs(10), || async {
        let q = queues.get("blk-q").await?;
        let items = q
            .status
            .unwrap_or_default()
            .queue_item_details
            .remove("active")
            .unwrap_or_default();
        let names: Vec<(String, i64)> = items.into_iter().map(|i| (i.name, i.position)).collect();
        Ok(names.len() == 2
            && names[0].0.starts_with("blk-g-big")
            && names[1].0.starts_with("blk-h-small")
            && names[1].1 == 2)
    })
    .await
    .expect("Queue.status lists the waiting units in order");
    // Once the first job ends, the blocked line moves in order.
    for job in ["blk-first", "blk-g-big", "blk-h-small"] {
        wait_phase(&client, &ns, job, &[Succeed], LONG)
            .await
            .unwrap();
    }
    let _ = phases(&client, &ns, &["pri-g-big"]).await;
}

/// Deleting a job frees its quota at once; an orphan unit is collected; a
/// unit is never released before its job exists.
#[tokio::test]
async fn deleted_jobs_free_quota_and_orphans_are_collected() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_quota_pair(&client, "del", "del-q", "4")
        .await
        .unwrap();

    kubectl_create_job(cp, &ns, &job_yaml("long", "del-q", "4", "600s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "long", &[Running], LONG)
        .await
        .unwrap();
    kubectl_create_job(cp, &ns, &job_yaml("next", "del-q", "4", "1s"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "next", &[Enqueued], LONG)
        .await
        .unwrap();
    let long_unit = e2e::unit_of_job(&client, &ns, "long")
        .await
        .unwrap()
        .unwrap();
    Api::<Job>::namespaced(client.clone(), &ns)
        .delete("long", &DeleteParams::background())
        .await
        .unwrap();
    wait_phase(&client, &ns, "next", &[Dequeued, Running, Succeed], LONG)
        .await
        .unwrap();
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(Duration::from_secs(20), || async {
        Ok(units
            .get_opt(long_unit.metadata.name.as_deref().unwrap())
            .await?
            .is_none())
    })
    .await
    .expect("the deleted job's unit is gone");

    // A unit whose job never appears: never released, deleted after the grace.
    let mut orphan = long_unit.clone();
    orphan.metadata = kube::api::ObjectMeta {
        name: Some("orphan-unit".into()),
        namespace: Some(ns.clone()),
        labels: long_unit.metadata.labels.clone(),
        ..Default::default()
    };
    orphan.spec.consumer_ref.name = Some("never-created".into());
    orphan.spec.consumer_ref.uid = None;
    orphan.status = None;
    units.create(&PostParams::default(), &orphan).await.unwrap();
    for _ in 0..10 {
        match units.get_opt("orphan-unit").await.unwrap() {
            Some(u) => assert!(
                u.status.and_then(|s| s.phase).is_none(),
                "an orphan is never adopted or released"
            ),
            None => break,
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    fixtures::eventually(Duration::from_secs(20), || async {
        Ok(units.get_opt("orphan-unit").await?.is_none())
    })
    .await
    .expect("the orphan unit is collected after the grace period");
}

/// The webhook answered but its QueueUnit create never happened (it was
/// killed with the create in its backlog): the scheduler creates the unit of
/// the held job after the grace period, built from the job, and the job runs.
/// A unit that existed and was deleted is not re-created (architecture §3 rule 3).
#[tokio::test]
async fn a_held_job_whose_unit_never_appeared_gets_one() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    // Not opted in, so the webhook stays out: the jobs arrive held and
    // annotated as the webhook answers, but nobody created their units.
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    create_quota_pair(&client, "rep", "rep-q", "2")
        .await
        .unwrap();
    let held = |name: &str, cpu: &str| {
        let mut job: Job = serde_yaml::from_str(&job_yaml(name, "rep-q", cpu, "1s")).unwrap();
        job.spec.as_mut().unwrap().suspend = Some(true);
        job.metadata.annotations = Some(
            [
                (
                    keys::QUEUE_UNIT_ANNOTATION.to_string(),
                    format!("{name}-lost0001"),
                ),
                (keys::QUEUE_ANNOTATION.to_string(), "rep-q".to_string()),
            ]
            .into(),
        );
        job
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    jobs.create(&PostParams::default(), &held("lost", "1"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "lost", &[Succeed], LONG)
        .await
        .unwrap();
    let unit = units.get("lost-lost0001").await.unwrap();
    assert_eq!(unit.spec.queue, "rep-q");
    assert_eq!(unit.spec.resource["cpu"].0, "1");
    assert_eq!(unit.spec.consumer_ref.name.as_deref(), Some("lost"));
    assert_eq!(
        unit.metadata.labels.unwrap_or_default()[keys::QUOTA_NAME_LABEL],
        "rep-q"
    );

    // More than the quota's max: it waits. Its unit, once deleted, stays gone
    // and the job stays held.
    jobs.create(&PostParams::default(), &held("blocked", "4"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "blocked", &[Enqueued], LONG)
        .await
        .unwrap();
    units
        .delete("blocked-lost0001", &DeleteParams::background())
        .await
        .unwrap();
    // Grace (5 s in tests) and a few housekeeping passes.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(units.get_opt("blocked-lost0001").await.unwrap().is_none());
    let job = jobs.get("blocked").await.unwrap();
    assert_eq!(job.spec.unwrap().suspend, Some(true));
}

/// A job kind whose CRD appears after the scheduler started is followed
/// without a restart: a TFJob is released (annotation removed,
/// `runPolicy.suspend: false`) and its unit finishes with it.
#[tokio::test]
async fn a_job_kind_installed_later_is_followed_without_restart() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    create_quota_pair(&client, "late", "late-q", "8")
        .await
        .unwrap();
    fixtures::apply_crds(&client, &koord_queue_tests::job_crds::job_framework_crds())
        .await
        .unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let gvk = GroupVersionKind::gvk("kubeflow.org", "v1", "TFJob");
    let tfjobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&gvk, "tfjobs"),
    );
    let tfjob: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": { "name": "late-tf", "labels": { keys::QUOTA_NAME_LABEL: "late-q" } },
        "spec": { "tfReplicaSpecs": { "Worker": { "replicas": 2, "template": { "spec": {
            "containers": [{ "name": "tf", "image": "tf",
                "resources": { "requests": { "cpu": "1" } } }] } } } } },
    }))
    .unwrap();
    // The webhook may need a moment to be called for the new resource.
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(tfjobs.create(&PostParams::default(), &tfjob).await.is_ok())
    })
    .await
    .unwrap();
    let unit_name = tfjobs
        .get("late-tf")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()[keys::QUEUE_UNIT_ANNOTATION]
        .clone();
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(Duration::from_secs(90), || async {
        let phase = units
            .get_opt(&unit_name)
            .await?
            .and_then(|u| u.status)
            .and_then(|s| s.phase);
        Ok(phase == Some(Dequeued))
    })
    .await
    .expect("the TFJob is released once its kind is followed");
    // The release writes the unit, then lifts the job's hold.
    fixtures::eventually(Duration::from_secs(15), || async {
        let job = serde_json::to_value(tfjobs.get("late-tf").await?)?;
        Ok(job["spec"]["runPolicy"]["suspend"] == serde_json::json!(false))
    })
    .await
    .expect("the TFJob's hold is lifted");
    let released = serde_json::to_value(tfjobs.get("late-tf").await.unwrap()).unwrap();
    assert!(
        released["metadata"]["annotations"]
            .get(keys::SUSPEND_ANNOTATION)
            .is_none()
    );
    // The training operator would report the end; here the test does.
    tfjobs
        .patch_status(
            "late-tf",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": { "conditions": [
                { "type": "Succeeded", "status": "True", "reason": "Done", "message": "done" }
            ] } })),
        )
        .await
        .unwrap();
    fixtures::eventually(Duration::from_secs(20), || async {
        let status = units.get(&unit_name).await?.status.unwrap_or_default();
        Ok(status.phase == Some(Succeed) && status.admissions.is_empty())
    })
    .await
    .expect("the unit follows the TFJob to Succeed and frees its quota");
}

/// A fair-sharing parent of 4 CPU with children `<name>-a` (weight 1) and
/// `<name>-b` (weight `weight_b`), min 0; queues of both with
/// `minRunSeconds: 0`. Returns the two leaves.
async fn fair_pair(cp: &ControlPlane, name: &str, weight_b: &str) -> (String, String) {
    let client = cp.client().await.unwrap();
    create_quota(&client, name, None, true, "0", "4", None)
        .await
        .unwrap();
    e2e::annotate_quota(&client, name, &[(keys::FAIR_SHARING_ANNOTATION, "true")])
        .await
        .unwrap();
    let (a, b) = (format!("{name}-a"), format!("{name}-b"));
    for (leaf, weight) in [(&a, "1"), (&b, weight_b)] {
        create_quota(&client, leaf, Some(name), false, "0", "4", None)
            .await
            .unwrap();
        e2e::annotate_quota(
            &client,
            leaf,
            &[(keys::FAIR_SHARE_WEIGHT_ANNOTATION, weight)],
        )
        .await
        .unwrap();
    }
    let queues: Api<Queue> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
    for leaf in [&a, &b] {
        fixtures::eventually(Duration::from_secs(15), || async {
            Ok(queues.get_opt(leaf).await?.is_some())
        })
        .await
        .unwrap();
        queues
            .patch(
                leaf,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({
                    "spec": { "preemption": { "minRunSeconds": 0 } } })),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    (a, b)
}

/// How many of the jobs `names` of `ns` are Running.
async fn running(client: &kube::Client, ns: &str, names: &[String]) -> usize {
    let mut n = 0;
    for name in names {
        if e2e::phase_of(client, ns, name).await.unwrap() == Some(Running) {
            n += 1;
        }
    }
    n
}

/// Fair-share admission on batch Jobs: 4 CPU freed at once under a
/// fair-sharing parent go 1 : 3 to children of weights 1 and 3, both with
/// more waiting than that — not to whichever queue comes first.
#[tokio::test]
async fn freed_capacity_is_shared_by_weight() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let (a, b) = fair_pair(cp, "fairadm", "3").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec![a.clone(), b.clone()]);
    // A blocker fills the pool; then both children queue 4 jobs each.
    kubectl_create_job(cp, &ns, &job_yaml("blocker", &a, "4", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "blocker", &[Running], LONG)
        .await
        .unwrap();
    let of_a: Vec<String> = (0..4).map(|i| format!("a-{i}")).collect();
    let of_b: Vec<String> = (0..4).map(|i| format!("b-{i}")).collect();
    for (leaf, names) in [(&a, &of_a), (&b, &of_b)] {
        for name in names {
            kubectl_create_job(cp, &ns, &job_yaml(name, leaf, "1", "1h"))
                .await
                .unwrap();
        }
    }
    for name in of_a.iter().chain(&of_b) {
        wait_phase(&client, &ns, name, &[Enqueued], LONG)
            .await
            .unwrap();
    }
    // The blocker's share (a at 100 %) is above b's: once b waits, fair
    // reclaim may take it back; either way the pool ends split 1 : 3.
    Api::<Job>::namespaced(client.clone(), &ns)
        .delete("blocker", &DeleteParams::background())
        .await
        .unwrap();
    let split = fixtures::eventually(LONG, || async {
        Ok(running(&client, &ns, &of_a).await == 1 && running(&client, &ns, &of_b).await == 3)
    })
    .await;
    if let Err(e) = split {
        panic!(
            "not split 1 : 3 ({e}): {}",
            e2e::describe_units(&client, &ns).await
        );
    }
    assert!(
        monitor.max() <= 4000,
        "pool held {} m > 4 CPU",
        monitor.max()
    );
}

/// Reclaim for fair share on batch Jobs: a child that took the whole pool
/// while its sibling had nothing gives back, newest first, until the
/// sibling's share would pass its own — and not beyond.
#[tokio::test]
async fn a_child_above_its_fair_share_gives_back_to_its_sibling() {
    use k8s_openapi::api::events::v1::Event;
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let (a, b) = fair_pair(cp, "fairrec", "1").await;
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec![a.clone(), b.clone()]);
    let of_a: Vec<String> = (0..4).map(|i| format!("a-{i}")).collect();
    for name in &of_a {
        kubectl_create_job(cp, &ns, &job_yaml(name, &a, "1", "1h"))
            .await
            .unwrap();
        wait_phase(&client, &ns, name, &[Running], LONG)
            .await
            .unwrap();
        // Distinct release times: the most recent goes first.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let of_b: Vec<String> = (0..3).map(|i| format!("b-{i}")).collect();
    for name in &of_b {
        kubectl_create_job(cp, &ns, &job_yaml(name, &b, "1", "1h"))
            .await
            .unwrap();
    }
    // b's first two jobs take a's two newest back (a 4 → 2, b 0 → 2); the
    // third would put b (75 %) above a (50 %): it waits.
    let shared = fixtures::eventually(LONG, || async {
        Ok(running(&client, &ns, &of_b).await == 2)
    })
    .await;
    if let Err(e) = shared {
        panic!(
            "b did not get its share ({e}): {}",
            e2e::describe_units(&client, &ns).await
        );
    }
    for victim in ["a-3", "a-2"] {
        let status = e2e::status_of(&client, &ns, victim).await.unwrap();
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.reason == "FairShareReclaimed"),
            "{victim}: {status:?}"
        );
    }
    assert_eq!(running(&client, &ns, &of_a[..2]).await, 2);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        running(&client, &ns, &of_b).await,
        2,
        "{}",
        e2e::describe_units(&client, &ns).await
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let notes: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FairShareReclaimed"))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("reclaimed for fair sharing") && n.contains(&b)),
        "{notes:?}"
    );
    assert!(
        monitor.max() <= 4000,
        "pool held {} m > 4 CPU",
        monitor.max()
    );
}
