//! One small adapter per job kind behind one trait (architecture §5), shared by the
//! webhook (hold on admission, build the QueueUnit) and the scheduler (release,
//! follow the job's state).
//!
//! Adapters work on the job as JSON (`serde_json::Value`): the webhook receives
//! it raw in the AdmissionReview, the scheduler reads non-core kinds as dynamic
//! objects, and `hold`/`release` edit it in place so that callers compute the
//! JSON Patch (webhook) or merge patch (scheduler) from the difference.

use serde_json::Value;

use crate::resources::{QuantityError, Resources};

pub mod argo;
pub mod batch_job;
pub mod guard;
pub mod hold;
pub mod jobset;
pub mod json;
pub mod kubeflow;
pub mod pod;
pub mod pod_defaults;
pub mod pod_group;
pub mod pod_request;
pub mod ray;
pub mod registry;
pub mod spark;
#[cfg(test)]
mod test_support;
pub mod trainjob;
pub mod unit;
pub mod watched;

pub use hold::{FieldPath, HoldStyle, HoldWrite, merge_patch};
pub use json::{annotation, remove_annotation, set_annotation, set_path};
pub use pod_group::PodGrouping;
pub use pod_request::{pod_spec_requests, pod_template_requests};
pub use registry::{
    Extension, ObjectFilter, all, extension_entries, extensions, extensions_of, for_api_version,
    for_extension, for_kind, for_resource,
};
pub use unit::{UnitPlacement, queue_unit};

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

/// An object a job's size is computed from, read by the caller (the
/// webhook, and the scheduler when it re-creates a unit) and attached with
/// [`attach_size_input`] before the job's pod sets are asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeInput {
    /// Its kind (a TrainingRuntime, a ClusterTrainingRuntime).
    pub kind: &'static JobKind,
    /// Whether it is in the job's namespace (else cluster-scoped).
    pub namespaced: bool,
    /// Its name.
    pub name: String,
    /// Where the job names it (for the message when it does not exist).
    pub named_by: &'static str,
}

/// Where [`attach_size_input`] puts the object read for a job's size: a
/// top-level key no API object has. A copy with it attached is only ever
/// read for sizes; it is never sent to the API server.
pub const SIZE_INPUT_KEY: &str = "koordQueueSizeInput";

/// `job` with `input` (the object its [`JobAdapter::size_input`] names)
/// attached, for [`JobAdapter::pod_sets`] and [`JobAdapter::child_budget`].
pub fn attach_size_input(job: &mut Value, input: Value) {
    if let Some(object) = job.as_object_mut() {
        object.insert(SIZE_INPUT_KEY.to_string(), input);
    }
}

/// The write that lifts `adapter`'s hold (the scheduler's release).
pub fn release_write(adapter: &dyn JobAdapter) -> HoldWrite {
    adapter.hold_style().release_write()
}

/// The write that puts `adapter`'s hold back (the scheduler's send-back).
pub fn hold_write(adapter: &dyn JobAdapter) -> HoldWrite {
    adapter.hold_style().hold_write()
}

/// The labels that name a pod's group for [`JobAdapter::pod_group`]: a pod
/// watcher keeps the value of these and no other label.
pub const POD_GROUP_LABELS: &[&str] = &["ray.io/cluster"];

/// What Koord-Queue needs to know about one job kind.
pub trait JobAdapter: Send + Sync + std::fmt::Debug {
    /// The kind this adapter handles.
    fn kind(&self) -> &'static JobKind;

    /// How this kind is held (architecture §5): a description, which
    /// [`HoldStyle`] carries out for every kind. By default the native
    /// `spec.suspend` most kinds have (batch Job, JobSet, TrainJob,
    /// RayCluster, Workflow).
    fn hold_style(&self) -> HoldStyle {
        HoldStyle::SPEC_SUSPEND
    }

    /// Edits `job` so that it is held. Idempotent. Not overridden: a kind
    /// describes its hold in [`JobAdapter::hold_style`].
    fn hold(&self, job: &mut Value) {
        self.hold_style().hold(job);
    }

    /// Edits `job` so that it is released (the scheduler's release).
    /// Idempotent. Not overridden, like [`JobAdapter::hold`].
    fn release(&self, job: &mut Value) {
        self.hold_style().release(job);
    }

    /// Whether `job` is held ([`HoldStyle::is_held`]). Not overridden.
    fn is_held(&self, job: &Value) -> bool {
        self.hold_style().is_held(job)
    }

    /// The JSON paths (from the object's root) that [`JobAdapter::hold`] sets:
    /// the markers of the hold. Changing any of them is lifting the hold
    /// ([`guard::loosens_hold`]), which only the scheduler may do.
    fn hold_fields(&self) -> Vec<FieldPath> {
        self.hold_style().markers()
    }

    /// The longest `job` runs once released, in seconds, when its own
    /// spec bounds it (its controller ends it then); `None`: unbounded. A
    /// bounded unit may be backfilled behind a reserving head.
    fn max_run_seconds(&self, _job: &Value) -> Option<i64> {
        None
    }

    /// Why `job` cannot be held, if it cannot (a Pod that names its node
    /// would never meet the scheduler that its gate stops).
    fn cannot_hold(&self, job: &Value) -> Option<String> {
        self.hold_style().cannot_hold(job)
    }

    /// Whether the webhook labels this kind's queued objects
    /// ([`crate::keys::QUEUED_LABEL`]) so that the scheduler watches only
    /// those: for Pods, of which a cluster has many more than it queues.
    fn labels_queued(&self) -> bool {
        false
    }

    /// The job's pod sets with counts, templates and per-pod resources. A
    /// field of the wrong shape (a string count, a negative count, a template
    /// that is not an object, an invalid quantity) is an
    /// [`AdapterError::Invalid`] naming its JSON path.
    fn pod_sets(&self, job: &Value) -> Result<Vec<PodSetInfo>, AdapterError>;

    /// The job's state from its status.
    fn state(&self, job: &Value) -> JobState;

    /// The fields (JSON paths from the object's root) of its status that
    /// [`JobAdapter::state`] and [`JobAdapter::pod_group`] read.
    fn status_fields(&self) -> &'static [FieldPath];

    /// The fields that [`JobAdapter::is_held`] and [`JobAdapter::state`]
    /// read, apart from the annotations: the hold's field and the
    /// [`JobAdapter::status_fields`]. A watcher keeps these and drops the
    /// rest of each job ([`watched::WatchedJob`]).
    fn state_fields(&self) -> Vec<FieldPath> {
        let mut fields = vec![self.hold_style().field()];
        fields.extend_from_slice(self.status_fields());
        fields
    }

    /// The pods that keep running on this job's quota without being its own
    /// (controller-owned) pods: a label and its value, read from the kept
    /// [`JobAdapter::status_fields`]. A RayJob's pods belong to its RayCluster
    /// (`ray.io/cluster=<status.rayClusterName>`), which may outlive the
    /// job's success; the unit keeps its quota while any of them runs. The
    /// label is one of [`POD_GROUP_LABELS`].
    fn pod_group(&self, _job: &Value) -> Option<(&'static str, String)> {
        None
    }

    /// Whether this kind's objects are single pods that may form pod groups,
    /// and how ([`pod_group::PodGrouping`]): `Some` for Pods only. Asked
    /// instead of comparing kinds wherever a pod is treated as a pod.
    fn grouping(&self) -> Option<&'static dyn PodGrouping> {
        None
    }

    /// The object this job's size is computed from, which the caller must
    /// read and attach ([`attach_size_input`]) before asking for its pod
    /// sets: a TrainJob's runtime. `None` for kinds whose size is in the job.
    fn size_input(&self, _job: &Value) -> Option<Result<SizeInput, AdapterError>> {
        None
    }

    /// Name of the job's PriorityClass: a job-level setting where the kind has
    /// one (Kubeflow `runPolicy.schedulingPolicy.priorityClass`, Argo
    /// `podPriorityClassName`), else the first pod template that names one.
    /// `None` means the cluster's global default class applies.
    fn priority_class_name(&self, job: &Value) -> Option<String>;

    /// The share of this job's size that a child object may use, when this
    /// kind's controller creates such a child: of kind `child`, named
    /// `child_name` the way the controller names it (from `owner`, this job).
    /// `None` for anything this kind does not create — such an object is
    /// queued like any job. Its pods are counted in this job's unit, so a
    /// child passes unqueued only within its budget ([`guard::exceeds`]).
    fn child_budget(
        &self,
        owner: &Value,
        child: &'static JobKind,
        child_name: &str,
    ) -> Option<Result<Resources, AdapterError>> {
        let _ = (owner, child, child_name);
        None
    }
}

/// A positive whole number of seconds at `path` of `job`, if there is one.
pub fn deadline_seconds(job: &Value, path: &[&str]) -> Option<i64> {
    json::get_path(job, path)
        .and_then(Value::as_i64)
        .filter(|s| *s > 0)
}

/// Total resources of a job: each pod set's per-pod resources times its count.
pub fn total_resources(pod_sets: &[PodSetInfo]) -> Resources {
    guard::pod_sets_total(pod_sets, &[])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn total_multiplies_and_sums() {
        let r = |cpu: i64, mem: i64| {
            Resources::from_iter([("cpu".to_string(), cpu), ("memory".to_string(), mem)])
        };
        let sets = [
            PodSetInfo {
                name: "head".into(),
                count: 1,
                template: json!({}),
                per_pod: r(2000, 4 << 30),
            },
            PodSetInfo {
                name: "worker".into(),
                count: 3,
                template: json!({}),
                per_pod: r(4000, 8 << 30),
            },
            PodSetInfo {
                name: "idle".into(),
                count: 0,
                template: json!({}),
                per_pod: r(1000, 1),
            },
        ];
        let total = total_resources(&sets);
        assert_eq!(total.get("cpu"), 14_000);
        assert_eq!(total.get("memory"), 28 << 30);
        assert!(total_resources(&[]).is_zero());
    }
}
