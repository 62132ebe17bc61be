//! A group's state from its members': held until a member is released,
//! done once its size succeeded.

use crate::jobs::JobState;
use crate::resources::Resources;

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
    pub(super) fn alive(&self) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::pod_group::MEMBER_ROLE;
    use crate::jobs::pod_group::fixtures::member;

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
}
