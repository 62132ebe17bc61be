//! Memory probe of the decision core (architecture §9): loads 100,000 units into
//! 1,000 queues under the synthetic 3-level quota tree, runs a full cycle,
//! and prints the process's resident memory (VmRSS) and its peak (VmHWM).
//!
//! `cargo run --release -p koord-queue-core --bin core-memory [UNITS]`

use std::process::ExitCode;
use std::time::Instant;

use koord_queue_core::synthetic;

fn status_line(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown".to_string())
}

fn main() -> ExitCode {
    let units = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000usize);
    println!("before load: VmRSS {}", status_line("VmRSS:"));
    let start = Instant::now();
    let mut core = match synthetic::loaded(units, synthetic::LEAVES) {
        Ok(core) => core,
        Err(e) => {
            eprintln!("core-memory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let loaded = start.elapsed();
    let start = Instant::now();
    let out = core.run_cycle();
    let cycle = start.elapsed();
    let pending: usize = core.queues().map(|q| q.counts.pending).sum();
    println!(
        "units {} (pending {pending}, released {}), load {:?}, first cycle {:?}",
        core.unit_count(),
        out.decisions.len(),
        loaded,
        cycle
    );
    drop(out);
    println!("VmRSS {}", status_line("VmRSS:"));
    println!("VmHWM {}", status_line("VmHWM:"));
    ExitCode::SUCCESS
}
