//! The walk through one queue (architecture §4.3): its waiting units in
//! QueueSort order, each judged by the filters (or by its earlier verdict while
//! the limit that stopped it has too little room) and released while it fits,
//! by the queue's policy — Priority (every unit, or only the changed ones, a
//! reserving head holding back the rest) or Block (stop at the first that does
//! not fit).

use std::sync::Arc;

use koord_queue_model::Reserve;

use super::{Decision, Pass, Verdict};
use crate::ids::{QueueId, UnitId};
use crate::queues::{Dirty, QueueEntry, Reservation, WaitKey};
use crate::reason::{Blocker, WaitReason};
use crate::reclaim::state::VictimKey;
use crate::units::{UnitEntry, UnitState};

impl Pass<'_> {
    /// The verdict for a waiting unit; `alone` when it may become its
    /// queue's reserving head (the queue reserves and no head does yet).
    fn judge(&mut self, id: UnitId, alone: bool) -> Verdict {
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
            && !self.fit_alone_changed(u, r, alone)
        {
            return Verdict::StillBlocked(b, need);
        }
        self.out.stats.filter_runs += 1;
        match self.framework.filter(&u.as_ref(), self.state) {
            Ok(()) => match self.paused(id).or_else(|| self.sent_back_too_often(id)) {
                Some(reason) => Verdict::Blocked(reason),
                None => Verdict::Fits,
            },
            Err(reason) => self.after_rejection(id, reason),
        }
    }

    /// Whether a unit still stopped by the limit of its earlier verdict
    /// must be judged afresh because it may reclaim now: its queue reclaims
    /// again, or it was judged to borrow and its quota has room under its
    /// min again (it may be guaranteed now; so too for a unit held back for
    /// having been sent back too often, which waits only while it borrows).
    fn may_reclaim_now(&self, u: &UnitEntry, r: &WaitReason) -> bool {
        if matches!(r, WaitReason::SentBackTooOften { .. }) {
            // Held back only while it borrows: within its min now, it runs.
            return self
                .state
                .quotas
                .is_guaranteed_projected(u.quota, &u.request);
        }
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

    /// Whether a unit's earlier verdict is wrong about whether it can fit
    /// at all: it said the unit never fits under a limit that has changed
    /// since (raised, it may fit or reserve now; else its figures are
    /// off), or — with `alone`, for a unit that may become its queue's
    /// reserving head — it said the unit waits for room where now it can
    /// never fit (a max lowered below what it asks for, the capacity
    /// shrunk). (A reserving head's own reason is never trusted: it is
    /// noted as of no epoch, `mark_reserving`.)
    fn fit_alone_changed(&self, u: &UnitEntry, r: &WaitReason, alone: bool) -> bool {
        let Some(s) = r.shortfall() else {
            return false;
        };
        if s.never_fits() {
            return self.state.quotas.limit_of(s.blocker) != Some(s.limit);
        }
        alone
            && matches!(s.blocker, Blocker::QuotaMax(..) | Blocker::Capacity(..))
            && self.state.quotas.never_fits(u.quota, &u.request).is_some()
    }

    /// [`Pass::release`] of the unit at `wk`, which was its queue's active
    /// reserving head if `head` names it.
    fn release_unit(&mut self, wk: &WaitKey, queue: &Arc<str>, head: Option<&WaitKey>) {
        self.release(wk.id, queue);
        let reserving = head.is_some_and(|h| h == wk);
        if let Some(u) = self.units.get_mut(wk.id) {
            u.released_reserving = reserving;
        }
    }

    /// Reserves the unit's request and records the decision.
    fn release(&mut self, id: UnitId, queue: &Arc<str>) {
        if self.reclaim.plans.contains_key(&id) {
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, self.relaxed);
        }
        self.reclaim.retry.remove(&id);
        // Released, it no longer waits for a victim's minimum run time: a
        // due time left behind would wake the controller (and end the
        // simulator's run) for nothing.
        self.reclaim.preempt_later.remove(&id);
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

    /// Whether a unit judged now may become its queue's reserving head:
    /// the queue reserves (`reserve`) and no head does yet.
    fn may_reserve(&self, reserve: Reserve, reservation: Option<&Reservation>) -> bool {
        reserve != Reserve::default() && !reservation.is_some_and(|r| r.active(self.now_ms))
    }

    /// Priority policy, every waiting unit in order.
    pub(super) fn priority_all(&mut self, q: QueueId, entry: &mut QueueEntry) {
        entry.blockers.clear();
        entry.beyond.clear();
        let reserve = entry.def.as_ref().map(|d| d.reserve).unwrap_or_default();
        let head = entry
            .reservation
            .as_ref()
            .filter(|r| r.active(self.now_ms))
            .map(|r| r.key.clone());
        let mut reservation = None;
        let mut released = Vec::new();
        self.units.warm(entry.waiting.iter().map(|wk| wk.id));
        for wk in &entry.waiting {
            if self.held_back(&mut reservation, wk) || self.held_across(q, wk) {
                continue;
            }
            self.out.stats.units_visited += 1;
            let alone = self.may_reserve(reserve, reservation.as_ref());
            match self.judge(wk.id, alone) {
                Verdict::Fits => {
                    self.release_unit(wk, &entry.name, head.as_ref());
                    released.push(wk.clone());
                    if self.borrowed {
                        break;
                    }
                }
                v => {
                    self.blocked(q, &mut entry.blockers, &mut entry.beyond, wk.id, v);
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
    pub(super) fn priority_listed(&mut self, q: QueueId, entry: &mut QueueEntry, ids: &[UnitId]) {
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
            if self.held_back(&mut reservation, &wk) || self.held_across(q, &wk) {
                continue;
            }
            self.out.stats.units_visited += 1;
            let alone = self.may_reserve(reserve, reservation.as_ref());
            match self.judge(wk.id, alone) {
                Verdict::Fits => {
                    let head = reservation
                        .as_ref()
                        .filter(|r| r.active(self.now_ms))
                        .map(|r| r.key.clone());
                    self.release_unit(&wk, &entry.name, head.as_ref());
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
                    self.blocked(q, &mut entry.blockers, &mut entry.beyond, wk.id, v);
                    self.maybe_reserve(&mut reservation, reserve, &wk);
                }
            }
        }
        self.mark_reserving(reservation.as_ref());
        entry.reservation = reservation;
    }

    /// Block policy: release from the front until a unit does not fit; the
    /// rest wait behind it.
    pub(super) fn block(&mut self, q: QueueId, entry: &mut QueueEntry) {
        entry.blockers.clear();
        entry.beyond.clear();
        entry.head = None;
        let mut released = Vec::new();
        let mut behind: Option<WaitReason> = None;
        for wk in &entry.waiting {
            if let Some(reason) = &behind {
                self.note_reason(wk.id, reason.clone(), 0);
                continue;
            }
            if self.held_across(q, wk) {
                // Held behind another queue's head: nothing passes it.
                entry.head = Some(wk.clone());
                behind = Some(WaitReason::BlockedBehind {
                    unit: Arc::clone(&wk.key),
                });
                continue;
            }
            self.out.stats.units_visited += 1;
            match self.judge(wk.id, false) {
                Verdict::Fits => {
                    self.release(wk.id, &entry.name);
                    released.push(wk.clone());
                    if self.borrowed {
                        break;
                    }
                }
                v => {
                    self.blocked(q, &mut entry.blockers, &mut entry.beyond, wk.id, v);
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

    /// A stopped queue: nothing is released and every waiting unit waits
    /// with the reason `QueueStopped`. Its limits, head and reservation are
    /// forgotten: resuming it changes its definition, which makes the next
    /// cycle judge every unit afresh (`Core::upsert_queue`).
    pub(super) fn stopped(&mut self, entry: &mut QueueEntry) {
        entry.blockers.clear();
        entry.beyond.clear();
        entry.head = None;
        entry.reservation = None;
        let reason = WaitReason::QueueStopped {
            queue: Arc::clone(&entry.name),
        };
        for wk in &entry.waiting {
            self.note_reason(wk.id, reason.clone(), 0);
        }
    }

    /// The places of the listed units that wait in queue `q`, sorted and
    /// without repeats.
    pub(super) fn wait_keys(&self, q: QueueId, entry: &QueueEntry, ids: &[UnitId]) -> Vec<WaitKey> {
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
