//! Every supported job kind, the extensions that enable them, and lookups
//! by kind and by extension key.

use std::sync::LazyLock;

use serde_json::Value;

use super::JobAdapter;
use super::argo::WorkflowAdapter;
use super::batch_job::BatchJobAdapter;
use super::jobset::JobSetAdapter;
use super::kubeflow::{MPI_JOB, PYTORCH_JOB, TF_JOB};
use super::pod::PodAdapter;
use super::pod_group::LWS_NAME_LABEL;
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

/// An extension: a chart value `extension.<key>.enable` and what it queues.
#[derive(Debug)]
pub struct Extension {
    /// Its key (`batchjob`, `tf`, …).
    pub key: &'static str,
    /// The kinds whose objects it queues.
    pub adapters: &'static [&'static dyn JobAdapter],
    /// Which of their objects.
    pub objects: ObjectFilter,
}

/// Which objects of its kinds an extension queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectFilter {
    /// Every one.
    Every,
    /// Those of namespaces that queue them (Pods: namespaces labelled
    /// `koord-queue/queue-pods=true`; a cluster has many more pods than it
    /// queues).
    InQueueingNamespaces,
    /// Those carrying the label (a LeaderWorkerSet's pods: an LWS has no
    /// suspend, its groups are queued as pods).
    Labelled(&'static str),
}

impl ObjectFilter {
    /// Whether `object` is one of those, in a namespace that queues such
    /// objects when `namespace_queues` says so.
    pub fn admits(&self, object: Option<&Value>, namespace_queues: bool) -> bool {
        match self {
            ObjectFilter::Every => true,
            ObjectFilter::InQueueingNamespaces => namespace_queues,
            ObjectFilter::Labelled(label) => object
                .and_then(|o| o.pointer("/metadata/labels"))
                .and_then(|labels| labels.get(*label))
                .is_some(),
        }
    }
}

/// Every extension, in chart order.
static EXTENSIONS: [Extension; 11] = [
    every("batchjob", &[&BatchJobAdapter]),
    every("tf", &[&TF_JOB]),
    every("pytorch", &[&PYTORCH_JOB]),
    every("mpi", &[&MPI_JOB]),
    every("ray", &[&RayJobAdapter, &RayClusterAdapter]),
    every("spark", &[&SparkApplicationAdapter]),
    every("argo", &[&WorkflowAdapter]),
    every("jobset", &[&JobSetAdapter]),
    every("trainjob", &[&TrainJobAdapter]),
    Extension {
        key: "pod",
        adapters: &[&PodAdapter],
        objects: ObjectFilter::InQueueingNamespaces,
    },
    Extension {
        key: LWS_EXTENSION,
        adapters: &[&PodAdapter],
        objects: ObjectFilter::Labelled(LWS_NAME_LABEL),
    },
];

/// An extension queueing every object of `adapters`.
const fn every(key: &'static str, adapters: &'static [&'static dyn JobAdapter]) -> Extension {
    Extension {
        key,
        adapters,
        objects: ObjectFilter::Every,
    }
}

/// The extension that queues LeaderWorkerSets: their groups are queued as
/// pods (an LWS has no suspend; its pods are gated), through the Pod kind.
pub const LWS_EXTENSION: &str = "lws";

static KEYS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| EXTENSIONS.iter().map(|e| e.key).collect());

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
    &KEYS
}

/// Every extension, in chart order.
pub fn extension_entries() -> &'static [Extension] {
    &EXTENSIONS
}

/// The adapters enabled by extension key `extension` (`lws`: the Pod kind).
pub fn for_extension(extension: &str) -> impl Iterator<Item = &'static dyn JobAdapter> + '_ {
    EXTENSIONS
        .iter()
        .filter(move |e| e.key == extension)
        .flat_map(|e| e.adapters.iter().copied())
}

/// The extensions that queue objects of `adapter`'s kind.
pub fn extensions_of(adapter: &dyn JobAdapter) -> impl Iterator<Item = &'static Extension> + '_ {
    EXTENSIONS
        .iter()
        .filter(move |e| e.adapters.iter().any(|a| a.kind() == adapter.kind()))
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
        // Each kind's own extension (JobKind::extension) queues it.
        for adapter in all() {
            let own = extensions_of(*adapter).find(|e| e.key == adapter.kind().extension);
            assert!(own.is_some(), "{}", adapter.kind().kind);
        }
    }

    #[test]
    fn the_lws_extension_queues_only_pods_of_a_leaderworkerset() {
        let pod = for_kind("", "Pod").unwrap();
        let keys: Vec<_> = extensions_of(pod).map(|e| (e.key, e.objects)).collect();
        assert_eq!(
            keys,
            [
                ("pod", ObjectFilter::InQueueingNamespaces),
                (LWS_EXTENSION, ObjectFilter::Labelled(LWS_NAME_LABEL)),
            ]
        );
        let lws_pod = serde_json::json!({"metadata": {"labels": {LWS_NAME_LABEL: "llama"}}});
        let plain = serde_json::json!({"metadata": {"labels": {"app": "x"}}});
        let lws = ObjectFilter::Labelled(LWS_NAME_LABEL);
        assert!(lws.admits(Some(&lws_pod), false));
        assert!(!lws.admits(Some(&plain), true));
        assert!(!lws.admits(None, true));
        assert!(ObjectFilter::InQueueingNamespaces.admits(Some(&plain), true));
        assert!(!ObjectFilter::InQueueingNamespaces.admits(Some(&lws_pod), false));
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
