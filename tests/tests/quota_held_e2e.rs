//! End-to-end for issue 37, "no way around the queue, round two" (tier 2:
//! kube-controller-manager's garbage collector and Job controller,
//! kube-scheduler, kwok nodes): quota is held while anything it paid for
//! runs. A tenant (a ServiceAccount token with a tenant's rights) cannot
//! free its quota early — by deleting a released Job with propagation
//! Orphan, by suspending it again while its pods run out their grace
//! period, or by deleting it while they do — and a scheduler restarted
//! meanwhile finds the hold again from the API alone.
//!
//! kwok removes a deleted pod at once; a pod that runs out a long grace
//! period is played by a pod holding a finalizer of the test's
//! ([`LINGER`]), which keeps it Terminating (deletionTimestamp set, phase
//! Running) until the test takes it off, as the kubelet would keep it until
//! its containers stopped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use koord_queue_api::queue_unit::QueueUnitPhase::{self, *};
use koord_queue_api::{QueueUnit, keys};
use koord_queue_scheduler::controller::records::QUOTA_FINALIZER;
use koord_queue_tests::control_plane::RUN_FOR_ANNOTATION;
use koord_queue_tests::e2e::{self, describe_units, held_cpu, tenant_with_quota};
use koord_queue_tests::scheduler::SchedulerReplica;
use koord_queue_tests::{ControlPlane, fixtures, scheduler, shared, webhook};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{Mutex, OnceCell};

const LONG: Duration = Duration::from_secs(90);

/// How long a tenant's way around the queue is watched for (after the
/// scheduler has seen what the tenant did): the old code released the
/// waiting job within a second or two.
const WATCHED: Duration = Duration::from_secs(6);

/// The test's finalizer on pods that are to stay Terminating.
const LINGER: &str = "koord-queue.test/linger";

const LEASE: &str = "quota-held-scheduler";

/// The binary's scheduler: one leader for every test here. A test that
/// restarts it holds the lock while it does.
async fn setup() -> (&'static ControlPlane, &'static Mutex<SchedulerReplica>) {
    static SCHEDULER: OnceCell<Mutex<SchedulerReplica>> = OnceCell::const_new();
    let cp = shared::tier2().await.unwrap();
    let replica = SCHEDULER
        .get_or_init(|| async {
            webhook::start_and_register(cp).await.unwrap();
            let replica = scheduler::start_leader(cp, scheduler::test_args(LEASE))
                .await
                .unwrap();
            Mutex::new(replica)
        })
        .await;
    (cp, replica)
}

/// Crashes the scheduler and starts another, which takes over once the
/// old Lease expires and rebuilds its state from the API alone.
async fn restart_scheduler(cp: &ControlPlane, replica: &Mutex<SchedulerReplica>) {
    let mut replica = replica.lock().await;
    let restarted = scheduler::crash_and_restart(cp, &replica, scheduler::test_args(LEASE))
        .await
        .unwrap();
    *replica = restarted;
}

/// A Job of `pods` pods of 1 CPU in quota `quota`, running `run_for` on
/// kwok nodes; with `linger`, its pods hold [`LINGER`] and a grace period
/// of ten minutes.
fn job(name: &str, quota: &str, pods: i32, run_for: &str, linger: bool) -> Job {
    let mut template = json!({
        "metadata": { "annotations": { RUN_FOR_ANNOTATION: run_for } },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox",
            "resources": { "requests": { "cpu": "1", "memory": "64Mi" } } }] },
    });
    if linger {
        template["metadata"]["finalizers"] = json!([LINGER]);
        template["spec"]["terminationGracePeriodSeconds"] = json!(600);
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
        "spec": { "parallelism": pods, "completions": pods, "backoffLimit": 0,
                  "template": template },
    }))
    .unwrap()
}

/// The pods job `uid` made: its own, and the ones it orphaned (they keep
/// the Job's uid label).
async fn pods_of(client: &kube::Client, ns: &str, uid: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .unwrap()
        .items
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The uid of job `name` once its `count` pods all run.
async fn wait_running(client: &kube::Client, ns: &str, name: &str, count: usize) -> String {
    e2e::wait_phase(client, ns, name, &[Dequeued, Running], LONG)
        .await
        .unwrap();
    let uid = Api::<Job>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    fixtures::eventually(LONG, || async {
        let pods = pods_of(client, ns, &uid).await;
        Ok(pods.len() == count && pods.iter().all(running))
    })
    .await
    .unwrap_or_else(|e| panic!("the pods of {name} do not run: {e:#}"));
    uid
}

/// The unit of job `name`, read while the job exists.
async fn unit_name(client: &kube::Client, ns: &str, name: &str) -> String {
    e2e::unit_of_job(client, ns, name)
        .await
        .unwrap()
        .and_then(|u| u.metadata.name)
        .unwrap_or_else(|| panic!("job {name} has no unit"))
}

/// Checks `holds` every 200 ms for [`WATCHED`]: a failure names `what`.
async fn holds_for<F, Fut>(what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let until = std::time::Instant::now() + WATCHED;
    while std::time::Instant::now() < until {
        assert!(holds().await.unwrap(), "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether job `name`'s unit is in one of `phases`.
async fn in_phase(
    client: &kube::Client,
    ns: &str,
    name: &str,
    phases: &[QueueUnitPhase],
) -> anyhow::Result<bool> {
    Ok(e2e::phase_of(client, ns, name)
        .await?
        .is_some_and(|p| phases.contains(&p)))
}

/// Takes [`LINGER`] off the pods of job `uid` (as an admin: the tenant
/// cannot write pods), which lets them go.
async fn let_go(admin: &kube::Client, ns: &str, uid: &str) {
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    for pod in pods_of(admin, ns, uid).await {
        let rest: Vec<String> = pod
            .metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != LINGER)
            .collect();
        pods.patch(
            pod.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": {
                "resourceVersion": pod.metadata.resource_version, "finalizers": rest } })),
        )
        .await
        .unwrap();
    }
}

/// `kubectl delete job hog --cascade=orphan` by a tenant with only job
/// rights. The garbage collector takes the owner references off the pods
/// (and off the unit, also the job's) and the pods run on — or, where the
/// webhook refuses to let a queued job's pods be orphaned, the job stays
/// deleting with its pods. Either way the job that waits stays waiting
/// while hog's pods run — also across a restart of the scheduler — and
/// runs once they are gone.
#[tokio::test]
async fn an_orphaning_delete_keeps_the_quota_until_the_orphaned_pods_are_gone() {
    let (cp, replica) = setup().await;
    orphaning_delete(cp, Some(replica), &DeleteParams::orphan()).await;
}

/// A batch/v1 Job deleted through the API without a propagation policy is
/// orphan-propagated (the Job kind's default): the same as
/// `--cascade=orphan`.
#[tokio::test]
async fn a_job_deleted_through_the_api_without_a_policy_keeps_the_quota_too() {
    let (cp, _) = setup().await;
    orphaning_delete(cp, None, &DeleteParams::default()).await;
}

/// A tenant deletes its running job `hog` with `params`, which orphan its
/// pods; `restart` (the binary's scheduler) is restarted while they run.
async fn orphaning_delete(
    cp: &ControlPlane,
    restart: Option<&Mutex<SchedulerReplica>>,
    params: &DeleteParams,
) {
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant) = tenant_with_quota(cp, "orphan", "2").await.unwrap();
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), &ns);
    jobs.create(&PostParams::default(), &job("hog", &quota, 2, "1h", false))
        .await
        .unwrap();
    let hog = wait_running(&tenant, &ns, "hog", 2).await;
    let hog_unit = unit_name(&tenant, &ns, "hog").await;
    jobs.create(&PostParams::default(), &job("next", &quota, 2, "1s", false))
        .await
        .unwrap();
    e2e::wait_phase(&tenant, &ns, "next", &[Enqueued], LONG)
        .await
        .unwrap();

    jobs.delete("hog", params).await.unwrap();
    // The delete took effect: hog is gone (its pods orphaned) or deleting.
    let hog_deleted = || async {
        Ok(jobs
            .get_opt("hog")
            .await?
            .is_none_or(|j| j.metadata.deletion_timestamp.is_some()))
    };
    fixtures::eventually(LONG, hog_deleted)
        .await
        .expect("hog is deleted");
    let units: Api<QueueUnit> = Api::namespaced(tenant.clone(), &ns);

    let quotas = [quota.as_str()];
    let waiting = || async {
        let pods = pods_of(&tenant, &ns, &hog).await;
        Ok(in_phase(&tenant, &ns, "next", &[Enqueued]).await?
            && held_cpu(&tenant, &ns, &quotas).await? == 2000
            && pods.len() == 2
            && pods.iter().all(running))
    };
    holds_for(
        "next waits and hog's unit holds the quota while its orphaned pods run",
        waiting,
    )
    .await;
    if let Some(replica) = restart {
        restart_scheduler(cp, replica).await;
        holds_for(
            "next waits and hog's unit holds the quota while its orphaned pods run, after a restart",
            waiting,
        )
        .await;
    }

    // An admin ends hog's pods (and hog, should it still be deleting, with
    // its pods): hog's unit goes, next runs.
    Api::<Job>::namespaced(admin.clone(), &ns)
        .delete("hog", &DeleteParams::background())
        .await
        .map(|_| ())
        .or_else(|e| match e {
            kube::Error::Api(s) if s.code == 404 => Ok(()),
            e => Err(e),
        })
        .unwrap();
    for pod in pods_of(&admin, &ns, &hog).await {
        Api::<Pod>::namespaced(admin.clone(), &ns)
            .delete(
                pod.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await
            .map(|_| ())
            .or_else(|e| match e {
                kube::Error::Api(s) if s.code == 404 => Ok(()),
                e => Err(e),
            })
            .unwrap();
    }
    if let Err(e) = e2e::wait_phase(&tenant, &ns, "next", &[Dequeued, Running, Succeed], LONG).await
    {
        panic!("{e:#}\nunits:\n{}", describe_units(&admin, &ns).await);
    }
    fixtures::eventually(LONG, || async {
        Ok(units.get_opt(&hog_unit).await?.is_none())
    })
    .await
    .expect("hog's unit is deleted once its pods are gone");
}

/// A tenant suspends its released job again while its pods run out a long
/// grace period: its quota stays held until they are gone — released again
/// at once, the job's new pods (or the waiting job's) would run beside them.
#[tokio::test]
async fn a_job_suspended_again_keeps_its_quota_until_its_terminating_pods_are_gone() {
    let (cp, _) = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant) = tenant_with_quota(cp, "resuspend", "2").await.unwrap();
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), &ns);
    jobs.create(&PostParams::default(), &job("first", &quota, 2, "1h", true))
        .await
        .unwrap();
    let first = wait_running(&tenant, &ns, "first", 2).await;
    jobs.create(
        &PostParams::default(),
        &job("second", &quota, 2, "1h", false),
    )
    .await
    .unwrap();
    e2e::wait_phase(&tenant, &ns, "second", &[Enqueued], LONG)
        .await
        .unwrap();

    jobs.patch(
        "first",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "suspend": true } })),
    )
    .await
    .unwrap();
    fixtures::eventually(LONG, || async {
        let pods = pods_of(&tenant, &ns, &first).await;
        Ok(pods.iter().filter(|p| terminating(p) && running(p)).count() == 2)
    })
    .await
    .expect("first's pods are deleted and run out their grace period");

    // Neither second nor first again: no new pod beside the terminating ones.
    let quotas = [quota.as_str()];
    holds_for(
        "first holds its quota, second waits and first is not released again while first's pods terminate",
        || async {
            let pods = pods_of(&tenant, &ns, &first).await;
            Ok(in_phase(&tenant, &ns, "second", &[Enqueued]).await?
                && held_cpu(&tenant, &ns, &quotas).await? == 2000
                && pods.len() == 2
                && pods.iter().all(terminating))
        },
    )
    .await;

    // The pods are gone: the quota is free, and one of the two (the queue
    // decides which) is released.
    let_go(&admin, &ns, &first).await;
    fixtures::eventually(LONG, || async {
        Ok(pods_of(&tenant, &ns, &first).await.is_empty())
    })
    .await
    .expect("first's pods are gone");
    let released = [Dequeued, Running];
    if let Err(e) = fixtures::eventually(LONG, || async {
        Ok(in_phase(&tenant, &ns, "second", &released).await?
            || in_phase(&tenant, &ns, "first", &released).await?)
    })
    .await
    {
        panic!("{e:#}\nunits:\n{}", describe_units(&admin, &ns).await);
    }
}

/// A tenant deletes its running job (background propagation, kubectl's
/// default): the garbage collector deletes the unit with it while the pods
/// run out their grace period. The unit's finalizer keeps it, and its
/// hold, until the pods are gone — also across a restart of the scheduler.
#[tokio::test]
async fn a_deleted_jobs_unit_holds_the_quota_until_its_pods_are_gone() {
    let (cp, replica) = setup().await;
    let admin = cp.client().await.unwrap();
    let (quota, ns, tenant) = tenant_with_quota(cp, "deleted", "2").await.unwrap();
    let jobs: Api<Job> = Api::namespaced(tenant.clone(), &ns);
    jobs.create(&PostParams::default(), &job("gone", &quota, 2, "1h", true))
        .await
        .unwrap();
    let gone = wait_running(&tenant, &ns, "gone", 2).await;
    let gone_unit = unit_name(&tenant, &ns, "gone").await;
    let units: Api<QueueUnit> = Api::namespaced(tenant.clone(), &ns);
    fixtures::eventually(LONG, || async {
        Ok(units
            .get(&gone_unit)
            .await?
            .metadata
            .finalizers
            .is_some_and(|f| f.iter().any(|f| f == QUOTA_FINALIZER)))
    })
    .await
    .expect("the released unit carries the quota finalizer");
    jobs.create(&PostParams::default(), &job("next", &quota, 2, "1s", false))
        .await
        .unwrap();
    e2e::wait_phase(&tenant, &ns, "next", &[Enqueued], LONG)
        .await
        .unwrap();

    jobs.delete("gone", &DeleteParams::background())
        .await
        .unwrap();
    fixtures::eventually(LONG, || async {
        let pods = pods_of(&tenant, &ns, &gone).await;
        Ok(
            jobs.get_opt("gone").await?.is_none()
                && pods.len() == 2
                && pods.iter().all(terminating),
        )
    })
    .await
    .expect("gone is deleted and its pods terminate");
    fixtures::eventually(LONG, || async {
        Ok(units
            .get_opt(&gone_unit)
            .await?
            .is_some_and(|u| u.metadata.deletion_timestamp.is_some()))
    })
    .await
    .expect("gone's unit is being deleted, kept by its finalizer while the pods terminate");

    let quotas = [quota.as_str()];
    let waiting = || async {
        Ok(in_phase(&tenant, &ns, "next", &[Enqueued]).await?
            && held_cpu(&tenant, &ns, &quotas).await? == 2000)
    };
    holds_for(
        "next waits and gone's unit holds the quota while its pods terminate",
        waiting,
    )
    .await;
    restart_scheduler(cp, replica).await;
    holds_for(
        "next waits and gone's unit holds the quota while its pods terminate, after a restart",
        waiting,
    )
    .await;

    let_go(&admin, &ns, &gone).await;
    if let Err(e) = e2e::wait_phase(&tenant, &ns, "next", &[Dequeued, Running, Succeed], LONG).await
    {
        panic!("{e:#}\nunits:\n{}", describe_units(&admin, &ns).await);
    }
    fixtures::eventually(LONG, || async {
        Ok(units.get_opt(&gone_unit).await?.is_none())
    })
    .await
    .expect("the unit is gone once its pods are");
}
