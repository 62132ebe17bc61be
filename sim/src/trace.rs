//! The trace: one job a line, as JSON (docs/simulate.md "Trace format").
//! What a job asks for (its pod sets), where it waits (quota or queue),
//! when it is submitted and how long it runs once released; what the real
//! system did with it (`observed`) when the trace comes from one.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Deserializer, Serialize};

/// One job of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceJob {
    /// Name of the job (and its unit); `job-<line>` when absent. Unique in
    /// its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the job.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The leaf ElasticQuota it is charged to (its quota label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// The Queue it waits in when it names no quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Its priority; absent: its class's value, else 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Its PriorityClass: the report's grouping, and its priority when
    /// `priority` is absent (a PriorityClass among the objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// When it is submitted, ms (of any epoch; the simulation starts at
    /// the first submission).
    pub submit_ms: i64,
    /// How long it runs once released, ms.
    pub runtime_ms: i64,
    /// Its run bound (`activeDeadlineSeconds`): its controller ends it then,
    /// and the scheduler may backfill it behind a reserving head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_bound_seconds: Option<i64>,
    /// Its groups of identical pods; the job holds their sum.
    #[serde(default)]
    pub pod_sets: Vec<TracePodSet>,
    /// Labels of its unit (for mapping and sorting plugins).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// What the real system did, when the trace was exported from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<Observed>,
}

fn default_namespace() -> String {
    "default".to_string()
}

/// A group of identical pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracePodSet {
    /// Name of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Number of pods.
    #[serde(default = "one")]
    pub count: i64,
    /// Requests of one pod: resource name to quantity (`"500m"`, `"2Gi"`,
    /// or a number).
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
    /// The pods' termination grace period (default 30 s): a bounded job
    /// holds its quota that long past its bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_seconds: Option<i64>,
}

fn one() -> i64 {
    1
}

/// A quantity as Kubernetes writes it; a JSON number is read as its text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Text {
            Text(String),
            Number(serde_json::Number),
        }
        Ok(match Text::deserialize(d)? {
            Text::Text(s) => Self(s),
            Text::Number(n) => Self(n.to_string()),
        })
    }
}

/// What the real system did with a job (times in the trace's ms).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observed {
    /// When it was released (first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_ms: Option<i64>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_ms: Option<i64>,
    /// When its unit was first seen waiting (the webhook's admission and
    /// the unit's create done): with `--admit-observed` the simulated unit
    /// arrives then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_ms: Option<i64>,
}

/// A line that is not a job.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Not a job of the format.
    #[error("trace line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The trace could not be read or written.
    #[error("trace: {0}")]
    Io(#[from] std::io::Error),
}

/// The jobs of a trace, one JSON job a line, read as they are asked for
/// (a million-job trace is not held whole); blank lines and lines starting
/// with `#` are skipped.
pub fn trace_jobs(reader: impl BufRead) -> impl Iterator<Item = Result<TraceJob, TraceError>> {
    reader
        .lines()
        .enumerate()
        .filter_map(|(i, line)| match line {
            Err(e) => Some(Err(TraceError::Io(e))),
            Ok(line) => {
                let text = line.trim();
                if text.is_empty() || text.starts_with('#') {
                    return None;
                }
                Some(serde_json::from_str(text).map_err(|e| TraceError::Line {
                    line: i + 1,
                    reason: e.to_string(),
                }))
            }
        })
}

/// Reads a whole trace (see [`trace_jobs`]).
pub fn read_trace(reader: impl BufRead) -> Result<Vec<TraceJob>, TraceError> {
    trace_jobs(reader).collect()
}

/// Writes a trace, one job a line.
pub fn write_trace<'a>(
    mut writer: impl Write,
    jobs: impl IntoIterator<Item = &'a TraceJob>,
) -> Result<(), TraceError> {
    for job in jobs {
        serde_json::to_writer(&mut writer, job).map_err(std::io::Error::from)?;
        writer.write_all(b"\n")?;
    }
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{Quantity, TraceJob, read_trace, write_trace};

    #[test]
    fn a_line_reads_with_defaults_and_numbers_as_quantities() {
        let text = "# a comment\n\n{\"submit_ms\":5,\"runtime_ms\":10,\"quota\":\"a\",\"pod_sets\":[{\"requests\":{\"cpu\":2,\"memory\":\"1Gi\"}}]}\n";
        let jobs = read_trace(text.as_bytes()).unwrap();
        assert_eq!(jobs.len(), 1);
        let job = &jobs[0];
        assert_eq!(job.namespace, "default");
        assert_eq!(job.pod_sets[0].count, 1);
        assert_eq!(job.pod_sets[0].requests["cpu"], Quantity("2".into()));
        let mut out = Vec::new();
        write_trace(&mut out, &jobs).unwrap();
        assert_eq!(read_trace(out.as_slice()).unwrap(), jobs);
    }

    #[test]
    fn a_bad_line_is_named() {
        let err = read_trace("{\"submit_ms\":1}\n{\"x\":1}".as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("trace line 1:"), "{err}");
        let ok: Result<TraceJob, _> = serde_json::from_str("{\"submit_ms\":1,\"runtime_ms\":2}");
        assert!(ok.is_ok());
    }
}
