//! Creating the benchmark's jobs: one with retries (an existing job counts
//! as created), paced as Kueue's runner paces them, or as fast as allowed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};

use super::Runner;
use crate::shape::{CLASSES, Shape};

/// Creates job `i` (with retries; an existing job counts as created).
pub async fn create_job(
    shape: &Shape,
    runner: &Runner,
    client: &kube::Client,
    i: usize,
    suspended: bool,
) -> Result<Job> {
    let manifest: Job = serde_json::from_value(shape.job_manifest(i, suspended))?;
    create(shape, runner, client, i, &manifest).await
}

/// Creates job `i` from `manifest` (with retries; an existing job counts as
/// created).
pub async fn create(
    shape: &Shape,
    runner: &Runner,
    client: &kube::Client,
    i: usize,
    manifest: &Job,
) -> Result<Job> {
    let job = &shape.jobs[i];
    let ns = &shape.leaves[job.leaf].namespace;
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    runner.mark_created(i);
    let mut last = None;
    let started = Instant::now();
    let mut attempt = 0u32;
    while runner.retry_due(attempt, started) {
        match api.create(&PostParams::default(), manifest).await {
            Ok(created) => return Ok(created),
            // A retry of a create that was stored although its answer was
            // lost, too.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return read_existing(&api, runner, &job.name, started).await;
            }
            Err(error) => {
                runner.record_create_failure(i, attempt == 0, &error);
                last = Some(error);
                let wait = Duration::from_millis(100 << attempt.min(4));
                tokio::time::sleep(wait.min(Duration::from_secs(2))).await;
            }
        }
        attempt += 1;
    }
    runner.record_create_given_up();
    match last {
        Some(error) => Err(error).with_context(|| format!("creating job {ns}/{}", job.name)),
        None => bail!("creating job {ns}/{}", job.name),
    }
}

/// Reads job `name` back after a create answered 409, retried as the
/// create is.
async fn read_existing(
    api: &Api<Job>,
    runner: &Runner,
    name: &str,
    started: Instant,
) -> Result<Job> {
    let mut attempt = 0u32;
    loop {
        match api.get(name).await {
            Ok(job) => return Ok(job),
            Err(error) if !runner.retry_due(attempt, started) => {
                return Err(error).context("reading an existing job");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
        attempt += 1;
    }
}

/// Creates every job on Kueue's arrival schedule: one sequence per (queue,
/// class), each waiting its class's interval before every create.
pub async fn create_paced(
    shape: Arc<Shape>,
    runner: Arc<Runner>,
    client: kube::Client,
    suspended: bool,
) -> Result<()> {
    let mut sequences: Vec<Vec<usize>> = vec![Vec::new(); shape.leaves.len() * CLASSES.len()];
    for (i, job) in shape.jobs.iter().enumerate() {
        sequences[job.leaf * CLASSES.len() + job.class].push(i);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for sequence in sequences.into_iter().filter(|s| !s.is_empty()) {
        let (shape, runner, client) = (shape.clone(), runner.clone(), client.clone());
        tasks.spawn(async move {
            let interval = CLASSES[shape.jobs[sequence[0]].class].interval;
            for i in sequence {
                tokio::time::sleep(interval).await;
                create_job(&shape, &runner, &client, i, suspended).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a creator task failed")??;
    }
    Ok(())
}

/// The order of a saturated run: round-robin over queues and classes.
pub fn interleaved(shape: &Shape) -> Vec<usize> {
    let mut order: Vec<usize> = (0..shape.jobs.len()).collect();
    order.sort_by_key(|&i| {
        let j = &shape.jobs[i];
        (j.seq, j.class, j.leaf)
    });
    order
}

/// Creates every job as fast as the API allows, `concurrency` at a time.
pub async fn create_saturated(
    shape: Arc<Shape>,
    runner: Arc<Runner>,
    client: kube::Client,
    concurrency: usize,
    suspended: bool,
) -> Result<()> {
    futures::stream::iter(interleaved(&shape))
        .map(|i| {
            let (shape, runner, client) = (shape.clone(), runner.clone(), client.clone());
            async move { create_job(&shape, &runner, &client, i, suspended).await }
        })
        .buffer_unordered(concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await
}
