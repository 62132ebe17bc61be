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

use serde_json::Value;

use super::json::{annotation, get_path, opt_count, template};
use super::pod::POD_KIND;
use super::pod_request::template_requests_at;
use super::{AdapterError, JobAdapter, JobKind, JobState, PodSetInfo, SIZE_INPUT_KEY};
use crate::resources::Resources;

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

/// `consumerRef.kind` of a group's QueueUnit: no API object has it, the
/// unit stands for its members.
pub const GROUP_KIND: &str = "PodGroup";

/// Pod set (role) of a plain group's members.
pub const MEMBER_ROLE: &str = "main";
/// Pod set of an LWS group's leader.
pub const LEADER_ROLE: &str = "leader";
/// Pod set of an LWS group's workers.
pub const WORKER_ROLE: &str = "worker";

/// The `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet: read to size its
/// groups, never queued itself (it has no suspend; its pods are).
pub static LWS_KIND: JobKind = JobKind {
    group: "leaderworkerset.x-k8s.io",
    version: "v1",
    kind: "LeaderWorkerSet",
    plural: "leaderworkersets",
    extension: "lws",
};

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

    /// Name of the group's QueueUnit: the same for every member, so that each
    /// names the one unit the first member's admission creates.
    pub fn unit_name(&self) -> String {
        let group = self.group.get(..NAME_MAX).unwrap_or(&self.group);
        format!("{}-group", group.trim_end_matches(['-', '.']))
    }
}

/// The uid a group's unit names in `consumerRef.uid`: stable for the
/// group's name, since no object's uid stands for the group.
pub fn group_uid(namespace: &str, group: &str) -> String {
    format!("{GROUP_KIND}/{namespace}/{group}")
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

/// The pod sets of `job`'s unit: the job's own, except for a member of a
/// pod group, whose unit is the group's.
pub fn unit_pod_sets(
    adapter: &dyn JobAdapter,
    job: &Value,
) -> Result<Vec<PodSetInfo>, AdapterError> {
    let own = adapter.pod_sets(job)?;
    if adapter.kind() != &POD_KIND {
        return Ok(own);
    }
    let (Some(member), Some(first)) = (membership(job).transpose()?, own.into_iter().next()) else {
        return adapter.pod_sets(job);
    };
    group_pod_sets(job, &member, first)
}

/// The pod sets of the group `member` names, `own` being the member's
/// own: a plain group is `size` pods like the member (the first member
/// to be admitted sizes it; a later one is released only within that
/// size); an LWS group is its LeaderWorkerSet's leader (its
/// `leaderTemplate`, else the `workerTemplate`) and `size - 1` workers,
/// as the LWS controller creates them.
fn group_pod_sets(
    pod: &Value,
    member: &Membership,
    own: PodSetInfo,
) -> Result<Vec<PodSetInfo>, AdapterError> {
    let GroupSource::LeaderWorkerSet { set, .. } = &member.source else {
        return Ok(vec![PodSetInfo {
            name: MEMBER_ROLE.to_string(),
            count: member.size,
            ..own
        }]);
    };
    let lws = pod
        .get(SIZE_INPUT_KEY)
        .ok_or_else(|| AdapterError::Invalid {
            path: format!("metadata.labels[{}]", LWS_NAME_LABEL),
            reason: format!("LeaderWorkerSet {set} was not read"),
        })?;
    let at = ["spec", "leaderWorkerTemplate"];
    let lwt = get_path(lws, &at).ok_or_else(|| AdapterError::Invalid {
        path: "spec.leaderWorkerTemplate".into(),
        reason: format!("LeaderWorkerSet {set} has no leaderWorkerTemplate"),
    })?;
    let size = opt_count(lwt.get("size"), "spec.leaderWorkerTemplate.size")?.unwrap_or(1);
    let worker_path = "spec.leaderWorkerTemplate.workerTemplate";
    let worker = template(lwt.get("workerTemplate"), worker_path)?;
    let leader_path = "spec.leaderWorkerTemplate.leaderTemplate";
    let leader = match lwt.get("leaderTemplate") {
        None | Some(Value::Null) => (worker, worker_path),
        given => (template(given, leader_path)?, leader_path),
    };
    let set_of = |name: &str, count: i32, (t, path): (&Value, &str)| {
        Ok::<_, AdapterError>(PodSetInfo {
            name: name.to_string(),
            count,
            per_pod: template_requests_at(t, path)?,
            template: t.clone(),
        })
    };
    let mut sets = vec![set_of(LEADER_ROLE, 1, leader)?];
    if size > 1 {
        sets.push(set_of(WORKER_ROLE, size - 1, (worker, worker_path))?);
    }
    Ok(sets)
}

/// A member as the group's state and its release see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// The pod's name.
    pub name: String,
    /// Its pod set.
    pub role: &'static str,
    /// It still carries the queue's scheduling gate.
    pub gated: bool,
    /// Its own state (from its phase).
    pub state: JobState,
    /// It is being deleted.
    pub deleting: bool,
    /// Creation time, ms since the epoch (release order).
    pub created_ms: i64,
    /// What it requests (only a release reads it).
    pub requests: Resources,
}

impl Member {
    fn alive(&self) -> bool {
        !matches!(self.state, JobState::Succeeded | JobState::Failed)
    }
}

/// A group's state from its members'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupState {
    /// No member was ever released (every one still carries the gate).
    pub held: bool,
    /// Succeeded once `size` members succeeded; Failed once none is alive
    /// and fewer succeeded; Running while a member runs; else Pending.
    pub state: JobState,
    /// Members alive and still gated.
    pub gated: usize,
    /// Members alive and released.
    pub released: usize,
}

/// The state of a group of `size` pods with `members`.
pub fn group_state(members: &[Member], size: i32) -> GroupState {
    let count = |f: &dyn Fn(&Member) -> bool| members.iter().filter(|m| f(m)).count();
    let succeeded = count(&|m| m.state == JobState::Succeeded);
    let alive = count(&|m| m.alive());
    let released = count(&|m| m.alive() && !m.gated);
    let size = usize::try_from(size).unwrap_or(0);
    let state = if size > 0 && succeeded >= size {
        JobState::Succeeded
    } else if !members.is_empty() && alive == 0 {
        JobState::Failed
    } else if members
        .iter()
        .any(|m| m.state == JobState::Running && !m.gated)
    {
        JobState::Running
    } else {
        JobState::Pending
    };
    GroupState {
        held: members.iter().all(|m| m.gated),
        state,
        gated: alive - released,
        released,
    }
}

/// One pod set of a group's unit: how many of its pods may run, and the
/// most one of them may request.
#[derive(Clone, Debug, PartialEq)]
pub struct SetLimit {
    /// The pod set's name (a member's role).
    pub role: String,
    /// Its pods.
    pub count: i32,
    /// What one pod of it requests, at most.
    pub per_pod: Resources,
}

/// The pod sets of a group's `unit` as limits: what the group was sized as.
pub fn set_limits(unit: &crate::QueueUnit) -> Vec<SetLimit> {
    unit.spec
        .pod_set
        .iter()
        .filter_map(|set| {
            let template = serde_json::to_value(&set.template).ok()?;
            Some(SetLimit {
                role: set.name.clone(),
                count: set.count,
                per_pod: super::pod_template_requests(&template).ok()?,
            })
        })
        .collect()
}

/// Whether a member of `role` requesting `requests`, that says its group
/// has `size` pods, fits the group's unit sized as `sets`; else why not.
pub fn fits_unit(
    role: &str,
    size: i32,
    requests: &Resources,
    sets: &[SetLimit],
) -> Result<(), String> {
    let sized: i32 = sets.iter().map(|s| s.count).sum();
    if sized != size {
        return Err(format!(
            "the group was queued with {sized} pods and this pod says {size}"
        ));
    }
    let Some(set) = sets.iter().find(|s| s.role == role) else {
        return Err(format!("the group's unit has no {role} pods"));
    };
    if !fits(requests, &set.per_pod) {
        return Err(format!(
            "it requests {requests}, more than the {} {role} pod the group was sized with",
            set.per_pod
        ));
    }
    Ok(())
}

/// Whether `requests` stays within `limit` for every resource it names.
fn fits(requests: &Resources, limit: &Resources) -> bool {
    requests.iter().all(|(r, v)| v <= limit.get(r))
}

/// Which gated members of a group a release lifts, in creation order: per
/// pod set, as many as the set has room for beside its released members,
/// only members that fit the set's pod size. The first release is whole
/// (gang): while no member runs, nothing is lifted unless every set can be
/// filled. `Err` says what the group waits for.
pub fn release_plan(members: &[Member], sets: &[SetLimit]) -> Result<Vec<String>, String> {
    let started = members.iter().any(|m| m.alive() && !m.gated);
    let mut lift = Vec::new();
    let mut short = Vec::new();
    for set in sets {
        let in_set = |m: &&Member| m.role == set.role && m.alive();
        let released = members.iter().filter(in_set).filter(|m| !m.gated).count();
        let room = usize::try_from(set.count)
            .unwrap_or(0)
            .saturating_sub(released);
        let mut candidates: Vec<&Member> = members
            .iter()
            .filter(in_set)
            .filter(|m| m.gated && !m.deleting && fits(&m.requests, &set.per_pod))
            .collect();
        candidates.sort_by(|a, b| (a.created_ms, &a.name).cmp(&(b.created_ms, &b.name)));
        if !started && candidates.len() < room {
            short.push(format!("{} of {room} {} pods", candidates.len(), set.role));
        }
        lift.extend(candidates.into_iter().take(room).map(|m| m.name.clone()));
    }
    if !short.is_empty() {
        return Err(format!(
            "the group is released whole: waiting for its pods ({} exist that fit its size)",
            short.join(", ")
        ));
    }
    Ok(lift)
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

    fn member(name: &str, role: &'static str, gated: bool, state: JobState, cpu: i64) -> Member {
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

    fn limit(role: &str, count: i32, cpu: i64) -> SetLimit {
        SetLimit {
            role: role.into(),
            count,
            per_pod: Resources::from_iter([("cpu".to_string(), cpu)]),
        }
    }

    #[test]
    fn a_group_is_held_until_a_member_is_released_and_done_when_size_succeeded() {
        use JobState::*;
        let m = |g, s| member("a", MEMBER_ROLE, g, s, 1);
        let held = group_state(&[m(true, Pending), m(true, Pending)], 2);
        assert_eq!(
            (held.held, held.state, held.gated, held.released),
            (true, Pending, 2, 0)
        );
        let running = group_state(&[m(false, Running), m(false, Pending)], 2);
        assert_eq!(
            (running.held, running.state, running.released),
            (false, Running, 2)
        );
        assert_eq!(
            group_state(&[m(false, Succeeded), m(false, Succeeded)], 2).state,
            Succeeded
        );
        // One failed, one succeeded, none alive: failed.
        assert_eq!(
            group_state(&[m(false, Succeeded), m(false, Failed)], 2).state,
            Failed
        );
        // A gated pod is not running whatever its phase says.
        assert_eq!(group_state(&[m(true, Running)], 1).state, Pending);
    }

    #[test]
    fn the_first_release_is_whole_later_ones_fill_the_room() {
        use JobState::*;
        let sets = [limit(LEADER_ROLE, 1, 2000), limit(WORKER_ROLE, 2, 1000)];
        // Leader and one worker exist: the group waits for its second worker.
        let partial = [
            member("l", LEADER_ROLE, true, Pending, 2000),
            member("w1", WORKER_ROLE, true, Pending, 1000),
        ];
        let why = release_plan(&partial, &sets).unwrap_err();
        assert!(why.contains("1 of 2 worker pods"), "{why}");
        // A worker larger than the unit's worker size does not count.
        let mut whole = partial.to_vec();
        whole.push(member("w-big", WORKER_ROLE, true, Pending, 4000));
        assert!(release_plan(&whole, &sets).is_err());
        whole.push(member("w2", WORKER_ROLE, true, Pending, 1000));
        whole.push(member("w3", WORKER_ROLE, true, Pending, 1000));
        assert_eq!(release_plan(&whole, &sets).unwrap(), ["l", "w1", "w2"]);
        // Once it runs, a replacement is lifted into the room left.
        let later = [
            member("l", LEADER_ROLE, false, Running, 2000),
            member("w1", WORKER_ROLE, false, Running, 1000),
            member("w2", WORKER_ROLE, false, Failed, 1000),
            member("w2b", WORKER_ROLE, true, Pending, 1000),
            member("w4", WORKER_ROLE, true, Pending, 1000),
        ];
        assert_eq!(release_plan(&later, &sets).unwrap(), ["w2b"]);
        // Nothing more than the size ever: a full group lifts nobody.
        let full = [
            member("l", LEADER_ROLE, false, Running, 2000),
            member("w1", WORKER_ROLE, false, Running, 1000),
            member("w2", WORKER_ROLE, false, Running, 1000),
            member("w9", WORKER_ROLE, true, Pending, 1000),
        ];
        assert!(release_plan(&full, &sets).unwrap().is_empty());
    }

    #[test]
    fn a_member_fits_its_units_size_and_role_or_is_told_why_not() {
        let sets = [limit(LEADER_ROLE, 1, 2000), limit(WORKER_ROLE, 2, 1000)];
        let cpu = |n| Resources::from_iter([("cpu".to_string(), n)]);
        assert!(fits_unit(WORKER_ROLE, 3, &cpu(1000), &sets).is_ok());
        let larger = fits_unit(WORKER_ROLE, 3, &cpu(1500), &sets).unwrap_err();
        assert!(
            larger.contains("more than the cpu: 1 worker pod"),
            "{larger}"
        );
        let resized = fits_unit(WORKER_ROLE, 4, &cpu(1000), &sets).unwrap_err();
        assert!(
            resized.contains("queued with 3 pods and this pod says 4"),
            "{resized}"
        );
        assert!(fits_unit(MEMBER_ROLE, 3, &cpu(1), &sets).is_err());
    }
}
