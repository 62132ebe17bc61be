//! Which gated members a release lifts: the whole group at first (gang),
//! then replacements into the room left.

use super::sizing::{SetLimit, fits};
use super::state::Member;

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
    use super::*;
    use crate::jobs::JobState;
    use crate::jobs::pod_group::fixtures::{limit, member};
    use crate::jobs::pod_group::{LEADER_ROLE, WORKER_ROLE};

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
}
