//! `export`: the trace of a live cluster — its QueueUnits of the last hours
//! and, for batch Jobs, when they ended (`import/export.rs` turns each into
//! a job).

use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::QueueUnit;
use koord_queue_model::parse_duration;
use koord_queue_sim::import::export::{JobEnds, Skip, unit_job};
use koord_queue_sim::trace::write_trace;
use kube::api::{Api, ListParams};

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Units created within this much before now.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    since: Duration,
    /// The trace to write.
    #[arg(long)]
    out: PathBuf,
    /// Keep units still running, with the time they have run so far as
    /// their runtime (a lower bound).
    #[arg(long)]
    include_running: bool,
}

/// A batch Job's end: its completion, else the time its Failed condition
/// was set.
fn job_end(job: &Job) -> Option<i64> {
    let status = job.status.as_ref()?;
    if let Some(t) = &status.completion_time {
        return Some(t.0.as_millisecond());
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_millisecond())
}

/// Lists every object of `api`, a page at a time.
async fn list_all<K>(api: &Api<K>) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

async fn export(args: &ExportArgs) -> Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client")?;
    let units = list_all(&Api::<QueueUnit>::all(client.clone()))
        .await
        .context("listing QueueUnits")?;
    let mut ends = JobEnds::new();
    // Other kinds end when their unit's phase says so.
    match list_all(&Api::<Job>::all(client)).await {
        Ok(jobs) => {
            for job in &jobs {
                if let (Some(ns), Some(name), Some(end)) =
                    (&job.metadata.namespace, &job.metadata.name, job_end(job))
                {
                    ends.insert((ns.clone(), name.clone()), end);
                }
            }
        }
        Err(error) => eprintln!("batch Jobs not read ({error:#}): units' times only"),
    }
    let now_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    let since_ms = now_ms - i64::try_from(args.since.as_millis()).unwrap_or(i64::MAX);
    let mut jobs = Vec::new();
    let (mut old, mut waiting, mut running, mut unreadable) = (0, 0, 0, 0);
    for unit in &units {
        match unit_job(unit, since_ms, now_ms, &ends, args.include_running) {
            Ok(job) => jobs.push(job),
            Err(Skip::Old) => old += 1,
            Err(Skip::NeverReleased) => waiting += 1,
            Err(Skip::Running) => running += 1,
            Err(Skip::Unreadable) => unreadable += 1,
        }
    }
    jobs.sort_by(|a, b| {
        (a.submit_ms, &a.namespace, &a.name).cmp(&(b.submit_ms, &b.namespace, &b.name))
    });
    let file = std::fs::File::create(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    write_trace(BufWriter::new(file), &jobs)?;
    eprintln!(
        "{} jobs written to {}; left out: {old} older, {waiting} never released, {running} running, \
         {unreadable} unreadable",
        jobs.len(),
        args.out.display()
    );
    Ok(())
}

/// `export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(export(args))
}
