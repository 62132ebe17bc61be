//! Pod groups: pods queued as one unit and released together (gang).
//!
//! A group has no object of its own. Its members name it: a plain group by
//! the label [`POD_GROUP_LABEL`] with its size in the annotation
//! [`POD_GROUP_SIZE_ANNOTATION`] (what a notebook launcher or a home-made
//! MPI launcher sets on each pod); a LeaderWorkerSet's group by the labels
//! its controller puts on the leader and the workers of each replica
//! ([`LWS_NAME_LABEL`], [`LWS_GROUP_INDEX_LABEL`], [`LWS_WORKER_INDEX_LABEL`]).
//! Every member is held by the Pod's scheduling gate and names the group's
//! one QueueUnit; the unit is sized once, from the first member that reaches
//! the webhook (a plain group: `size` pods like it; an LWS group: its
//! LeaderWorkerSet's leader and worker templates, read at admission), and a
//! member is released only while it fits that size.
//!
//! What is decided here is pure: which group a pod belongs to, the group's
//! state from its members', and which gated members a release lifts.
//!
//! One file each: `membership.rs` (which group a pod is in), `sizing.rs`
//! (the group's unit and whether a member fits it), `state.rs` (the group's
//! state from its members'), `release.rs` (which members a release lifts).
//! [`PodGrouping`] is how a kind says its objects form such groups.

use serde_json::Value;

use super::{AdapterError, PodSetInfo};

mod membership;
mod release;
mod sizing;
mod state;

pub use membership::{
    GroupSource, LEADER_ROLE, LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_SIZE_ANNOTATION,
    LWS_WORKER_INDEX_LABEL, MEMBER_ROLE, MEMBERSHIP_LABELS, Membership, POD_GROUP_LABEL,
    POD_GROUP_SIZE_ANNOTATION, SIZE_ANNOTATIONS, WORKER_ROLE, membership,
};
pub use release::release_plan;
pub use sizing::{LWS_KIND, SetLimit, fits_unit, set_limits, unit_pod_sets};
pub use state::{GroupState, Member, group_state};

/// `consumerRef.kind` of a group's QueueUnit: no API object has it, the
/// unit stands for its members.
pub const GROUP_KIND: &str = "PodGroup";

/// The uid a group's unit names in `consumerRef.uid`: stable for the
/// group's name, since no object's uid stands for the group.
pub fn group_uid(namespace: &str, group: &str) -> String {
    format!("{GROUP_KIND}/{namespace}/{group}")
}

/// The capability of a kind whose every object is one pod (the Pod kind),
/// asked through [`super::JobAdapter::grouping`] as Kueue's jobframework asks
/// its Pod integration through an optional interface: such objects may name
/// a pod group, whose one unit they share and which is released whole, and
/// are otherwise a unit of one pod each. They are also what a child pod is —
/// counted one by one against its owner's unit — and are completed by the
/// API server (LimitRange defaults) before any webhook sees them. Callers ask
/// for the capability instead of comparing kinds.
pub trait PodGrouping: Send + Sync + std::fmt::Debug {
    /// The group `pod` names, if any; an error when it names one badly.
    fn membership(&self, pod: &Value) -> Option<Result<Membership, AdapterError>>;

    /// The pod sets of `pod`'s unit, `own` being its own: a member's unit
    /// is its group's.
    fn unit_pod_sets(
        &self,
        pod: &Value,
        own: Vec<PodSetInfo>,
    ) -> Result<Vec<PodSetInfo>, AdapterError>;
}

/// Pod groups as Pods form them: by [`POD_GROUP_LABEL`], or as the
/// replicas of a LeaderWorkerSet.
#[derive(Debug)]
pub struct PodGroups;

impl PodGrouping for PodGroups {
    fn membership(&self, pod: &Value) -> Option<Result<Membership, AdapterError>> {
        membership(pod)
    }

    fn unit_pod_sets(
        &self,
        pod: &Value,
        own: Vec<PodSetInfo>,
    ) -> Result<Vec<PodSetInfo>, AdapterError> {
        sizing::member_unit_pod_sets(pod, own)
    }
}

/// Members and limits for the tests of the group's files.
#[cfg(test)]
mod fixtures {
    use super::{Member, SetLimit};
    use crate::jobs::JobState;
    use crate::resources::Resources;

    pub(super) fn member(
        name: &str,
        role: &'static str,
        gated: bool,
        state: JobState,
        cpu: i64,
    ) -> Member {
        Member {
            name: name.into(),
            role,
            gated,
            state,
            deleting: false,
            created_ms: 0,
            requests: Resources::from_iter([("cpu".to_string(), cpu)]),
        }
    }

    pub(super) fn limit(role: &str, count: i32, cpu: i64) -> SetLimit {
        SetLimit {
            role: role.into(),
            count,
            per_pod: Resources::from_iter([("cpu".to_string(), cpu)]),
        }
    }
}
