//! What the controller keeps of a job and of its pods, and the patches that hold and release a job.

use super::*;

/// `Kind/namespace/name` of a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey(Arc<str>);

impl JobKey {
    /// The key of job `name` of `kind` in `namespace`.
    pub fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self(Arc::from(format!("{kind}/{namespace}/{name}")))
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
    /// The pods that run on its quota besides its own: label and value
    /// (`JobAdapter::pod_group`).
    pub pod_group: Option<(&'static str, String)>,
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
            pod_group: adapter.pod_group(&view),
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
    /// Not Succeeded or Failed: it uses what it requests (also while it
    /// runs out its grace period after a deletion).
    pub alive: bool,
    /// Its group label (one of `POD_GROUP_LABELS`) and value.
    pub group: Option<(&'static str, String)>,
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
            alive: !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            ),
            group: pod.labels().iter().find_map(|(k, v)| {
                jobs::POD_GROUP_LABELS
                    .iter()
                    .find(|l| **l == k.as_str())
                    .map(|l| (*l, v.clone()))
            }),
        })
    }
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
