//! No way around the queue (docs/security.md): every route a tenant could
//! take to run what its quota does not hold, tried as the tenant — a
//! ServiceAccount token with rights on the job kinds only — against the real
//! kube-apiserver with the real upstream CRDs, the webhook with its default
//! policy and a scheduler releasing jobs. Each route is held, refused with a
//! clear message, or counted; never run unqueued.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::{ElasticQuota, QueueUnit, ResourceListExt as _, Resources, keys};
use koord_queue_tests::{
    ControlPlane, e2e, fixtures, job_crds, scheduler, shared, tenant, webhook,
};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// The parent of every quota of this suite.
const ORG: &str = "tenant-org";

/// The shared control plane: upstream CRDs, the parent quota, the webhook
/// (default policy) and a scheduler.
async fn setup() -> &'static ControlPlane {
    let cp = shared::tier1().await.unwrap();
    scheduler_admin().await;
    cp
}

/// The admin address of the suite's scheduler (set up on first use).
async fn scheduler_admin() -> std::net::SocketAddr {
    static READY: OnceCell<std::net::SocketAddr> = OnceCell::const_new();
    let cp = shared::tier1().await.unwrap();
    *READY
        .get_or_init(|| async {
            let admin = cp.client().await.unwrap();
            let crds = job_crds::upstream_crds(job_crds::UPSTREAM_JOB_CRDS).unwrap();
            fixtures::apply_crds(&admin, &crds).await.unwrap();
            e2e::create_quota(&admin, ORG, None, true, "0", "1000", None)
                .await
                .unwrap();
            webhook::start_and_register_with(cp, |args| {
                // The default, which test_args loosens for the older suites.
                args.allow_cross_namespace_quota = false;
            })
            .await
            .unwrap();
            let config = "plugins:\n- name: Priority\n- name: ElasticQuota\n  args:\n    rootCapacity: { cpu: \"1000\", memory: 4000Gi }\n";
            let args = scheduler::with_config(scheduler::test_args("tenant-scheduler"), cp, config)
                .unwrap();
            let replica = scheduler::start_leader(cp, args).await.unwrap();
            let admin = replica.admin_addr;
            std::mem::forget(replica);
            admin
        })
        .await
}

/// A leaf quota `name` in `namespace` (max `cpu`), serving `also` too.
async fn quota(cp: &ControlPlane, name: &str, namespace: &str, cpu: &str, also: &[&str]) {
    let admin = cp.client().await.unwrap();
    fixtures::ensure_namespace(&admin, namespace).await.unwrap();
    let mut annotations = serde_json::Map::new();
    if !also.is_empty() {
        annotations.insert(
            keys::QUOTA_NAMESPACES_ANNOTATION.into(),
            serde_json::to_string(also).unwrap().into(),
        );
    }
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": { "name": name, "namespace": namespace, "annotations": annotations,
                      "labels": { keys::QUOTA_PARENT_LABEL: ORG } },
        "spec": { "min": { "cpu": "0" }, "max": { "cpu": cpu, "memory": "1000Gi" } },
    }))
    .unwrap();
    Api::<ElasticQuota>::namespaced(admin, namespace)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    // Both the webhook's cache and the scheduler see it shortly.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// A fresh tenant: its namespace (named after the test) and client.
async fn tenant(cp: &ControlPlane, name: &str, default_queue: Option<&str>) -> kube::Client {
    tenant::tenant_namespace(cp, name, default_queue)
        .await
        .unwrap()
}

/// The API of a kind for `client` in `ns` (named as the registry names it).
fn api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    koord_queue_tests::kinds::kind_api(client, ns, kind)
}

async fn create(api: &Api<DynamicObject>, object: Value) -> Result<Value, kube::Error> {
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    let created = api.create(&PostParams::default(), &object).await?;
    Ok(serde_json::to_value(created).unwrap())
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) -> Result<Value, kube::Error> {
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(serde_json::to_value(patched).unwrap())
}

async fn json_patch(
    api: &Api<DynamicObject>,
    name: &str,
    ops: Value,
) -> Result<Value, kube::Error> {
    let ops: json_patch::Patch = serde_json::from_value(ops).unwrap();
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
        .await?;
    Ok(serde_json::to_value(patched).unwrap())
}

/// The refusal message of a webhook denial, or a panic saying what passed.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>, route: &str) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("{route}: expected a refusal, got {other:?}"),
    }
}

fn container(cpu: &str) -> Value {
    json!({ "name": "main", "image": "busybox",
            "resources": { "requests": { "cpu": cpu, "memory": "64Mi" } } })
}

fn template(cpu: &str) -> Value {
    json!({ "spec": { "containers": [container(cpu)], "restartPolicy": "Never" } })
}

fn batch_job(name: &str, quota: Option<&str>, parallelism: i32, cpu: &str) -> Value {
    let mut labels = serde_json::Map::new();
    if let Some(q) = quota {
        labels.insert(keys::QUOTA_NAME_LABEL.into(), q.into());
    }
    json!({ "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "labels": labels },
            "spec": { "parallelism": parallelism, "template": template(cpu) } })
}

fn queue_unit_name(job: &Value) -> Option<String> {
    job["metadata"]["annotations"][keys::QUEUE_UNIT_ANNOTATION]
        .as_str()
        .map(str::to_string)
}

/// The job's QueueUnit once it exists (the webhook creates it right after
/// the job is stored).
async fn unit_of(cp: &ControlPlane, ns: &str, job: &Value) -> QueueUnit {
    let name = queue_unit_name(job).unwrap_or_else(|| panic!("not queued: {job}"));
    let units: Api<QueueUnit> = Api::namespaced(cp.client().await.unwrap(), ns);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(unit) = units.get_opt(&name).await.unwrap() {
            return unit;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "QueueUnit {ns}/{name} did not appear"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the scheduler has released the job's unit.
async fn released(cp: &ControlPlane, ns: &str, job: &Value) {
    let name = queue_unit_name(job).unwrap();
    let units: Api<QueueUnit> = Api::namespaced(cp.client().await.unwrap(), ns);
    fixtures::eventually(Duration::from_secs(30), || {
        let units = units.clone();
        let name = name.clone();
        async move {
            Ok(units
                .get_opt(&name)
                .await?
                .and_then(|u| u.status?.phase)
                .is_some_and(|p| p.is_released()))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("unit {ns}/{name} not released: {e:#}"));
}

/// Whether the unit of `job` holds quota after `wait`.
async fn phase_after(cp: &ControlPlane, ns: &str, job: &Value, wait: Duration) -> String {
    tokio::time::sleep(wait).await;
    let unit = unit_of(cp, ns, job).await;
    unit.status
        .and_then(|s| s.phase)
        .map(|p| p.to_string())
        .unwrap_or_default()
}

fn held(job: &Value) -> bool {
    job["spec"]["suspend"] == json!(true)
}

// ---- route 1: forged owners ------------------------------------------------

#[tokio::test]
async fn a_forged_owner_is_queued_like_any_job() {
    let cp = setup().await;
    let ns = "tenant-forged-owner";
    quota(cp, "forged-q", ns, "2", &[]).await;
    let client = tenant(cp, ns, None).await;
    let jobs = api(&client, ns, "Job");
    let owner = create(&jobs, batch_job("owner", Some("forged-q"), 1, "1"))
        .await
        .unwrap();
    let uid = owner["metadata"]["uid"].as_str().unwrap();
    // Claims to be the child of the tenant's own Job: Jobs create no Jobs.
    let mut forged = batch_job("forged", Some("forged-q"), 2, "1");
    forged["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1", "kind": "Job",
        "name": "owner", "uid": uid, "controller": true }]);
    let stored = create(&jobs, forged).await.unwrap();
    assert!(held(&stored), "stored unsuspended: {stored}");
    let unit = unit_of(cp, ns, &stored).await;
    assert_eq!(
        unit.spec.resource["cpu"].0, "2",
        "counted as a job of its own"
    );

    // A child name the owner's kind does make, but a wrong uid.
    let mpijobs = api(&client, ns, "MPIJob");
    create(&mpijobs, mpijob("mpi", "forged-q", 1))
        .await
        .unwrap();
    let mut launcher = batch_job("mpi-launcher", Some("forged-q"), 1, "100m");
    launcher["metadata"]["ownerReferences"] = json!([{ "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob", "name": "mpi", "uid": "0d9b7a8e-0000-4000-8000-000000000000",
        "controller": true }]);
    let stored = create(&jobs, launcher).await.unwrap();
    assert!(
        held(&stored) && queue_unit_name(&stored).is_some(),
        "{stored}"
    );
}

fn mpijob(name: &str, quota: &str, workers: i32) -> Value {
    json!({ "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
            "spec": { "mpiReplicaSpecs": {
                "Launcher": { "replicas": 1, "template": template("100m") },
                "Worker": { "replicas": workers, "template": template("100m") } } } })
}

// ---- the real children keep working ----------------------------------------

#[tokio::test]
async fn a_real_child_passes_and_starts_only_once_its_owner_holds_quota() {
    let cp = setup().await;
    let ns = "tenant-children";
    quota(cp, "children-q", ns, "1", &[]).await;
    let client = tenant(cp, ns, None).await;
    let jobs = api(&client, ns, "Job");
    // Fill the quota so the MPIJob waits.
    let blocker = create(&jobs, batch_job("blocker", Some("children-q"), 1, "1"))
        .await
        .unwrap();
    released(cp, ns, &blocker).await;
    let mpijobs = api(&client, ns, "MPIJob");
    let mpi = create(&mpijobs, mpijob("pi", "children-q", 2))
        .await
        .unwrap();
    let uid = mpi["metadata"]["uid"].as_str().unwrap().to_string();
    // The owner waits once its unit exists (the webhook creates it right
    // after the MPIJob is stored; before that the child is refused as the
    // child of an owner without a unit).
    unit_of(cp, ns, &mpi).await;

    // mpi-operator creates the launcher held while the MPIJob waits.
    let mut launcher = batch_job("pi-launcher", None, 1, "100m");
    launcher["spec"]["suspend"] = json!(true);
    launcher["metadata"]["ownerReferences"] = json!([{ "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob", "name": "pi", "uid": uid, "controller": true }]);
    let stored = create(&jobs, launcher).await.unwrap();
    assert!(
        queue_unit_name(&stored).is_none(),
        "a child is not queued twice"
    );
    assert!(held(&stored));

    // It cannot start while its owner waits…
    let message = refusal(
        merge(
            &jobs,
            "pi-launcher",
            json!({ "spec": { "suspend": false } }),
        )
        .await,
        "unsuspend a child of a waiting owner",
    );
    assert!(message.contains("does not hold quota"), "{message}");
    // …nor lose its owner.
    let message = refusal(
        json_patch(
            &jobs,
            "pi-launcher",
            json!([{ "op": "remove", "path": "/metadata/ownerReferences" }]),
        )
        .await,
        "orphan a child",
    );
    assert!(message.contains("controller reference"), "{message}");

    // Once the owner is released it may.
    jobs.delete("blocker", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    released(cp, ns, &mpi).await;
    let started = merge(
        &jobs,
        "pi-launcher",
        json!({ "spec": { "suspend": false } }),
    )
    .await
    .unwrap();
    assert_eq!(started["spec"]["suspend"], json!(false));

    // A second "launcher" under another name is no child of an MPIJob.
    let mut extra = batch_job("pi-launcher-2", None, 1, "100m");
    extra["metadata"]["ownerReferences"] = json!([{ "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob", "name": "pi", "uid": uid, "controller": true }]);
    extra["metadata"]["labels"] = json!({ keys::QUOTA_NAME_LABEL: "children-q" });
    let stored = create(&jobs, extra).await.unwrap();
    assert!(
        held(&stored) && queue_unit_name(&stored).is_some(),
        "{stored}"
    );
}

#[tokio::test]
async fn a_rayjobs_cluster_and_submitter_pass_within_its_size() {
    let cp = setup().await;
    let ns = "tenant-ray-children";
    quota(cp, "ray-q", ns, "20", &[]).await;
    let client = tenant(cp, ns, None).await;
    let admin = cp.client().await.unwrap();
    let rayjobs = api(&client, ns, "RayJob");
    let rayjob = create(
        &rayjobs,
        json!({ "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": { "name": "train", "labels": { keys::QUOTA_NAME_LABEL: "ray-q" } },
        "spec": { "entrypoint": "python train.py", "rayClusterSpec": ray_cluster_spec(2) } }),
    )
    .await
    .unwrap();
    let unit = unit_of(cp, ns, &rayjob).await;
    let sets: Vec<_> = unit
        .spec
        .pod_set
        .iter()
        .map(|s| (s.name.as_str(), s.count))
        .collect();
    assert_eq!(sets, [("head", 1), ("workers", 2), ("submitter", 1)]);
    released(cp, ns, &rayjob).await;
    let uid = rayjob["metadata"]["uid"].as_str().unwrap().to_string();
    // KubeRay records the cluster's name before it creates it.
    api(&admin, ns, "RayJob")
        .patch_status(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "rayClusterName": "train-x7k2q" } })),
        )
        .await
        .unwrap();
    let owner = json!([{ "apiVersion": "ray.io/v1", "kind": "RayJob", "name": "train",
        "uid": uid, "controller": true }]);
    let clusters = api(&client, ns, "RayCluster");
    let cluster = create(
        &clusters,
        json!({ "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": { "name": "train-x7k2q", "ownerReferences": owner },
        "spec": ray_cluster_spec(2) }),
    )
    .await
    .unwrap();
    assert!(queue_unit_name(&cluster).is_none() && cluster["spec"]["suspend"] != json!(true));
    // Its size is its owner's: it may not grow.
    let message = refusal(
        json_patch(
            &clusters,
            "train-x7k2q",
            json!([{ "op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 5 }]),
        )
        .await,
        "grow the RayJob's cluster",
    );
    assert!(message.contains("cannot grow"), "{message}");
    // The submitter Job, named as the RayJob.
    let mut submitter = batch_job("train", None, 1, "500m");
    submitter["metadata"]["ownerReferences"] = owner.clone();
    let stored = create(&api(&client, ns, "Job"), submitter).await.unwrap();
    assert!(
        queue_unit_name(&stored).is_none() && !held(&stored),
        "{stored}"
    );
    // A cluster bigger than the RayJob's is no child: queued on its own.
    let big = create(
        &clusters,
        json!({ "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": { "name": "train-other", "ownerReferences": owner,
                      "labels": { keys::QUOTA_NAME_LABEL: "ray-q" } },
        "spec": ray_cluster_spec(9) }),
    )
    .await
    .unwrap();
    assert!(queue_unit_name(&big).is_some() && big["spec"]["suspend"] == json!(true));
}

fn ray_cluster_spec(workers: i32) -> Value {
    json!({ "headGroupSpec": { "rayStartParams": {}, "template": template("1") },
            "workerGroupSpecs": [{ "groupName": "workers", "replicas": workers, "minReplicas": 0,
                "maxReplicas": 10, "rayStartParams": {}, "template": template("1") }] })
}

// ---- route 2: growing a job --------------------------------------------------

#[tokio::test]
async fn a_released_job_cannot_grow() {
    let cp = setup().await;
    let ns = "tenant-grow";
    quota(cp, "grow-q", ns, "2", &[]).await;
    let client = tenant(cp, ns, None).await;
    let jobs = api(&client, ns, "Job");
    let job = create(&jobs, batch_job("grow", Some("grow-q"), 2, "1"))
        .await
        .unwrap();
    released(cp, ns, &job).await;
    let message = refusal(
        merge(&jobs, "grow", json!({ "spec": { "parallelism": 6 } })).await,
        "kubectl patch job grow -p '{\"spec\":{\"parallelism\":6}}'",
    );
    assert!(
        message.contains("cannot grow (pod set main: 2 → 6 pods)")
            && message.contains("holds cpu: 2")
            && message.contains("quota grow-q"),
        "{message}"
    );
    // Shrinking stays allowed.
    merge(&jobs, "grow", json!({ "spec": { "parallelism": 1 } }))
        .await
        .unwrap();
}

#[tokio::test]
async fn no_kind_grows_through_any_of_its_size_fields() {
    let cp = setup().await;
    let ns = "tenant-grow-kinds";
    quota(cp, "kinds-q", ns, "0", &[]).await;
    let client = tenant(cp, ns, None).await;
    let label = json!({ keys::QUOTA_NAME_LABEL: "kinds-q" });
    let replica =
        |n: i32| json!({ "replicas": n, "restartPolicy": "Never", "template": template("100m") });
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "TFJob",
            json!({ "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": { "name": "tf", "labels": label },
                 "spec": { "tfReplicaSpecs": { "Worker": replica(1) } } }),
            json!([{ "op": "replace", "path": "/spec/tfReplicaSpecs/Worker/replicas", "value": 4 }]),
        ),
        (
            "PyTorchJob",
            json!({ "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": { "name": "pt", "labels": label },
                 "spec": { "pytorchReplicaSpecs": { "Master": replica(1), "Worker": replica(1) } } }),
            json!([{ "op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 4 }]),
        ),
        (
            "MPIJob",
            mpijob("mpi", "kinds-q", 1),
            json!([{ "op": "replace", "path": "/spec/mpiReplicaSpecs/Worker/replicas", "value": 4 }]),
        ),
        (
            "RayCluster",
            json!({ "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": { "name": "rc", "labels": label },
                 "spec": ray_cluster_spec(1) }),
            json!([{ "op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 4 }]),
        ),
        (
            "SparkApplication",
            spark("sp", "kinds-q"),
            json!([{ "op": "replace", "path": "/spec/executor/instances", "value": 8 }]),
        ),
        (
            "JobSet",
            jobset("js", "kinds-q", 1),
            json!([{ "op": "replace", "path": "/spec/replicatedJobs/1/replicas", "value": 4 }]),
        ),
        (
            "Workflow",
            workflow("wf", "kinds-q", Some(r#"{"cpu":"1"}"#)),
            json!([{ "op": "replace", "path": "/metadata/annotations/koord-queue~1min-resources",
                  "value": "{\"cpu\":\"8\"}" }]),
        ),
    ];
    for (kind, object, grow) in cases {
        let api = api(&client, ns, kind);
        let stored = create(&api, object)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        let name = stored["metadata"]["name"].as_str().unwrap().to_string();
        let message = refusal(json_patch(&api, &name, grow).await, kind);
        assert!(message.contains("cannot grow"), "{kind}: {message}");
    }

    // A suspended worker group counts no pods; unsuspending it grows.
    let rayjobs = api(&client, ns, "RayJob");
    let mut spec = ray_cluster_spec(2);
    spec["workerGroupSpecs"][0]["suspend"] = json!(true);
    create(
        &rayjobs,
        json!({ "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": { "name": "rj", "labels": label },
        "spec": { "entrypoint": "python x.py", "rayClusterSpec": spec } }),
    )
    .await
    .unwrap();
    let message = refusal(
        json_patch(
            &rayjobs,
            "rj",
            json!([{ "op": "replace",
            "path": "/spec/rayClusterSpec/workerGroupSpecs/0/suspend", "value": false }]),
        )
        .await,
        "unsuspend a worker group",
    );
    assert!(message.contains("pod set workers: 0 → 2 pods"), "{message}");

    // /scale of a PyTorchJob (its CRD's scale subresource sets the workers).
    let message = refusal(
        api(&client, ns, "PyTorchJob")
            .patch_scale(
                "pt",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 6 } })),
            )
            .await,
        "kubectl scale pytorchjob pt --replicas=6",
    );
    assert!(
        message.contains("cannot be scaled from 1 to 6"),
        "{message}"
    );
}

/// A JobSet: a leader Job of one pod and `workers` worker Jobs of two
/// pods each (100m and 500m CPU a pod).
fn jobset(name: &str, quota: &str, workers: i32) -> Value {
    let job = |pods: i32, cpu: &str| json!({ "spec": { "parallelism": pods, "completions": pods, "template": template(cpu) } });
    json!({ "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
            "spec": { "replicatedJobs": [
                { "name": "leader", "replicas": 1, "template": job(1, "100m") },
                { "name": "workers", "replicas": workers, "template": job(2, "500m") } ] } })
}

/// A JobSet is held at creation with its whole size (every replicated Job's
/// Jobs' pods), cannot be unsuspended by its tenant, is released within
/// quota, and the Jobs its controller creates pass as its children — within
/// one Job's share, only while it holds quota.
#[tokio::test]
async fn a_jobset_is_queued_whole_and_its_jobs_pass_as_its_children() {
    let cp = setup().await;
    let ns = "tenant-jobset";
    quota(cp, "jobset-q", ns, "3", &[]).await;
    let client = tenant(cp, ns, None).await;
    // Fill the quota so the JobSet waits.
    let jobs = api(&client, ns, "Job");
    let blocker = create(&jobs, batch_job("blocker", Some("jobset-q"), 1, "1"))
        .await
        .unwrap();
    released(cp, ns, &blocker).await;
    let jobsets = api(&client, ns, "JobSet");
    let js = create(&jobsets, jobset("js", "jobset-q", 2)).await.unwrap();
    assert!(held(&js), "{js}");
    let unit = unit_of(cp, ns, &js).await;
    let cpu = Resources::from_list(&unit.spec.resource)
        .unwrap()
        .get("cpu");
    assert_eq!(cpu, 100 + 2 * 2 * 500, "leader + 2 worker Jobs of 2 pods");
    let message = refusal(
        merge(&jobsets, "js", json!({ "spec": { "suspend": false } })).await,
        "kubectl patch jobset js -p '{\"spec\":{\"suspend\":false}}'",
    );
    assert!(message.contains("only the scheduler"), "{message}");
    jobs.delete("blocker", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    released(cp, ns, &js).await;
    let uid = js["metadata"]["uid"].as_str().unwrap().to_string();

    // The JobSet controller's Jobs: <jobset>-<replicatedJob>-<index>.
    let jobs = api(&client, ns, "Job");
    let owned = |name: &str, pods: i32, cpu: &str| {
        let mut job = batch_job(name, None, pods, cpu);
        job["spec"]["completions"] = json!(pods);
        job["metadata"]["ownerReferences"] = json!([{ "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet", "name": "js", "uid": uid, "controller": true }]);
        job
    };
    for name in ["js-leader-0", "js-workers-0", "js-workers-1"] {
        let pods = if name == "js-leader-0" { 1 } else { 2 };
        let cpu = if name == "js-leader-0" {
            "100m"
        } else {
            "500m"
        };
        let stored = create(&jobs, owned(name, pods, cpu)).await.unwrap();
        assert!(
            queue_unit_name(&stored).is_none(),
            "{name} is not queued twice: {stored}"
        );
        assert!(!held(&stored), "{name} runs with its JobSet");
    }
    // A Job bigger than its share, or one the JobSet does not create, is
    // queued on its own.
    for (name, pods) in [("js-workers-2", 2), ("js-leader-1", 1)] {
        let mut extra = owned(name, pods, "500m");
        extra["metadata"]["labels"] = json!({ keys::QUOTA_NAME_LABEL: "jobset-q" });
        let stored = create(&jobs, extra).await.unwrap();
        assert!(
            held(&stored) && queue_unit_name(&stored).is_some(),
            "{name}: {stored}"
        );
    }
}

/// A TrainJob of runtime `runtime` with `nodes` trainer nodes.
fn trainjob(name: &str, quota: &str, runtime: &str, nodes: i32) -> Value {
    json!({ "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
            "spec": { "runtimeRef": { "name": runtime }, "trainer": { "numNodes": nodes } } })
}

/// A TrainJob is sized from its runtime as the Trainer controller builds
/// its JobSet (the runtime's replicated Jobs, the TrainJob's numNodes),
/// refused when its runtime does not exist, held, kept from growing, and
/// released; the JobSet the Trainer creates passes as its child.
#[tokio::test]
async fn a_trainjob_is_sized_from_its_runtime_and_its_jobset_passes_as_its_child() {
    let cp = setup().await;
    let ns = "tenant-trainjob";
    quota(cp, "trainjob-q", ns, "3", &[]).await;
    let admin = cp.client().await.unwrap();
    let mut node = template("500m");
    node["spec"]["containers"][0]["name"] = json!("node");
    let runtime: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": { "name": "torch-kq" },
        "spec": {
            "mlPolicy": { "numNodes": 2, "torch": { "numProcPerNode": "auto" } },
            "template": { "spec": { "replicatedJobs": [
                { "name": "dataset-initializer", "template": {
                    "metadata": { "labels": { "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer" } },
                    "spec": { "template": template("100m") } } },
                { "name": "node", "template": {
                    "metadata": { "labels": { "trainer.kubeflow.org/trainjob-ancestor-step": "trainer" } },
                    "spec": { "template": node } } } ] } },
        },
    }))
    .unwrap();
    let gvk = GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime");
    Api::<DynamicObject>::all_with(
        admin,
        &ApiResource::from_gvk_with_plural(&gvk, "clustertrainingruntimes"),
    )
    .create(&PostParams::default(), &runtime)
    .await
    .unwrap();

    let client = tenant(cp, ns, None).await;
    // Fill the quota so the TrainJob waits.
    let jobs = api(&client, ns, "Job");
    let blocker = create(&jobs, batch_job("blocker", Some("trainjob-q"), 1, "2"))
        .await
        .unwrap();
    released(cp, ns, &blocker).await;
    let trainjobs = api(&client, ns, "TrainJob");
    let message = refusal(
        create(
            &trainjobs,
            trainjob("lost", "trainjob-q", "no-such-runtime", 1),
        )
        .await,
        "a TrainJob of a runtime that does not exist",
    );
    assert!(
        message.contains("ClusterTrainingRuntime no-such-runtime does not exist"),
        "{message}"
    );
    let tj = create(&trainjobs, trainjob("llm", "trainjob-q", "torch-kq", 3))
        .await
        .unwrap();
    assert!(held(&tj), "{tj}");
    let unit = unit_of(cp, ns, &tj).await;
    let cpu = Resources::from_list(&unit.spec.resource)
        .unwrap()
        .get("cpu");
    assert_eq!(cpu, 100 + 3 * 500, "the initializer and 3 trainer nodes");
    let message = refusal(
        merge(
            &trainjobs,
            "llm",
            json!({ "spec": { "trainer": { "numNodes": 5 } } }),
        )
        .await,
        "grow a TrainJob",
    );
    assert!(
        message.contains("cannot grow (pod set node: 3 → 5 pods)"),
        "{message}"
    );
    let message = refusal(
        merge(&trainjobs, "llm", json!({ "spec": { "suspend": false } })).await,
        "unsuspend a TrainJob",
    );
    assert!(message.contains("only the scheduler"), "{message}");
    jobs.delete("blocker", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    released(cp, ns, &tj).await;

    // The JobSet the Trainer controller builds, named as the TrainJob.
    let uid = tj["metadata"]["uid"].as_str().unwrap().to_string();
    let mut jobset = jobset("llm", "trainjob-q", 0);
    jobset["metadata"]["labels"] = json!({});
    jobset["metadata"]["ownerReferences"] = json!([{ "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob", "name": "llm", "uid": uid, "controller": true }]);
    jobset["spec"]["replicatedJobs"] = json!([
        { "name": "dataset-initializer", "replicas": 1, "template": { "spec": { "template": template("100m") } } },
        { "name": "node", "replicas": 1, "template": { "spec": {
            "parallelism": 3, "completions": 3, "template": template("500m") } } } ]);
    // The runtime edited since the TrainJob was queued (its nodes 4× as
    // large): a JobSet of the new size is no child within the budget, which
    // is the unit's, fixed at admission.
    let mut grown = jobset.clone();
    grown["spec"]["replicatedJobs"][1]["template"]["spec"]["template"] = template("2");
    let mut bigger_node = template("2");
    bigger_node["spec"]["containers"][0]["name"] = json!("node");
    Api::<DynamicObject>::all_with(
        cp.client().await.unwrap(),
        &ApiResource::from_gvk_with_plural(&gvk, "clustertrainingruntimes"),
    )
    .patch(
        "torch-kq",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "template": { "spec": { "replicatedJobs": [
            { "name": "dataset-initializer", "template": { "spec": { "template": template("100m") } } },
            { "name": "node", "template": { "spec": { "template": bigger_node } } } ] } } } })),
    )
    .await
    .unwrap();
    let jobsets = api(&client, ns, "JobSet");
    // It names no quota, so it cannot be queued on its own either.
    let message = refusal(
        create(&jobsets, grown).await,
        "a JobSet beyond the TrainJob's unit",
    );
    assert!(
        message.contains("it needs cpu: 6100m") && message.contains("counts cpu: 1600m"),
        "{message}"
    );
    let stored = create(&jobsets, jobset).await.unwrap();
    assert!(
        queue_unit_name(&stored).is_none(),
        "not queued twice: {stored}"
    );
}

// ---- what the API server adds to pods ---------------------------------------

/// A Job whose containers ask nothing is sized with the namespace's
/// LimitRange defaults, and a pod's RuntimeClass overhead counts: both are
/// written into its template (its pods ask what its unit holds), and a
/// RuntimeClass that does not exist is refused.
#[tokio::test]
async fn limitrange_defaults_and_runtimeclass_overhead_count_in_a_jobs_size() {
    let cp = setup().await;
    let ns = "tenant-limitrange";
    quota(cp, "limitrange-q", ns, "2", &[]).await;
    let client = tenant(cp, ns, None).await;
    let admin = cp.client().await.unwrap();
    let range: k8s_openapi::api::core::v1::LimitRange = serde_json::from_value(json!({
        "metadata": { "name": "defaults" },
        "spec": { "limits": [{ "type": "Container",
            "defaultRequest": { "cpu": "1", "memory": "128Mi" },
            "default": { "cpu": "1", "memory": "128Mi" } }] } }))
    .unwrap();
    Api::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &range)
        .await
        .unwrap();
    let class: k8s_openapi::api::node::v1::RuntimeClass = serde_json::from_value(json!({
        "metadata": { "name": "kq-sandboxed" }, "handler": "sandboxed",
        "overhead": { "podFixed": { "cpu": "500m", "memory": "64Mi" } } }))
    .unwrap();
    let _ = Api::all(admin.clone())
        .create(&PostParams::default(), &class)
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let jobs = api(&client, ns, "Job");
    let mut bare = batch_job("bare", Some("limitrange-q"), 3, "1");
    bare["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("resources");
    let stored = create(&jobs, bare).await.unwrap();
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["resources"],
        json!({ "requests": { "cpu": "1", "memory": "128Mi" },
                "limits": { "cpu": "1", "memory": "128Mi" } }),
        "the defaults its pods will get are in its template"
    );
    let unit = unit_of(cp, ns, &stored).await;
    assert_eq!(
        Resources::from_list(&unit.spec.resource)
            .unwrap()
            .get("cpu"),
        3000,
        "3 pods of the default 1 cpu"
    );
    assert_eq!(
        phase_after(cp, ns, &stored, Duration::from_secs(2)).await,
        "Enqueued",
        "3 cpu do not fit a quota of 2"
    );

    let mut sandboxed = batch_job("sandboxed", Some("limitrange-q"), 1, "1");
    sandboxed["spec"]["template"]["spec"]["runtimeClassName"] = json!("kq-sandboxed");
    let stored = create(&jobs, sandboxed).await.unwrap();
    let unit = unit_of(cp, ns, &stored).await;
    assert_eq!(
        Resources::from_list(&unit.spec.resource)
            .unwrap()
            .get("cpu"),
        1500,
        "1 cpu and the RuntimeClass's 500m overhead"
    );
    let mut lost = batch_job("lost", Some("limitrange-q"), 1, "1");
    lost["spec"]["template"]["spec"]["runtimeClassName"] = json!("no-such-class");
    let message = refusal(
        create(&jobs, lost).await,
        "a RuntimeClass that does not exist",
    );
    assert!(
        message.contains("RuntimeClass \"no-such-class\", which does not exist"),
        "{message}"
    );
}

// ---- priority ----------------------------------------------------------------

/// Priority is the administrator's: the cluster's own classes are refused,
/// and a namespace's or quota's annotation lists the classes its jobs may
/// name.
#[tokio::test]
async fn priority_classes_are_the_administrators() {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let cp = setup().await;
    let ns = "tenant-priority";
    quota(cp, "priority-q", ns, "10", &[]).await;
    let client = tenant(cp, ns, None).await;
    let admin = cp.client().await.unwrap();
    for (name, value) in [("tenant-low", 10), ("tenant-high", 1000)] {
        let class: PriorityClass =
            serde_json::from_value(json!({ "metadata": { "name": name }, "value": value }))
                .unwrap();
        let _ = Api::<PriorityClass>::all(admin.clone())
            .create(&PostParams::default(), &class)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let jobs = api(&client, ns, "Job");
    let with_class = |name: &str, class: &str| {
        let mut job = batch_job(name, Some("priority-q"), 1, "100m");
        job["spec"]["template"]["spec"]["priorityClassName"] = json!(class);
        job
    };
    let message = refusal(
        create(&jobs, with_class("critical", "system-cluster-critical")).await,
        "a system PriorityClass",
    );
    assert!(message.contains("the cluster's own"), "{message}");
    create(&jobs, with_class("high-1", "tenant-high"))
        .await
        .expect("any other class while nothing narrows them");

    // The administrator narrows the namespace to the low class.
    let annotate = |classes: &str| json!({ "metadata": { "annotations": { keys::PRIORITY_CLASSES_ANNOTATION: classes } } });
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(annotate("tenant-low")),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let message = refusal(
        create(&jobs, with_class("high-2", "tenant-high")).await,
        "a class the namespace does not list",
    );
    assert!(
        message.contains("namespace tenant-priority allows the PriorityClasses [tenant-low]"),
        "{message}"
    );
    create(&jobs, with_class("low-1", "tenant-low"))
        .await
        .expect("a class the namespace lists");

    // And the quota to the high class: the low one is refused by it.
    Api::<ElasticQuota>::namespaced(admin.clone(), ns)
        .patch(
            "priority-q",
            &PatchParams::default(),
            &Patch::Merge(annotate("tenant-high")),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let message = refusal(
        create(&jobs, with_class("low-2", "tenant-low")).await,
        "a class the quota does not list",
    );
    assert!(
        message.contains("ElasticQuota priority-q allows the PriorityClasses [tenant-high]"),
        "{message}"
    );
}

fn spark(name: &str, quota: &str) -> Value {
    json!({ "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
            "spec": { "type": "Scala", "mode": "cluster", "sparkVersion": "3.5.0",
                      "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                      "driver": { "cores": 1, "memory": "512m" },
                      "executor": { "cores": 1, "memory": "512m", "instances": 2 } } })
}

/// A SparkApplication is sized as the most it may run: dynamic allocation
/// at its maximum (refused without one), accelerators its `sparkConf` asks
/// for counted.
#[tokio::test]
async fn a_spark_application_is_sized_at_its_dynamic_maximum_with_its_accelerators() {
    let cp = setup().await;
    let ns = "tenant-spark-size";
    quota(cp, "spark-size-q", ns, "100", &[]).await;
    let client = tenant(cp, ns, None).await;
    let apps = api(&client, ns, "SparkApplication");
    let mut unbounded = spark("unbounded", "spark-size-q");
    unbounded["spec"]["dynamicAllocation"] = json!({ "enabled": true, "minExecutors": 1 });
    let message = refusal(
        create(&apps, unbounded).await,
        "dynamic allocation without a maximum",
    );
    assert!(message.contains("without a maximum"), "{message}");
    let mut bounded = spark("bounded", "spark-size-q");
    bounded["spec"]["dynamicAllocation"] =
        json!({ "enabled": true, "minExecutors": 1, "maxExecutors": 6 });
    bounded["spec"]["sparkConf"] = json!({
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.vendor": "nvidia.com" });
    let stored = create(&apps, bounded).await.unwrap();
    let unit = unit_of(cp, ns, &stored).await;
    let executors = unit
        .spec
        .pod_set
        .iter()
        .find(|s| s.name == "executor")
        .expect("an executor pod set");
    assert_eq!(executors.count, 6, "its maximum");
    assert_eq!(
        Resources::from_list(&unit.spec.resource)
            .unwrap()
            .get("nvidia.com/gpu"),
        6,
        "one GPU for each of 6 executors"
    );
}

fn workflow(name: &str, quota: &str, min_resources: Option<&str>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(m) = min_resources {
        annotations.insert(keys::MIN_RESOURCES_ANNOTATION.into(), m.into());
    }
    json!({ "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota },
                          "annotations": annotations },
            "spec": { "entrypoint": "main",
                      "templates": [{ "name": "main", "container": { "image": "busybox" } }] } })
}

// ---- route 3: another team's quota ------------------------------------------

#[tokio::test]
async fn another_teams_quota_is_refused_unless_it_lists_the_namespace() {
    let cp = setup().await;
    let ns = "tenant-cross";
    quota(cp, "other-team-q", "tenant-cross-other", "10", &[]).await;
    quota(cp, "shared-q", "tenant-cross-other", "10", &[ns]).await;
    let client = tenant(cp, ns, None).await;
    let jobs = api(&client, ns, "Job");
    let message = refusal(
        create(&jobs, batch_job("steal", Some("other-team-q"), 1, "1")).await,
        "a job labelled with another namespace's quota",
    );
    assert!(
        message.contains("ElasticQuota tenant-cross-other/other-team-q")
            && message.contains("does not serve namespace tenant-cross")
            && message.contains(keys::QUOTA_NAMESPACES_ANNOTATION),
        "{message}"
    );
    let shared = create(&jobs, batch_job("share", Some("shared-q"), 1, "1"))
        .await
        .unwrap();
    assert!(held(&shared));
    // The label is set at admission: no moving a queued job to another quota.
    let message = refusal(
        merge(
            &jobs,
            "share",
            json!({ "metadata": { "labels": { keys::QUOTA_NAME_LABEL: "other-team-q" } } }),
        )
        .await,
        "relabel a queued job",
    );
    assert!(message.contains("cannot be changed"), "{message}");
}

// ---- route 4: the default queue charges its quota ---------------------------

#[tokio::test]
async fn a_default_queue_charges_its_quota() {
    let cp = setup().await;
    let ns = "tenant-default";
    quota(cp, "default-q", ns, "1", &[]).await;
    let client = tenant(cp, ns, Some("default-q")).await;
    let jobs = api(&client, ns, "Job");
    let first = create(&jobs, batch_job("first", None, 1, "1"))
        .await
        .unwrap();
    assert_eq!(
        first["metadata"]["labels"][keys::QUOTA_NAME_LABEL],
        "default-q"
    );
    let unit = unit_of(cp, ns, &first).await;
    assert_eq!(
        unit.metadata
            .labels
            .unwrap_or_default()
            .get(keys::QUOTA_NAME_LABEL)
            .map(String::as_str),
        Some("default-q"),
        "the unit is charged to the quota"
    );
    released(cp, ns, &first).await;
    // The quota is full: a second job waits, as if it named the quota.
    let second = create(&jobs, batch_job("second", None, 1, "1"))
        .await
        .unwrap();
    let phase = phase_after(cp, ns, &second, Duration::from_secs(3)).await;
    assert!(
        !["Dequeued", "Running"].contains(&phase.as_str()),
        "released while full: {phase}"
    );
    jobs.delete("first", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    released(cp, ns, &second).await;
}

// ---- holds: every marker, and finished jobs ---------------------------------

#[tokio::test]
async fn a_hold_is_lifted_only_by_the_scheduler_whatever_marker_is_touched() {
    let cp = setup().await;
    let ns = "tenant-markers";
    quota(cp, "markers-q", ns, "0", &[]).await;
    let client = tenant(cp, ns, None).await;
    let label = json!({ keys::QUOTA_NAME_LABEL: "markers-q" });
    let tfjobs = api(&client, ns, "TFJob");
    let sparks = api(&client, ns, "SparkApplication");
    let rayjobs = api(&client, ns, "RayJob");
    for (api, object) in [
        (
            &tfjobs,
            json!({ "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": { "name": "tf", "labels": label },
            "spec": { "tfReplicaSpecs": { "Worker": { "replicas": 1, "template": template("100m") } } } }),
        ),
        (&sparks, spark("sp", "markers-q")),
        (
            &rayjobs,
            json!({ "apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": { "name": "rj", "labels": label },
            "spec": { "entrypoint": "python x.py", "rayClusterSpec": ray_cluster_spec(1) } }),
        ),
    ] {
        let stored = create(api, object).await.unwrap();
        // Its unit exists (and waits: the quota's max is 0).
        unit_of(cp, ns, &stored).await;
    }
    let annotation = "/metadata/annotations/scheduling.x-k8s.io~1suspend";
    let attempts: Vec<(&Api<DynamicObject>, &str, Value)> = vec![
        (
            &tfjobs,
            "tf",
            json!([{ "op": "remove", "path": "/spec/runPolicy/suspend" }]),
        ),
        (
            &tfjobs,
            "tf",
            json!([{ "op": "replace", "path": "/spec/runPolicy/suspend", "value": null }]),
        ),
        (
            &tfjobs,
            "tf",
            json!([{ "op": "replace", "path": "/spec/runPolicy/suspend", "value": false }]),
        ),
        (
            &tfjobs,
            "tf",
            json!([{ "op": "remove", "path": annotation }]),
        ),
        (
            &sparks,
            "sp",
            json!([{ "op": "remove", "path": "/spec/suspend" }]),
        ),
        (
            &sparks,
            "sp",
            json!([{ "op": "remove", "path": annotation }]),
        ),
        (
            &rayjobs,
            "rj",
            json!([{ "op": "remove", "path": annotation }]),
        ),
        (
            &rayjobs,
            "rj",
            json!([{ "op": "replace", "path": "/spec/suspend", "value": false }]),
        ),
    ];
    for (api, name, ops) in attempts {
        let route = format!("{name}: {ops}");
        let message = refusal(json_patch(api, name, ops).await, &route);
        assert!(
            message.contains("only the scheduler may lift its hold"),
            "{route}: {message}"
        );
    }
}

#[tokio::test]
async fn a_finished_job_stays_finished() {
    let cp = setup().await;
    let ns = "tenant-finished";
    quota(cp, "finished-q", ns, "4", &[]).await;
    let client = tenant(cp, ns, None).await;
    let admin = cp.client().await.unwrap();
    let workflows = api(&client, ns, "Workflow");
    let wf = create(
        &workflows,
        workflow("wf", "finished-q", Some(r#"{"cpu":"1"}"#)),
    )
    .await
    .unwrap();
    released(cp, ns, &wf).await;
    // The workflow controller finishes it (Workflows keep status in the object).
    merge(
        &api(&admin, ns, "Workflow"),
        "wf",
        json!({ "status": { "phase": "Succeeded" } }),
    )
    .await
    .unwrap();
    let units: Api<QueueUnit> = Api::namespaced(admin.clone(), ns);
    let unit = queue_unit_name(&wf).unwrap();
    fixtures::eventually(Duration::from_secs(20), || {
        let units = units.clone();
        let unit = unit.clone();
        async move {
            Ok(units
                .get(&unit)
                .await?
                .status
                .and_then(|s| s.phase)
                .is_some_and(|p| p.is_finished()))
        }
    })
    .await
    .unwrap();
    // `argo retry` puts it back to Running: refused.
    let message = refusal(
        merge(
            &workflows,
            "wf",
            json!({ "status": { "phase": "Running" } }),
        )
        .await,
        "argo retry",
    );
    assert!(
        message.contains("has finished and stays finished"),
        "{message}"
    );
    // Hold it and lift the hold again: refused, its unit has finished.
    merge(&workflows, "wf", json!({ "spec": { "suspend": true } }))
        .await
        .unwrap();
    let message = refusal(
        merge(&workflows, "wf", json!({ "spec": { "suspend": false } })).await,
        "re-run a finished workflow",
    );
    assert!(message.contains("has finished"), "{message}");
}

#[tokio::test]
async fn a_workflow_must_state_its_size() {
    let cp = setup().await;
    let ns = "tenant-argo";
    quota(cp, "argo-q", ns, "4", &[]).await;
    let client = tenant(cp, ns, None).await;
    let message = refusal(
        create(
            &api(&client, ns, "Workflow"),
            workflow("wf", "argo-q", None),
        )
        .await,
        "a workflow without koord-queue/min-resources",
    );
    assert!(
        message.contains("koord-queue/min-resources") && message.contains("required"),
        "{message}"
    );
}

// ---- quota names are unique cluster-wide ------------------------------------

#[tokio::test]
async fn a_second_quota_of_a_taken_name_is_ignored_and_reported() {
    let cp = setup().await;
    let admin = cp.client().await.unwrap();
    let ns = "tenant-dup";
    // The older quota of the name holds it.
    quota(cp, "dup-q", "tenant-dup-first", "1", &[]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // A newer one in the tenant's namespace, larger: ignored, not merged.
    quota(cp, "dup-q", ns, "100", &[]).await;
    let client = tenant(cp, ns, None).await;
    let message = refusal(
        create(
            &api(&client, ns, "Job"),
            batch_job("dup", Some("dup-q"), 1, "1"),
        )
        .await,
        "use a shadowed quota",
    );
    assert!(
        message.contains("ElasticQuota tenant-dup-first/dup-q")
            && message.contains("does not serve"),
        "{message}"
    );
    // The scheduler reports it: a warning Event on the ignored quota, a metric.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin, ns);
    fixtures::eventually(Duration::from_secs(20), || {
        let events = events.clone();
        async move {
            Ok(events
                .list(&Default::default())
                .await?
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("QuotaNameTaken")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("dup-q")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("tenant-dup-first/dup-q is older"))
                }))
        }
    })
    .await
    .expect("a QuotaNameTaken Event on the ignored quota");
    let text = koord_queue_tests::metrics::scrape(scheduler_admin().await)
        .await
        .unwrap();
    assert!(
        koord_queue_tests::metrics::sum_of(&text, "koord_queue_scheduler_quota_name_conflicts")
            >= 1.0
    );
    // The scheduler still charges the older one: its max is 1.
    let used = koord_queue_tests::metrics::sample(
        &text,
        "koord_queue_scheduler_quota_max",
        &[("quota", "dup-q"), ("resource", "cpu")],
    );
    assert_eq!(
        used,
        Some(1000.0),
        "the older quota's max (millicores), not merged"
    );
}
