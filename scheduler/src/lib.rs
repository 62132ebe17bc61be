//! Koord-Queue scheduler.
//!
//! [`core`] is the pure decision core (the `koord-queue-core` crate):
//! queues, units, the elastic quota tree and the plugin-driven scheduling
//! cycle, with no I/O.

pub use koord_queue_core as core;

mod app;
mod args;
pub mod controller;
pub mod forecast;
pub mod wait_view;

use std::process::ExitCode;

use koord_queue_runtime::{init_logging, shutdown_signal};

pub use app::{DEFAULT_CONFIG, Running, start};
pub use args::Args;

/// Runs the scheduler until SIGTERM/SIGINT; the exit code says how it ended.
pub async fn run(args: Args) -> ExitCode {
    init_logging(args.log_format, &args.log_level);
    let result = async {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client: {e}"))?;
        let running = start(args, client).await?;
        shutdown_signal().await;
        running.shutdown().await;
        anyhow::Ok(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("koord-queue-scheduler: {error:#}");
            ExitCode::FAILURE
        }
    }
}
