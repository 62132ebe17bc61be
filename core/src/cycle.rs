//! The scheduling cycle (architecture §4.3): queues in MultiQueueSort order, units
//! of a queue in QueueSort order, as many releases as fit, usage accumulating
//! within the cycle so that decisions never over-commit.
//!
//! A cycle visits only queues that may have a different outcome since the
//! last one (see `engine.rs`), and inside a visited queue it re-uses a unit's
//! earlier verdict without running the filters while the limit that stopped
//! it still has too little room.

use std::collections::{HashMap, HashSet};
use std::mem;
use std::sync::Arc;

use koord_queue_model::{QueuePolicy, Resources};

use super::engine::Core;
use super::framework::Framework;
use super::ids::{QueueId, QuotaId, UnitId};
use super::queues::{Dirty, QueueEntry, WaitKey};
use super::reason::{Blocker, WaitReason};
use super::reclaim::state::{Reclaim, ReclaimState, VictimKey};
use super::state::ClusterState;
use super::units::{UnitEntry, UnitState, Units};

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
    /// have one for the first time), with the new reason.
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
    /// Stop the queue after its first release that borrows (fair round).
    pub one_borrower: bool,
    /// It did.
    pub borrowed: bool,
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

    /// Serves the queues of fair-sharing quotas (see `quota_tree/fair.rs`):
    /// always the one whose quota has the lowest weighted share under its
    /// fair-sharing parent, one borrowing release at a time, until none
    /// releases more. Ties go by the queues' order.
    fn fair_round(
        &mut self,
        queues: Vec<((QuotaId, QuotaId), usize, QueueId)>,
        out: &mut CycleOutput,
    ) {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let share = |core: &Self, (parent, child): (QuotaId, QuotaId)| {
            let none = Default::default();
            core.state
                .quotas
                .weighted_share(parent, child, &none, &none)
        };
        let mut heap: BinaryHeap<_> = queues
            .into_iter()
            .map(|(scope, position, q)| Reverse((share(self, scope), position, q, scope)))
            .collect();
        while let Some(Reverse((_, position, q, scope))) = heap.pop() {
            if !self.queues.get(q).is_some_and(QueueEntry::needs_visit) {
                continue;
            }
            let borrowed = self.evaluate_queue(q, out, true);
            self.requeue_withdrawn();
            if borrowed {
                heap.push(Reverse((share(self, scope), position, q, scope)));
            }
        }
    }

    /// The fair-sharing scope of queue `q`: the quota it serves (the one of
    /// its name) has a fair-sharing ancestor.
    fn fair_scope_of(&self, q: QueueId) -> Option<(QuotaId, QuotaId)> {
        let entry = self.queues.get(q)?;
        let quota = self.state.quotas.id(&entry.name)?;
        self.state.quotas.fair_scope(quota)
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
        let Some((policy, reclaim_on, preemption)) = entry
            .def
            .as_ref()
            .map(|d| (d.policy, d.reclaim, d.preemption))
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
            one_borrower,
            borrowed: false,
        };
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

    fn flush_reasons(&mut self, out: &mut CycleOutput) {
        for id in self.changed.drain(..) {
            let Some(e) = self.units.get_mut(id) else {
                continue;
            };
            if !mem::replace(&mut e.reason_changed, false) {
                continue;
            }
            if let Some(r) = e.reason() {
                out.waiting.push((Arc::clone(&e.key), r.clone()));
            }
        }
    }
}

impl Pass<'_> {
    /// Sets a waiting unit's reason (as of `epoch`, 0 for reasons that are
    /// not the filters' verdict) and reports it in the output if it changed.
    /// Reported here rather than when the cycle ends, while the unit is at
    /// hand; a unit already listed as changed before the cycle is reported
    /// by the end-of-cycle flush instead, with its latest reason.
    pub(crate) fn note_reason(&mut self, id: UnitId, new: WaitReason, epoch: u64) {
        if !self.reclaim.plans.is_empty()
            && !matches!(
                new,
                WaitReason::Reclaiming { .. } | WaitReason::Preempting { .. }
            )
            && self.reclaim.plans.contains_key(&id)
        {
            // It no longer waits for reclaimed resources (e.g. a Block
            // queue stops at a unit ahead of it): borrowing must not stay
            // paused for it.
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, self.relaxed);
        }
        let Some(e) = self.units.get_mut(id) else {
            return;
        };
        let UnitState::Waiting { reason, trusted } = &mut e.state else {
            return;
        };
        *trusted = epoch;
        if reason.as_ref() == Some(&new) {
            return;
        }
        if !e.reason_changed {
            // Reported once per cycle, with its latest reason (a unit may be
            // judged again in a later pass of the cycle).
            match usize::try_from(e.reported.1) {
                Ok(i) if e.reported.0 == self.cycle_no && i < self.out.waiting.len() => {
                    self.out.waiting[i].1 = new.clone();
                }
                _ => {
                    e.reported = (
                        self.cycle_no,
                        u32::try_from(self.out.waiting.len()).unwrap_or(u32::MAX),
                    );
                    self.out.waiting.push((Arc::clone(&e.key), new.clone()));
                }
            }
        }
        *reason = Some(new);
    }

    /// The verdict for a waiting unit.
    fn judge(&mut self, id: UnitId) -> Verdict {
        let Some(u) = self.units.get(id) else {
            return Verdict::Blocked(WaitReason::NoQueue);
        };
        if let UnitState::Waiting {
            reason: Some(r),
            trusted,
        } = &u.state
            && *trusted == self.epoch
            && let Some((b, need)) = r.blocker()
            && self.state.headroom(b) < need
            && !self.may_reclaim_now(u, r)
        {
            return Verdict::StillBlocked(b, need);
        }
        self.out.stats.filter_runs += 1;
        match self.framework.filter(&u.as_ref(), self.state) {
            Ok(()) => match self.paused(id) {
                Some(reason) => Verdict::Blocked(reason),
                None => Verdict::Fits,
            },
            Err(reason) => self.after_rejection(id, reason),
        }
    }

    /// Whether a unit still stopped by the limit of its earlier verdict
    /// must be judged afresh because it may reclaim now: its queue reclaims
    /// again, or it was judged to borrow and its quota has room under its
    /// min again (it may be guaranteed now).
    fn may_reclaim_now(&self, u: &UnitEntry, r: &WaitReason) -> bool {
        if !self.reclaim_on {
            return false;
        }
        match r {
            WaitReason::ReclaimOff { .. } => true,
            _ => {
                r.is_quota_limit()
                    && !r.is_guaranteed()
                    && self
                        .state
                        .quotas
                        .is_guaranteed_projected(u.quota, &u.request)
            }
        }
    }

    /// Reserves the unit's request and records the decision.
    fn release(&mut self, id: UnitId, queue: &Arc<str>) {
        if self.reclaim.plans.contains_key(&id) {
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, self.relaxed);
        }
        self.reclaim.retry.remove(&id);
        let since = self.reclaim.now_at(self.now_ms);
        let Some(u) = self.units.get_mut(id) else {
            return;
        };
        let guaranteed = self.state.quotas.is_guaranteed(u.quota, &u.request);
        if !guaranteed {
            // More borrowing: a guaranteed unit may be able to reclaim now.
            self.reclaim.stale = true;
            self.borrowed = self.one_borrower;
        }
        let amount = u.request.clone();
        self.framework
            .reserve(&u.as_ref_with(&amount), &amount, self.state);
        // The decision's index is its sequence number within the cycle
        // (see `ReclaimState::withdrawn`).
        debug_assert_eq!(
            since.seq - self.reclaim.cycle_start,
            self.out.decisions.len() as u64
        );
        self.out.decisions.push(Decision {
            unit: Arc::clone(&u.key),
            queue: Arc::clone(queue),
            resources: amount.to_resources(&self.state.resources),
            guaranteed,
        });
        u.state = UnitState::Holding {
            amount,
            started: false,
            since,
        };
        if self.reclaim.made_room.contains(&id) {
            // Never taken back in this cycle: listed once it ends, so that
            // picking does not read past it meanwhile.
            self.reclaim.unlisted.push(id);
        } else {
            self.reclaim
                .index
                .insert(&self.state.quotas, VictimKey::of(u, id, since));
        }
    }

    /// Records a blocked verdict: the unit's reason and the queue's limits.
    fn blocked(
        &mut self,
        q: QueueId,
        blockers: &mut Vec<(Blocker, i64)>,
        id: UnitId,
        verdict: Verdict,
    ) {
        let limit = match verdict {
            Verdict::Fits => None,
            Verdict::StillBlocked(b, need) => Some((b, need)),
            Verdict::Blocked(reason) => {
                let limit = reason.blocker();
                self.watch(q, id, &reason);
                self.note_reason(id, reason, self.epoch);
                limit
            }
        };
        if let Some((b, need)) = limit {
            match blockers.iter_mut().find(|(x, _)| *x == b) {
                Some((_, n)) => *n = (*n).min(need),
                None => {
                    blockers.push((b, need));
                    self.index.entry(b).or_default().insert(q);
                }
            }
        }
    }

    /// Records that queue `q` has a unit judged to borrow in its quota, to
    /// look at it again if the quota gets room under its min.
    fn watch(&mut self, q: QueueId, id: UnitId, reason: &WaitReason) {
        if !self.reclaim_on || !reason.is_quota_limit() || reason.is_guaranteed() {
            return;
        }
        let Some(quota) = self.units.get(id).and_then(|u| u.quota) else {
            return;
        };
        if self.watched == Some(quota) {
            return;
        }
        self.watched = Some(quota);
        self.reclaim.watch.entry(quota).or_default().insert(q);
    }

    /// Priority policy, every waiting unit in order.
    fn priority_all(&mut self, q: QueueId, entry: &mut QueueEntry) {
        entry.blockers.clear();
        let reserve = entry.def.as_ref().map(|d| d.reserve).unwrap_or_default();
        let mut reservation = None;
        let mut released = Vec::new();
        for wk in &entry.waiting {
            if self.held_back(&mut reservation, wk) {
                continue;
            }
            self.out.stats.units_visited += 1;
            match self.judge(wk.id) {
                Verdict::Fits => {
                    self.release(wk.id, &entry.name);
                    released.push(wk.clone());
                    if self.borrowed {
                        break;
                    }
                }
                v => {
                    self.blocked(q, &mut entry.blockers, wk.id, v);
                    self.maybe_reserve(&mut reservation, reserve, wk);
                }
            }
        }
        self.mark_reserving(reservation.as_ref());
        entry.reservation = reservation;
        entry.admitted += released.len();
        for wk in &released {
            entry.waiting.remove(wk);
        }
    }

    /// Priority policy, only the listed (new or changed) units, in order.
    /// The others were blocked by limits that have not got room since.
    fn priority_listed(&mut self, q: QueueId, entry: &mut QueueEntry, ids: &[UnitId]) {
        let reserve = entry.def.as_ref().map(|d| d.reserve).unwrap_or_default();
        let mut reservation = entry.reservation.take();
        if reservation
            .as_ref()
            .is_some_and(|r| !entry.waiting.contains(&r.key))
        {
            // The reserving head is gone: those it held back are looked at
            // afresh.
            reservation = None;
            entry.dirty = Dirty::Forced;
        }
        for wk in self.wait_keys(q, entry, ids) {
            if self.held_back(&mut reservation, &wk) {
                continue;
            }
            self.out.stats.units_visited += 1;
            match self.judge(wk.id) {
                Verdict::Fits => {
                    self.release(wk.id, &entry.name);
                    entry.waiting.remove(&wk);
                    entry.admitted += 1;
                    if reservation.as_ref().is_some_and(|r| r.key == wk) {
                        // The head got its room: those it held back may go.
                        reservation = None;
                        entry.dirty = Dirty::Forced;
                    }
                    if self.borrowed {
                        break;
                    }
                }
                v => {
                    self.blocked(q, &mut entry.blockers, wk.id, v);
                    self.maybe_reserve(&mut reservation, reserve, &wk);
                }
            }
        }
        self.mark_reserving(reservation.as_ref());
        entry.reservation = reservation;
    }

    /// Block policy: release from the front until a unit does not fit; the
    /// rest wait behind it.
    fn block(&mut self, q: QueueId, entry: &mut QueueEntry) {
        entry.blockers.clear();
        entry.head = None;
        let mut released = Vec::new();
        let mut behind: Option<WaitReason> = None;
        for wk in &entry.waiting {
            if let Some(reason) = &behind {
                self.note_reason(wk.id, reason.clone(), 0);
                continue;
            }
            self.out.stats.units_visited += 1;
            match self.judge(wk.id) {
                Verdict::Fits => {
                    self.release(wk.id, &entry.name);
                    released.push(wk.clone());
                    if self.borrowed {
                        break;
                    }
                }
                v => {
                    self.blocked(q, &mut entry.blockers, wk.id, v);
                    entry.head = Some(wk.clone());
                    behind = Some(WaitReason::BlockedBehind {
                        unit: Arc::clone(&wk.key),
                    });
                }
            }
        }
        entry.admitted += released.len();
        for wk in &released {
            entry.waiting.remove(wk);
        }
    }

    /// The places of the listed units that wait in queue `q`, sorted and
    /// without repeats.
    fn wait_keys(&self, q: QueueId, entry: &QueueEntry, ids: &[UnitId]) -> Vec<WaitKey> {
        let mut keys: Vec<WaitKey> = ids
            .iter()
            .filter_map(|id| {
                let u = self.units.get(*id)?;
                (u.is_waiting() && u.queue == Some(q)).then(|| WaitKey {
                    order: u.order,
                    key: Arc::clone(&u.key),
                    id: *id,
                })
            })
            .filter(|k| entry.waiting.contains(k))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}
