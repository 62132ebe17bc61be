//! A reservation that holds where the room is short (architecture §4.3,
//! issue 44). A reserving head stopped by its own quota's max needs only its
//! own queue to hold back (one Queue per quota). One stopped by an
//! ancestor's max, or by the root's capacity, competes with every queue
//! under that ancestor (every queue, for the capacity): if only its own
//! queue held back, the sibling queues would take each core it waits for.
//! So such a head *holds across*: a unit of another queue under that scope
//! that asks for the resource the head is short of passes only
//! - as backfill (its bounded run ends before the head can start, the
//!   rule of `mod.rs`),
//! - when it is within its own quota's min (the min stays a guarantee: a
//!   reservation never holds back a guaranteed unit, so a quota below its
//!   min is served as if no head reserved), or
//! - when it is *senior* to the head: higher priority, or equal priority
//!   and created earlier (then name). Seniority is a total order, so two
//!   heads never hold each other back: of two reserving heads that compete
//!   the senior one waits for room, the other waits behind it.
//!
//! A head that can never fit (it asks for more than a max on its path, or
//! the capacity, holds at all) holds nothing back: `mod.rs` does not let it
//! reserve, and a reservation whose head a lowered limit left so is dropped
//! at a pass's start, its queue and those it held looked at again.
//!
//! A unit held back says which head it waits behind, of which queue and
//! where the head is short ([`WaitReason::ReservedAcross`]). When the hold
//! ends (the head is released, leaves, or no longer reserves) the queues it
//! held back are looked at afresh.

use std::sync::Arc;

use super::holds::Hold;
use crate::cycle::Pass;
use crate::engine::Core;
use crate::ids::QueueId;
use crate::queues::{Dirty, WaitKey};
use crate::reason::{Blocker, WaitReason};

impl Core {
    /// Brings queue `q`'s hold up to date after it was visited (or at a
    /// pass's start, for every queue that may have one): a hold is kept,
    /// replaced or dropped; one dropped or replaced lets the queues it held
    /// back be looked at afresh.
    pub(crate) fn refresh_hold(&mut self, q: QueueId) {
        self.drop_reservation_in_vain(q);
        let fresh = self.hold_of(q);
        let old = self
            .holds
            .active
            .iter()
            .position(|h| h.queue == q)
            .map(|i| self.holds.active.swap_remove(i));
        let same_head = match (&old, &fresh) {
            (Some(o), Some(n)) => o.reservation.key == n.reservation.key && o.scope == n.scope,
            _ => false,
        };
        match (old, fresh) {
            (Some(o), Some(mut n)) if same_head => {
                n.held = o.held;
                self.holds.active.push(n);
            }
            (old, fresh) => {
                if let Some(o) = old {
                    for held in o.held {
                        if let Some(e) = self.queues.get_mut(held) {
                            e.dirty = Dirty::Forced;
                        }
                    }
                }
                if let Some(n) = fresh {
                    self.holds.active.push(n);
                }
            }
        }
        let has = self.queues.get(q).is_some_and(|e| e.reservation.is_some());
        if has {
            self.holds.reserving.insert(q);
        } else {
            self.holds.reserving.remove(&q);
        }
    }

    /// Queue `q`'s reservation, if its head can never fit now (a max was
    /// lowered below what it asks for, the capacity shrank): dropped, and
    /// the queue looked at again in full, so that what it held back passes
    /// and its reason says why it waits. Not sticky: once the limit is
    /// raised the head is judged afresh and reserves again.
    fn drop_reservation_in_vain(&mut self, q: QueueId) {
        let Core {
            queues,
            units,
            state,
            ..
        } = self;
        let Some(e) = queues.get_mut(q) else {
            return;
        };
        let in_vain = e
            .reservation
            .as_ref()
            .and_then(|r| units.get(r.key.id))
            .is_some_and(|u| state.quotas.never_fits(u.quota, &u.request).is_some());
        if in_vain {
            e.reservation = None;
            e.dirty = Dirty::Forced;
        }
    }

    /// Every queue that may hold across, brought up to date (a pass's
    /// start: heads may have left, limits changed, reservations begun).
    pub(crate) fn refresh_holds(&mut self) {
        let mut queues: Vec<QueueId> = self.holds.reserving.iter().copied().collect();
        queues.extend(self.holds.active.iter().map(|h| h.queue));
        queues.sort_unstable();
        queues.dedup();
        for q in queues {
            self.refresh_hold(q);
        }
    }

    /// The hold of queue `q`'s reservation, if it holds across: active,
    /// its head still waiting in the queue, stopped by an ancestor's max or
    /// the capacity.
    fn hold_of(&self, q: QueueId) -> Option<Hold> {
        let e = self.queues.get(q)?;
        let def = e.def.as_ref()?;
        if def.stopped {
            return None;
        }
        let r = e.reservation.as_ref()?;
        if !r.active(self.now_ms) || !e.waiting.contains(&r.key) {
            return None;
        }
        let u = self.units.get(r.key.id)?;
        let scope = match u.reason()?.shortfall()?.blocker {
            Blocker::QuotaMax(at, _) if Some(at) != u.quota => Some(at),
            Blocker::Capacity(_) => None,
            _ => return None,
        };
        Some(Hold {
            queue: q,
            queue_name: Arc::clone(&e.name),
            reservation: r.clone(),
            scope,
            priority: u.priority,
            created_ms: u.created_ms,
            held: Vec::new(),
        })
    }
}

impl Pass<'_> {
    /// Whether the unit at `wk` of queue `q` must wait behind a head of
    /// another queue that holds across; if so its reason says which.
    pub(crate) fn held_across(&mut self, q: QueueId, wk: &WaitKey) -> bool {
        if self.holds.active.is_empty() {
            return false;
        }
        let Some(u) = self.units.get(wk.id) else {
            return false;
        };
        let (priority, created_ms, quota) = (u.priority, u.created_ms, u.quota);
        let mut found = None;
        for (i, h) in self.holds.active.iter().enumerate() {
            if h.queue == q || u.request.get(h.resource()) <= 0 {
                continue;
            }
            if let Some(scope) = h.scope {
                let under = quota
                    .and_then(|l| self.state.quotas.path(l).ok())
                    .is_some_and(|p| p.contains(&scope));
                if !under {
                    continue;
                }
            }
            if !h.junior_to_head(priority, created_ms, &wk.key) {
                continue;
            }
            found = Some(i);
            break;
        }
        let Some(i) = found else {
            return false;
        };
        if self.state.quotas.is_guaranteed_projected(quota, &u.request) {
            // Within its min: a guarantee no reservation takes away.
            return false;
        }
        let mut r = self.holds.active[i].reservation.clone();
        let backfilled = self.backfills(&mut r, wk.id);
        self.holds.active[i].reservation.start_by = r.start_by;
        if backfilled {
            return false;
        }
        let h = &mut self.holds.active[i];
        if !h.held.contains(&q) {
            h.held.push(q);
        }
        let reason = WaitReason::ReservedAcross {
            unit: Arc::clone(&h.reservation.key.key),
            queue: Arc::clone(&h.queue_name),
            resource: self.state.resource_name(h.resource()).clone(),
            scope: h.scope.map(|s| self.state.quotas.name(s).clone()),
        };
        self.note_reason(wk.id, reason, 0);
        true
    }
}
