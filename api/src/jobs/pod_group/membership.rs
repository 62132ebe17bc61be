//! Which group a pod belongs to: a plain group by its label and size
//! annotation, a LeaderWorkerSet's replica by the labels its controller
//! sets (or, before LWS's own webhook has run, by the pod's name).

use serde_json::Value;

use crate::jobs::AdapterError;
use crate::jobs::json::{annotation, get_path};

/// Label naming a pod's plain group.
pub const POD_GROUP_LABEL: &str = "koord-queue/pod-group";
/// Annotation with the number of pods of the group (each member carries it).
pub const POD_GROUP_SIZE_ANNOTATION: &str = "koord-queue/pod-group-total-count";
/// The LeaderWorkerSet a pod belongs to (set by the LWS controller).
pub const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
/// The replica (group) of the LeaderWorkerSet a pod belongs to.
pub const LWS_GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// The pod's place in its group: 0 is the leader.
pub const LWS_WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// The group's size (leader included), as the LWS controller annotates it.
pub const LWS_SIZE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/size";

/// The labels that place a pod in its group (and name its unit): a queued
/// pod keeps them as they were when it was queued.
pub const MEMBERSHIP_LABELS: [&str; 4] = [
    POD_GROUP_LABEL,
    LWS_NAME_LABEL,
    LWS_GROUP_INDEX_LABEL,
    LWS_WORKER_INDEX_LABEL,
];
/// The annotations that give a group's size: fixed once it is queued.
pub const SIZE_ANNOTATIONS: [&str; 2] = [POD_GROUP_SIZE_ANNOTATION, LWS_SIZE_ANNOTATION];

/// Pod set (role) of a plain group's members.
pub const MEMBER_ROLE: &str = "main";
/// Pod set of an LWS group's leader.
pub const LEADER_ROLE: &str = "leader";
/// Pod set of an LWS group's workers.
pub const WORKER_ROLE: &str = "worker";

/// Longest group name kept in a unit name (a QueueUnit name is a DNS
/// subdomain; labels values are at most 63 characters anyway).
const NAME_MAX: usize = 200;

/// What names a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupSource {
    /// The label [`POD_GROUP_LABEL`].
    Labelled,
    /// Replica `index` of LeaderWorkerSet `set`.
    LeaderWorkerSet {
        /// The LeaderWorkerSet's name.
        set: String,
        /// The replica's index.
        index: String,
    },
}

/// A pod's membership of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The group's name: the label's value, or `<lws>-<index>` (the name of
    /// the group's leader pod, as LWS names groups).
    pub group: String,
    /// What names it.
    pub source: GroupSource,
    /// Pods in the group, as the member says.
    pub size: i32,
    /// The member's pod set: [`MEMBER_ROLE`], [`LEADER_ROLE`] or [`WORKER_ROLE`].
    pub role: &'static str,
}

impl Membership {
    /// The label selector that lists the group's members.
    pub fn selector(&self) -> String {
        match &self.source {
            GroupSource::Labelled => format!("{POD_GROUP_LABEL}={}", self.group),
            GroupSource::LeaderWorkerSet { set, index } => {
                format!("{LWS_NAME_LABEL}={set},{LWS_GROUP_INDEX_LABEL}={index}")
            }
        }
    }

    /// The label that lists the group's members and that the member may
    /// lack when the webhook sees it: the group index LWS's own pod webhook
    /// adds to a leader (read from its name when this webhook is called
    /// first), which admission writes on the held pod.
    pub fn index_label(&self) -> Option<(&'static str, &str)> {
        match &self.source {
            GroupSource::Labelled => None,
            GroupSource::LeaderWorkerSet { index, .. } => Some((LWS_GROUP_INDEX_LABEL, index)),
        }
    }

    /// Name of the group's QueueUnit: the same for every member, so that each
    /// names the one unit the first member's admission creates.
    pub fn unit_name(&self) -> String {
        let group = self.group.get(..NAME_MAX).unwrap_or(&self.group);
        format!("{}-group", group.trim_end_matches(['-', '.']))
    }
}

/// A label of `pod`.
fn label<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    get_path(pod, &["metadata", "labels", key]).and_then(Value::as_str)
}

fn invalid(path: String, reason: impl Into<String>) -> AdapterError {
    AdapterError::Invalid {
        path,
        reason: reason.into(),
    }
}

/// A group size from annotation `key` of `pod`: a whole number ≥ 1.
fn size_of(pod: &Value, key: &str) -> Result<i32, AdapterError> {
    let path = format!("metadata.annotations[{key}]");
    let text = annotation(pod, key).ok_or_else(|| {
        invalid(
            path.clone(),
            "a member of a pod group needs the group's size",
        )
    })?;
    match text.trim().parse::<i32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(invalid(
            path,
            format!("{text:?} is not a whole number of pods of at least 1"),
        )),
    }
}

/// The group `pod` is a member of, if it names one. A pod that names a
/// group badly (no size, a size that is not a number) is an error: it
/// cannot be queued, rather than queued as a pod of its own.
pub fn membership(pod: &Value) -> Option<Result<Membership, AdapterError>> {
    if let Some(group) = label(pod, POD_GROUP_LABEL) {
        return Some(if group.is_empty() {
            Err(invalid(
                format!("metadata.labels[{POD_GROUP_LABEL}]"),
                "the group's name is empty",
            ))
        } else {
            size_of(pod, POD_GROUP_SIZE_ANNOTATION).map(|size| Membership {
                group: group.to_string(),
                source: GroupSource::Labelled,
                size,
                role: MEMBER_ROLE,
            })
        });
    }
    let set = label(pod, LWS_NAME_LABEL)?;
    Some(lws_membership(pod, set))
}

/// The ordinal a StatefulSet put at the end of pod `name`, and what is
/// before it (`llama-2-1` → `llama-2`, 1).
fn ordinal(name: &str) -> Option<(&str, &str)> {
    let (parent, n) = name.rsplit_once('-')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some((parent, n))
}

/// A LeaderWorkerSet pod's group and role. The LWS controller's own pod
/// webhook adds the group index to a leader and the worker index to a
/// worker, from the pod's ordinal; when this webhook is called first (the
/// API server calls mutating webhooks in the order of their
/// configurations' names) they are read from the name as LWS reads them.
/// The leader's StatefulSet template labels it `worker-index: "0"`.
fn lws_membership(pod: &Value, set: &str) -> Result<Membership, AdapterError> {
    let name = get_path(pod, &["metadata", "name"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    let role = match label(pod, LWS_WORKER_INDEX_LABEL) {
        Some("0") => LEADER_ROLE,
        _ => WORKER_ROLE,
    };
    let from_name = match role {
        // `<lws>-<group>`
        LEADER_ROLE => ordinal(name).map(|(_, group)| group),
        // `<lws>-<group>-<worker>`
        _ => ordinal(name)
            .and_then(|(parent, _)| ordinal(parent))
            .map(|(_, group)| group),
    };
    let index = label(pod, LWS_GROUP_INDEX_LABEL)
        .or(from_name)
        .ok_or_else(|| {
            invalid(
                format!("metadata.labels[{LWS_GROUP_INDEX_LABEL}]"),
                format!(
                    "a LeaderWorkerSet's pod names its group, by this label or by its name \
                     ({name:?} ends in no group ordinal)"
                ),
            )
        })?;
    Ok(Membership {
        group: format!("{set}-{index}"),
        source: GroupSource::LeaderWorkerSet {
            set: set.to_string(),
            index: index.to_string(),
        },
        size: size_of(pod, LWS_SIZE_ANNOTATION)?,
        role,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn a_labelled_pod_names_its_group_and_size() {
        let m = membership(&pod(
            json!({POD_GROUP_LABEL: "train"}),
            json!({POD_GROUP_SIZE_ANNOTATION: "3"}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            (m.group.as_str(), m.size, m.role),
            ("train", 3, MEMBER_ROLE)
        );
        assert_eq!(m.selector(), "koord-queue/pod-group=train");
        assert_eq!(m.unit_name(), "train-group");
        // No group: a pod of its own.
        assert!(membership(&pod(json!({"app": "x"}), json!({}))).is_none());
        // A group without a size, or a size that is not one, is refused.
        for bad in [
            json!({}),
            json!({POD_GROUP_SIZE_ANNOTATION: "0"}),
            json!({POD_GROUP_SIZE_ANNOTATION: "two"}),
        ] {
            let e = membership(&pod(json!({POD_GROUP_LABEL: "train"}), bad)).unwrap();
            assert!(
                e.unwrap_err()
                    .to_string()
                    .contains(POD_GROUP_SIZE_ANNOTATION)
            );
        }
    }

    #[test]
    fn an_lws_pod_names_its_replica_and_role() {
        let lws = |worker: &str| {
            pod(
                json!({LWS_NAME_LABEL: "llama", LWS_GROUP_INDEX_LABEL: "2", LWS_WORKER_INDEX_LABEL: worker}),
                json!({LWS_SIZE_ANNOTATION: "4"}),
            )
        };
        let leader = membership(&lws("0")).unwrap().unwrap();
        assert_eq!(
            (leader.group.as_str(), leader.size, leader.role),
            ("llama-2", 4, LEADER_ROLE)
        );
        assert_eq!(
            leader.selector(),
            "leaderworkerset.sigs.k8s.io/name=llama,leaderworkerset.sigs.k8s.io/group-index=2"
        );
        assert_eq!(membership(&lws("3")).unwrap().unwrap().role, WORKER_ROLE);
        let no_index = pod(
            json!({LWS_NAME_LABEL: "llama", LWS_WORKER_INDEX_LABEL: "0"}),
            json!({LWS_SIZE_ANNOTATION: "4"}),
        );
        assert!(membership(&no_index).unwrap().is_err());
    }
}
