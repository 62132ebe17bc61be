//! Compact records of the watched objects: only what the controller decides
//! on, so that 100,000 cached units stay small (pod templates are dropped).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::jobs::{self, JobAdapter, JobState};
use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_api::{ElasticQuota, Queue, QueuePolicy, QueueUnit, Resources, keys};
use kube::ResourceExt;
use serde_json::Value;

/// `namespace/name`.
pub type Key = Arc<str>;

/// Builds a `namespace/name` key.
pub fn key(namespace: &str, name: &str) -> Key {
    Arc::from(format!("{namespace}/{name}"))
}

/// A name that many records repeat: a namespace, queue, quota or job kind.
/// 100,000 units name 50 namespaces and 1,000 queues; one shared copy of
/// each saves a heap string per field and record (~15 MB at 100,000 units).
pub type Name = Arc<str>;

struct Interner {
    names: HashSet<Name>,
    /// Size at which names no record holds any more are dropped.
    purge_at: usize,
}

static NAMES: LazyLock<Mutex<Interner>> = LazyLock::new(|| {
    Mutex::new(Interner {
        names: HashSet::new(),
        purge_at: 1024,
    })
});

/// The shared copy of `name`.
pub fn intern(name: &str) -> Name {
    // The set is never left half-updated, so a poisoned lock is still usable.
    let mut interner = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = interner.names.get(name) {
        return shared.clone();
    }
    if interner.names.len() >= interner.purge_at {
        // Names of deleted namespaces or queues: only the set holds them.
        interner.names.retain(|n| Arc::strong_count(n) > 1);
        interner.purge_at = (interner.names.len() * 2).max(1024);
    }
    let shared: Name = Arc::from(name);
    interner.names.insert(shared.clone());
    shared
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

/// What the controller knows of a QueueUnit.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitRecord {
    /// Namespace.
    pub namespace: Name,
    /// Name.
    pub name: String,
    /// resourceVersion of the observed object.
    pub resource_version: Option<u64>,
    /// Creation time, ms since the epoch.
    pub created_ms: i64,
    /// Queue named in the spec.
    pub queue: Name,
    /// The quota label, if any.
    pub quota: Option<Name>,
    /// Priority.
    pub priority: i32,
    /// Total resources.
    pub request: Resources,
    /// Labels (admission checks select units by them).
    pub labels: Labels,
    /// Kind of the job.
    pub job_kind: Name,
    /// Name of the job.
    pub job_name: String,
    /// Key of the job, made once: passes over every unit look it up.
    job: JobKey,
    /// Uid of the job once adopted (owner reference).
    pub owner_uid: Option<String>,
    /// Observed phase.
    pub phase: Option<QueueUnitPhase>,
    /// Sum of `status.admissions[].resources`: what the unit holds.
    pub held: Resources,
    /// `status.message`.
    pub message: Option<String>,
    /// `status.position`.
    pub position: Option<i64>,
    /// `status.attempts`.
    pub attempts: i64,
    /// `status.admissionChecks`.
    pub checks: Vec<koord_queue_api::queue_unit::AdmissionCheckState>,
    /// `status.requeueState.count`.
    pub requeue_count: i32,
    /// `status.requeueState.requeueAt`, ms since the epoch.
    pub requeue_at_ms: Option<i64>,
    /// `status.lastAllocateTime`, ms since the epoch.
    pub allocated_ms: Option<i64>,
    /// Pod sets: name, count and resources of the whole set.
    pub pod_sets: Box<[(Name, i32, Resources)]>,
    /// Whether the unit is being deleted.
    pub deleting: bool,
    /// Whether `spec.resource` could not be read (the unit is then never released).
    pub invalid: Option<String>,
}

impl UnitRecord {
    /// The record of `unit`.
    pub fn from_unit(mut unit: QueueUnit) -> Self {
        // Taken, not copied: this runs on every unit event.
        let status = unit.status.take().unwrap_or_default();
        let spec = &unit.spec;
        let (request, invalid) = match Resources::from_list(&spec.resource) {
            Ok(r) => (r, None),
            Err(e) => (Resources::new(), Some(e.to_string())),
        };
        let mut held = Resources::new();
        for admission in &status.admissions {
            if let Ok(r) = Resources::from_list(&admission.resources) {
                held.add(&r);
            }
        }
        let job_uid = |r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
            r.kind == spec.consumer_ref.kind.clone().unwrap_or_default()
                && Some(&r.name) == spec.consumer_ref.name.as_ref()
        };
        let labels = unit.labels();
        let namespace = unit.metadata.namespace.as_deref().unwrap_or_default();
        let job_kind = spec.consumer_ref.kind.as_deref().unwrap_or_default();
        let job_name = spec.consumer_ref.name.clone().unwrap_or_default();
        Self {
            job: JobKey::new(job_kind, namespace, &job_name),
            namespace: intern(namespace),
            name: unit.name_any(),
            resource_version: rv_number(unit.metadata.resource_version.as_deref()),
            created_ms: unit
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0),
            queue: intern(&spec.queue),
            quota: labels
                .get(keys::QUOTA_NAME_LABEL)
                .filter(|q| !q.is_empty())
                .map(|q| intern(q)),
            priority: spec.effective_priority(),
            request,
            labels: Labels::from_map(labels),
            job_kind: intern(job_kind),
            job_name,
            owner_uid: unit
                .owner_references()
                .iter()
                .find(|r| job_uid(r))
                .map(|r| r.uid.clone()),
            phase: status.phase,
            held,
            message: status.message,
            position: status.position,
            attempts: status.attempts.unwrap_or(0),
            checks: status.admission_checks.clone(),
            requeue_count: status.requeue_state.as_ref().map_or(0, |r| r.count),
            requeue_at_ms: status
                .requeue_state
                .as_ref()
                .and_then(|r| r.requeue_at.as_ref())
                .map(|t| t.0.as_millisecond()),
            allocated_ms: status
                .last_allocate_time
                .as_ref()
                .map(|t| t.0.as_millisecond()),
            pod_sets: spec
                .pod_set
                .iter()
                .map(|ps| {
                    let per_pod = serde_json::to_value(&ps.template)
                        .ok()
                        .and_then(|t| jobs::pod_template_requests(&t).ok())
                        .unwrap_or_default();
                    (
                        intern(&ps.name),
                        ps.count,
                        per_pod.scaled(i64::from(ps.count)),
                    )
                })
                .collect(),
            deleting: unit.metadata.deletion_timestamp.is_some(),
            invalid,
        }
    }

    /// Key of the unit.
    pub fn key(&self) -> Key {
        key(&self.namespace, &self.name)
    }

    /// Key of the unit's job (kind-qualified).
    pub fn job_key(&self) -> JobKey {
        self.job.clone()
    }

    /// Whether the observed status says the unit holds quota.
    pub fn holds_quota(&self) -> bool {
        self.phase.is_some_and(QueueUnitPhase::holds_quota)
    }
}

/// `Kind/namespace/name` of a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey(Arc<str>);

impl JobKey {
    /// The key of job `name` of `kind` in `namespace`.
    pub fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self(Arc::from(format!("{kind}/{namespace}/{name}")))
    }
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the controller knows of a job that names a QueueUnit.
#[derive(Clone, Debug)]
pub struct JobRecord {
    /// The job's adapter.
    pub adapter: &'static dyn JobAdapter,
    /// Namespace.
    pub namespace: Name,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
    /// The `koord-queue/queue-unit` annotation.
    pub unit_name: String,
    /// Key of that unit, made once: passes over every job look it up.
    pub unit: Key,
    /// Whether the job is held.
    pub held: bool,
    /// The job's own state.
    pub state: JobState,
    /// Whether the job is being deleted.
    pub deleting: bool,
    /// Creation time, ms since the epoch (0 if unknown).
    pub created_ms: i64,
}

impl JobRecord {
    /// The record of a job, or `None` when Koord-Queue does not queue it
    /// (no `koord-queue/queue-unit` annotation).
    pub fn from_object(adapter: &'static dyn JobAdapter, job: WatchedJob) -> Option<Self> {
        let unit_name = job
            .metadata
            .annotations
            .as_ref()?
            .get(keys::QUEUE_UNIT_ANNOTATION)?
            .clone();
        // What the adapters read: the kept fields and the annotations.
        let (metadata, view) = job.into_view();
        let namespace = metadata.namespace.as_deref().unwrap_or_default();
        Some(Self {
            adapter,
            unit: key(namespace, &unit_name),
            namespace: intern(namespace),
            name: metadata.name.unwrap_or_default(),
            uid: metadata.uid.unwrap_or_default(),
            unit_name,
            held: adapter.is_held(&view),
            state: adapter.state(&view),
            deleting: metadata.deletion_timestamp.is_some(),
            created_ms: metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_millisecond()),
        })
    }

    /// Key of the job.
    pub fn key(&self) -> JobKey {
        JobKey::new(self.adapter.kind().kind, &self.namespace, &self.name)
    }
}

/// The merge patch that releases (or holds) a job of `adapter`'s kind,
/// computed from the fields the adapter's hold sets, so that the job itself
/// need not be read first.
pub fn hold_release_patches(adapter: &dyn JobAdapter) -> (Value, Value) {
    let mut held = Value::Object(Default::default());
    adapter.hold(&mut held);
    let mut released = held.clone();
    adapter.release(&mut released);
    (merge_patch(&held, &released), merge_patch(&released, &held))
}

/// An RFC 7386 merge patch turning `from` into `to` (objects only).
fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in b {
                match a.get(k) {
                    Some(old) if old == v => {}
                    Some(old) if old.is_object() && v.is_object() => {
                        patch.insert(k.clone(), merge_patch(old, v));
                    }
                    _ => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in a.keys() {
                if !b.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        (_, to) => to.clone(),
    }
}

/// What the controller knows of an ElasticQuota.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaRecord {
    /// Name.
    pub name: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Parent name (root quota name when unlabeled).
    pub parent: String,
    /// Inner node.
    pub is_parent: bool,
    /// min.
    pub min: Resources,
    /// max.
    pub max: Resources,
    /// Policy of its queue.
    pub policy: QueuePolicy,
    /// A min/max that could not be read.
    pub invalid: Option<String>,
    /// Order among quotas of the same name
    /// ([`koord_queue_api::elastic_quota::precedence_key`]).
    pub precedence: (i64, String),
}

impl QuotaRecord {
    /// The record of `quota`.
    pub fn from_quota(quota: &ElasticQuota) -> Self {
        let parse = |list: &Option<koord_queue_api::queue_unit::ResourceList>| {
            list.as_ref()
                .map(Resources::from_list)
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let (min, max, invalid) = match (parse(&quota.spec.min), parse(&quota.spec.max)) {
            (Ok(min), Ok(max)) => (min, max, None),
            (Err(e), _) | (_, Err(e)) => (Resources::new(), Resources::new(), Some(e.to_string())),
        };
        Self {
            name: quota.name_any(),
            namespace: quota.namespace().unwrap_or_default(),
            parent: quota.parent_name().to_string(),
            is_parent: quota.is_parent(),
            min,
            max,
            policy: quota
                .labels()
                .get(keys::QUEUE_POLICY_LABEL)
                .and_then(|v| QueuePolicy::from_label(v))
                .unwrap_or_default(),
            invalid,
            precedence: koord_queue_api::elastic_quota::precedence_key(&quota.metadata),
        }
    }
}

/// What the controller knows of a Queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueRecord {
    /// Name.
    pub name: String,
    /// Serving priority.
    pub priority: i32,
    /// Policy.
    pub policy: QueuePolicy,
    /// Quota this queue was created for (label), if any.
    pub managed_for: Option<String>,
    /// Published status (to write only when it changes).
    pub status: Option<koord_queue_api::QueueStatus>,
    /// Whether guaranteed units may reclaim borrowed quota.
    pub reclaim: bool,
    /// Admission checks of the queue.
    pub checks: Vec<koord_queue_api::queue::AdmissionCheckRef>,
    /// Strict dequeue: `Some(Some(timeout))` on, `Some(None)` off, `None`
    /// when the queue leaves it to the scheduler's global setting.
    pub strict: Option<Option<std::time::Duration>>,
    /// Running timeout.
    pub running_timeout: Option<std::time::Duration>,
}

/// Label on Queues the scheduler keeps for an ElasticQuota.
pub const QUEUE_FOR_QUOTA_LABEL: &str = "koord-queue/elastic-quota";

impl QueueRecord {
    /// The record of `queue`.
    pub fn from_queue(queue: &Queue) -> Self {
        Self {
            name: queue.name_any(),
            priority: queue.spec.effective_priority(),
            policy: queue.spec.queue_policy,
            managed_for: queue.labels().get(QUEUE_FOR_QUOTA_LABEL).cloned(),
            status: queue.status.clone(),
            reclaim: queue.spec.reclaim.unwrap_or(true),
            checks: queue.spec.admission_checks.clone(),
            strict: queue.spec.strict_dequeue.as_ref().map(|s| {
                s.enabled.then(|| {
                    std::time::Duration::from_secs(
                        s.timeout_seconds.unwrap_or(300).max(1).unsigned_abs(),
                    )
                })
            }),
            running_timeout: queue
                .spec
                .running_timeout_seconds
                .filter(|t| *t > 0)
                .map(|t| std::time::Duration::from_secs(t.unsigned_abs())),
        }
    }
}

/// A node's contribution to the cluster capacity.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NodeRecord {
    /// Node name.
    pub name: String,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Condition Ready=True and schedulable.
    pub ready: bool,
}

impl NodeRecord {
    /// The record of `node`.
    pub fn from_node(node: &Node) -> Self {
        let status = node.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            && !node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable: status
                .allocatable
                .as_ref()
                .and_then(|a| Resources::from_list(a).ok())
                .unwrap_or_default(),
            ready,
        }
    }
}

/// Finds the adapter of a job kind by apiVersion and kind.
pub fn adapter_for(api_version: &str, kind: &str) -> Option<&'static dyn JobAdapter> {
    jobs::for_api_version(api_version, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (release, hold) = hold_release_patches(tf);
        assert_eq!(
            release,
            serde_json::json!({
                "metadata": { "annotations": { keys::SUSPEND_ANNOTATION: null } },
                "spec": { "runPolicy": { "suspend": false } }
            })
        );
        assert_eq!(
            hold,
            serde_json::json!({
                "metadata": { "annotations": { keys::SUSPEND_ANNOTATION: "true" } },
                "spec": { "runPolicy": { "suspend": true } }
            })
        );
        let job = jobs::for_kind("batch", "Job").unwrap();
        let (release, hold) = hold_release_patches(job);
        assert_eq!(release, serde_json::json!({ "spec": { "suspend": false } }));
        assert_eq!(hold, serde_json::json!({ "spec": { "suspend": true } }));
    }

    fn object(value: Value) -> WatchedJob {
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
            (
                held.name.as_str(),
                held.uid.as_str(),
                held.unit_name.as_str()
            ),
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
}

/// A namespace ResourceQuota, reduced to the resources a unit's request
/// names: `requests.cpu` and `cpu` count as `cpu`, and so on; limits and
/// object counts are not checked.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NamespaceQuotaRecord {
    /// Namespace.
    pub namespace: String,
    /// Name of the ResourceQuota.
    pub name: String,
    /// Hard limits on requests.
    pub hard: Resources,
    /// Requests in use.
    pub used: Resources,
}

impl NamespaceQuotaRecord {
    /// The record of `quota`.
    pub fn from_quota(quota: &k8s_openapi::api::core::v1::ResourceQuota) -> Self {
        let requests = |list: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            let mut out = Resources::new();
            for (key, q) in list.into_iter().flatten() {
                let name = key.strip_prefix("requests.").unwrap_or(key);
                if key.starts_with("limits.")
                    || key.starts_with("count/")
                    || name == "pods"
                    || name.contains("services")
                {
                    continue;
                }
                if let Ok(v) = koord_queue_api::resources::parse_quantity(name, &q.0) {
                    // `cpu` and `requests.cpu` may both be set: the tighter wins.
                    let cur = if out.contains(name) {
                        out.get(name).min(v)
                    } else {
                        v
                    };
                    out.set(name, cur);
                }
            }
            out
        };
        let spec = quota.spec.as_ref();
        let status = quota.status.as_ref();
        Self {
            namespace: quota.namespace().unwrap_or_default(),
            name: quota.name_any(),
            hard: requests(
                status
                    .and_then(|s| s.hard.as_ref())
                    .or_else(|| spec.and_then(|s| s.hard.as_ref())),
            ),
            used: requests(status.and_then(|s| s.used.as_ref())),
        }
    }
}

/// A pod of a queued job, as strict dequeue needs it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PodRecord {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid of the job that owns it (its controller owner reference).
    pub owner_uid: String,
    /// `PodScheduled=True`.
    pub scheduled: bool,
    /// `PodScheduled=False` with reason `Unschedulable`: the message.
    pub unschedulable: Option<String>,
}

impl PodRecord {
    /// The record of `pod`, or `None` for a pod without a controller owner.
    pub fn from_pod(pod: &k8s_openapi::api::core::v1::Pod) -> Option<Self> {
        let owner = pod
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true))?;
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
        let scheduled = conditions.and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
        Some(Self {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            owner_uid: owner.uid.clone(),
            scheduled: scheduled.is_some_and(|c| c.status == "True")
                || pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some(),
            unschedulable: scheduled
                .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
                .map(|c| c.message.clone().unwrap_or_else(|| "unschedulable".into())),
        })
    }
}
