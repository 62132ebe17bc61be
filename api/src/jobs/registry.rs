//! Every supported job kind, and lookups by kind and by extension key.

use super::JobAdapter;
use super::argo::WorkflowAdapter;
use super::batch_job::BatchJobAdapter;
use super::jobset::JobSetAdapter;
use super::kubeflow::{MPI_JOB, PYTORCH_JOB, TF_JOB};
use super::pod::PodAdapter;
use super::ray::{RayClusterAdapter, RayJobAdapter};
use super::spark::SparkApplicationAdapter;
use super::trainjob::TrainJobAdapter;

static ALL: [&dyn JobAdapter; 11] = [
    &BatchJobAdapter,
    &TF_JOB,
    &PYTORCH_JOB,
    &MPI_JOB,
    &RayJobAdapter,
    &RayClusterAdapter,
    &SparkApplicationAdapter,
    &WorkflowAdapter,
    &JobSetAdapter,
    &TrainJobAdapter,
    &PodAdapter,
];

/// Extension keys (chart values `extension.<key>.enable`), in chart order.
const EXTENSIONS: [&str; 11] = [
    "batchjob", "tf", "pytorch", "mpi", "ray", "spark", "argo", "jobset", "trainjob", "pod", "lws",
];

/// The extension that queues LeaderWorkerSets: their groups are queued as
/// pods (an LWS has no suspend; its pods are gated), through the Pod kind.
pub const LWS_EXTENSION: &str = "lws";

/// The adapters of every supported kind.
pub fn all() -> &'static [&'static dyn JobAdapter] {
    &ALL
}

/// The adapter of `group`/`kind`, whatever the version (the API server may
/// convert between served versions; `matchPolicy: Equivalent`). `group` is
/// `""` for the core group.
pub fn for_kind(group: &str, kind: &str) -> Option<&'static dyn JobAdapter> {
    ALL.iter()
        .copied()
        .find(|a| a.kind().group == group && a.kind().kind == kind)
}

/// The adapter of an object's `apiVersion` (`group/version`, or `version` for
/// the core group) and `kind`.
pub fn for_api_version(api_version: &str, kind: &str) -> Option<&'static dyn JobAdapter> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    for_kind(group, kind)
}

/// The adapter of the resource `plural` in `group` (for subresource
/// requests such as `/scale`, whose object is not the job).
pub fn for_resource(group: &str, plural: &str) -> Option<&'static dyn JobAdapter> {
    ALL.iter()
        .copied()
        .find(|a| a.kind().group == group && a.kind().plural == plural)
}

/// The extension keys that enable kinds, each once (`ray` covers RayJob and
/// RayCluster).
pub fn extensions() -> &'static [&'static str] {
    &EXTENSIONS
}

/// The adapters enabled by extension key `extension` (`lws`: the Pod kind).
pub fn for_extension(extension: &str) -> impl Iterator<Item = &'static dyn JobAdapter> + '_ {
    ALL.iter().copied().filter(move |a| {
        a.kind().extension == extension
            || (extension == LWS_EXTENSION && a.kind() == &super::pod::POD_KIND)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_unique_identity() {
        let n = all().len();
        assert_eq!(n, 11);
        let mut kinds: Vec<_> = all()
            .iter()
            .map(|a| (a.kind().group, a.kind().kind))
            .collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), n);
        let mut plurals: Vec<_> = all().iter().map(|a| a.kind().plural).collect();
        plurals.sort();
        plurals.dedup();
        assert_eq!(plurals.len(), n);
    }

    #[test]
    fn extensions_cover_exactly_the_kinds() {
        let mut from_kinds: Vec<_> = all().iter().map(|a| a.kind().extension).collect();
        from_kinds.dedup();
        from_kinds.push(LWS_EXTENSION);
        assert_eq!(from_kinds, extensions());
        let lws: Vec<_> = for_extension(LWS_EXTENSION)
            .map(|a| a.kind().kind)
            .collect();
        assert_eq!(lws, ["Pod"]);
        assert_eq!(for_extension("ray").count(), 2);
        assert_eq!(for_extension("batchjob").count(), 1);
        assert_eq!(for_extension("nope").count(), 0);
    }

    #[test]
    fn lookups_ignore_the_version() {
        let job = for_kind("batch", "Job").map(|a| a.kind().api_version());
        assert_eq!(job.as_deref(), Some("batch/v1"));
        assert_eq!(
            for_kind("ray.io", "RayCluster").map(|a| a.kind().plural),
            Some("rayclusters")
        );
        assert_eq!(
            for_api_version("ray.io/v1alpha1", "RayJob").map(|a| a.kind().plural),
            Some("rayjobs")
        );
        assert_eq!(
            for_api_version("kubeflow.org/v2beta1", "MPIJob").map(|a| a.kind().extension),
            Some("mpi")
        );
        assert!(for_kind("", "Job").is_none());
        assert!(for_api_version("v1", "Service").is_none());
        assert_eq!(
            for_api_version("v1", "Pod").map(|a| a.kind().extension),
            Some("pod")
        );
        assert!(for_kind("batch", "CronJob").is_none());
        assert!(for_kind("kubeflow.org", "job").is_none());
        assert_eq!(
            for_resource("kubeflow.org", "pytorchjobs").map(|a| a.kind().kind),
            Some("PyTorchJob")
        );
        assert!(for_resource("kubeflow.org", "PyTorchJob").is_none());
    }
}
