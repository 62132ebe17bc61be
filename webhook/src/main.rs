//! `koord-queue-webhook`: see the crate documentation.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    koord_queue_webhook::run(koord_queue_webhook::Args::parse()).await
}
