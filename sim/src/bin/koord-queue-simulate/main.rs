//! `koord-queue-simulate`: replays a trace against a cluster's quotas,
//! queues and scheduler configuration in virtual time (docs/simulate.md).
//!
//! - `run --objects cluster.yaml --trace trace.jsonl [--out r.json] [--html r.html]`
//! - `run --compare A.yaml B.yaml --trace trace.jsonl …`
//! - `import swf FILE`, `import shape --scale 15k`: traces from elsewhere;
//! - `export --since 24h`: the trace of a live cluster.

mod export_cmd;
mod import_cmd;
mod run_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// The simulation allocates per event; glibc's malloc cost the scheduler a
// third of its CPU (docs/performance.md), the same allocator helps here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Koord-Queue's simulator.
#[derive(Debug, Parser)]
#[command(name = "koord-queue-simulate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replays a trace against one configuration, or two (`--compare`).
    Run(run_cmd::RunArgs),
    /// Makes a trace from another source.
    #[command(subcommand)]
    Import(import_cmd::Import),
    /// Writes the trace of a live cluster: its QueueUnits of the last
    /// hours and their jobs (kubeconfig as kubectl finds it).
    Export(export_cmd::ExportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(&args),
        Command::Import(import) => import_cmd::run(import),
        Command::Export(args) => export_cmd::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("koord-queue-simulate: {error:#}");
            ExitCode::FAILURE
        }
    }
}
