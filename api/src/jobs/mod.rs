//! One small adapter per job kind behind one trait (design §5), shared by the
//! webhook (hold on admission, build the QueueUnit) and the scheduler (release,
//! follow the job's state).
//!
//! Adapters work on the job as JSON (`serde_json::Value`): the webhook receives
//! it raw in the AdmissionReview, the scheduler reads non-core kinds as dynamic
//! objects, and `hold`/`release` edit it in place so that callers compute the
//! JSON Patch (webhook) or merge patch (scheduler) from the difference.

use serde_json::Value;

use crate::resources::{QuantityError, Resources};

/// Identity of a job kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobKind {
    /// API group (`""` for the core group; `batch` for Jobs).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource (plural) name.
    pub plural: &'static str,
    /// Key of the chart value `extension.<key>.enable` that enables the kind
    /// (`batchjob`, `tf`, `pytorch`, `mpi`, `ray`, `spark`, `argo`).
    pub extension: &'static str,
}

impl JobKind {
    /// `group/version` (or `version` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// Lifecycle state of a job as its own status reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Not running yet (held, or released and starting).
    Pending,
    /// Its pods run.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully.
    Failed,
}

/// A homogeneous group of pods of a job.
#[derive(Clone, Debug, PartialEq)]
pub struct PodSetInfo {
    /// Name of the group (e.g. `main`, `Worker`, `head`, `driver`).
    pub name: String,
    /// Number of pods.
    pub count: i32,
    /// The pods' template (`PodTemplateSpec` JSON; `{}` when the kind has none).
    pub template: Value,
    /// Resources of one pod (Kubernetes' pod request rule).
    pub per_pod: Resources,
}

/// Why a job's requirements could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    /// A quantity is not valid.
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    /// A field has the wrong shape.
    #[error("{path}: {reason}")]
    Invalid {
        /// JSON path of the field, e.g. `spec.parallelism`.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// What Koord-Queue needs to know about one job kind.
pub trait JobAdapter: Send + Sync + std::fmt::Debug {
    /// The kind this adapter handles.
    fn kind(&self) -> &'static JobKind;

    /// Edits `job` so that it is held (design §5 "Hold on admit"). Idempotent.
    fn hold(&self, job: &mut Value);

    /// Edits `job` so that it is released (design §5 "Release"). Idempotent.
    fn release(&self, job: &mut Value);

    /// Whether `job` is held.
    fn is_held(&self, job: &Value) -> bool;

    /// The job's pod sets with counts, templates and per-pod resources.
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError>;

    /// The job's state from its status.
    fn state(&self, job: &Value) -> JobState;

    /// Name of the job's PriorityClass (default: the first pod set template's
    /// `spec.priorityClassName`).
    fn priority_class_name(&self, job: &Value) -> Option<String>;
}
