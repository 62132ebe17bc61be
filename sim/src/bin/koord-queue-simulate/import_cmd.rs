//! `import`: traces (and objects to run them against) from other sources.

use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use koord_queue_sim::import::objects::to_yaml;
use koord_queue_sim::import::swf::{QuotaBy, SwfOptions, objects, read_swf};
use koord_queue_sim::trace::write_trace;

/// The sources.
#[derive(Debug, clap::Subcommand)]
pub enum Import {
    /// A log of the Parallel Workloads Archive (Standard Workload Format).
    Swf(SwfArgs),
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
    }
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
