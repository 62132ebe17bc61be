//! The heads that hold across queues (`across.rs`), as the core keeps them
//! between passes and a pass reads them: data only, so that the engine and
//! the cycle, which hold and read them, do not depend on the rules of
//! `across.rs`, which depend on both.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::ids::{QueueId, QuotaId, ResId};
use crate::queues::Reservation;

/// One head that holds across queues.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    /// Its queue, and the queue's name.
    pub queue: QueueId,
    pub queue_name: Arc<str>,
    /// Its reservation (a copy: the backfill bound is cached in it).
    pub reservation: Reservation,
    /// Where it is short: an ancestor quota, or `None` for the capacity.
    pub scope: Option<QuotaId>,
    /// Its seniority: (priority, created, key).
    pub priority: i32,
    pub created_ms: i64,
    /// Queues with units held back behind it (looked at again when it ends).
    pub held: Vec<QueueId>,
}

impl Hold {
    /// The resource the head is short of.
    pub fn resource(&self) -> ResId {
        self.reservation.resource
    }

    /// Whether a unit of `priority`, created at `created_ms`, named `key`,
    /// is senior to the head (and so is not held back by it).
    pub(super) fn junior_to_head(&self, priority: i32, created_ms: i64, key: &str) -> bool {
        let head = &self.reservation.key.key;
        (std::cmp::Reverse(self.priority), self.created_ms, &**head)
            < (std::cmp::Reverse(priority), created_ms, key)
    }
}

/// The heads that hold across queues, and the queues that may have one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Holds {
    pub active: Vec<Hold>,
    /// Queues whose last visit left a reservation (active or not yet).
    pub reserving: BTreeSet<QueueId>,
}
