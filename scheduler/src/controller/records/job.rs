//! What the controller keeps of a job and of its pods, and the patches that hold and release a job.

use kube::ResourceExt as _;
use std::sync::Arc;

use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::jobs::{JobAdapter, JobState};
use koord_queue_api::{Resources, jobs, keys};

use super::{Key, Name, Uid, intern, intern_uid, key, name_in};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koord_queue_api::jobs::pod_group::{self, Member, Membership};

/// `Kind/namespace/name` of a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey(Arc<str>);

impl JobKey {
    /// The key of job `name` of `kind` in `namespace`.
    pub fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self(Arc::from(format!("{kind}/{namespace}/{name}")))
    }

    /// Whether `other` is this very copy (tests of the shared keys).
    #[cfg(test)]
    pub(crate) fn same_copy(&self, other: &JobKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
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
    pub uid: Uid,
    /// Key of the unit its `koord-queue/queue-unit` annotation names, made
    /// once: passes over every job look it up. The same copy as the key of
    /// the controller's map of units where it has both
    /// ([`JobRecord::share_unit_key`]); the name is read from it.
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
    /// (`JobAdapter::pod_group`). Boxed: few kinds have one, and the
    /// record is kept inline in the controller's map of every job.
    pub pod_group: Option<Box<(&'static str, String)>>,
    /// A pod group's member, or a pod group itself (see `state/groups.rs`).
    pub grouping: Option<Box<Grouping>>,
}

/// Where a record stands in a pod group.
#[derive(Clone, Debug, PartialEq)]
pub enum Grouping {
    /// A member pod (the watch's record; the controller folds members into
    /// one record of their group).
    Member {
        /// The group.
        of: Membership,
        /// The member as the group's state sees it.
        member: Member,
    },
    /// The group: what the members tell of it.
    Group {
        /// The label selector of the members.
        selector: String,
        /// The group's size.
        size: i32,
        /// Members alive and still gated.
        gated: usize,
        /// Members alive and released.
        released: usize,
        /// A member (the oldest): Events are on it, a missing unit is
        /// re-created from it.
        member: (String, String),
    },
}

impl JobRecord {
    /// The record of a job, or `None` when Koord-Queue does not queue it
    /// (no `koord-queue/queue-unit` annotation).
    pub fn from_object(adapter: &'static dyn JobAdapter, job: WatchedJob) -> Option<Self> {
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        let unit = key(
            namespace,
            job.metadata
                .annotations
                .as_ref()?
                .get(keys::QUEUE_UNIT_ANNOTATION)?,
        );
        // What the adapters read: the kept fields and the annotations.
        let (metadata, view) = job.into_view();
        let namespace = metadata.namespace.as_deref().unwrap_or_default();
        let created_ms = metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_millisecond());
        let grouping = member_of(adapter, &metadata, &view, created_ms).map(Box::new);
        Some(Self {
            adapter,
            unit,
            namespace: intern(namespace),
            name: metadata.name.unwrap_or_default(),
            uid: intern_uid(metadata.uid.as_deref().unwrap_or_default()),
            held: adapter.is_held(&view),
            state: adapter.state(&view),
            pod_group: adapter.pod_group(&view).map(Box::new),
            grouping,
            deleting: metadata.deletion_timestamp.is_some(),
            created_ms,
        })
    }

    /// Key of the job (of a pod group: `PodGroup/<namespace>/<group>`).
    pub fn key(&self) -> JobKey {
        let kind = match self.grouping.as_deref() {
            Some(Grouping::Group { .. }) => pod_group::GROUP_KIND,
            _ => self.adapter.kind().kind,
        };
        JobKey::new(kind, &self.namespace, &self.name)
    }

    /// The name of its unit.
    pub fn unit_name(&self) -> &str {
        name_in(&self.unit)
    }

    /// Uses `shared`, the key of the controller's map of units, instead of
    /// this record's copy when they are equal: 100,000 jobs otherwise keep
    /// a second copy of each unit's key.
    pub fn share_unit_key(&mut self, shared: &Key) {
        if *shared == self.unit {
            self.unit = shared.clone();
        }
    }

    /// Whether this is a pod group member's record.
    pub fn is_member(&self) -> bool {
        matches!(self.grouping.as_deref(), Some(Grouping::Member { .. }))
    }

    /// Whether this is a pod group's record.
    pub fn is_group(&self) -> bool {
        matches!(self.grouping.as_deref(), Some(Grouping::Group { .. }))
    }
}

/// A pod's membership of a group, if it is a member (read from its labels
/// and annotations, as the webhook read them when it queued it). A pod
/// that names a group badly was refused by the webhook; one that got past
/// it (created before its namespace opted in) counts as a pod of its own.
fn member_of(
    adapter: &dyn JobAdapter,
    metadata: &ObjectMeta,
    pod: &serde_json::Value,
    created_ms: i64,
) -> Option<Grouping> {
    let labels = metadata.labels.as_ref()?;
    if adapter.kind() != &jobs::pod::POD_KIND
        || !(labels.contains_key(pod_group::POD_GROUP_LABEL)
            || labels.contains_key(pod_group::LWS_NAME_LABEL))
    {
        return None;
    }
    let meta = serde_json::json!({ "metadata": {
        "name": metadata.name, "labels": labels, "annotations": metadata.annotations,
    }});
    let of = pod_group::membership(&meta)?.ok()?;
    let member = Member {
        name: metadata.name.clone().unwrap_or_default(),
        role: of.role,
        gated: adapter.is_held(pod),
        state: adapter.state(pod),
        deleting: metadata.deletion_timestamp.is_some(),
        created_ms,
        requests: Resources::new(),
    };
    Some(Grouping::Member { of, member })
}

/// Labels a Job's controller puts on its pods, naming the Job's uid
/// (`batch.kubernetes.io/controller-uid` since Kubernetes 1.27, the older
/// `controller-uid` before). They outlive the owner reference: a Job
/// deleted with propagation Orphan leaves its pods running without one.
const JOB_UID_LABELS: [&str; 2] = ["batch.kubernetes.io/controller-uid", "controller-uid"];

/// A pod of a queued job, as strict dequeue and the quota's hold need it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PodRecord {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid of the job whose unit pays for it: the queued job the webhook
    /// charged it to (`koord-queue/charged-to`, on every proven child pod,
    /// however deep: a JobSet's Jobs' pods are charged to the JobSet), else
    /// its controller owner, else (an orphaned Job pod) the Job uid its
    /// labels name.
    pub job_uid: String,
    /// `PodScheduled=True`.
    pub scheduled: bool,
    /// `PodScheduled=False` with reason `Unschedulable`: the message.
    pub unschedulable: Option<String>,
    /// Not Succeeded or Failed: it uses what it requests, also while it
    /// runs out its grace period after a deletion (deletionTimestamp set,
    /// phase still Running) — until the object is gone.
    pub alive: bool,
    /// Its group label (one of `POD_GROUP_LABELS`) and value.
    pub group: Option<(&'static str, String)>,
}

impl PodRecord {
    /// The record of `pod`, or `None` for a pod that runs for no job: one
    /// charged to none, without a controller owner and without a Job's uid
    /// label.
    pub fn from_pod(pod: &k8s_openapi::api::core::v1::Pod) -> Option<Self> {
        let labels = pod.labels();
        let label = |key: &str| labels.get(key).filter(|uid| !uid.is_empty()).cloned();
        let job_uid = label(keys::CHARGED_TO_LABEL)
            .or_else(|| {
                pod.owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true))
                    .map(|r| r.uid.clone())
            })
            .or_else(|| JOB_UID_LABELS.iter().find_map(|l| label(l)))?;
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
        let scheduled = conditions.and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
        Some(Self {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            job_uid,
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
