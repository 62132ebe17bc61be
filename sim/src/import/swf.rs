//! The Standard Workload Format of the Parallel Workloads Archive
//! (<https://www.cs.huji.ac.il/labs/parallel/workload/swf.html>): one job a
//! line, 18 whitespace-separated fields, `-1` for unknown, `;` comments
//! (the header: `; MaxProcs: 128` and the like).
//!
//! A job becomes one pod set of `processors` pods, each requesting one
//! processor's cpu (`--cpu-per-processor`) and its memory; submit, wait and
//! run times (seconds) give the submission, the observed release and the
//! runtime; the requested time is its run bound. Its quota is named after
//! its user, group, queue or partition, or one quota for all.

use std::collections::BTreeSet;
use std::io::BufRead;

use koord_queue_api::Resources;

use super::objects::{QuotaSpec, config};
use crate::trace::{Observed, Quantity, TraceJob, TracePodSet};

/// What a log's jobs are charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum QuotaBy {
    /// One quota for every job.
    One,
    /// `user-<id>` (field 12).
    User,
    /// `group-<id>` (field 13).
    Group,
    /// `queue-<id>` (field 15).
    Queue,
    /// `partition-<id>` (field 16).
    Partition,
}

/// How a log is read.
#[derive(Clone, Debug)]
pub struct SwfOptions {
    /// What jobs are charged to.
    pub quota_by: QuotaBy,
    /// The quota of [`QuotaBy::One`] (and the parent of the others).
    pub quota: String,
    /// Namespace of every job.
    pub namespace: String,
    /// Cpu of one processor, millicores.
    pub cpu_per_processor_milli: i64,
    /// Request memory (fields 10, else 7); off: cpu only.
    pub memory: bool,
    /// The requested time (field 9) is the job's run bound.
    pub bound: bool,
}

impl Default for SwfOptions {
    fn default() -> Self {
        Self {
            quota_by: QuotaBy::User,
            quota: "swf".into(),
            namespace: "swf".into(),
            cpu_per_processor_milli: 1000,
            memory: false,
            bound: false,
        }
    }
}

/// A log read.
#[derive(Clone, Debug, Default)]
pub struct SwfTrace {
    /// Its jobs, in the log's order.
    pub jobs: Vec<TraceJob>,
    /// The header's `MaxProcs` (else `MaxNodes`), if given.
    pub max_procs: Option<i64>,
    /// Lines skipped: no processors, or never ran (cancelled).
    pub skipped: usize,
    /// The quotas the jobs name.
    pub quotas: BTreeSet<String>,
}

/// A line that is not an SWF job.
#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    /// Fewer than 18 fields, or one that is not a number.
    #[error("SWF line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The log could not be read.
    #[error("SWF: {0}")]
    Io(#[from] std::io::Error),
}

fn header_value(comment: &str, key: &str) -> Option<i64> {
    let rest = comment.trim_start_matches(';').trim();
    let value = rest.strip_prefix(key)?.trim_start().strip_prefix(':')?;
    value.split_whitespace().next()?.parse().ok()
}

/// Reads an SWF log.
pub fn read_swf(reader: impl BufRead, options: &SwfOptions) -> Result<SwfTrace, SwfError> {
    let mut out = SwfTrace::default();
    let (mut procs, mut nodes) = (None, None);
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if text.starts_with(';') {
            procs = procs.or(header_value(text, "MaxProcs"));
            nodes = nodes.or(header_value(text, "MaxNodes"));
            continue;
        }
        let bad = |reason: String| SwfError::Line {
            line: i + 1,
            reason,
        };
        let fields: Vec<f64> = text
            .split_whitespace()
            .map(|f| {
                f.parse::<f64>()
                    .map_err(|_| bad(format!("{f:?} is not a number")))
            })
            .collect::<Result<_, _>>()?;
        if fields.len() < 18 {
            return Err(bad(format!("{} fields, the format has 18", fields.len())));
        }
        // Fields are 1-based in the format's description.
        let f = |n: usize| fields[n - 1];
        let int = |n: usize| f(n).round() as i64;
        let processors = if int(8) > 0 { int(8) } else { int(5) };
        let run = int(4);
        if processors <= 0 || run < 0 {
            out.skipped += 1;
            continue;
        }
        let submit_ms = (f(2) * 1000.0).round() as i64;
        let quota = match options.quota_by {
            QuotaBy::One => options.quota.clone(),
            QuotaBy::User => format!("user-{}", int(12)),
            QuotaBy::Group => format!("group-{}", int(13)),
            QuotaBy::Queue => format!("queue-{}", int(15)),
            QuotaBy::Partition => format!("partition-{}", int(16)),
        };
        out.quotas.insert(quota.clone());
        let mut requests = std::collections::BTreeMap::new();
        requests.insert(
            "cpu".to_string(),
            Quantity(format!("{}m", options.cpu_per_processor_milli)),
        );
        let memory_kb = if int(10) > 0 { int(10) } else { int(7) };
        if options.memory && memory_kb > 0 {
            requests.insert("memory".to_string(), Quantity(format!("{memory_kb}Ki")));
        }
        let wait = int(3);
        out.jobs.push(TraceJob {
            name: Some(format!("job-{}", int(1))),
            namespace: options.namespace.clone(),
            quota: Some(quota),
            submit_ms,
            runtime_ms: run.saturating_mul(1000),
            run_bound_seconds: (options.bound && int(9) > 0).then(|| int(9)),
            pod_sets: vec![TracePodSet {
                name: Some("main".into()),
                count: processors,
                requests,
                grace_seconds: None,
            }],
            observed: (wait >= 0).then(|| Observed {
                release_ms: Some(submit_ms + wait * 1000),
                finish_ms: Some(submit_ms + (wait + run) * 1000),
                admitted_ms: None,
            }),
            ..TraceJob::default()
        });
    }
    out.max_procs = procs.or(nodes);
    Ok(out)
}

/// Objects to run a log against: a fair-sharing parent `options.quota`
/// whose max is the machine (`MaxProcs` processors) with one child per
/// quota the jobs name (min 0, weight 1), and a configuration whose root
/// capacity is the machine. With [`QuotaBy::One`], the one quota.
pub fn objects(trace: &SwfTrace, options: &SwfOptions) -> Vec<serde_json::Value> {
    let capacity = trace.max_procs.map(|p| {
        let mut r = Resources::new();
        r.set("cpu", p.saturating_mul(options.cpu_per_processor_milli));
        r
    });
    let mut docs = vec![config(capacity.as_ref())];
    let machine = QuotaSpec {
        name: options.quota.clone(),
        max: capacity.clone().unwrap_or_default(),
        namespaces: vec![options.namespace.clone()],
        ..QuotaSpec::default()
    };
    if options.quota_by == QuotaBy::One {
        docs.push(machine.to_object());
        return docs;
    }
    docs.push(
        QuotaSpec {
            is_parent: true,
            fair_sharing: true,
            namespaces: Vec::new(),
            ..machine
        }
        .to_object(),
    );
    for quota in &trace.quotas {
        docs.push(
            QuotaSpec {
                name: quota.clone(),
                parent: Some(options.quota.clone()),
                namespaces: vec![options.namespace.clone()],
                ..QuotaSpec::default()
            }
            .to_object(),
        );
    }
    docs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{QuotaBy, SwfOptions, objects, read_swf};
    use crate::cluster::Cluster;
    use crate::import::objects::to_yaml;

    /// A log in the archive's layout: header comments, then jobs — the
    /// second cancelled before it ran, the third with the allocated
    /// processors only.
    const LOG: &str = "\
; Version: 2.2
; MaxProcs: 8
;
    1     0    10    100   4  -1  -1   4  200  2048  1  7  3  -1  1  1  -1  -1
    2     5    -1     -1  -1  -1  -1   2  100    -1  5  7  3  -1  1  1  -1  -1
    3  12.5     0     50   2  -1  512  -1   -1    -1  1  9  3  -1  2  1  -1  -1
";

    #[test]
    fn jobs_map_to_pod_sets_times_and_quotas() {
        let options = SwfOptions {
            memory: true,
            bound: true,
            ..SwfOptions::default()
        };
        let t = read_swf(LOG.as_bytes(), &options).unwrap();
        assert_eq!((t.jobs.len(), t.skipped, t.max_procs), (2, 1, Some(8)));
        let first = &t.jobs[0];
        assert_eq!(first.name.as_deref(), Some("job-1"));
        assert_eq!(first.quota.as_deref(), Some("user-7"));
        assert_eq!((first.submit_ms, first.runtime_ms), (0, 100_000));
        assert_eq!(first.run_bound_seconds, Some(200));
        assert_eq!(first.pod_sets[0].count, 4);
        assert_eq!(first.pod_sets[0].requests["memory"].0, "2048Ki");
        let observed = first.observed.clone().unwrap();
        assert_eq!(
            (observed.release_ms, observed.finish_ms),
            (Some(10_000), Some(110_000))
        );
        let third = &t.jobs[1];
        assert_eq!((third.submit_ms, third.pod_sets[0].count), (12_500, 2));
        assert_eq!(third.pod_sets[0].requests["memory"].0, "512Ki");
        assert_eq!(third.run_bound_seconds, None);
    }

    #[test]
    fn its_objects_run_the_log() {
        let options = SwfOptions::default();
        let t = read_swf(LOG.as_bytes(), &options).unwrap();
        let cluster = Cluster::from_yaml(&[to_yaml(&objects(&t, &options)).unwrap()]).unwrap();
        assert_eq!(cluster.quotas.len(), 3);
        let report =
            crate::simulate(&cluster, &t.jobs, crate::engine::Settings::default()).unwrap();
        // 8 processors: both jobs run at once, released at the first cycle.
        assert_eq!(report.summary.released, 2);
        assert_eq!(report.summary.time_to_release.max, 0.02);
        // The real system let the first wait 10 s.
        assert!(report.by_quota[0].observed_time_to_release.is_some());
        let one = SwfOptions {
            quota_by: QuotaBy::One,
            ..SwfOptions::default()
        };
        assert_eq!(objects(&t, &one).len(), 2);
    }

    #[test]
    fn a_short_line_is_refused() {
        let err = read_swf("1 2 3\n".as_bytes(), &SwfOptions::default()).unwrap_err();
        assert!(err.to_string().contains("SWF line 1"), "{err}");
    }
}
