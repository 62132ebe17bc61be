//! Resource usage of a process from `/proc` (Linux): resident memory and CPU
//! time, for the memory benchmark.

use anyhow::{Context, Result};

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, fixed at
/// 100 by the kernel's user ABI on every architecture Linux reports it for).
pub const TICKS_PER_SECOND: u64 = 100;

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`, …).
pub fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// User + system CPU time of the process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces: count from after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15; the first after `)` is field 3.
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .context("malformed /proc/<pid>/stat")
    };
    Ok(ticks(11)? + ticks(12)?)
}
