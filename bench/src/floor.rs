//! The floor: what the API server allows for the benchmark's API work with
//! no scheduling logic at all. A null scheduler creates each job as the real
//! run stores it once held (suspended, with the webhook's annotations; in a
//! namespace the webhook does not watch) and the QueueUnit the webhook
//! builds for it, then issues, per job, the same writes the real scheduler
//! made in the saturated run, with the same content — unit metadata patches
//! (adoption), unit status patches, job patches (the unsuspend) and Events —
//! as fast as the API allows, with the scheduler's write concurrency, reading
//! each answer as the scheduler does (its resourceVersion alone). The
//! benchmark's job runtime and observers run exactly as in the real run
//! (they complete the released jobs with the same status writes).

use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use koord_queue_api::{QueueUnit, QueueUnitPhase, WriteAck, jobs, keys};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::runner::{self, Runner};
use super::shape::Shape;

/// Totals of each kind of write the null scheduler makes (spread evenly
/// over the jobs).
#[derive(Clone, Debug, Serialize)]
pub struct FloorWrites {
    /// Job reads (the webhook reads each held job back before creating its
    /// unit).
    pub job_reads: u64,
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
    /// Per job: the minimum of a release — the job read back, one unit, its adoption, status
    /// Enqueued, Dequeued, Running and Succeed, the unsuspend, and Events
    /// Queued, Released and Finished. Used without a saturated run to copy.
    pub fn default_for(jobs: usize) -> Self {
        let n = jobs as u64;
        Self {
            job_reads: n,
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

/// The scheduler's own conditions for `phase`, so that the objects weigh
/// the same.
fn conditions(phase: QueueUnitPhase, message: &str) -> Value {
    let at = Time(k8s_openapi::jiff::Timestamp::now());
    serde_json::to_value(phase.standard_conditions(None, message, &at)).unwrap_or(Value::Null)
}

fn now() -> Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or(Value::Null)
}

/// The manifest of job `i` as the real run stores it once the webhook has
/// held it: suspended, with the webhook's two annotations naming its queue
/// and its unit (`unit_name`).
pub fn held_job_manifest(shape: &Shape, i: usize, unit_name: &str) -> Value {
    let leaf = &shape.leaves[shape.jobs[i].leaf];
    let mut manifest = shape.job_manifest(i, true);
    manifest["metadata"]["annotations"] = json!({
        keys::QUEUE_UNIT_ANNOTATION: unit_name,
        keys::QUEUE_ANNOTATION: leaf.name,
    });
    manifest
}

/// The QueueUnit the webhook creates for job `i`, built by the same pure
/// function from the job as the webhook sees it: `created` (the API
/// server's defaults filled in, so the unit's pod template carries them as
/// in the real run) without the labels and selector that the API server
/// adds after admission.
pub fn unit_manifest(shape: &Shape, i: usize, created: &Job, unit_name: &str) -> Result<QueueUnit> {
    let job = &shape.jobs[i];
    let leaf = &shape.leaves[job.leaf];
    let class = &shape.classes[job.class];
    let manifest = shape.job_manifest(i, true);
    let mut admitted = serde_json::to_value(created)?;
    admitted["spec"]["template"]["metadata"]["labels"] =
        manifest["spec"]["template"]["metadata"]["labels"].clone();
    if let Some(spec) = admitted["spec"].as_object_mut() {
        spec.remove("selector");
    }
    let adapter = jobs::for_kind("batch", "Job").context("the Job adapter")?;
    let placement = jobs::UnitPlacement {
        namespace: leaf.namespace.clone(),
        job_name: job.name.clone(),
        unit_name: unit_name.to_string(),
        queue: leaf.name.clone(),
        priority_class_name: Some(class.name.to_string()),
        priority: class.priority,
    };
    jobs::queue_unit(adapter, &admitted, placement)
        .map_err(|e| anyhow!("unit of {}: {e}", job.name))
}

/// The `k`-th status write of a unit, in the order and with the content the
/// scheduler writes them in the saturated run: the release (Dequeued, with
/// admissions and conditions) before the unsuspend, Succeed after it; any
/// further writes are phase Enqueued, Running, then changes of why it waits.
fn status_write(shape: &Shape, i: usize, k: u64) -> Value {
    let job = &shape.jobs[i];
    let leaf = &shape.leaves[job.leaf];
    let cpu = job.cpu.to_string();
    let status = match k {
        0 => {
            let message = format!(
                "released: cpu: {cpu} reserved in quota {} (borrowing idle capacity)",
                leaf.name
            );
            json!({
                "phase": "Dequeued", "message": message, "lastUpdateTime": now(),
                "lastAllocateTime": now(), "position": null, "attempts": 1,
                "admissions": [{ "name": "main", "replicas": 1, "running": 0, "resources": { "cpu": cpu } }],
                "conditions": conditions(QueueUnitPhase::Dequeued, &message),
            })
        }
        1 => json!({
            "phase": "Succeed", "message": "job succeeded", "lastUpdateTime": now(),
            "admissions": [], "position": null, "conditions": conditions(QueueUnitPhase::Succeed, "job succeeded"),
        }),
        2 => {
            json!({ "phase": "Enqueued", "message": format!("waiting in queue {}", leaf.name), "lastUpdateTime": now() })
        }
        3 => json!({
            "phase": "Running", "message": "running", "lastUpdateTime": now(),
            "conditions": conditions(QueueUnitPhase::Running, "running"),
        }),
        k => {
            let message = format!("quota {}: cpu {k} used, needs {cpu}", leaf.name);
            json!({ "position": null, "message": message,
                    "conditions": QueueUnitPhase::waiting_conditions(
                        "QuotaExceeded", &message, &Time(k8s_openapi::jiff::Timestamp::now())) })
        }
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
    // Answers are read as the scheduler and the webhook read them: for the
    // resourceVersion alone.
    let units = WriteAck::api::<QueueUnit>(&clients.null_scheduler, ns);
    // Named as the webhook names units: the job's name and 8 characters.
    let unit_name = koord_queue_webhook::unit_name(&job.name, &format!("{i:08x}"));
    let uid = {
        // One create slot for the job and its unit: in the real run the
        // webhook's unit create happens inside the job's create.
        let _permit = creates.acquire().await?;
        let manifest: Job = serde_json::from_value(held_job_manifest(shape, i, &unit_name))?;
        let created = runner::create(shape, runner, &clients.creator, i, &manifest).await?;
        let unit = unit_manifest(shape, i, &created, &unit_name)?;
        let jobs = Api::<Job>::namespaced(clients.unit_creator.clone(), ns);
        for _ in 0..share(writes.job_reads, n, i) {
            read_back(&jobs, &job.name).await?;
        }
        for _ in 0..share(writes.unit_creates, n, i) {
            match WriteAck::create(&clients.unit_creator, ns, &unit).await {
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
            Write::Unsuspend => WriteAck::api::<Job>(&clients.null_scheduler, ns)
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
    plan.extend((0..statuses.min(1)).map(Write::UnitStatus));
    plan.extend((0..share(writes.job_patches, n, i)).map(|_| Write::Unsuspend));
    plan.extend((1..statuses.max(1)).map(Write::UnitStatus));
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

/// Reads a job back as the webhook does (a quorum read, after the create).
async fn read_back(jobs: &Api<Job>, name: &str) -> Result<()> {
    jobs.get_opt(name)
        .await
        .context("reading the job back")?
        .map(|_| ())
        .ok_or_else(|| anyhow!("job {name} not found after its create"))
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
    fn the_unit_is_the_webhooks_unit_of_the_admitted_job() -> Result<()> {
        let shape = Shape::new("t", 30, 30, 5, crate::shape::CLASSES)?;
        let mut created = held_job_manifest(&shape, 0, "j-0000000a");
        assert_eq!(
            created["metadata"]["annotations"][keys::QUEUE_ANNOTATION],
            shape.leaves[0].name.as_str()
        );
        // What the API server adds: defaults (before admission), then the
        // selector and its labels (after).
        created["spec"]["template"]["spec"]["dnsPolicy"] = json!("ClusterFirst");
        created["spec"]["selector"] = json!({ "matchLabels": { "job-name": "j" } });
        created["spec"]["template"]["metadata"]["labels"]["job-name"] = json!("j");
        let created: Job = serde_json::from_value(created)?;
        let unit = unit_manifest(&shape, 0, &created, "j-0000000a")?;
        assert_eq!(unit.metadata.name.as_deref(), Some("j-0000000a"));
        assert_eq!(unit.spec.queue, shape.leaves[0].name);
        assert_eq!(unit.spec.priority, Some(50));
        let template = serde_json::to_value(&unit.spec.pod_set[0].template)?;
        assert_eq!(template["spec"]["dnsPolicy"], "ClusterFirst");
        assert!(template["metadata"]["labels"].get("job-name").is_none());
        Ok(())
    }

    #[test]
    fn the_release_comes_first_and_succeed_after_it() -> Result<()> {
        let shape = Shape::new("t", 30, 30, 5, crate::shape::CLASSES)?;
        assert_eq!(status_write(&shape, 0, 0)["status"]["phase"], "Dequeued");
        assert_eq!(status_write(&shape, 0, 1)["status"]["phase"], "Succeed");
        let finished = &status_write(&shape, 0, 1)["status"]["conditions"][3];
        assert_eq!(
            (finished["type"].as_str(), finished["status"].as_str()),
            (Some("Finished"), Some("True"))
        );
        Ok(())
    }
}
