//! What one unit's next step is decided from ([`UnitView`]): its record,
//! its job, queue and pods, what this process knows of its release, and the
//! time of the input being handled. `decide.rs` decides from it, and so do
//! the writes it calls for (`backoff.rs`, `release_write.rs`).

use std::collections::HashMap;
use std::time::Duration;

use crate::controller::records::{JobRecord, Key, PodRecord, QueueRecord, UnitRecord};

/// Everything one unit's next step is decided from.
pub(super) struct UnitView<'a> {
    pub key: &'a Key,
    pub rec: &'a UnitRecord,
    /// The unit's job (the one that names this unit), if observed.
    pub job: Option<&'a JobRecord>,
    pub queue: Option<&'a QueueRecord>,
    /// The job's pods (strict dequeue counts the bound ones).
    pub pods: Option<&'a HashMap<String, PodRecord>>,
    /// A pod the unit paid for is alive: its job's own (also orphaned by
    /// the job's deletion, also terminating) or its job's group's.
    pub pods_alive: bool,
    /// A held job of this unit means it was suspended again (rather than
    /// that this process's release has not reached it yet).
    pub suspended_again: bool,
    /// The unit was found released (not by this process) and its job has
    /// not been seen running since: a held job may be a release cut short
    /// by a leader change.
    pub found_released: bool,
    /// This process's release of the unit has an unknown outcome and the
    /// unit's watch has not spoken since (the record is the release as sent).
    pub unconfirmed: bool,
    /// A pod group's members were last released at this (gated, released)
    /// count: not sent again until the members change.
    pub members_released_at: Option<(usize, usize)>,
    /// Strict dequeue for queues that do not set it.
    pub strict_default: Option<Duration>,
    pub now_ms: i64,
    /// The unit is in a backoff because a reclaim or a preemption took its
    /// room, and the core says that room is free again now: the backoff
    /// guards against thrash, not against an idle quota (issue 44).
    pub room_free: bool,
    /// Salt of the backoff jitter: differs between processes, so units sent
    /// back together by different schedulers do not return together.
    pub jitter_salt: u64,
}

/// Strict dequeue timeout of `queue` (its own setting, else the default);
/// `None` when strict dequeue is off.
pub(super) fn strict_timeout(
    queue: Option<&QueueRecord>,
    default: Option<Duration>,
) -> Option<Duration> {
    match queue.and_then(|q| q.strict) {
        Some(setting) => setting,
        None => default,
    }
}
