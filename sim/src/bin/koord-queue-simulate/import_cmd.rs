//! `import`: traces (and objects to run them against) from other sources.

use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use koord_queue_sim::import::objects::to_yaml;
use koord_queue_sim::import::shape;
use koord_queue_sim::import::swf::{QuotaBy, SwfOptions, objects, read_swf};
use koord_queue_sim::shape::named;
use koord_queue_sim::trace::write_trace;

/// The sources.
#[derive(Debug, clap::Subcommand)]
pub enum Import {
    /// A log of the Parallel Workloads Archive (Standard Workload Format).
    Swf(SwfArgs),
    /// The benchmark's shape: the stream and quota tree `bench-e2e` runs.
    Shape(ShapeArgs),
}

/// Arguments of `import shape`.
#[derive(Debug, clap::Args)]
pub struct ShapeArgs {
    /// `1k`, `15k` (Kueue's baseline), `50k` (Kueue's large scale) or a
    /// number of jobs, as `bench-e2e --scale`.
    #[arg(long, default_value = "15k")]
    scale: String,
    /// `baseline` (Kueue's) or `one-large-class` (three queues of large
    /// jobs among 27 of small ones under one parent), as `bench-e2e --shape`.
    #[arg(long, default_value = "baseline")]
    shape: String,
    /// Merged into the spec of every leaf's Queue, written with the objects
    /// (`bench-e2e --queue-spec`), e.g.
    /// `{"reserveHead":{"abovePriority":150},"preemption":{"withinQuota":"LowerPriority"}}`.
    #[arg(long)]
    queue_spec: Option<String>,
    /// Each job's run bound is its class's runtime times this
    /// (`bench-e2e --run-bound-factor`).
    #[arg(long)]
    run_bound_factor: Option<f64>,
    /// Every class's arrival interval and runtime times this
    /// (`bench-e2e --slow-down`).
    #[arg(long, default_value_t = 1.0, value_parser = koord_queue_sim::shape::parse_slow_down)]
    slow_down: f64,
    /// The trace to write.
    #[arg(long)]
    out: PathBuf,
    /// The objects to write: the quota tree and the configuration.
    #[arg(long)]
    objects_out: Option<PathBuf>,
    /// Scales the parents' quotas and the root capacity of the objects (1:
    /// the benchmark's, which the stream overloads by about 18 %).
    #[arg(long, default_value_t = 1.0)]
    capacity_factor: f64,
}

/// Arguments of `import swf`.
#[derive(Debug, clap::Args)]
pub struct SwfArgs {
    /// The log (`.swf`).
    log: PathBuf,
    /// The trace to write.
    #[arg(long)]
    out: PathBuf,
    /// Objects to run it against: a fair-sharing parent quota as large as
    /// the machine (the header's MaxProcs) with a child per quota the jobs
    /// name, and the configuration.
    #[arg(long)]
    objects_out: Option<PathBuf>,
    /// What each job is charged to.
    #[arg(long, value_enum, default_value = "user")]
    quota_by: QuotaBy,
    /// The quota of `--quota-by one`, and the parent of the others.
    #[arg(long, default_value = "swf")]
    quota: String,
    /// Namespace of the jobs.
    #[arg(long, default_value = "swf")]
    namespace: String,
    /// Cpu of one processor (millicores).
    #[arg(long, default_value_t = 1000)]
    cpu_per_processor: i64,
    /// Request each processor's memory too.
    #[arg(long)]
    memory: bool,
    /// The requested time bounds each job's run.
    #[arg(long)]
    bound: bool,
}

fn create(path: &Path) -> Result<BufWriter<std::fs::File>> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(BufWriter::new(file))
}

/// `import …`.
pub fn run(import: Import) -> Result<()> {
    match import {
        Import::Swf(args) => swf(&args),
        Import::Shape(args) => shape(&args),
    }
}

fn shape(args: &ShapeArgs) -> Result<()> {
    let shape = named(&args.shape, &args.scale, None, None, None)?
        .slowed(args.slow_down)
        .with_run_bounds(args.run_bound_factor);
    let queue_spec = match &args.queue_spec {
        Some(text) => Some(serde_json::from_str::<serde_json::Value>(text)?),
        None => None,
    };
    let jobs = shape::trace(&shape);
    write_trace(create(&args.out)?, &jobs)?;
    eprintln!("{} jobs written to {}", jobs.len(), args.out.display());
    if let Some(path) = &args.objects_out {
        std::fs::write(
            path,
            to_yaml(&shape::objects(
                &shape,
                args.capacity_factor,
                queue_spec.as_ref(),
            ))?,
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn swf(args: &SwfArgs) -> Result<()> {
    let options = SwfOptions {
        quota_by: args.quota_by,
        quota: args.quota.clone(),
        namespace: args.namespace.clone(),
        cpu_per_processor_milli: args.cpu_per_processor,
        memory: args.memory,
        bound: args.bound,
    };
    let file = std::fs::File::open(&args.log)
        .with_context(|| format!("opening {}", args.log.display()))?;
    let trace = read_swf(BufReader::new(file), &options)?;
    write_trace(create(&args.out)?, &trace.jobs)?;
    eprintln!(
        "{} jobs written to {} ({} skipped: no processors or never ran; {} quotas)",
        trace.jobs.len(),
        args.out.display(),
        trace.skipped,
        trace.quotas.len()
    );
    if let Some(path) = &args.objects_out {
        std::fs::write(path, to_yaml(&objects(&trace, &options))?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
