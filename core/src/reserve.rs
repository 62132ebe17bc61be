//! The reserving head of a `Priority` queue (architecture §4.3). A unit that
//! does not fit is normally passed by the smaller units behind it, so a
//! large job can wait for ever while small ones keep the quota full. From
//! the time its queue's [`Reserve`](koord_queue_model::Reserve) says — after
//! it has waited long enough, or at once above a priority — the first unit
//! that does not fit *reserves*: units behind it that ask for what it is
//! short of are not released (the room freed is kept for it), units that do
//! not compete for it still pass, and its message says it reserves and how
//! much it still needs. Without runtime estimates nothing is backfilled into
//! the room it waits for.

use std::sync::Arc;

use super::cycle::Pass;
use super::ids::UnitId;
use koord_queue_model::Reserve;

use super::queues::{Reservation, WaitKey};
use super::reason::{Blocker, WaitReason};

impl Pass<'_> {
    /// The unit at `wk` was just found not to fit: it becomes the queue's
    /// `reservation` if its queue reserves (`reserve`) and none is set, or
    /// the one set does not reserve yet while this one does.
    pub(crate) fn maybe_reserve(
        &mut self,
        reservation: &mut Option<Reservation>,
        reserve: Reserve,
        wk: &WaitKey,
    ) {
        if reservation.as_ref().is_some_and(|r| r.active(self.now_ms)) {
            return;
        }
        let Some(u) = self.units.get(wk.id) else {
            return;
        };
        let Some(from_ms) = reserve.from_ms(u.created_ms, u.priority) else {
            return;
        };
        if reservation.is_some() && from_ms > self.now_ms {
            // The first unit that does not fit is kept while no later one
            // reserves yet (it may be the first to reserve as time passes).
            // But a newer unit ahead that has not waited long enough must
            // not lift the reservation of one that has: the room kept for
            // it would go to the small units behind (starving it again).
            return;
        }
        let resource = match u
            .reason()
            .and_then(WaitReason::shortfall)
            .map(|s| s.blocker)
        {
            Some(Blocker::QuotaMax(_, k) | Blocker::Capacity(k)) => k,
            // Only a quota limit or the capacity is worth reserving for.
            _ => return,
        };
        *reservation = Some(Reservation {
            key: wk.clone(),
            resource,
            from_ms,
        });
    }

    /// Whether the unit at `wk`, behind the queue's active `reservation`,
    /// must wait for it; if so its reason says so.
    pub(crate) fn held_back(
        &mut self,
        reservation: &mut Option<Reservation>,
        wk: &WaitKey,
    ) -> bool {
        let now = self.now_ms;
        let Some(r) = reservation.as_mut() else {
            return false;
        };
        if !r.active(now) || *wk <= r.key {
            return false;
        }
        let competes = self
            .units
            .get(wk.id)
            .is_some_and(|u| u.request.get(r.resource) > 0);
        if !competes {
            return false;
        }
        let reason = WaitReason::ReservedBehind {
            unit: Arc::clone(&r.key.key),
            resource: self.state.resource_name(r.resource).clone(),
        };
        self.note_reason(wk.id, reason, 0);
        true
    }

    /// At the end of a pass over a queue: the reserving head's reason says
    /// it reserves, and how much it still needs.
    pub(crate) fn mark_reserving(&mut self, reservation: Option<&Reservation>) {
        let Some(r) = reservation.filter(|r| r.active(self.now_ms)) else {
            return;
        };
        let id: UnitId = r.key.id;
        let Some(reason) = self.units.get(id).and_then(|u| u.reason()) else {
            return;
        };
        if matches!(reason, WaitReason::Reserving { .. }) {
            return;
        }
        let Some(shortfall) = reason.shortfall().cloned() else {
            return;
        };
        self.note_reason(id, WaitReason::Reserving { shortfall }, 0);
    }
}
