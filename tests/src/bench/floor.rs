//! The floor: what the API server allows for the benchmark's API work with
//! no scheduling logic at all. A null scheduler creates each job suspended
//! (in a namespace the webhook does not watch) and its QueueUnit, then
//! issues, per job, the same writes the real scheduler made in the
//! saturated run — unit metadata patches (adoption), unit status patches,
//! job patches (the unsuspend) and Events — as fast as the API allows, with
//! the scheduler's write concurrency. The benchmark's job runtime and
//! observers run exactly as in the real run (they complete the released
//! jobs with the same status writes).

use std::sync::Arc;

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use koord_queue_api::QueueUnit;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::runner::{self, Runner};
use super::shape::{CLASSES, Shape};

/// Totals of each kind of write the null scheduler makes (spread evenly
/// over the jobs).
#[derive(Clone, Debug, Serialize)]
pub struct FloorWrites {
    /// QueueUnit creates (the webhook's, in the real run).
    pub unit_creates: u64,
    /// QueueUnit metadata patches (adoption).
    pub unit_patches: u64,
    /// QueueUnit status patches.
    pub unit_status_patches: u64,
    /// Job patches (unsuspend).
    pub job_patches: u64,
    /// Event creates.
    pub event_creates: u64,
}

impl FloorWrites {
    /// Per job: the minimum of a release — one unit, its adoption, status
    /// Enqueued, Dequeued, Running and Succeed, the unsuspend, and Events
    /// Queued, Released and Finished. Used without a saturated run to copy.
    pub fn default_for(jobs: usize) -> Self {
        let n = jobs as u64;
        Self {
            unit_creates: n,
            unit_patches: n,
            unit_status_patches: 4 * n,
            job_patches: n,
            event_creates: 3 * n,
        }
    }
}

/// `total` spread over `n` items: item `i`'s share.
fn share(total: u64, n: usize, i: usize) -> u64 {
    let n = n.max(1) as u64;
    total / n + u64::from((i as u64) < total % n)
}

fn now() -> Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or(Value::Null)
}

/// The QueueUnit the webhook would create for job `i`.
pub fn unit_manifest(shape: &Shape, i: usize, job_uid: Option<&str>) -> Result<QueueUnit> {
    let job = &shape.jobs[i];
    let leaf = &shape.leaves[job.leaf];
    let class = &CLASSES[job.class];
    let manifest = shape.job_manifest(i, true);
    let mut owner = Value::Null;
    if let Some(uid) = job_uid {
        owner = json!([{
            "apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": uid,
            "controller": false, "blockOwnerDeletion": false,
        }]);
    }
    let mut unit = json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "QueueUnit",
        "metadata": {
            "name": format!("{}-unit", job.name),
            "namespace": leaf.namespace,
            "labels": manifest["metadata"]["labels"],
        },
        "spec": {
            "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "namespace": leaf.namespace, "name": job.name },
            "priority": class.priority,
            "priorityClassName": class.name,
            "queue": leaf.name,
            "resource": { "cpu": class.cpu.to_string() },
            "request": { "cpu": class.cpu.to_string() },
            "podSet": [{ "name": "main", "count": 1, "template": manifest["spec"]["template"] }],
        },
    });
    if !owner.is_null() {
        unit["metadata"]["ownerReferences"] = owner;
    }
    Ok(serde_json::from_value(unit)?)
}

/// The `k`-th status write of a unit: Enqueued, Dequeued (with admissions
/// and conditions), Running, Succeed, then position updates.
fn status_write(shape: &Shape, i: usize, k: u64) -> Value {
    let job = &shape.jobs[i];
    let leaf = &shape.leaves[job.leaf];
    let cpu = CLASSES[job.class].cpu.to_string();
    let condition = |type_: &str, on: bool| {
        json!({ "type": type_, "status": if on { "True" } else { "False" }, "reason": type_,
                "message": "", "lastTransitionTime": now() })
    };
    let status = match k {
        0 => {
            json!({ "phase": "Enqueued", "message": format!("waiting in queue {}", leaf.name), "lastUpdateTime": now() })
        }
        1 => json!({
            "phase": "Dequeued", "message": format!("released: cpu={cpu} reserved in quota {}", leaf.name),
            "lastUpdateTime": now(), "lastAllocateTime": now(), "position": null, "attempts": 1,
            "admissions": [{ "name": "main", "replicas": 1, "running": 0, "resources": { "cpu": cpu } }],
            "conditions": [condition("QuotaReserved", true), condition("Admitted", true),
                           condition("PodsReady", false), condition("Finished", false), condition("Evicted", false)],
        }),
        2 => json!({ "phase": "Running", "message": "running", "lastUpdateTime": now() }),
        3 => {
            json!({ "phase": "Succeed", "message": "job succeeded", "lastUpdateTime": now(), "admissions": [] })
        }
        k => json!({ "position": k, "message": format!("position {k} in queue {}", leaf.name) }),
    };
    json!({ "status": status })
}

/// Clients of the floor's identities.
#[derive(Clone)]
pub struct FloorClients {
    /// Creates the jobs (the same ordinary user as in the real run).
    pub creator: kube::Client,
    /// Creates the units (the webhook's identity in the real run).
    pub unit_creator: kube::Client,
    /// Everything else (the scheduler's identity in the real run).
    pub null_scheduler: kube::Client,
}

/// Runs the null scheduler over every job; returns when all its writes are
/// done (the runtime completes the jobs on its own).
pub async fn run(
    shape: Arc<Shape>,
    runner: Arc<Runner>,
    clients: FloorClients,
    writes: FloorWrites,
    create_concurrency: usize,
    write_concurrency: usize,
) -> Result<()> {
    let creates = Arc::new(Semaphore::new(create_concurrency.max(1)));
    let slots = Arc::new(Semaphore::new(write_concurrency.max(1)));
    let writes = Arc::new(writes);
    let mut tasks = tokio::task::JoinSet::new();
    // Spawned in the saturated run's creation order; the fair semaphores
    // keep that order.
    for i in runner::interleaved(&shape) {
        let (shape, runner, clients, writes, creates, slots) = (
            shape.clone(),
            runner.clone(),
            clients.clone(),
            writes.clone(),
            creates.clone(),
            slots.clone(),
        );
        tasks.spawn(async move {
            job_chain(&shape, &runner, &clients, &writes, &creates, &slots, i).await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a null scheduler task failed")??;
    }
    Ok(())
}

async fn job_chain(
    shape: &Shape,
    runner: &Runner,
    clients: &FloorClients,
    writes: &FloorWrites,
    creates: &Semaphore,
    slots: &Semaphore,
    i: usize,
) -> Result<()> {
    let n = shape.jobs.len();
    let job = &shape.jobs[i];
    let ns = &shape.leaves[job.leaf].namespace;
    let units: Api<QueueUnit> = Api::namespaced(clients.null_scheduler.clone(), ns);
    let unit_name = format!("{}-unit", job.name);
    let uid = {
        // One create slot for the job and its unit: in the real run the
        // webhook's unit create happens inside the job's create.
        let _permit = creates.acquire().await?;
        let created = runner::create_job(shape, runner, &clients.creator, i, true).await?;
        let unit = unit_manifest(shape, i, None)?;
        for _ in 0..share(writes.unit_creates, n, i) {
            match Api::<QueueUnit>::namespaced(clients.unit_creator.clone(), ns)
                .create(&PostParams::default(), &unit)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e).context("creating a unit"),
            }
        }
        created.metadata.uid.unwrap_or_default()
    };
    let uid = uid.as_str();
    let (units, unit_name) = (&units, unit_name.as_str());
    let write = |w: Write| async move {
        let _permit = slots.acquire().await?;
        match w {
            Write::UnitMeta => {
                let patch = json!({ "metadata": { "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": uid,
                    "controller": false, "blockOwnerDeletion": false,
                }]}, "spec": { "consumerRef": { "uid": uid } } });
                units
                    .patch(unit_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Write::UnitStatus(k) => units
                .patch_status(
                    unit_name,
                    &PatchParams::default(),
                    &Patch::Merge(&status_write(shape, i, k)),
                )
                .await
                .map(|_| ()),
            Write::Unsuspend => Api::<Job>::namespaced(clients.null_scheduler.clone(), ns)
                .patch(
                    &job.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "suspend": false } })),
                )
                .await
                .map(|_| ()),
            Write::Event(reason) => {
                let event = Event {
                    metadata: kube::api::ObjectMeta {
                        generate_name: Some(format!("{}-", job.name)),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    action: Some(reason.to_string()),
                    reason: Some(reason.to_string()),
                    note: Some(format!(
                        "{reason}: written by the null scheduler of the floor"
                    )),
                    type_: Some("Normal".into()),
                    event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                    regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
                        api_version: Some("batch/v1".into()),
                        kind: Some("Job".into()),
                        namespace: Some(ns.clone()),
                        name: Some(job.name.clone()),
                        uid: Some(uid.to_string()),
                        ..Default::default()
                    }),
                    reporting_controller: Some("koord-queue.x-k8s.io/null-scheduler".into()),
                    reporting_instance: Some("floor".into()),
                    ..Default::default()
                };
                Api::<Event>::namespaced(clients.null_scheduler.clone(), ns)
                    .create(&PostParams::default(), &event)
                    .await
                    .map(|_| ())
            }
        }
        .with_context(|| format!("null scheduler write on {ns}/{}", job.name))
    };
    let statuses = share(writes.unit_status_patches, n, i);
    let events = share(writes.event_creates, n, i);
    let reasons = ["Queued", "Released", "Finished", "Waiting"];
    let mut plan = Vec::new();
    plan.extend((0..share(writes.unit_patches, n, i)).map(|_| Write::UnitMeta));
    plan.extend((0..statuses.min(2)).map(Write::UnitStatus));
    plan.extend((0..share(writes.job_patches, n, i)).map(|_| Write::Unsuspend));
    plan.extend((2..statuses.max(2)).map(Write::UnitStatus));
    plan.extend((0..events).map(|k| Write::Event(reasons[(k as usize).min(reasons.len() - 1)])));
    for w in plan {
        write(w).await?;
    }
    Ok(())
}

impl std::fmt::Debug for FloorClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloorClients").finish_non_exhaustive()
    }
}

#[derive(Clone, Copy, Debug)]
enum Write {
    UnitMeta,
    UnitStatus(u64),
    Unsuspend,
    Event(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        let total: u64 = (0..7).map(|i| share(23, 7, i)).sum();
        assert_eq!(total, 23);
        assert_eq!(share(14, 7, 3), 2);
    }

    #[test]
    fn unit_matches_the_webhook_shape() -> Result<()> {
        let shape = Shape::new("t", 30, 30, 5)?;
        let unit = unit_manifest(&shape, 0, Some("u-1"))?;
        assert_eq!(unit.spec.queue, shape.leaves[0].name);
        assert_eq!(unit.spec.pod_set.len(), 1);
        assert_eq!(unit.spec.priority, Some(50));
        Ok(())
    }
}
