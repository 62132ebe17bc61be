//! Jobs of kinds without a typed client in the suites (any queued kind read
//! as JSON): their API, a job read together with
//! its unit, and a PyTorchJob built to a size and a priority class. Shared by
//! the reserving-head and the preemption end-to-end tests.

use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_api::{QueueUnit, keys};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

/// The API of job kind `kind` (`Job`, `PyTorchJob`, any kind the registry
/// queues) in `ns`, as the registry names its group, version and resource.
pub fn kind_api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let k = koord_queue_api::jobs::all()
        .iter()
        .map(|a| a.kind())
        .find(|k| k.kind == kind)
        .unwrap_or_else(|| panic!("no job kind {kind}"));
    let gvk = GroupVersionKind::gvk(k.group, k.version, k.kind);
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, k.plural),
    )
}

/// The job `kind/name` as JSON and its unit (named by its annotation).
pub async fn job_and_unit(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> (serde_json::Value, Option<QueueUnit>) {
    let job = serde_json::to_value(kind_api(client, ns, kind).get(name).await.unwrap()).unwrap();
    let unit = match job["metadata"]["annotations"][keys::QUEUE_UNIT_ANNOTATION].as_str() {
        Some(unit) => Api::<QueueUnit>::namespaced(client.clone(), ns)
            .get_opt(unit)
            .await
            .unwrap(),
        None => None,
    };
    (job, unit)
}

/// A PyTorchJob of one master and `workers` workers of 1 CPU each, in
/// priority class `class`, charged to `quota`.
pub fn pytorch_job(name: &str, quota: &str, workers: i64, class: &str) -> DynamicObject {
    let replica = |replicas: i64| {
        json!({ "replicas": replicas, "template": { "spec": {
            "priorityClassName": class,
            "containers": [{ "name": "pytorch", "image": "pytorch",
                "resources": { "requests": { "cpu": "1", "memory": "64Mi" } } }] } } })
    };
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": { "name": name, "labels": { keys::QUOTA_NAME_LABEL: quota } },
        "spec": { "pytorchReplicaSpecs": { "Master": replica(1), "Worker": replica(workers) } },
    }))
    .unwrap()
}

/// The phase of PyTorchJob `name`'s unit, and whether the job is held.
pub async fn pytorch_state(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> (Option<QueueUnitPhase>, bool) {
    let (job, unit) = job_and_unit(client, ns, "PyTorchJob", name).await;
    let held = job["spec"]["runPolicy"]["suspend"] == json!(true);
    (unit.and_then(|u| u.status?.phase), held)
}
