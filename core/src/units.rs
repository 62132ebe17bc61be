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

/// Slots of one page of the table.
const PAGE: usize = 1024;

/// All units.
///
/// The slots are kept in pages of [`PAGE`], each allocated whole when the
/// one before is full: a single `Vec` grown by doubling kept up to half of
/// its slots empty and resident (at 100,000 units, 131,072 slots of ~280
/// bytes: 8.7 MB never used), and held the old and the new table at once
/// while it grew.
#[derive(Clone, Debug, Default)]
pub(crate) struct Units {
    pages: Vec<Vec<Option<UnitEntry>>>,
    free: Vec<UnitId>,
    by_key: HashMap<Arc<str>, UnitId>,
}

impl Units {
    pub fn lookup(&self, key: &str) -> Option<UnitId> {
        self.by_key.get(key).copied()
    }

    fn slot(&self, id: UnitId) -> Option<&Option<UnitEntry>> {
        let i = id.index();
        self.pages.get(i / PAGE)?.get(i % PAGE)
    }

    fn slot_mut(&mut self, id: UnitId) -> Option<&mut Option<UnitEntry>> {
        let i = id.index();
        self.pages.get_mut(i / PAGE)?.get_mut(i % PAGE)
    }

    pub fn get(&self, id: UnitId) -> Option<&UnitEntry> {
        self.slot(id).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, id: UnitId) -> Option<&mut UnitEntry> {
        self.slot_mut(id).and_then(Option::as_mut)
    }

    pub fn insert(&mut self, entry: UnitEntry) -> UnitId {
        let key = Arc::clone(&entry.key);
        // A freed slot is always in the table: ids are only freed by `remove`.
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(slot) = self.slot_mut(id) {
                    *slot = Some(entry);
                }
                id
            }
            None => {
                if self.pages.last().is_none_or(|p| p.len() == PAGE) {
                    self.pages.push(Vec::with_capacity(PAGE));
                }
                let full_pages = self.pages.len() - 1;
                let mut at = 0;
                if let Some(page) = self.pages.last_mut() {
                    at = page.len();
                    page.push(Some(entry));
                }
                UnitId::from_index(full_pages * PAGE + at)
            }
        };
        self.by_key.insert(key, id);
        id
    }

    pub fn remove(&mut self, id: UnitId) -> Option<UnitEntry> {
        let entry = self.slot_mut(id)?.take()?;
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
        self.pages.iter().flatten().filter_map(Option::as_ref)
    }

    /// Every page but the last is full, so a slot's place in this order is
    /// its id.
    pub fn iter_ids(&self) -> impl Iterator<Item = (UnitId, &UnitEntry)> {
        self.pages
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, s)| Some((UnitId::from_index(i), s.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::{PAGE, UnitEntry, UnitState, Units};
    use crate::ids::{Id, NsId, UnitId};
    use std::sync::Arc;

    fn entry(key: &str) -> UnitEntry {
        UnitEntry {
            key: Arc::from(key),
            namespace: NsId::from_index(0),
            quota: None,
            queue: None,
            priority: 0,
            created_ms: 0,
            max_run_ms: None,
            order: Default::default(),
            request: Default::default(),
            state: UnitState::Waiting {
                reason: None,
                trusted: 0,
            },
            dirty_in: None,
            reason_changed: false,
            released_reserving: false,
            reported: (0, 0),
        }
    }

    #[test]
    fn ids_stay_valid_across_pages_and_freed_slots_are_reused() {
        let mut units = Units::default();
        let n = 2 * PAGE + 3;
        let ids: Vec<UnitId> = (0..n)
            .map(|i| units.insert(entry(&format!("ns/u{i}"))))
            .collect();
        assert_eq!(ids.last().map(|id| id.index()), Some(n - 1));
        assert_eq!(
            units.pages.len(),
            3,
            "pages are filled before another is made"
        );
        for (i, id) in ids.iter().enumerate() {
            let key = format!("ns/u{i}");
            assert_eq!(units.get(*id).map(|e| &*e.key), Some(key.as_str()));
            assert_eq!(units.lookup(&key), Some(*id));
        }
        // Every slot is met once, in id order, by both iterations.
        let seen: Vec<UnitId> = units.iter_ids().map(|(id, _)| id).collect();
        assert_eq!(seen, ids);
        assert_eq!(units.iter().count(), n);

        // A slot freed on the second page is taken by the next unit.
        let freed = ids[PAGE + 5];
        assert_eq!(
            units.remove(freed).map(|e| e.key.to_string()),
            Some(format!("ns/u{}", PAGE + 5))
        );
        assert!(units.get(freed).is_none());
        assert_eq!(units.len(), n - 1);
        assert_eq!(units.insert(entry("ns/new")), freed);
        assert_eq!(units.lookup("ns/new"), Some(freed));
        assert_eq!(units.iter_ids().count(), n);
        // Ids beyond the table are not found.
        assert!(units.get(UnitId::from_index(10 * PAGE)).is_none());
        assert!(units.remove(UnitId::from_index(n)).is_none());
    }
}
