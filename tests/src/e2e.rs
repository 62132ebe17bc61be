//! Building blocks of the end-to-end suites: quota trees, kubectl-created
//! Jobs that "run" on kwok nodes for a given time, and reading a job's unit.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_api::{ElasticQuota, QueueUnit, Resources, keys};
use kube::api::{Api, PostParams};
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
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": { "name": name, "labels": labels },
        "spec": { "min": { "cpu": min_cpu }, "max": { "cpu": max_cpu } },
    }))?;
    Api::<ElasticQuota>::namespaced(client.clone(), keys::SYSTEM_NAMESPACE)
        .create(&PostParams::default(), &quota)
        .await
        .with_context(|| format!("creating quota {name}"))?;
    Ok(())
}

/// YAML of a batch/v1 Job in quota `quota` whose single pod requests `cpu`
/// and runs for `run_for` on a kwok node.
pub fn job_yaml(name: &str, quota: &str, cpu: &str, run_for: &str) -> String {
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
      containers:
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
    let Some(job) = Api::<Job>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
    else {
        return Ok(None);
    };
    let Some(unit) = job
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

/// Waits until job `name`'s unit is in one of `phases`.
pub async fn wait_phase(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    phases: &[QueueUnitPhase],
    timeout: Duration,
) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let last = phase_of(client, namespace, name).await?;
        if last.is_some_and(|p| phases.contains(&p)) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "job {namespace}/{name}: unit phase {last:?} after {timeout:?}, wanted one of {phases:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// CPU (millicores) held by the units of `namespace` charged to one of `quotas`.
pub async fn held_cpu(client: &kube::Client, namespace: &str, quotas: &[&str]) -> Result<i64> {
    let units = Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .list(&Default::default())
        .await?;
    let mut total = 0;
    for unit in units.items {
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
                if let Ok(cpu) = held_cpu(&client, &namespace, &names).await {
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
