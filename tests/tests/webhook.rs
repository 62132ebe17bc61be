//! The admission webhook against a real kube-apiserver (tier 1), registered
//! by URL with a caBundle: every job kind is held at creation and queued.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::jobs;
use koord_queue_api::keys;
use koord_queue_api::{ElasticQuota, QueueUnit, Resources};
use koord_queue_tests::{ControlPlane, fixtures, webhook};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

/// The admin address of the webhook [`setup`] registers.
static WEBHOOK_ADMIN: OnceCell<std::net::SocketAddr> = OnceCell::const_new();

/// The shared control plane with the job CRDs, two quotas, a PriorityClass
/// and the webhook registered.
async fn setup() -> &'static ControlPlane {
    let cp = koord_queue_tests::shared::tier1().await.unwrap();
    WEBHOOK_ADMIN
        .get_or_init(|| async {
            let client = cp.client().await.unwrap();
            fixtures::apply_crds(&client, &koord_queue_tests::job_crds::job_framework_crds())
                .await
                .unwrap();
            let quotas: Api<ElasticQuota> = Api::namespaced(client.clone(), keys::SYSTEM_NAMESPACE);
            for (name, labels) in [
                ("org", json!({ keys::QUOTA_IS_PARENT_LABEL: "true" })),
                ("team-a", json!({ keys::QUOTA_PARENT_LABEL: "org" })),
                ("team-b", json!({ keys::QUOTA_PARENT_LABEL: "org" })),
            ] {
                let quota: ElasticQuota = serde_json::from_value(json!({
                    "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
                    "metadata": { "name": name, "labels": labels },
                    "spec": { "max": { "cpu": "100" } },
                }))
                .unwrap();
                quotas.create(&PostParams::default(), &quota).await.unwrap();
            }
            let pc: PriorityClass = serde_json::from_value(json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": { "name": "high" }, "value": 1000,
            }))
            .unwrap();
            Api::<PriorityClass>::all(client.clone())
                .create(&PostParams::default(), &pc)
                .await
                .unwrap();
            webhook::start_and_register(cp).await.unwrap().admin_addr
        })
        .await;
    cp
}

fn container(cpu: &str, memory: &str) -> Value {
    json!({ "name": "main", "image": "busybox",
            "resources": { "requests": { "cpu": cpu, "memory": memory } } })
}

fn template(cpu: &str, memory: &str) -> Value {
    json!({ "spec": { "containers": [container(cpu, memory)], "restartPolicy": "Never" } })
}

/// A sample job: the object, its expected pod sets (name, count), total CPU
/// and total memory.
type Sample = (Value, Vec<(&'static str, i32)>, &'static str, &'static str);

/// One sample object per kind.
fn samples() -> Vec<Sample> {
    let replica = |n: i32| json!({ "replicas": n, "template": template("1", "1Gi") });
    vec![
        (
            json!({ "apiVersion": "batch/v1", "kind": "Job", "spec": {
                "parallelism": 2, "completions": 4,
                "template": { "spec": { "containers": [container("2", "1Gi")],
                    "restartPolicy": "Never", "priorityClassName": "high" } } } }),
            vec![("main", 2)],
            "4",
            "2Gi",
        ),
        (
            json!({ "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "spec": {
                "tfReplicaSpecs": { "PS": replica(1), "Worker": replica(3) } } }),
            vec![("PS", 1), ("Worker", 3)],
            "4",
            "4Gi",
        ),
        (
            json!({ "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {
                "pytorchReplicaSpecs": { "Master": replica(1), "Worker": replica(2) } } }),
            vec![("Master", 1), ("Worker", 2)],
            "3",
            "3Gi",
        ),
        (
            json!({ "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "spec": {
                "mpiReplicaSpecs": { "Launcher": replica(1), "Worker": replica(2) } } }),
            vec![("Launcher", 1), ("Worker", 2)],
            "3",
            "3Gi",
        ),
        (
            json!({ "apiVersion": "ray.io/v1", "kind": "RayJob", "spec": {
                "entrypoint": "python main.py",
                "rayClusterSpec": {
                    "headGroupSpec": { "template": template("2", "4Gi") },
                    "workerGroupSpecs": [{ "groupName": "gpu", "replicas": 3, "minReplicas": 1,
                        "maxReplicas": 5, "template": template("4", "8Gi") }] } } }),
            // KubeRay's default submitter pod (500m, 200Mi) is counted too.
            vec![("head", 1), ("gpu", 3), ("submitter", 1)],
            "14500m",
            "28872Mi",
        ),
        (
            json!({ "apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {
                "headGroupSpec": { "template": template("1", "1Gi") },
                "workerGroupSpecs": [{ "groupName": "cpu", "replicas": 2, "minReplicas": 2,
                    "maxReplicas": 2, "template": template("1", "1Gi") }] } }),
            vec![("head", 1), ("cpu", 2)],
            "3",
            "3Gi",
        ),
        (
            json!({ "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "spec": {
                "type": "Scala", "mode": "cluster", "sparkVersion": "3.5.0",
                "mainApplicationFile": "local:///opt/app.jar",
                "driver": { "cores": 1, "memory": "1024m", "memoryOverhead": "1024m" },
                "executor": { "cores": 2, "instances": 2, "memory": "2048m", "memoryOverhead": "1024m" } } }),
            vec![("driver", 1), ("executor", 2)],
            "5",
            "8Gi",
        ),
        (
            json!({ "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": { "annotations": { keys::MIN_RESOURCES_ANNOTATION: "{\"cpu\":\"3\",\"memory\":\"6Gi\"}" } },
                "spec": { "entrypoint": "main", "templates": [{ "name": "main",
                    "container": { "image": "busybox" } }] } }),
            vec![("workflow", 1)],
            "3",
            "6Gi",
        ),
    ]
}

fn api_for(client: &kube::Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let adapter = jobs::for_kind(group, kind).unwrap();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, adapter.kind().plural);
    Api::namespaced_with(client.clone(), ns, &resource)
}

async fn unit_of(client: &kube::Client, ns: &str, job: &Value) -> QueueUnit {
    let name = job["metadata"]["annotations"][keys::QUEUE_UNIT_ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("no {} annotation on {job}", keys::QUEUE_UNIT_ANNOTATION));
    // Created right after the webhook's answer: give it a moment.
    let api = Api::<QueueUnit>::namespaced(client.clone(), ns);
    for _ in 0..500 {
        if let Some(unit) = api.get_opt(name).await.unwrap() {
            return unit;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("QueueUnit {ns}/{name} was not created");
}

#[tokio::test]
async fn every_kind_is_held_at_creation_and_queued() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    for (i, (mut object, pod_sets, cpu, memory)) in samples().into_iter().enumerate() {
        let kind = object["kind"].as_str().unwrap().to_string();
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let name = format!("job-{i}");
        object["metadata"]["name"] = json!(name);
        object["metadata"]["labels"] = json!({ keys::QUOTA_NAME_LABEL: "team-a", "app": "demo" });
        let api = api_for(&client, &ns, &api_version, &kind);
        let obj: DynamicObject = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();

        let stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
        let (group, _) = api_version.rsplit_once('/').unwrap_or(("", ""));
        let adapter = jobs::for_kind(group, &kind).unwrap();
        assert!(adapter.is_held(&stored), "{kind} stored unheld: {stored}");
        let unit = unit_of(&client, &ns, &stored).await;
        assert_eq!(unit.spec.queue, "team-a", "{kind}");
        assert_eq!(unit.spec.consumer_ref.kind.as_deref(), Some(kind.as_str()));
        assert_eq!(unit.spec.consumer_ref.name.as_deref(), Some(name.as_str()));
        assert_eq!(
            unit.spec.consumer_ref.api_version.as_deref(),
            Some(api_version.as_str())
        );
        let sets: Vec<(&str, i32)> = unit
            .spec
            .pod_set
            .iter()
            .map(|p| (p.name.as_str(), p.count))
            .collect();
        assert_eq!(sets, pod_sets, "{kind} pod sets");
        let total = Resources::from_list(&unit.spec.resource).unwrap();
        let want = Resources::from_list(&BTreeMap::from([
            (
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
            ),
            (
                "memory".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
            ),
        ]))
        .unwrap();
        assert_eq!(total, want, "{kind} resources");
        let labels = unit.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("app").map(String::as_str),
            Some("demo"),
            "{kind} labels copied"
        );
        if kind == "Job" {
            assert_eq!(unit.spec.priority, Some(1000));
            assert_eq!(unit.spec.priority_class_name.as_deref(), Some("high"));
        } else {
            assert_eq!(unit.spec.priority, Some(0));
        }
    }
}

#[tokio::test]
async fn kubectl_job_is_queued_only_in_opted_in_namespaces() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { keys::DEFAULT_QUEUE_ANNOTATION: "team-b" } } })),
        )
        .await
        .unwrap();
    // The webhook may not have seen the annotation yet; it reads it fresh or
    // from the cache — either way the job lands in team-b.
    fixtures::eventually(std::time::Duration::from_secs(10), || async {
        Ok(cp
            .kubectl(&["create", "job", "x", "--image=busybox", "-n", &ns])
            .await
            .is_ok())
    })
    .await
    .unwrap();
    let job = serde_json::to_value(
        Api::<Job>::namespaced(client.clone(), &ns)
            .get("x")
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(job["spec"]["suspend"], json!(true));
    let unit = unit_of(&client, &ns, &job).await;
    assert_eq!(unit.spec.queue, "team-b");

    let plain = fixtures::create_namespace(&client, false).await.unwrap();
    cp.kubectl(&["create", "job", "x", "--image=busybox", "-n", &plain])
        .await
        .unwrap();
    let job = Api::<Job>::namespaced(client.clone(), &plain)
        .get("x")
        .await
        .unwrap();
    assert_ne!(job.spec.unwrap().suspend, Some(true));
    assert!(
        !job.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(keys::QUEUE_UNIT_ANNOTATION)
    );
    let units = Api::<QueueUnit>::namespaced(client, &plain)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(units.items.is_empty());
}

fn simple_job(name: Option<&str>, quota: &str) -> Job {
    let mut metadata = json!({ "labels": { keys::QUOTA_NAME_LABEL: quota } });
    match name {
        Some(n) => metadata["name"] = json!(n),
        None => metadata["generateName"] = json!("gen-"),
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
        "spec": { "template": template("1", "1Gi") },
    }))
    .unwrap()
}

#[tokio::test]
async fn dry_run_generate_name_and_missing_quota() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let units: Api<QueueUnit> = Api::namespaced(client.clone(), &ns);

    // Dry run: mutated, nothing created.
    let dry = jobs_api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &simple_job(Some("dry"), "team-a"),
        )
        .await
        .unwrap();
    assert_eq!(dry.spec.unwrap().suspend, Some(true));

    // generateName: the webhook names the job; the unit names that name.
    let generated = jobs_api
        .create(&PostParams::default(), &simple_job(None, "team-a"))
        .await
        .unwrap();
    let name = generated.metadata.name.clone().unwrap();
    assert!(name.starts_with("gen-") && name.len() > 4, "{name}");
    let unit = unit_of(&client, &ns, &serde_json::to_value(&generated).unwrap()).await;
    assert_eq!(unit.spec.consumer_ref.name.as_deref(), Some(name.as_str()));
    // Units are created within milliseconds of the answer: had the dry run
    // queued one, it would exist by now too.
    let all = units.list(&Default::default()).await.unwrap().items;
    assert_eq!(all.len(), 1, "only the real create has a unit: {all:?}");

    // A quota that does not exist, and a parent quota: refused, quotas listed.
    let err = jobs_api
        .create(&PostParams::default(), &simple_job(Some("nope"), "team-z"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("team-z") && err.contains("does not exist"),
        "{err}"
    );
    assert!(
        err.contains("team-a") && err.contains("team-b"),
        "quotas listed: {err}"
    );
    assert!(!err.contains("org,"), "parents are not offered: {err}");
    let err = jobs_api
        .create(&PostParams::default(), &simple_job(Some("parent"), "org"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("parent quota"), "{err}");
    // No label and no default queue.
    let mut unlabeled = simple_job(Some("unlabeled"), "x");
    unlabeled.metadata.labels = None;
    let err = jobs_api
        .create(&PostParams::default(), &unlabeled)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(keys::QUOTA_NAME_LABEL) && err.contains(keys::DEFAULT_QUEUE_ANNOTATION),
        "{err}"
    );
    assert!(jobs_api.get_opt("nope").await.unwrap().is_none());
}

#[tokio::test]
async fn only_the_scheduler_lifts_the_hold() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job = jobs_api
        .create(&PostParams::default(), &simple_job(Some("held"), "team-a"))
        .await
        .unwrap();
    let unit = unit_of(&client, &ns, &serde_json::to_value(&job).unwrap()).await;

    // Job UPDATEs the webhook reviewed (this is the only test here that
    // updates jobs).
    let updates_reviewed = || async {
        let text = koord_queue_tests::metrics::scrape(*WEBHOOK_ADMIN.get().unwrap())
            .await
            .unwrap();
        text.lines()
            .filter(|l| l.starts_with("koord_queue_webhook_reviews_total{"))
            .filter(|l| l.contains("kind=\"Job\"") && l.contains("operation=\"UPDATE\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = updates_reviewed().await;

    let unsuspend = Patch::Merge(json!({ "spec": { "suspend": false } }));
    let err = jobs_api
        .patch("held", &PatchParams::default(), &unsuspend)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("queued in queue team-a"), "{err}");
    assert!(err.contains("only the scheduler"), "{err}");
    // The annotation is protected too.
    let err = jobs_api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "annotations": { keys::QUEUE_UNIT_ANNOTATION: null } } }),
            ),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("managed by Koord-Queue"), "{err}");

    assert_eq!(updates_reviewed().await, before + 2.0, "the user's updates");

    // The scheduler's identity may, and the API server does not even ask
    // the webhook (the updates' webhook leaves the scheduler out).
    let scheduler = webhook::scheduler_client(cp).await.unwrap();
    let released = Api::<Job>::namespaced(scheduler, &ns)
        .patch("held", &PatchParams::default(), &unsuspend)
        .await
        .unwrap();
    assert_eq!(released.spec.unwrap().suspend, Some(false));
    assert_eq!(
        updates_reviewed().await,
        before + 2.0,
        "the scheduler's update was not reviewed"
    );
    assert_eq!(unit.spec.queue, "team-a");
}

#[tokio::test]
async fn a_recreated_job_gets_a_fresh_unit() {
    let cp = setup().await;
    let client = cp.client().await.unwrap();
    let ns = fixtures::create_namespace(&client, true).await.unwrap();
    let jobs_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let first = jobs_api
        .create(&PostParams::default(), &simple_job(Some("again"), "team-a"))
        .await
        .unwrap();
    let first_unit = unit_of(&client, &ns, &serde_json::to_value(&first).unwrap()).await;
    // Background propagation: without a garbage collector (tier 1) an
    // orphaning delete would wait for its finalizer forever.
    jobs_api
        .delete("again", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    fixtures::eventually(std::time::Duration::from_secs(10), || async {
        Ok(jobs_api.get_opt("again").await?.is_none())
    })
    .await
    .unwrap();
    let second = jobs_api
        .create(&PostParams::default(), &simple_job(Some("again"), "team-a"))
        .await
        .unwrap();
    let second_unit = unit_of(&client, &ns, &serde_json::to_value(&second).unwrap()).await;
    assert_ne!(first_unit.metadata.name, second_unit.metadata.name);
    assert_ne!(first_unit.metadata.uid, second_unit.metadata.uid);
}
