//! The queue table: each queue's definition, its waiting units in serving
//! order, and what the cycle needs to know to skip it when nothing changed.

use std::collections::BTreeSet;
use std::sync::Arc;

use koord_queue_model::QueuePolicy;

use super::ids::{Id, Interner, QueueId, UnitId};
use super::plugin::SortKey;
use super::reason::Blocker;

/// A waiting unit's place in its queue: ordered by key, then `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct WaitKey {
    pub order: SortKey,
    pub key: Arc<str>,
    pub id: UnitId,
}

/// How much of a queue the next cycle must look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Dirty {
    /// Only the units in the dirty list (if any).
    Clean,
    /// A limit that stopped some of its units got room: every unit, unless
    /// re-checking the queue's limits shows that none has enough room.
    Relaxed,
    /// Every unit.
    Forced,
}

/// A queue's definition as the cycle uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueState {
    pub priority: i32,
    pub policy: QueuePolicy,
    pub reclaim: bool,
    pub preemption: koord_queue_model::Preemption,
    pub reserve: koord_queue_model::Reserve,
    pub stopped: bool,
    pub order: SortKey,
}

/// One queue.
#[derive(Clone, Debug)]
pub(crate) struct QueueEntry {
    pub name: Arc<str>,
    /// `None` while no queue of this name is defined (units may name it first).
    pub def: Option<QueueState>,
    pub waiting: BTreeSet<WaitKey>,
    pub admitted: usize,
    pub dirty: Dirty,
    /// Units added or changed since the queue was last evaluated.
    pub dirty_units: Vec<UnitId>,
    /// Limits that stopped units of the queue, each with the smallest amount
    /// a stopped unit needs under it. The queue is worth another look only
    /// when one of them has at least that much room.
    pub blockers: Vec<(Blocker, i64)>,
    /// Those of `blockers` under which a unit can never fit (it asks for
    /// more than the limit holds at all), each with the limit as it was
    /// then: the queue is looked at again in full when one changes (a max
    /// raised, the capacity grown), however little room it has.
    pub beyond: Vec<(Blocker, i64)>,
    /// `Block` policy: the unit the queue stops at.
    pub head: Option<WaitKey>,
    /// `Priority` policy: the first unit that does not fit, which reserves
    /// from some time on (see `reserve.rs`).
    pub reservation: Option<Reservation>,
}

impl QueueEntry {
    fn new(name: Arc<str>) -> Self {
        Self {
            name,
            def: None,
            waiting: BTreeSet::new(),
            admitted: 0,
            dirty: Dirty::Clean,
            dirty_units: Vec::new(),
            blockers: Vec::new(),
            beyond: Vec::new(),
            head: None,
            reservation: None,
        }
    }

    /// Whether the next cycle has anything to look at in this queue.
    pub fn needs_visit(&self) -> bool {
        self.dirty != Dirty::Clean || !self.dirty_units.is_empty()
    }
}

/// All queues, and the defined ones in serving order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Queues {
    names: Interner<QueueId>,
    pub entries: Vec<QueueEntry>,
    /// Defined queues by (order key, name).
    pub order: BTreeSet<(SortKey, Arc<str>, QueueId)>,
}

impl Queues {
    /// The id of queue `name`, adding an undefined entry if it is new.
    pub fn intern(&mut self, name: &str) -> QueueId {
        let id = self.names.intern(name);
        while self.entries.len() <= id.index() {
            let next = QueueId::from_index(self.entries.len());
            self.entries
                .push(QueueEntry::new(Arc::clone(self.names.name(next))));
        }
        id
    }

    pub fn id(&self, name: &str) -> Option<QueueId> {
        self.names.get(name)
    }

    pub fn get(&self, id: QueueId) -> Option<&QueueEntry> {
        self.entries.get(id.index())
    }

    pub fn get_mut(&mut self, id: QueueId) -> Option<&mut QueueEntry> {
        self.entries.get_mut(id.index())
    }
}

/// A queue's head that does not fit, and from when it reserves.
#[derive(Clone, Debug)]
pub(crate) struct Reservation {
    pub key: WaitKey,
    /// The resource it is short of.
    pub resource: super::ids::ResId,
    pub from_ms: i64,
    /// The latest the head can start (`reserve.rs`, backfill), as computed
    /// in cycle `.0`: `None` when the units holding what it needs do not
    /// all have bounded runs that free enough.
    pub start_by: Option<(u32, Option<i64>)>,
}

impl Reservation {
    pub fn active(&self, now_ms: i64) -> bool {
        now_ms >= self.from_ms
    }
}
