//! Faults between the scheduler and the API (architecture §3 rule 2, "faults
//! lose nothing"): each test has a control plane of its own, breaks it the
//! way production does — kube-apiserver killed and restarted, etcd
//! compacted so that watches get 410 Gone, the scheduler cut off through a
//! TCP proxy — and checks, from outside, that quota comes back exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::QueueUnit;
use koord_queue_api::queue_unit::QueueUnitPhase::*;
use koord_queue_tests::control_plane::Tier;
use koord_queue_tests::e2e::{
    self, UsageMonitor, create_quota_serving, describe_units, job_yaml, kubectl_create_job,
    wait_phase,
};
use koord_queue_tests::proxy::{Mode, Proxy};
use koord_queue_tests::{fixtures, metrics, scheduler, shared, webhook};
use kube::api::{Api, DeleteParams};

const LONG: Duration = Duration::from_secs(60);

/// A relist after a 410 Gone drops what was deleted while the watch was
/// away. The scheduler is cut off; a released job and its unit are deleted;
/// etcd is compacted and kube-apiserver restarted (its watch cache empty),
/// so the scheduler's watches cannot resume and relist. The deleted unit's
/// quota must be freed — the waiting job it blocked is released — and freed
/// once: the quota never holds more than its max.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_410_gone_frees_the_quota_of_what_was_deleted_meanwhile() {
    let cp = shared::own(Tier::One).await.unwrap();
    let _webhook = webhook::start_and_register(&cp).await.unwrap();
    let proxy = Proxy::start(cp.server()).await.unwrap();
    let args = scheduler::test_args("faults-relist");
    let replica = scheduler::start_via(&cp, args, &proxy.url()).await.unwrap();
    let r = replica.clone();
    fixtures::eventually(Duration::from_secs(30), move || {
        let ok = r.is_leader() && r.is_ready();
        async move { Ok(ok) }
    })
    .await
    .unwrap();

    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_quota_serving(&client, "fq", None, false, ("4", "4"), None, &[ns.as_str()])
        .await
        .unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec!["fq".into()]);
    for name in ["a", "b"] {
        kubectl_create_job(&cp, &ns, &job_yaml(name, "fq", "2", "1h"))
            .await
            .unwrap();
        wait_phase(&client, &ns, name, &[Dequeued, Running], LONG)
            .await
            .unwrap();
    }
    kubectl_create_job(&cp, &ns, &job_yaml("c", "fq", "2", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "c", &[Enqueued], LONG)
        .await
        .unwrap();

    // While the scheduler cannot see it: job a and its unit go.
    proxy.set(Mode::Cut);
    let unit = e2e::unit_of_job(&client, &ns, "a")
        .await
        .unwrap()
        .and_then(|u| u.metadata.name)
        .expect("job a has its unit");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.delete("a", &DeleteParams::background()).await.unwrap();
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);
    // Tier 1 runs no garbage collector: the unit is deleted by hand.
    units.delete(&unit, &DeleteParams::default()).await.unwrap();
    let compacted = cp.compact_etcd().await.unwrap();
    cp.restart_apiserver().await.unwrap();
    tracing::info!(compacted, "etcd compacted, kube-apiserver restarted");
    proxy.set(Mode::Open);

    // The relist frees a's 2 CPU: c is released.
    if let Err(e) = wait_phase(&client, &ns, "c", &[Dequeued, Running], LONG).await {
        panic!("{e:#}\nunits:\n{}", describe_units(&client, &ns).await);
    }
    let text = metrics::scrape(replica.admin_addr).await.unwrap();
    assert!(
        metrics::sum_of(&text, "koord_queue_scheduler_watch_relists_total") >= 1.0,
        "the relists are counted:\n{text}"
    );
    assert!(
        metrics::sum_of(&text, "koord_queue_scheduler_relist_dropped_records_total") >= 1.0,
        "the dropped records are counted"
    );
    metrics::wait_scheduler_quota_used(replica.admin_addr, "fq", "cpu", 4000.0, LONG)
        .await
        .unwrap();
    assert!(
        monitor.max() <= 4000,
        "quota fq held {} m > 4 CPU",
        monitor.max()
    );
    replica.stop().await.unwrap();
}

/// One job kind whose API fails does not stall the others. PyTorchJob's
/// CRD here stores `v2` and serves the scheduler's `v1` through a
/// conversion webhook that does not exist, so listing PyTorchJobs answers
/// 500 as long as one is stored. The scheduler still becomes ready, says
/// which kind fails (`/readyz`, `watch_failing`), and schedules batch Jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_whose_api_fails_is_reported_and_the_others_are_scheduled() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let cp = shared::own(Tier::One).await.unwrap();
    let client = cp.client().await.unwrap();
    let versions: Vec<serde_json::Value> = ["v1", "v2"]
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v, "served": true, "storage": *v == "v2",
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
            })
        })
        .collect();
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": "pytorchjobs.kubeflow.org" },
            "spec": {
                "group": "kubeflow.org", "scope": "Namespaced",
                "names": { "kind": "PyTorchJob", "plural": "pytorchjobs", "singular": "pytorchjob", "listKind": "PyTorchJobList" },
                "conversion": { "strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": { "url": "https://127.0.0.1:1/convert" } } },
                "versions": versions,
            },
        }))
        .unwrap();
    fixtures::apply_crds(&client, &[crd]).await.unwrap();
    let ns = fixtures::create_namespace(&client, false).await.unwrap();
    let gvk = GroupVersionKind::gvk("kubeflow.org", "v2", "PyTorchJob");
    let stored: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&gvk, "pytorchjobs"),
    );
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v2", "kind": "PyTorchJob",
        "metadata": { "name": "unreadable" }, "spec": {},
    }))
    .unwrap();
    stored
        .create(&PostParams::default(), &object)
        .await
        .unwrap();

    let _webhook = webhook::start_and_register(&cp).await.unwrap();
    let replica = scheduler::start_leader(&cp, scheduler::test_args("faults-kind"))
        .await
        .expect("ready although one kind's API fails");
    let text = metrics::scrape(replica.admin_addr).await.unwrap();
    assert_eq!(
        metrics::sample(
            &text,
            "koord_queue_scheduler_watch_failing",
            &[("source", "PyTorchJob")]
        ),
        Some(1.0),
        "{text}"
    );
    let (code, readyz) = koord_queue_tests::admin::get(replica.admin_addr, "/readyz")
        .await
        .unwrap();
    assert_eq!(code, 200, "{readyz}");
    assert!(readyz.contains("PyTorchJob: its API fails"), "{readyz}");

    let queued = fixtures::create_namespace(&client, true).await.unwrap();
    create_quota_serving(
        &client,
        "fk",
        None,
        false,
        ("4", "4"),
        None,
        &[queued.as_str()],
    )
    .await
    .unwrap();
    kubectl_create_job(&cp, &queued, &job_yaml("j", "fk", "1", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &queued, "j", &[Dequeued, Running], LONG)
        .await
        .unwrap();
    replica.stop().await.unwrap();
}

/// A write computed by a scheduler that no longer holds the Lease fails at
/// the API server (the chart's fencing policy), not only in the writer's
/// own leadership check. Scheduler B leads and has filled quota fq (max 2)
/// with job j1; a stale leader — a writer that still believes it leads, as
/// a process paused past its renew deadline would — releases j2 into the
/// same headroom. Its unit status write is refused, so j2 stays held and
/// waiting, and the quota never holds more than its max.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_leaders_release_fails_at_the_api_server() {
    use koord_queue_api::queue_unit::Admission;
    use koord_queue_scheduler::controller::writes::{JobRef, Outcome, Write};
    let cp = shared::own(Tier::One).await.unwrap();
    let lease = "faults-fence";
    koord_queue_tests::install::fencing_policy(&cp, koord_queue_api::keys::SYSTEM_NAMESPACE, lease)
        .await
        .unwrap();
    let _webhook = webhook::start_and_register(&cp).await.unwrap();
    let leader = scheduler::start_leader(&cp, scheduler::test_args(lease))
        .await
        .unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_quota_serving(
        &client,
        "fq2",
        None,
        false,
        ("2", "2"),
        None,
        &[ns.as_str()],
    )
    .await
    .unwrap();
    let monitor = UsageMonitor::start(client.clone(), ns.clone(), vec!["fq2".into()]);
    // The current leader's writes carry its token and pass the policy.
    kubectl_create_job(&cp, &ns, &job_yaml("j1", "fq2", "2", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "j1", &[Dequeued, Running], LONG)
        .await
        .unwrap();
    kubectl_create_job(&cp, &ns, &job_yaml("j2", "fq2", "2", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "j2", &[Enqueued], LONG)
        .await
        .unwrap();

    let unit = e2e::unit_of_job(&client, &ns, "j2")
        .await
        .unwrap()
        .and_then(|u| u.metadata.name)
        .expect("j2 has its unit");
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get("j2")
        .await
        .unwrap();
    let (stale, mut done_rx) = leading_writer(&cp, "stale-leader", 1).await;
    stale.submit(Write::Release {
        unit: format!("{ns}/{unit}").into(),
        job: JobRef {
            adapter: koord_queue_api::jobs::for_kind("batch", "Job").unwrap(),
            namespace: ns.clone(),
            name: "j2".into(),
            uid: job.metadata.uid.clone().unwrap(),
            group: None,
        },
        admissions: Some(vec![Admission {
            name: "main".into(),
            replicas: 1,
            running: 0,
            resources: [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            )]
            .into(),
        }]),
        attempts: Some(1),
        phase: Dequeued,
        checks: None,
        guard: false,
        message: "released by a stale leader".into(),
    });
    let written = tokio::time::timeout(LONG, done_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(written.outcome, Outcome::NotLeader),
        "the stale release is refused: {:?}",
        written.outcome
    );
    assert!(
        e2e::job_suspended(&client, &ns, "j2").await.unwrap(),
        "j2 stays held"
    );
    assert_eq!(
        e2e::phase_of(&client, &ns, "j2").await.unwrap(),
        Some(Enqueued)
    );
    assert!(
        monitor.max() <= 2000,
        "quota fq2 held {} m > 2 CPU",
        monitor.max()
    );
    leader.stop().await.unwrap();
}

/// A released job's unit deleted while no scheduler runs is found at
/// startup: the job is held again (it would run unqueued), its quota is not
/// counted once its pods are gone, and an Event on the job says why. (The
/// released unit carries the quota finalizer, so the new scheduler finds it
/// deleting — "QueueUnitDeleted"; a unit gone for good is "QueueUnitMissing".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_deleted_while_no_scheduler_runs_is_found_at_startup() {
    use k8s_openapi::api::events::v1::Event;
    let cp = shared::own(Tier::One).await.unwrap();
    let _webhook = webhook::start_and_register(&cp).await.unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_quota_serving(&client, "fs", None, false, ("2", "2"), None, &[ns.as_str()])
        .await
        .unwrap();
    let first = scheduler::start_leader(&cp, scheduler::test_args("faults-startup"))
        .await
        .unwrap();
    kubectl_create_job(&cp, &ns, &job_yaml("a", "fs", "2", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "a", &[Dequeued, Running], LONG)
        .await
        .unwrap();
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(!e2e::job_suspended(&client, &ns, "a").await?)
    })
    .await
    .expect("a is released");
    first.kill().await.unwrap();

    // No scheduler: the unit goes.
    let unit = e2e::unit_of_job(&client, &ns, "a")
        .await
        .unwrap()
        .and_then(|u| u.metadata.name)
        .expect("a has its unit");
    Api::<QueueUnit>::namespaced(client.clone(), &ns)
        .delete(&unit, &DeleteParams::default())
        .await
        .unwrap();

    let second = scheduler::start_leader(&cp, scheduler::test_args("faults-startup"))
        .await
        .unwrap();
    fixtures::eventually(Duration::from_secs(30), || async {
        e2e::job_suspended(&client, &ns, "a").await
    })
    .await
    .expect("the job without its unit is held again");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    fixtures::eventually(Duration::from_secs(15), || async {
        Ok(events
            .list(&Default::default())
            .await?
            .items
            .iter()
            .any(|e| {
                matches!(
                    e.reason.as_deref(),
                    Some("QueueUnitDeleted" | "QueueUnitMissing")
                )
            }))
    })
    .await
    .expect("an Event says the unit is deleted or missing");
    metrics::wait_scheduler_quota_used(second.admin_addr, "fs", "cpu", 0.0, LONG)
        .await
        .unwrap();
    second.stop().await.unwrap();
}

/// Quota is freed when a job's pods are gone, not when the job goes: the
/// job is deleted while its pod cannot go yet (a finalizer, as a pod
/// running out a long grace period); its unit's quota stays held until the
/// pod is gone, and only then may the waiting job use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_stays_held_while_a_deleted_jobs_pod_still_runs() {
    use k8s_openapi::api::core::v1::Pod;
    use koord_queue_tests::control_plane::Nodes;
    use kube::api::{ListParams, Patch, PatchParams};
    let cp = shared::own(Tier::Two(Nodes::default())).await.unwrap();
    let _webhook = webhook::start_and_register(&cp).await.unwrap();
    let replica = scheduler::start_leader(&cp, scheduler::test_args("faults-pods"))
        .await
        .unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    create_quota_serving(&client, "fp", None, false, ("2", "2"), None, &[ns.as_str()])
        .await
        .unwrap();
    kubectl_create_job(&cp, &ns, &job_yaml("a", "fp", "2", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "a", &[Running], LONG)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default().labels("job-name=a"))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .and_then(|p| p.metadata.name)
        .expect("a's pod");
    let finalizer = json_patch_finalizer(true);
    pods.patch(&pod, &PatchParams::default(), &Patch::Merge(&finalizer))
        .await
        .unwrap();
    kubectl_create_job(&cp, &ns, &job_yaml("b", "fp", "2", "1h"))
        .await
        .unwrap();
    wait_phase(&client, &ns, "b", &[Enqueued], LONG)
        .await
        .unwrap();

    // a goes (its unit with it, by garbage collection); its pod cannot yet.
    Api::<Job>::namespaced(client.clone(), &ns)
        .delete("a", &DeleteParams::background())
        .await
        .unwrap();
    fixtures::eventually(LONG, || async {
        Ok(pods.get(&pod).await?.metadata.deletion_timestamp.is_some())
    })
    .await
    .expect("a's pod is being deleted");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        e2e::phase_of(&client, &ns, "b").await.unwrap(),
        Some(Enqueued),
        "b waits while a's pod runs"
    );
    assert_eq!(
        metrics::scheduler_quota_used(replica.admin_addr, "fp", "cpu")
            .await
            .unwrap(),
        2000.0,
        "a's quota is held while its pod runs"
    );
    // The pod goes: b is released.
    pods.patch(
        &pod,
        &PatchParams::default(),
        &Patch::Merge(&json_patch_finalizer(false)),
    )
    .await
    .unwrap();
    wait_phase(&client, &ns, "b", &[Dequeued, Running], LONG)
        .await
        .unwrap();
    replica.stop().await.unwrap();
}

fn json_patch_finalizer(on: bool) -> serde_json::Value {
    if on {
        serde_json::json!({ "metadata": { "finalizers": ["koord-queue.test/keep"] } })
    } else {
        serde_json::json!({ "metadata": { "finalizers": null } })
    }
}

/// The quota finalizer comes off where the watch last saw it, by one JSON
/// patch that tests it is still there — and, when another controller's
/// finalizer moved it meanwhile, by reading the list and writing it back
/// without it: the stale index removes nobody else's finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_finalizer_comes_off_where_it_is_even_after_it_moved() {
    use koord_queue_api::keys::QUOTA_FINALIZER;
    use koord_queue_scheduler::controller::writes::{Outcome, Write};
    use kube::api::{Patch, PatchParams, PostParams};
    const OTHER: &str = "koord-queue.test/keep";

    let cp = shared::own(Tier::One).await.unwrap();
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let units = Api::<QueueUnit>::namespaced(client.clone(), &ns);
    let create = |name: &str, finalizers: &[&str]| {
        serde_json::from_value::<QueueUnit>(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": name, "finalizers": finalizers },
            "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": name },
                      "queue": "q", "resource": { "cpu": "1" } },
        }))
        .unwrap()
    };
    for (name, finalizers) in [
        ("first", vec![QUOTA_FINALIZER]),
        ("moved", vec![QUOTA_FINALIZER, OTHER]),
    ] {
        units
            .create(&PostParams::default(), &create(name, &finalizers))
            .await
            .unwrap();
    }
    // Another controller puts its finalizer first: ours is at 1 now, and
    // the scheduler's view (0) is stale.
    units
        .patch(
            "moved",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({ "metadata": { "finalizers": [OTHER, QUOTA_FINALIZER] } }),
            ),
        )
        .await
        .unwrap();

    // Reads of single units, as the API server counts them.
    let unit_reads = || async {
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(request).await.unwrap();
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                l.contains("resource=\"queueunits\"")
                    && l.contains("verb=\"GET\"")
                    && l.contains("scope=\"resource\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let reads_before = unit_reads().await;
    let (writer, mut done_rx) = leading_writer(&cp, "finalizer-test", 2).await;
    for name in ["first", "moved"] {
        writer.submit(Write::RemoveFinalizer {
            unit: format!("{ns}/{name}").into(),
            at: Some(0),
        });
    }
    for _ in 0..2 {
        let written = tokio::time::timeout(LONG, done_rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(written.outcome, Outcome::Done(Some(_))),
            "{:?}: {:?}",
            written.write,
            written.outcome
        );
    }
    // One read: the moved finalizer's; the first came off without one.
    assert_eq!(unit_reads().await - reads_before, 1.0);
    let finalizers = |u: QueueUnit| u.metadata.finalizers.unwrap_or_default();
    assert!(finalizers(units.get("first").await.unwrap()).is_empty());
    assert_eq!(finalizers(units.get("moved").await.unwrap()), [OTHER]);
}

/// The scheduler's writer alone, with the scheduler's identity, believing it
/// leads (a stale leader, or a write path tested without a controller), and
/// the channel of its results.
async fn leading_writer(
    cp: &koord_queue_tests::ControlPlane,
    identity: &str,
    concurrency: usize,
) -> (
    koord_queue_scheduler::controller::writes::Writer,
    tokio::sync::mpsc::UnboundedReceiver<koord_queue_scheduler::controller::writes::Written>,
) {
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = koord_queue_scheduler::controller::writes::Writer::new(
        webhook::scheduler_client(cp).await.unwrap(),
        koord_queue_runtime::Leadership::fixed(true),
        concurrency,
        done_tx,
        koord_queue_scheduler::controller::metrics::Metrics::register(&mut Default::default()),
        identity.into(),
        koord_queue_api::keys::SYSTEM_NAMESPACE.into(),
    );
    (writer, done_rx)
}
