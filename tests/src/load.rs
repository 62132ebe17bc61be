//! Bulk objects for benchmarks against a real API server: the synthetic
//! 3-level quota tree of the scheduler's core benchmarks (architecture §9) and
//! held Jobs with the QueueUnits the webhook would have created for them,
//! created with many requests in flight.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::{ElasticQuota, QueueUnit, keys};
use koord_queue_scheduler::core::synthetic::Rng;
use kube::api::{Api, PostParams};
use serde_json::json;

/// Leaves per middle quota and middles per parent quota.
pub const FANOUT: usize = 10;

/// Name of leaf quota `i` (`leaf-<parent>-<middle>-<leaf>`).
pub fn leaf_name(i: usize) -> String {
    let (p, m, l) = (i / (FANOUT * FANOUT), (i / FANOUT) % FANOUT, i % FANOUT);
    format!("leaf-{p}-{m}-{l}")
}

/// The scheduler's plugin configuration for the tree of `leaves` leaves:
/// the capacity binds below the parents' max, as in the core benchmarks
/// (15 cpu and 64 GiB per leaf).
pub fn scheduler_config(leaves: usize) -> String {
    format!(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args:\n    rootCapacity: {{ cpu: \"{}\", memory: {}Gi }}\n",
        15 * leaves,
        64 * leaves
    )
}

fn quota(
    name: &str,
    parent: Option<&str>,
    is_parent: bool,
    min: (i64, i64),
    max: (i64, i64),
) -> Result<ElasticQuota> {
    let mut labels = serde_json::Map::new();
    if let Some(p) = parent {
        labels.insert(keys::QUOTA_PARENT_LABEL.into(), p.into());
    }
    if is_parent {
        labels.insert(keys::QUOTA_IS_PARENT_LABEL.into(), "true".into());
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": { "name": name, "namespace": keys::SYSTEM_NAMESPACE, "labels": labels },
        "spec": {
            "min": { "cpu": min.0.to_string(), "memory": format!("{}Gi", min.1) },
            "max": { "cpu": max.0.to_string(), "memory": format!("{}Gi", max.1) },
        },
    }))?)
}

/// The quota tree of `leaves` leaf quotas: ten leaves per middle quota, ten
/// middles per parent. Every level's max binds somewhere (leaves 30 cpu;
/// middles 250 cpu, less than their leaves' 300; parents 2,000 cpu, less
/// than their middles' 2,500). Parents first, so children find them.
pub fn quota_tree(leaves: usize) -> Result<Vec<ElasticQuota>> {
    let middles = leaves.div_ceil(FANOUT);
    let parents = middles.div_ceil(FANOUT);
    let mut out = Vec::with_capacity(parents + middles + leaves);
    for p in 0..parents {
        out.push(quota(
            &format!("parent-{p}"),
            None,
            true,
            (1000, 4000),
            (2000, 8000),
        )?);
    }
    for m in 0..middles {
        out.push(quota(
            &format!("middle-{}-{}", m / FANOUT, m % FANOUT),
            Some(&format!("parent-{}", m / FANOUT)),
            true,
            (100, 400),
            (250, 1000),
        )?);
    }
    for i in 0..leaves {
        let m = i / FANOUT;
        out.push(quota(
            &leaf_name(i),
            Some(&format!("middle-{}-{}", m / FANOUT, m % FANOUT)),
            false,
            (10, 40),
            (30, 120),
        )?);
    }
    Ok(out)
}

/// Job number `n` of the load, held (suspended) and naming its unit, and
/// that unit as the webhook creates it (same pod template, totals, queue
/// and labels): in leaf quota (and queue) `leaf`, namespace
/// `ns-<leaf % namespaces>`,
/// 1–4 cpu, 1–8 GiB and priority 0–3 (the core benchmarks' distribution,
/// seeded by `n` so that concurrent creation yields the same load).
pub fn job_and_unit(n: usize, leaf: usize, namespaces: usize) -> Result<(Job, QueueUnit)> {
    let mut rng = Rng::new(42 + n as u64);
    let quota = leaf_name(leaf);
    let namespace = format!("ns-{}", leaf % namespaces.max(1));
    let job_name = format!("job-{n:07}");
    let unit_name = format!(
        "{job_name}-{:08x}",
        n.wrapping_mul(0x9E37_79B9) & 0xffff_ffff
    );
    let cpu = 1 + rng.below(4);
    let memory = format!("{}Gi", 1 + rng.below(8));
    let priority = rng.below(4);
    let template = json!({
        "metadata": { "labels": { keys::QUOTA_NAME_LABEL: quota } },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "60"],
                "resources": { "requests": { "cpu": cpu.to_string(), "memory": memory } },
            }],
        },
    });
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": job_name, "namespace": namespace,
            "labels": { keys::QUOTA_NAME_LABEL: quota },
            "annotations": { keys::QUEUE_UNIT_ANNOTATION: unit_name },
        },
        "spec": { "suspend": true, "backoffLimit": 0, "template": template },
    }))?;
    let total = json!({ "cpu": cpu.to_string(), "memory": memory });
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", keys::GROUP, keys::VERSION), "kind": "QueueUnit",
        "metadata": {
            "name": unit_name, "namespace": namespace,
            "labels": { keys::QUOTA_NAME_LABEL: quota },
        },
        "spec": {
            "consumerRef": { "apiVersion": "batch/v1", "kind": "Job",
                "namespace": namespace, "name": job_name },
            "priority": priority,
            "queue": quota,
            "resource": total,
            "request": total,
            "podSet": [{ "name": "main", "count": 1, "template": template }],
        },
    }))?;
    Ok((job, unit))
}

/// Creates the namespaced `object` in its namespace, retrying what the
/// API server may refuse under load (429, 5xx, timeouts); an object that
/// exists already counts as created (a retry of a create that went through).
pub async fn create<K>(client: &kube::Client, object: &K) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(
        client.clone(),
        object.meta().namespace.as_deref().unwrap_or("default"),
    );
    let mut attempt = 0u32;
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
                return Err(kube::Error::Api(e)).with_context(|| {
                    format!(
                        "creating {}",
                        object.meta().name.as_deref().unwrap_or_default()
                    )
                });
            }
            Err(e) if attempt >= 20 => {
                return Err(e).with_context(|| {
                    format!(
                        "creating {} (gave up after {attempt} retries)",
                        object.meta().name.as_deref().unwrap_or_default()
                    )
                });
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt.min(20)))).await;
            }
        }
    }
}

/// Runs `make(i)` for every `i` in `0..count` with up to `concurrency` in
/// flight; stops at the first error.
pub async fn for_each_concurrent<F, Fut>(count: usize, concurrency: usize, make: F) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    futures::stream::iter((0..count).map(Ok))
        .try_for_each_concurrent(concurrency.max(1), make)
        .await
}

/// Creates `objects` with up to `concurrency` requests in flight.
pub async fn create_all<K>(client: &kube::Client, objects: &[K], concurrency: usize) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    futures::stream::iter(objects.iter().map(|o| create(client, o)))
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}
