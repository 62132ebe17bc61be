//! The scheduling cycle (architecture §4.3): queues in MultiQueueSort order, units
//! of a queue in QueueSort order, as many releases as fit, usage accumulating
//! within the cycle so that decisions never over-commit.
//!
//! A cycle visits only queues that may have a different outcome since the
//! last one (see `engine/`), and inside a visited queue it re-uses a unit's
//! earlier verdict without running the filters while the limit that stopped
//! it still has too little room.
//!
//! This file holds the cycle's passes and the visit of one queue; the walk
//! through a queue's units by its policy is in `walk.rs`, the fair round in
//! `fair.rs`, and the waiting units' reasons in `reasons.rs`.

use std::collections::{HashMap, HashSet};
use std::mem;
use std::sync::Arc;

use koord_queue_model::{QueuePolicy, Resources};

use crate::engine::Core;
use crate::framework::Framework;
use crate::ids::{QueueId, QuotaId};
use crate::queues::{Dirty, QueueEntry};
use crate::reason::{Blocker, WaitReason};
use crate::reclaim::state::{Reclaim, ReclaimState};
use crate::state::ClusterState;
use crate::units::Units;

mod fair;
mod reasons;
mod walk;

/// Passes of one cycle at most. A cycle makes another pass only when the
/// previous one released units that reclaim was waiting on (or took back
/// units for a guaranteed one), which ends because every such pass releases
/// units; the bound only guards against a mistake. Work left over waits for
/// the next cycle.
const MAX_PASSES: usize = 64;

/// A unit to release. The core has already reserved its resources; if the
/// release cannot be written, call [`Core::unreserve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The unit's key, `namespace/name`.
    pub unit: Arc<str>,
    /// Its queue.
    pub queue: Arc<str>,
    /// What it now holds.
    pub resources: Resources,
    /// Whether it stays within its quota's min (otherwise it borrows).
    pub guaranteed: bool,
}

/// What a cycle did, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Queues looked at.
    pub queues_visited: usize,
    /// Units judged (released or found blocked).
    pub units_visited: usize,
    /// Units for which the filters ran.
    pub filter_runs: usize,
    /// Decisions withdrawn before the cycle ended: units released earlier
    /// in it and taken back (for a guaranteed unit, or as a preemption's
    /// victims) before anything was written. They are not in
    /// [`CycleOutput::decisions`]; they wait again.
    pub withdrawn: usize,
}

/// The result of a cycle.
#[derive(Clone, Debug, Default)]
pub struct CycleOutput {
    /// Units to release, in the order they were decided.
    pub decisions: Vec<Decision>,
    /// Units to re-suspend so that guaranteed units get the quota they
    /// borrow (each reported once). They keep counting as used until the
    /// controller reports them freed; see [`Reclaim`].
    pub reclaims: Vec<Reclaim>,
    /// Waiting units whose reason changed since the previous cycle (or that
    /// have one for the first time), with the new reason; empty when
    /// [`Core::report_reasons`] is off.
    pub waiting: Vec<(Arc<str>, WaitReason)>,
    /// Work done.
    pub stats: CycleStats,
}

/// A unit's verdict.
pub(crate) enum Verdict {
    Fits,
    /// Rejected by the filters with this reason.
    Blocked(WaitReason),
    /// Its earlier reason still holds: the limit has less room than it needs.
    StillBlocked(Blocker, i64),
}

/// The parts of the core a queue evaluation works with.
pub(crate) struct Pass<'a> {
    pub framework: &'a Framework,
    pub state: &'a mut ClusterState,
    pub units: &'a mut Units,
    pub index: &'a mut HashMap<Blocker, HashSet<QueueId>>,
    pub epoch: u64,
    pub out: &'a mut CycleOutput,
    pub reclaim: &'a mut ReclaimState,
    pub relaxed: &'a mut HashSet<Blocker>,
    /// The queue being served: its name, whether it reclaims and how it
    /// preempts.
    pub queue_name: Arc<str>,
    pub reclaim_on: bool,
    pub preemption: koord_queue_model::Preemption,
    /// The controller's clock at the cycle's start (ms since the epoch).
    pub now_ms: i64,
    /// The quota last recorded as watched for this queue (saves lookups).
    pub watched: Option<QuotaId>,
    /// The running cycle's number (see `UnitEntry::reported`).
    pub cycle_no: u32,
    /// Whether changed reasons are listed in the output
    /// ([`Core::report_reasons`]).
    pub reports_reasons: bool,
    /// Stop the queue after its first release that borrows (fair round).
    pub one_borrower: bool,
    /// It did.
    pub borrowed: bool,
    /// Reserving heads of other queues that hold across.
    pub holds: &'a mut crate::reserve::holds::Holds,
}

impl Core {
    /// Runs one scheduling cycle and returns its decisions (already
    /// reserved) and the waiting units whose reason changed.
    pub fn run_cycle(&mut self) -> CycleOutput {
        let mut out = CycleOutput::default();
        self.reclaim.cycle_start = self.reclaim.next_seq();
        self.reclaim.made_room.clear();
        let mut order = mem::take(&mut self.order_buf);
        self.cycle_no = self.cycle_no.wrapping_add(1).max(1);
        for _ in 0..MAX_PASSES {
            self.reclaim_housekeeping();
            self.refresh_holds();
            self.apply_relaxations();
            order.clear();
            order.extend(self.queues.order.iter().map(|(_, _, q)| *q));
            let fair_on = self.state.quotas.any_fair();
            let mut fair = Vec::new();
            for (position, &q) in order.iter().enumerate() {
                if self.queues.get(q).is_some_and(QueueEntry::needs_visit) {
                    if fair_on && let Some(scope) = self.fair_scope_of(q) {
                        fair.push((scope, position, q));
                        continue;
                    }
                    self.evaluate_queue(q, &mut out, false);
                    self.refresh_hold(q);
                    self.requeue_withdrawn();
                }
            }
            if !fair.is_empty() {
                self.fair_round(fair, &mut out);
            }
            // Only reclaim leaves work behind a pass: pauses that ended,
            // units taken back, guaranteed units to try again.
            if self.relaxed.is_empty() && !self.reclaim.has_pending() {
                break;
            }
        }
        self.order_buf = order;
        self.list_made_room();
        self.drop_withdrawn(&mut out);
        self.flush_reasons(&mut out);
        out
    }

    /// Removes the decisions withdrawn during the cycle (units taken back
    /// for guaranteed ones before anything was written).
    fn drop_withdrawn(&mut self, out: &mut CycleOutput) {
        let withdrawn = mem::take(&mut self.reclaim.withdrawn);
        if withdrawn.is_empty() {
            return;
        }
        out.stats.withdrawn = withdrawn.len();
        let mut gone = vec![false; out.decisions.len()];
        for i in withdrawn {
            if let Some(g) = gone.get_mut(i) {
                *g = true;
            }
        }
        let mut i = 0;
        out.decisions.retain(|_| {
            i += 1;
            !gone[i - 1]
        });
    }

    /// Marks the queues that have units stopped by a limit that now has
    /// enough room for at least one of them.
    fn apply_relaxations(&mut self) {
        let Core {
            relaxed,
            blocked_index,
            queues,
            state,
            ..
        } = self;
        for b in relaxed.drain() {
            let Some(set) = blocked_index.get_mut(&b) else {
                continue;
            };
            let room = state.headroom(b);
            set.retain(|q| {
                let Some(e) = queues.get_mut(*q) else {
                    return false;
                };
                match e.blockers.iter().find(|(x, _)| *x == b) {
                    Some(&(_, need)) => {
                        if room >= need && e.dirty == Dirty::Clean {
                            e.dirty = Dirty::Relaxed;
                        }
                        // A limit some unit can never fit under changed
                        // (raised, or the figures in its reason would be
                        // wrong): judged afresh, it may fit or reserve now.
                        let limit = state.quotas.limit_of(b);
                        if e.beyond
                            .iter()
                            .any(|&(x, seen)| x == b && limit != Some(seen))
                        {
                            e.dirty = Dirty::Forced;
                        }
                        true
                    }
                    None => false,
                }
            });
            if set.is_empty() {
                blocked_index.remove(&b);
            }
        }
    }

    /// Evaluates queue `q`; with `one_borrower`, it stops after the first
    /// release that borrows (and is looked at again), returning whether one
    /// did.
    fn evaluate_queue(&mut self, q: QueueId, out: &mut CycleOutput, one_borrower: bool) -> bool {
        let Core {
            framework,
            state,
            queues,
            units,
            blocked_index,
            epoch,
            reclaim,
            relaxed,
            cycle_no,
            now_ms,
            holds,
            reports_reasons,
            ..
        } = self;
        let Some(entry) = queues.get_mut(q) else {
            return false;
        };
        let dirty = mem::replace(&mut entry.dirty, Dirty::Clean);
        let dirty_units = mem::take(&mut entry.dirty_units);
        for id in &dirty_units {
            if let Some(u) = units.get_mut(*id)
                && u.dirty_in == Some(q)
            {
                u.dirty_in = None;
            }
        }
        let Some((policy, reclaim_on, preemption, stopped)) = entry
            .def
            .as_ref()
            .map(|d| (d.policy, d.reclaim, d.preemption, d.stopped))
        else {
            return false;
        };
        if dirty == Dirty::Relaxed
            && dirty_units.is_empty()
            && !entry
                .blockers
                .iter()
                .any(|(b, need)| state.headroom(*b) >= *need)
        {
            // Some limit got room, but not enough for any unit it stopped
            // here (the room may have been taken earlier in this cycle).
            return false;
        }
        out.stats.queues_visited += 1;
        let mut pass = Pass {
            framework,
            state,
            units,
            index: blocked_index,
            epoch: *epoch,
            out,
            reclaim,
            relaxed,
            queue_name: Arc::clone(&entry.name),
            reclaim_on,
            preemption,
            now_ms: *now_ms,
            watched: None,
            cycle_no: *cycle_no,
            reports_reasons: *reports_reasons,
            one_borrower,
            borrowed: false,
            holds,
        };
        if stopped {
            // A stopped queue releases nothing, whatever fits: its units
            // wait, each saying so (architecture §4.3).
            pass.stopped(entry);
            return false;
        }
        let full = dirty != Dirty::Clean;
        match policy {
            QueuePolicy::Priority if full => pass.priority_all(q, entry),
            QueuePolicy::Priority => pass.priority_listed(q, entry, &dirty_units),
            QueuePolicy::Block => {
                let head = entry.head.clone();
                let keys = pass.wait_keys(q, entry, &dirty_units);
                match head {
                    Some(head) if !full && keys.iter().all(|k| *k > head) => {
                        // New units behind the stopping point: still behind it.
                        let reason = WaitReason::BlockedBehind {
                            unit: Arc::clone(&head.key),
                        };
                        for k in keys {
                            pass.note_reason(k.id, reason.clone(), 0);
                        }
                    }
                    _ => pass.block(q, entry),
                }
            }
        }
        if pass.borrowed {
            // Stopped after one borrowing release: the rest is looked at in
            // the queue's next turn.
            entry.dirty = Dirty::Forced;
        }
        pass.borrowed
    }
}
