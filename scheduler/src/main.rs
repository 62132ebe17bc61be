//! `koord-queue-scheduler`: see the crate documentation.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    koord_queue_scheduler::run(koord_queue_scheduler::Args::parse()).await
}
