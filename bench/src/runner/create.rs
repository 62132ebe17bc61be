//! Creating the benchmark's jobs: one with retries (an existing job counts
//! as created), paced as Kueue's runner paces them, or as fast as allowed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};

use super::Runner;
use crate::shape::Shape;

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
    let started = Instant::now();
    // Failed attempts, and those of them that counted against the retries.
    let (mut failures, mut attempt) = (0u32, 0u32);
    loop {
        let error = match api.create(&PostParams::default(), manifest).await {
            Ok(created) => return Ok(created),
            // A retry of a create that was stored although its answer was
            // lost, too.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return read_existing(&api, runner, &job.name, started).await;
            }
            Err(error) => error,
        };
        runner.record_create_failure(i, failures == 0, &error);
        failures += 1;
        // The webhook's back-pressure (its backlog of units to create is
        // full, or the namespace's share of it) asks the client to come
        // back; a controller does, for as long as it takes, and so does the
        // runner: those refusals do not use up the retries of failures. It
        // backs off further than from a failure, as a controller's work
        // queue does: each refusal costs the API server a review.
        let busy = super::asks_to_retry(&error);
        if !busy {
            attempt += 1;
            if !runner.retry_due(attempt, started) {
                runner.record_create_given_up();
                return Err(error).with_context(|| format!("creating job {ns}/{}", job.name));
            }
        }
        let longest = Duration::from_secs(if busy { 10 } else { 2 });
        let wait = Duration::from_millis(100 << failures.min(7).saturating_sub(1));
        tokio::time::sleep(wait.min(longest)).await;
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

/// Paced creates in flight at most, unless told otherwise.
pub const PACED_IN_FLIGHT: usize = 256;

/// Creates every job on Kueue's arrival schedule: one sequence per (queue,
/// class), each waiting its class's interval before every create, and at
/// most `in_flight` creates of all sequences in flight.
///
/// Why the bound: Kueue's runner sends every sequence's creates over
/// client-go's one HTTP/2 connection; this client (HTTP/1.1) opens one
/// connection per create in flight, which at Kueue's large scale (3,000
/// sequences) are 3,000 TLS handshakes that starve the API server. Kueue's
/// baseline (90 sequences) stays below any bound above 90.
pub async fn create_paced(
    shape: Arc<Shape>,
    runner: Arc<Runner>,
    client: kube::Client,
    in_flight: usize,
    suspended: bool,
) -> Result<()> {
    let pool = Arc::new(tokio::sync::Semaphore::new(in_flight.max(1)));
    let mut sequences: Vec<Vec<usize>> = vec![Vec::new(); shape.leaves.len() * shape.classes.len()];
    for (i, job) in shape.jobs.iter().enumerate() {
        sequences[job.leaf * shape.classes.len() + job.class].push(i);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for sequence in sequences.into_iter().filter(|s| !s.is_empty()) {
        let (shape, runner, client) = (shape.clone(), runner.clone(), client.clone());
        let pool = pool.clone();
        tasks.spawn(async move {
            let interval = shape.classes[shape.jobs[sequence[0]].class].interval;
            for i in sequence {
                tokio::time::sleep(interval).await;
                let _slot = pool.acquire().await?;
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
