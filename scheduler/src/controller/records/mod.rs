//! Compact records of the watched objects: only what the controller decides
//! on, so that 100,000 cached units stay small (pod templates are dropped).

mod cluster;
mod core_defs;
mod job;
mod unit;

pub use cluster::{
    DetailsDigest, NamespaceQuotaRecord, NodeRecord, PublishedQueueStatus, QUEUE_FOR_QUOTA_LABEL,
    QueueRecord, QuotaRecord,
};
pub use core_defs::{queue_for_quota, root_capacity};
pub use job::{Grouping, JobKey, JobRecord, PodRecord};
pub use unit::{DEFAULT_GRACE_SECONDS, QUOTA_FINALIZER, UnitRecord, max_run_ms};

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use koord_queue_api::jobs::{self, JobAdapter};

/// `namespace/name`.
pub type Key = Arc<str>;

/// Builds a `namespace/name` key.
pub fn key(namespace: &str, name: &str) -> Key {
    Arc::from(format!("{namespace}/{name}"))
}

/// The name in a `namespace/name` key (records read names from their keys
/// rather than keep them twice).
pub fn name_in(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, name)| name)
}

/// A name that many records repeat: a namespace, queue, quota or job kind.
/// 100,000 units name 50 namespaces and 1,000 queues; one shared copy of
/// each saves a heap string per field and record (~15 MB at 100,000 units).
pub type Name = Arc<str>;

/// An object's uid as records keep it: one shared copy of each. A unit's
/// job uid is kept by its unit's record (twice: owner and consumer), its
/// job's record and two pod indexes; as strings that was ~360 bytes per
/// unit, 36 MB at 100,000 units.
pub type Uid = Arc<str>;

struct Interner {
    names: HashSet<Arc<str>>,
    /// Size at which strings no record holds any more are dropped.
    purge_at: usize,
}

impl Interner {
    fn new() -> Self {
        Self {
            names: HashSet::new(),
            purge_at: 1024,
        }
    }

    fn shared(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        if self.names.len() >= self.purge_at {
            // Strings of deleted objects: only the set holds them. Purged
            // when the set has doubled, so each insert pays O(1) of it.
            self.names.retain(|n| Arc::strong_count(n) > 1);
            self.purge_at = (self.names.len() * 2).max(1024);
        }
        let shared: Arc<str> = Arc::from(name);
        self.names.insert(shared.clone());
        shared
    }
}

static NAMES: LazyLock<Mutex<Interner>> = LazyLock::new(|| Mutex::new(Interner::new()));
static UIDS: LazyLock<Mutex<Interner>> = LazyLock::new(|| Mutex::new(Interner::new()));

/// The shared copy of `name`.
pub fn intern(name: &str) -> Name {
    // The set is never left half-updated, so a poisoned lock is still usable.
    NAMES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .shared(name)
}

/// The shared copy of `uid`.
pub fn intern_uid(uid: &str) -> Uid {
    UIDS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .shared(uid)
}

/// Parses a resourceVersion for ordering our own writes against watch events.
/// etcd-backed resourceVersions are increasing integers; anything else is
/// treated as unordered.
pub fn rv_number(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

/// Labels of a unit, sorted by key. A `BTreeMap` node costs ~550 bytes even
/// for the one label a unit usually carries; 100,000 units are cached. Keys
/// and values are shared names: units repeat the same few keys, and values
/// such as the quota name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(Name, Name)]>);

impl Labels {
    /// The labels of `map`.
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self(map.iter().map(|(k, v)| (intern(k), intern(v))).collect())
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, v)| v.as_ref())
    }

    /// As a map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// Finds the adapter of a job kind by apiVersion and kind.
pub fn adapter_for(api_version: &str, kind: &str) -> Option<&'static dyn JobAdapter> {
    jobs::for_api_version(api_version, kind)
}

#[cfg(test)]
mod tests {
    use super::{JobRecord, NAMES, Name, PodRecord, QUOTA_FINALIZER, UnitRecord, intern};
    use koord_queue_api::jobs::JobState;
    use koord_queue_api::jobs::watched::WatchedJob;
    use koord_queue_api::{jobs, keys};
    use std::sync::{Arc, PoisonError};

    #[test]
    fn repeated_names_share_one_copy_and_unused_ones_are_dropped() {
        // Other tests intern concurrently: names unique to this test.
        let a = intern("intern-test-namespace");
        let b = intern(&String::from("intern-test-namespace"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "intern-test-namespace");
        drop((a, b));
        // Enough new names to pass the purge size: the unused ones go.
        let kept: Vec<Name> = (0..3000)
            .map(|i| intern(&format!("intern-test-{i}")))
            .collect();
        let set = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(!set.names.contains("intern-test-namespace"));
        assert!(kept.iter().all(|n| set.names.contains(&**n)));
    }

    #[test]
    fn release_and_hold_patches_touch_only_the_hold_fields() {
        let tf = jobs::for_kind("kubeflow.org", "TFJob").unwrap();
        let (release, hold) = (jobs::release_write(tf), jobs::hold_write(tf));
        assert_eq!(
            release,
            jobs::HoldWrite::Merge(serde_json::json!({
                "metadata": { "annotations": { keys::SUSPEND_ANNOTATION: null } },
                "spec": { "runPolicy": { "suspend": false } }
            }))
        );
        assert_eq!(
            hold,
            jobs::HoldWrite::Merge(serde_json::json!({
                "metadata": { "annotations": { keys::SUSPEND_ANNOTATION: "true" } },
                "spec": { "runPolicy": { "suspend": true } }
            }))
        );
        let job = jobs::for_kind("batch", "Job").unwrap();
        assert_eq!(
            jobs::release_write(job),
            jobs::HoldWrite::Merge(serde_json::json!({ "spec": { "suspend": false } }))
        );
        assert_eq!(
            jobs::hold_write(job),
            jobs::HoldWrite::Merge(serde_json::json!({ "spec": { "suspend": true } }))
        );
    }

    fn object(value: serde_json::Value) -> WatchedJob {
        WatchedJob::from_value(&value).unwrap()
    }

    #[test]
    fn a_job_record_reads_the_hold_from_fields_or_annotations() {
        let batch = jobs::for_kind("batch", "Job").unwrap();
        let job = |suspend: bool| {
            object(serde_json::json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": { "name": "j", "namespace": "ns", "uid": "u-1",
                              "annotations": { keys::QUEUE_UNIT_ANNOTATION: "j-1" } },
                "spec": { "suspend": suspend, "template": { "spec": { "containers": [] } } },
                "status": { "active": 1 },
            }))
        };
        let held = JobRecord::from_object(batch, job(true)).unwrap();
        assert!(held.held);
        assert_eq!(
            (held.name.as_str(), &*held.uid, held.unit_name()),
            ("j", "u-1", "j-1")
        );
        let running = JobRecord::from_object(batch, job(false)).unwrap();
        assert!(!running.held);
        assert_eq!(running.state, JobState::Running);

        // A Kubeflow job held by the annotation alone.
        let tf = jobs::for_kind("kubeflow.org", "TFJob").unwrap();
        let tfjob = object(serde_json::json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": { "name": "t", "namespace": "ns",
                          "annotations": { keys::QUEUE_UNIT_ANNOTATION: "t-1",
                                           keys::SUSPEND_ANNOTATION: "true" } },
            "spec": { "tfReplicaSpecs": {} },
        }));
        assert!(JobRecord::from_object(tf, tfjob).unwrap().held);

        // Not queued by Koord-Queue: no record.
        let mut plain = job(false);
        plain.metadata.annotations = None;
        assert!(JobRecord::from_object(batch, plain).is_none());
    }

    fn pod(metadata: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": { "containers": [] },
            "status": { "phase": "Running" },
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_its_jobs_by_owner_and_still_by_its_label_once_orphaned() {
        let owned = pod(serde_json::json!({
            "name": "p", "namespace": "ns",
            "labels": { "batch.kubernetes.io/controller-uid": "uid-j" },
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                  "uid": "uid-j", "controller": true }],
        }));
        let rec = PodRecord::from_pod(&owned).unwrap();
        assert_eq!((rec.job_uid.as_str(), rec.alive), ("uid-j", true));
        // `kubectl delete job j --cascade=orphan`: the owner reference goes,
        // the label stays (older clusters: `controller-uid`).
        for label in ["batch.kubernetes.io/controller-uid", "controller-uid"] {
            let orphaned = pod(serde_json::json!({
                "name": "p", "namespace": "ns", "labels": { label: "uid-j" },
            }));
            assert_eq!(PodRecord::from_pod(&orphaned).unwrap().job_uid, "uid-j");
        }
        // Terminating: alive until it is gone.
        let terminating = pod(serde_json::json!({
            "name": "p", "namespace": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": { "batch.kubernetes.io/controller-uid": "uid-j" },
        }));
        assert!(PodRecord::from_pod(&terminating).unwrap().alive);
        // A child's pod (a JobSet's Job's) is charged by the webhook to the
        // queued job that pays for it, whatever its owner.
        let charged = pod(serde_json::json!({
            "name": "p", "namespace": "ns",
            "labels": { keys::CHARGED_TO_LABEL: "uid-jobset",
                        "batch.kubernetes.io/controller-uid": "uid-child-job" },
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "js-w-0",
                                  "uid": "uid-child-job", "controller": true }],
        }));
        assert_eq!(PodRecord::from_pod(&charged).unwrap().job_uid, "uid-jobset");
        // A pod that runs for no job.
        let plain = pod(serde_json::json!({ "name": "p", "namespace": "ns" }));
        assert!(PodRecord::from_pod(&plain).is_none());
    }

    fn unit(metadata: serde_json::Value, spec: serde_json::Value) -> UnitRecord {
        let mut value = serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": "u", "namespace": "ns" },
            "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                       "namespace": "ns", "uid": "uid-j" },
                      "queue": "q", "resource": { "cpu": "2" } },
        });
        if let (Some(into), Some(from)) = (value["metadata"].as_object_mut(), metadata.as_object())
        {
            into.extend(from.clone());
        }
        if let (Some(into), Some(from)) = (value["spec"].as_object_mut(), spec.as_object()) {
            into.extend(from.clone());
        }
        UnitRecord::from_unit(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn a_jobs_uid_is_kept_once_by_its_unit_and_its_job() {
        let owned = unit(
            serde_json::json!({ "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                "name": "j", "uid": "uid-shared-j" }] }),
            serde_json::json!({ "consumerRef": { "apiVersion": "batch/v1", "kind": "Job",
                "name": "j", "namespace": "ns", "uid": "uid-shared-j" } }),
        );
        let job = JobRecord::from_object(
            jobs::for_kind("batch", "Job").unwrap(),
            object(serde_json::json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": { "name": "j", "namespace": "ns", "uid": "uid-shared-j",
                              "annotations": { keys::QUEUE_UNIT_ANNOTATION: "u" } },
                "spec": { "suspend": true, "template": { "spec": { "containers": [] } } },
            })),
        )
        .unwrap();
        let (owner, consumer) = (owned.owner_uid.unwrap(), owned.consumer_uid.unwrap());
        assert!(Arc::ptr_eq(&owner, &consumer) && Arc::ptr_eq(&owner, &job.uid));
        assert_eq!(&*job.uid, "uid-shared-j");
    }

    #[test]
    fn a_unit_names_the_job_it_paid_for_without_its_owner_reference() {
        let orphaned = unit(
            serde_json::json!({ "finalizers": [QUOTA_FINALIZER] }),
            serde_json::json!({}),
        );
        assert_eq!(orphaned.owner_uid, None);
        assert_eq!(orphaned.consumer_uid.as_deref(), Some("uid-j"));
        assert_eq!(
            orphaned.job_uids().map(|u| &**u).collect::<Vec<_>>(),
            ["uid-j"]
        );
        assert!(orphaned.guarded);
        let owned = unit(
            serde_json::json!({ "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                "name": "j", "uid": "uid-j" }] }),
            serde_json::json!({}),
        );
        assert_eq!(
            owned.job_uids().map(|u| &**u).collect::<Vec<_>>(),
            ["uid-j"],
            "once"
        );
        assert!(!owned.guarded);
        assert_eq!(owned.finalizer_at, None);
    }

    #[test]
    fn a_unit_knows_where_its_quota_finalizer_is() {
        let first = unit(
            serde_json::json!({ "finalizers": [QUOTA_FINALIZER, "other.example/keep"] }),
            serde_json::json!({}),
        );
        assert_eq!(first.finalizer_at, Some(0));
        let second = unit(
            serde_json::json!({ "finalizers": ["other.example/keep", QUOTA_FINALIZER] }),
            serde_json::json!({}),
        );
        assert!(second.guarded);
        assert_eq!(second.finalizer_at, Some(1));
    }

    #[test]
    fn a_run_bound_includes_the_pods_grace_period() {
        let bounded = |grace: Option<i64>| {
            let mut template = serde_json::json!({ "spec": { "containers": [] } });
            if let Some(g) = grace {
                template["spec"]["terminationGracePeriodSeconds"] = g.into();
            }
            unit(
                serde_json::json!({}),
                serde_json::json!({ "maxRunSeconds": 600,
                    "podSet": [{ "name": "main", "count": 2, "template": template }] }),
            )
            .max_run_ms
        };
        // At its deadline the job's pods are deleted and run out their grace.
        assert_eq!(bounded(Some(120)), Some(720_000));
        assert_eq!(bounded(Some(0)), Some(600_000));
        // The API server's default, 30 s, when the template says nothing.
        assert_eq!(bounded(None), Some(630_000));
        // No deadline, no bound.
        let unbounded = unit(serde_json::json!({}), serde_json::json!({}));
        assert_eq!(unbounded.max_run_ms, None);
    }
}
