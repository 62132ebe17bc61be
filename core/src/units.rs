//! The unit table: every unit the core knows, waiting or holding quota,
//! in slots addressed by [`UnitId`] and found by key.

use std::collections::HashMap;
use std::sync::Arc;

use super::amounts::ResVec;
use super::ids::{Id, NsId, QueueId, QuotaId, UnitId};
use super::plugin::{SortKey, UnitRef};
use super::reason::WaitReason;

/// When a unit started holding quota, to find the most recently released
/// units first when reclaiming. The core has no clock: `ms` is the release
/// time the controller reported (`lastAllocateTime`, after a restart), or
/// the latest such time for units the core released or was told about
/// without a time; `seq` orders releases with the same `ms` (it only grows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Stamp {
    pub ms: i64,
    pub seq: u64,
}

/// Where a unit stands.
#[derive(Clone, Debug)]
pub(crate) enum UnitState {
    /// In its queue's line.
    Waiting {
        /// Why it waits, once evaluated.
        reason: Option<WaitReason>,
        /// The epoch in which the filters produced `reason` (0: never). A
        /// reason from the current epoch may be re-used without running the
        /// filters while its limit still has too little room.
        trusted: u64,
    },
    /// Holding quota.
    Holding {
        /// What it holds.
        amount: ResVec,
        /// Whether its pods exist (see [`UnitRef::started`]).
        started: bool,
        /// When it was released.
        since: Stamp,
    },
}

/// One unit.
#[derive(Clone, Debug)]
pub(crate) struct UnitEntry {
    pub key: Arc<str>,
    pub namespace: NsId,
    pub quota: Option<QuotaId>,
    pub queue: Option<QueueId>,
    pub priority: i32,
    /// Creation time (ms), for preemption's "newer" (see `reclaim/preempt.rs`).
    pub created_ms: i64,
    /// The longest it runs once released (ms), if bounded (backfill).
    pub max_run_ms: Option<i64>,
    pub order: SortKey,
    pub request: ResVec,
    pub state: UnitState,
    /// The queue whose dirty list holds this unit, if any (avoids duplicates).
    pub dirty_in: Option<QueueId>,
    /// Whether the unit is in the list of changed reasons.
    pub reason_changed: bool,
    /// It was released as its queue's reserving head (its latest release):
    /// reclaim for a guaranteed unit of lower priority spares it while
    /// others can make room (`reclaim/state.rs` `Eligible`).
    pub released_reserving: bool,
    /// Where the running cycle reported the unit's reason: (cycle number,
    /// index in the output), so that a later pass of the same cycle
    /// replaces that entry instead of reporting the unit twice.
    pub reported: (u32, u32),
}

impl UnitEntry {
    /// The unit as plugins see it, with `amount` as its request.
    pub fn as_ref_with<'a>(&'a self, amount: &'a ResVec) -> UnitRef<'a> {
        UnitRef {
            key: &self.key,
            namespace: self.namespace,
            quota: self.quota,
            queue: self.queue,
            priority: self.priority,
            request: amount,
            started: matches!(self.state, UnitState::Holding { started: true, .. }),
        }
    }

    /// The unit as filters see it.
    pub fn as_ref(&self) -> UnitRef<'_> {
        self.as_ref_with(&self.request)
    }

    /// The reason of a waiting unit.
    pub fn reason(&self) -> Option<&WaitReason> {
        match &self.state {
            UnitState::Waiting { reason, .. } => reason.as_ref(),
            UnitState::Holding { .. } => None,
        }
    }

    /// Whether the unit waits.
    pub fn is_waiting(&self) -> bool {
        matches!(self.state, UnitState::Waiting { .. })
    }

    /// What a holding unit holds and since when.
    pub fn holding(&self) -> Option<(&ResVec, Stamp)> {
        match &self.state {
            UnitState::Holding { amount, since, .. } => Some((amount, *since)),
            UnitState::Waiting { .. } => None,
        }
    }
}

/// All units.
#[derive(Clone, Debug, Default)]
pub(crate) struct Units {
    slots: Vec<Option<UnitEntry>>,
    free: Vec<UnitId>,
    by_key: HashMap<Arc<str>, UnitId>,
}

impl Units {
    pub fn lookup(&self, key: &str) -> Option<UnitId> {
        self.by_key.get(key).copied()
    }

    pub fn get(&self, id: UnitId) -> Option<&UnitEntry> {
        self.slots.get(id.index()).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, id: UnitId) -> Option<&mut UnitEntry> {
        self.slots.get_mut(id.index()).and_then(Option::as_mut)
    }

    pub fn insert(&mut self, entry: UnitEntry) -> UnitId {
        let key = Arc::clone(&entry.key);
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id.index()] = Some(entry);
                id
            }
            None => {
                self.slots.push(Some(entry));
                UnitId::from_index(self.slots.len() - 1)
            }
        };
        self.by_key.insert(key, id);
        id
    }

    pub fn remove(&mut self, id: UnitId) -> Option<UnitEntry> {
        let entry = self.slots.get_mut(id.index())?.take()?;
        self.by_key.remove(&*entry.key);
        self.free.push(id);
        Some(entry)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Reads the fields a judgement reads first of each of `ids`, and
    /// nothing else: a walk through a queue meets its units in the queue's
    /// order, scattered over the table, and waits for memory at each; these
    /// reads do not depend on one another, so the processor overlaps their
    /// waits, and the walk then finds the units in its cache.
    pub fn warm(&self, ids: impl Iterator<Item = UnitId>) {
        let mut seen = 0usize;
        for id in ids {
            if let Some(u) = self.get(id) {
                // The fields of the unit as filters see it (`as_ref`),
                // wherever the compiler lays them out.
                seen = seen
                    .wrapping_add(usize::from(u.is_waiting()))
                    .wrapping_add(usize::from(u.request.is_empty()))
                    .wrapping_add(u.key.len())
                    .wrapping_add(u.namespace.index())
                    .wrapping_add(u.quota.map_or(0, |q| q.index()))
                    .wrapping_add(u.priority as usize);
            }
        }
        std::hint::black_box(seen);
    }

    pub fn iter(&self) -> impl Iterator<Item = &UnitEntry> {
        self.slots.iter().filter_map(Option::as_ref)
    }

    pub fn iter_ids(&self) -> impl Iterator<Item = (UnitId, &UnitEntry)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((UnitId::from_index(i), s.as_ref()?)))
    }
}
