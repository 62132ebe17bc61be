//! How large a group is: its unit's pod sets, sized once from the first
//! member admitted (a plain group: `size` pods like it; an LWS group: its
//! LeaderWorkerSet's templates), and whether a later member fits them.

use serde_json::Value;

use super::membership::{
    GroupSource, LEADER_ROLE, LWS_NAME_LABEL, MEMBER_ROLE, Membership, WORKER_ROLE, membership,
};
use crate::jobs::json::{get_path, opt_count, template};
use crate::jobs::pod_request::template_requests_at;
use crate::jobs::{AdapterError, JobAdapter, JobKind, PodSetInfo, SIZE_INPUT_KEY};
use crate::resources::Resources;

/// The `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet: read to size its
/// groups, never queued itself (it has no suspend; its pods are).
pub static LWS_KIND: JobKind = JobKind {
    group: "leaderworkerset.x-k8s.io",
    version: "v1",
    kind: "LeaderWorkerSet",
    plural: "leaderworkersets",
    extension: "lws",
};

/// The pod sets of `job`'s unit: the job's own, except for a member of a
/// pod group, whose unit is the group's.
pub fn unit_pod_sets(
    adapter: &dyn JobAdapter,
    job: &Value,
) -> Result<Vec<PodSetInfo>, AdapterError> {
    let own = adapter.pod_sets(job)?;
    match adapter.grouping() {
        None => Ok(own),
        Some(grouping) => grouping.unit_pod_sets(job, own),
    }
}

/// [`unit_pod_sets`] of a pod: the group's when it is a member (`own`
/// sizes a plain group's members), else `own`.
pub(super) fn member_unit_pod_sets(
    pod: &Value,
    own: Vec<PodSetInfo>,
) -> Result<Vec<PodSetInfo>, AdapterError> {
    let Some(member) = membership(pod).transpose()? else {
        return Ok(own);
    };
    match own.into_iter().next() {
        Some(first) => group_pod_sets(pod, &member, first),
        None => Ok(Vec::new()),
    }
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
                per_pod: crate::jobs::pod_template_requests(&template).ok()?,
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
pub(super) fn fits(requests: &Resources, limit: &Resources) -> bool {
    requests.iter().all(|(r, v)| v <= limit.get(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::pod_group::fixtures::limit;

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
