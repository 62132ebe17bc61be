//! Building blocks of the end-to-end suites: quota trees, namespace
//! ResourceQuotas, kubectl-created Jobs that "run" on kwok nodes for a given
//! time, and reading a job's unit.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ResourceQuota;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::queue_unit::{CheckState, QueueUnitPhase, QueueUnitStatus};
use koord_queue_api::{ElasticQuota, Queue, QueueUnit, Resources, keys};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::ControlPlane;
use crate::control_plane::RUN_FOR_ANNOTATION;

/// Creates an ElasticQuota in the system namespace.
pub async fn create_quota(
    client: &kube::Client,
    name: &str,
    parent: Option<&str>,
    is_parent: bool,
    min_cpu: &str,
    max_cpu: &str,
    policy: Option<&str>,
) -> Result<()> {
    create_quota_serving(
        client,
        name,
        parent,
        is_parent,
        (min_cpu, max_cpu),
        policy,
        &[],
    )
    .await
}

/// Lets jobs of `namespaces` use quota `quota` (of the system namespace):
/// its annotation `quota.scheduling.koordinator.sh/namespaces`.
pub async fn serve_namespaces(
    client: &kube::Client,
    quota: &str,
    namespaces: &[&str],
) -> Result<()> {
    Api::<ElasticQuota>::namespaced(client.clone(), keys::SYSTEM_NAMESPACE)
        .patch(
            quota,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                keys::QUOTA_NAMESPACES_ANNOTATION: serde_json::to_string(namespaces)?,
            }}})),
        )
        .await
        .with_context(|| format!("letting namespaces {namespaces:?} use quota {quota}"))?;
    Ok(())
}

/// Sets annotations of quota `quota` (of the system namespace), e.g. the
/// fair-sharing switch of a parent or a child's weight.
pub async fn annotate_quota(
    client: &kube::Client,
    quota: &str,
    annotations: &[(&str, &str)],
) -> Result<()> {
    let map: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    Api::<ElasticQuota>::namespaced(client.clone(), keys::SYSTEM_NAMESPACE)
        .patch(
            quota,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": map } })),
        )
        .await
        .with_context(|| format!("annotating quota {quota}"))?;
    Ok(())
}

/// [`create_quota`] serving jobs of `namespaces` too.
pub async fn create_quota_serving(
    client: &kube::Client,
    name: &str,
    parent: Option<&str>,
    is_parent: bool,
    (min_cpu, max_cpu): (&str, &str),
    policy: Option<&str>,
    namespaces: &[&str],
) -> Result<()> {
    let mut labels = serde_json::Map::new();
    if let Some(p) = parent {
        labels.insert(keys::QUOTA_PARENT_LABEL.into(), p.into());
    }
    if is_parent {
        labels.insert(keys::QUOTA_IS_PARENT_LABEL.into(), "true".into());
    }
    if let Some(p) = policy {
        labels.insert(keys::QUEUE_POLICY_LABEL.into(), p.into());
    }
    let annotations = if namespaces.is_empty() {
        json!({})
    } else {
        json!({ keys::QUOTA_NAMESPACES_ANNOTATION: serde_json::to_string(namespaces)? })
    };
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": { "name": name, "labels": labels, "annotations": annotations },
        "spec": { "min": { "cpu": min_cpu }, "max": { "cpu": max_cpu } },
    }))?;
    Api::<ElasticQuota>::namespaced(client.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &quota)
        .await
        .with_context(|| format!("creating quota {name}"))?;
    Ok(())
}

/// Creates a leaf ElasticQuota `name` (min/max CPU) in `namespace`: it
/// serves the jobs of that namespace.
pub async fn create_quota_in(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    min_cpu: &str,
    max_cpu: &str,
) -> Result<()> {
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "min": { "cpu": min_cpu }, "max": { "cpu": max_cpu } },
    }))?;
    Api::<ElasticQuota>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &quota)
        .await
        .with_context(|| format!("creating quota {namespace}/{name}"))?;
    Ok(())
}

/// A parent quota and one leaf under it, both with min 0 and `max_cpu`.
pub async fn create_quota_pair(
    client: &kube::Client,
    parent: &str,
    leaf: &str,
    max_cpu: &str,
) -> Result<()> {
    create_quota(client, parent, None, true, "0", max_cpu, None).await?;
    create_quota(client, leaf, Some(parent), false, "0", max_cpu, None).await
}

/// A quota tree `<name>` → `<name>-q` (min 0, max `max_cpu`) and its Queue,
/// with `spec` merged into the Queue the scheduler created for the leaf
/// quota; returns the leaf (queue) name. Needs a running scheduler.
pub async fn queue_with(
    cp: &ControlPlane,
    name: &str,
    max_cpu: &str,
    spec: serde_json::Value,
) -> Result<String> {
    let client = cp.client().await?;
    let leaf = format!("{name}-q");
    create_quota_pair(&client, name, &leaf, max_cpu).await?;
    let queues: Api<Queue> = Api::namespaced(client, keys::SYSTEM_NAMESPACE);
    crate::fixtures::eventually(Duration::from_secs(15), || async {
        Ok(queues.get_opt(&leaf).await?.is_some())
    })
    .await
    .with_context(|| format!("the scheduler did not create queue {leaf}"))?;
    queues
        .patch(
            &leaf,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await?;
    // Let the scheduler see the queue's new settings.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(leaf)
}

/// YAML of a batch/v1 Job in quota `quota` whose single pod requests `cpu`
/// and runs for `run_for` on a kwok node.
pub fn job_yaml(name: &str, quota: &str, cpu: &str, run_for: &str) -> String {
    job_yaml_with(name, quota, cpu, run_for, "")
}

/// [`job_yaml`] whose pod may only be bound to a node labelled `key=value`:
/// its pod stays pending (unschedulable) until a node carries that label.
pub fn job_yaml_on_nodes(
    name: &str,
    quota: &str,
    cpu: &str,
    run_for: &str,
    key: &str,
    value: &str,
) -> String {
    let selector = format!("      nodeSelector:\n        {key}: \"{value}\"\n");
    job_yaml_with(name, quota, cpu, run_for, &selector)
}

/// Creates PriorityClass `name` of `value` (a suite's classes are shared by
/// its tests, so one that exists already is fine).
pub async fn priority_class(client: &kube::Client, name: &str, value: i32) -> Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let class: PriorityClass =
        serde_json::from_value(json!({ "metadata": { "name": name }, "value": value }))?;
    match Api::<PriorityClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating PriorityClass {name}")),
    }
}

/// [`job_yaml`] whose pod has PriorityClass `class`.
pub fn job_yaml_with_priority(
    name: &str,
    quota: &str,
    cpu: &str,
    run_for: &str,
    class: &str,
) -> String {
    job_yaml_with(
        name,
        quota,
        cpu,
        run_for,
        &format!("      priorityClassName: {class}\n"),
    )
}

/// A Job's YAML from [`job_yaml`] or its siblings, ended by its controller
/// after `deadline` seconds at the latest (`activeDeadlineSeconds`: the run
/// bound a reserving head's backfill and reclaim read).
pub fn with_deadline(yaml: &str, deadline: u32) -> String {
    let bounded = yaml.replacen(
        "spec:\n  backoffLimit: 0\n",
        &format!("spec:\n  backoffLimit: 0\n  activeDeadlineSeconds: {deadline}\n"),
        1,
    );
    assert_ne!(bounded, yaml, "the job YAML has the expected shape");
    bounded
}

/// [`job_yaml`] with `pod_spec` (YAML lines indented for the pod spec) added
/// to the pod spec.
fn job_yaml_with(name: &str, quota: &str, cpu: &str, run_for: &str, pod_spec: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels:
    {label}: {quota}
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        {run_for_key}: "{run_for}"
    spec:
      restartPolicy: Never
{pod_spec}      containers:
      - name: main
        image: busybox
        resources:
          requests:
            cpu: "{cpu}"
            memory: 64Mi
"#,
        label = keys::QUOTA_NAME_LABEL,
        run_for_key = RUN_FOR_ANNOTATION,
    )
}

/// Creates a Job with `kubectl create -f`.
pub async fn kubectl_create_job(cp: &ControlPlane, namespace: &str, yaml: &str) -> Result<()> {
    let file = cp
        .dir()
        .join(format!("{}.yaml", crate::fixtures::unique_name("job")));
    std::fs::write(&file, yaml)?;
    let path = file.display().to_string();
    cp.kubectl(&["create", "-n", namespace, "-f", &path])
        .await?;
    Ok(())
}

/// The QueueUnit of job `name` (named by the job's annotation).
pub async fn unit_of_job(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<QueueUnit>> {
    unit_of_object(client, &ApiResource::erase::<Job>(&()), namespace, name).await
}

/// The QueueUnit of the object `name` of any queued kind (`resource`),
/// named by the object's annotation.
pub async fn unit_of_object(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
) -> Result<Option<QueueUnit>> {
    let Some(object) = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource)
        .get_opt(name)
        .await?
    else {
        return Ok(None);
    };
    let Some(unit) = object
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(keys::QUEUE_UNIT_ANNOTATION)
    else {
        return Ok(None);
    };
    Ok(Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .get_opt(&unit)
        .await?)
}

/// The phase of job `name`'s unit.
pub async fn phase_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<QueueUnitPhase>> {
    Ok(unit_of_job(client, namespace, name)
        .await?
        .and_then(|u| u.status.and_then(|s| s.phase)))
}

/// The status of job `name`'s unit (an error when there is no unit).
pub async fn status_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<QueueUnitStatus> {
    Ok(unit_of_job(client, namespace, name)
        .await?
        .with_context(|| format!("job {namespace}/{name} has no QueueUnit"))?
        .status
        .unwrap_or_default())
}

/// Sets every admission check of job `name`'s unit to `state`, as an
/// admission check controller would.
pub async fn set_check(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    state: CheckState,
) -> Result<()> {
    let unit = unit_of_job(client, namespace, name)
        .await?
        .with_context(|| format!("job {namespace}/{name} has no QueueUnit"))?;
    let checks: Vec<serde_json::Value> = unit
        .status
        .unwrap_or_default()
        .admission_checks
        .iter()
        .map(|c| json!({ "name": c.name, "state": state, "lastTransitionTime": "2026-11-29T00:00:00Z", "message": "set by the test" }))
        .collect();
    Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .patch_status(
            unit.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "admissionChecks": checks } })),
        )
        .await?;
    Ok(())
}

/// Whether Job `name` is suspended (held).
pub async fn job_suspended(client: &kube::Client, namespace: &str, name: &str) -> Result<bool> {
    let job = Api::<Job>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    Ok(job.spec.and_then(|s| s.suspend) == Some(true))
}

/// The phases job `name`'s unit goes through, polled until it reaches
/// `last` or `timeout` passes (a phase held shorter than the poll interval
/// may be missed).
pub async fn phases_until(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    last: QueueUnitPhase,
    timeout: Duration,
) -> Result<Vec<QueueUnitPhase>> {
    let mut seen: Vec<QueueUnitPhase> = Vec::new();
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if let Some(p) = phase_of(client, namespace, name).await?
            && seen.last() != Some(&p)
        {
            seen.push(p);
            if p == last {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    Ok(seen)
}

/// One line per unit of `namespace`: job, phase and message (for failure
/// reports).
pub async fn describe_units(client: &kube::Client, namespace: &str) -> String {
    let units = match Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .list(&Default::default())
        .await
    {
        Ok(units) => units,
        Err(e) => return format!("cannot list units: {e}"),
    };
    units
        .items
        .iter()
        .map(|u| {
            let status = u.status.clone().unwrap_or_default();
            format!(
                "{}: {:?} {:?}",
                u.spec.consumer_ref.name.clone().unwrap_or_default(),
                status.phase,
                status.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Creates each of `jobs` (name, YAML) with `kubectl create` and waits
/// until it runs, a little over a second apart: release times are whole
/// seconds, so the jobs' release order — which reclaim and preemption take
/// the most recent of first — is the order given.
pub async fn run_in_order(
    cp: &ControlPlane,
    client: &kube::Client,
    namespace: &str,
    jobs: &[(&str, String)],
    timeout: Duration,
) -> Result<()> {
    for (name, yaml) in jobs {
        kubectl_create_job(cp, namespace, yaml).await?;
        wait_phase(client, namespace, name, &[QueueUnitPhase::Running], timeout).await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    Ok(())
}

/// Waits until job `name`'s unit is in one of `phases`.
pub async fn wait_phase(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    phases: &[QueueUnitPhase],
    timeout: Duration,
) -> Result<()> {
    let job = ApiResource::erase::<Job>(&());
    wait_object_phase(client, &job, namespace, name, phases, timeout).await
}

/// Waits until the unit of object `name` (of kind `resource`) is in one
/// of `phases`.
pub async fn wait_object_phase(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    phases: &[QueueUnitPhase],
    timeout: Duration,
) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let last = unit_of_object(client, resource, namespace, name)
            .await?
            .and_then(|u| u.status.and_then(|s| s.phase));
        if last.is_some_and(|p| phases.contains(&p)) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "{} {namespace}/{name}: unit phase {last:?} after {timeout:?}, wanted one of {phases:?}",
                resource.kind
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tenant's namespace (`<prefix>-…`, its ServiceAccount's client) with a
/// quota of its own (`<prefix>q-…`, min = max = `cpu`): the start of a
/// tenant's end-to-end story. Returns the quota, the namespace, the client.
pub async fn tenant_with_quota(
    cp: &ControlPlane,
    prefix: &str,
    cpu: &str,
) -> Result<(String, String, kube::Client)> {
    let quota = crate::fixtures::unique_name(&format!("{prefix}q"));
    create_quota(&cp.client().await?, &quota, None, false, cpu, cpu, None).await?;
    let namespace = crate::fixtures::unique_name(prefix);
    let client = crate::tenant::tenant_namespace(cp, &namespace, None).await?;
    Ok((quota, namespace, client))
}

/// CPU (millicores) held by the units of `namespace` charged to one of `quotas`.
pub async fn held_cpu(client: &kube::Client, namespace: &str, quotas: &[&str]) -> Result<i64> {
    held_cpu_of(client, namespace, quotas, true).await
}

/// [`held_cpu`], counting units being deleted only when `deleting`.
async fn held_cpu_of(
    client: &kube::Client,
    namespace: &str,
    quotas: &[&str],
    deleting: bool,
) -> Result<i64> {
    let units = Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .list(&Default::default())
        .await?;
    let mut total = 0;
    for unit in units.items {
        if !deleting && unit.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let quota = unit
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .remove(keys::QUOTA_NAME_LABEL);
        if !quota.is_some_and(|q| quotas.contains(&q.as_str())) {
            continue;
        }
        let status = unit.status.unwrap_or_default();
        if !status.phase.is_some_and(QueueUnitPhase::holds_quota) {
            continue;
        }
        for a in status.admissions {
            total += Resources::from_list(&a.resources)?.get("cpu");
        }
    }
    Ok(total)
}

/// Samples held CPU every 200 ms in the background; `max()` reports the
/// highest total seen.
///
/// A unit being deleted is not counted. Its job gone and its pods gone, the
/// scheduler frees its quota when it deletes the unit, while the object
/// keeps its last phase until its finalizer comes off; the releases that
/// room allows are written concurrently with that, in no promised order,
/// so counting it would count the same room twice (`scheduler_e2e` saw
/// 8 of 4 CPU that way in CI). While pods it paid for still run, the
/// scheduler holds such a unit's quota and this sampler undercounts.
#[derive(Debug)]
pub struct UsageMonitor {
    max: std::sync::Arc<std::sync::atomic::AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl UsageMonitor {
    /// Starts sampling.
    pub fn start(client: kube::Client, namespace: String, quotas: Vec<String>) -> Self {
        let max = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
        let seen = max.clone();
        let task = tokio::spawn(async move {
            loop {
                let names: Vec<&str> = quotas.iter().map(String::as_str).collect();
                if let Ok(cpu) = held_cpu_of(&client, &namespace, &names, false).await {
                    seen.fetch_max(cpu, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { max, task }
    }

    /// Highest held CPU seen (millicores).
    pub fn max(&self) -> i64 {
        self.max.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for UsageMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Creates a ResourceQuota `name` in `namespace` with `hard` limits and
/// waits until kube-controller-manager has computed its status (before
/// that, the API server rejects every pod the quota governs).
pub async fn create_resource_quota(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    hard: &[(&str, &str)],
) -> Result<()> {
    let hard: serde_json::Map<String, serde_json::Value> = hard
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).into()))
        .collect();
    let quota: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": { "name": name },
        "spec": { "hard": hard },
    }))?;
    Api::<ResourceQuota>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &quota)
        .await
        .with_context(|| format!("creating ResourceQuota {namespace}/{name}"))?;
    wait_resource_quota_enforced(client, namespace, name).await
}

/// Sets `resource` of ResourceQuota `namespace/name`'s hard limits to
/// `amount` and waits until its status shows the new limit.
pub async fn set_resource_quota_hard(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    resource: &str,
    amount: &str,
) -> Result<()> {
    Api::<ResourceQuota>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "hard": { resource: amount } } })),
        )
        .await
        .with_context(|| format!("patching ResourceQuota {namespace}/{name}"))?;
    wait_resource_quota_enforced(client, namespace, name).await
}

/// Waits until the status of ResourceQuota `namespace/name` carries its
/// spec's hard limits (the controller manager has caught up).
async fn wait_resource_quota_enforced(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<()> {
    let api = Api::<ResourceQuota>::namespaced(client.clone(), namespace);
    crate::fixtures::eventually(Duration::from_secs(30), || async {
        let quota = api.get(name).await?;
        let spec = quota.spec.and_then(|s| s.hard);
        let status = quota.status.unwrap_or_default();
        Ok(spec.is_some() && status.hard == spec && status.used.is_some())
    })
    .await
    .with_context(|| format!("ResourceQuota {namespace}/{name} status not computed"))
}

/// `status.used[resource]` of ResourceQuota `namespace/name`.
pub async fn resource_quota_used(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    resource: &str,
) -> Result<Option<String>> {
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    Ok(quota
        .status
        .and_then(|s| s.used)
        .and_then(|mut u| u.remove(resource))
        .map(|q| q.0))
}

/// `status.message` of job `name`'s unit.
pub async fn message_of(client: &kube::Client, namespace: &str, name: &str) -> Result<String> {
    Ok(unit_of_job(client, namespace, name)
        .await?
        .and_then(|u| u.status.and_then(|s| s.message))
        .unwrap_or_default())
}

/// Whether `pod` still carries the queue's scheduling gate.
pub fn gated(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| {
            g.iter()
                .any(|g| g.name == koord_queue_api::jobs::pod::SCHEDULING_GATE)
        })
}

/// The message of the API server's refusal of `result` (panics when it was
/// not refused: a test expected it to be).
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The summed container requests of `pods`: what a framework's controller
/// really asked for, to compare with the unit the queue sized before.
pub fn requested_by(pods: &[k8s_openapi::api::core::v1::Pod]) -> Result<Resources> {
    let mut total = Resources::default();
    for container in pods
        .iter()
        .filter_map(|p| p.spec.as_ref())
        .flat_map(|s| s.containers.iter())
    {
        if let Some(requests) = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
        {
            total.add(&Resources::from_list(requests)?);
        }
    }
    Ok(total)
}

/// Of two objects of `resource` created together (in the same second: the
/// scheduler may release either first, as the first's unit may be stored
/// after the second's), the one released first and the other, as
/// `(released, waiting)`; an error after `timeout` when neither is.
pub async fn released_first(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: &str,
    pair: (&'static str, &'static str),
    timeout: Duration,
) -> Result<(&'static str, &'static str)> {
    use koord_queue_api::queue_unit::QueueUnitPhase::{Dequeued, Running};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        for (one, other) in [pair, (pair.1, pair.0)] {
            let phase = unit_of_object(client, resource, namespace, one)
                .await?
                .and_then(|u| u.status)
                .and_then(|s| s.phase);
            if matches!(phase, Some(Running | Dequeued)) {
                return Ok((one, other));
            }
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "neither {} nor {} was released within {timeout:?}",
                pair.0,
                pair.1
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
