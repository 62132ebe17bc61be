//! `koord-queue-webhook`: see the crate documentation.

use clap::Parser;

// Decoding reviews and building units (serde_json, many small allocations)
// left glibc malloc sorting free lists a third of the time; see
// docs/performance.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    koord_queue_webhook::run(koord_queue_webhook::Args::parse()).await
}
