//! CPU time and memory of processes and threads, from `/proc` (Linux): the
//! one reader of the benchmarks and of the tests that bound memory.

use std::collections::BTreeMap;

use serde::Serialize;

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`;
/// 100 on every common Linux).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// `(comm, utime + stime in ticks)` from a `stat` file's text.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
    // After the comm: state is field 3 of stat(5), utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// CPU ticks (user + system) used so far by process `pid` (`"self"` for this one).
pub fn process_ticks(pid: impl std::fmt::Display) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).map(|(_, t)| t)
}

/// CPU ticks of every live thread of this process: thread id → (name, ticks).
pub fn thread_ticks() -> BTreeMap<u64, (String, u64)> {
    let mut threads = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    for entry in entries.flatten() {
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|t| parse_stat(&t))
        {
            threads.insert(tid, stat);
        }
    }
    threads
}

/// A `VmHWM`/`VmRSS`-style field of `/proc/<pid>/status`, in KiB (`pid` a
/// number or `"self"`).
pub fn status_kib(pid: impl std::fmt::Display, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Resets this process's peak RSS (`VmHWM`) to its current RSS.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Load averages (1, 5, 15 minutes).
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// CPU times at one moment: this process, its threads, and other processes.
#[derive(Clone, Debug, Default)]
pub struct CpuSnapshot {
    /// This process.
    pub process: u64,
    /// Its threads.
    pub threads: BTreeMap<u64, (String, u64)>,
    /// Other processes by name.
    pub others: BTreeMap<String, u64>,
}

impl CpuSnapshot {
    /// Takes a snapshot; `others` are `(name, pid)` pairs.
    pub fn take(others: &[(String, u32)]) -> Self {
        Self {
            process: process_ticks("self").unwrap_or(0),
            threads: thread_ticks(),
            others: others
                .iter()
                .map(|(name, pid)| (name.clone(), process_ticks(pid).unwrap_or(0)))
                .collect(),
        }
    }
}

/// CPU seconds between two snapshots.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuUsage {
    /// The whole benchmark process (webhook + scheduler + runner).
    pub process_seconds: f64,
    /// Threads by name prefix (`kq-webhook`, `kq-scheduler`, the rest).
    pub by_thread_group: BTreeMap<String, f64>,
    /// Other processes (kube-apiserver, etcd).
    pub others: BTreeMap<String, f64>,
}

/// Thread group of a thread name: the component runtimes name their threads.
fn group_of(name: &str) -> &'static str {
    if name.starts_with("kq-webhook") {
        "webhook"
    } else if name.starts_with("kq-scheduler") {
        "scheduler"
    } else {
        "runner"
    }
}

/// CPU used between `before` and `after`.
pub fn usage(before: &CpuSnapshot, after: &CpuSnapshot, ticks_per_second: f64) -> CpuUsage {
    let secs = |t: u64| t as f64 / ticks_per_second;
    let mut groups: BTreeMap<String, f64> = BTreeMap::new();
    let mut accounted = 0u64;
    for (tid, (name, ticks)) in &after.threads {
        let start = before
            .threads
            .get(tid)
            .filter(|(n, _)| n == name)
            .map_or(0, |(_, t)| *t);
        let used = ticks.saturating_sub(start);
        accounted += used;
        *groups.entry(group_of(name).to_string()).or_default() += secs(used);
    }
    let process = after.process.saturating_sub(before.process);
    // Threads that ended between the snapshots are only in the process total.
    if process > accounted {
        *groups.entry("runner".to_string()).or_default() += secs(process - accounted);
    }
    CpuUsage {
        process_seconds: secs(process),
        by_thread_group: groups,
        others: after
            .others
            .iter()
            .map(|(name, t)| {
                (
                    name.clone(),
                    secs(t.saturating_sub(before.others.get(name).copied().unwrap_or(0))),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let text = "1234 (kq sched (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(parse_stat(text), Some(("kq sched (x)".into(), 300)));
    }

    #[test]
    fn reads_this_process() {
        assert!(process_ticks("self").is_some());
        assert!(status_kib("self", "VmRSS").is_some_and(|k| k > 0));
        assert!(!thread_ticks().is_empty());
    }
}
