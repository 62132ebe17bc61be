//! The reserving head of a `Priority` queue (architecture §4.3). A unit that
//! does not fit is normally passed by the smaller units behind it, so a
//! large job can wait for ever while small ones keep the quota full. From
//! the time its queue's [`Reserve`](koord_queue_model::Reserve) says — after
//! it has waited long enough, or at once above a priority — the first unit
//! that does not fit *reserves*: units behind it that ask for what it is
//! short of are not released (the room freed is kept for it), units that do
//! not compete for it still pass, and its message says it reserves and how
//! much it still needs. A unit whose run is bounded (its job's
//! `activeDeadlineSeconds`) is backfilled: it passes when it ends before the
//! time by which the bounded runs holding what the head needs free enough
//! (EASY backfilling); without bounds nothing is.
//!
//! A unit that can never fit — it asks for more than the max of its quota
//! or of an ancestor, or than the capacity, holds even with nothing else
//! running — never reserves: it would keep the room for ever and never use
//! it, and every unit behind it (in other queues too, `across.rs`) would
//! wait with it. It waits with the limit's reason, which says by how much
//! it is too large; whether it fits alone is judged from the tree each
//! time, so once the limit is raised it reserves like any other head.

pub(crate) mod across;
pub(crate) mod holds;

use std::sync::Arc;

use crate::cycle::Pass;
use crate::ids::UnitId;
use koord_queue_model::Reserve;

use crate::queues::{Reservation, WaitKey};
use crate::reason::{Blocker, WaitReason};

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
        if self.state.quotas.never_fits(u.quota, &u.request).is_some() {
            // It asks for more than a max on its path (or the capacity)
            // holds at all: it could keep the room for ever and never use
            // it. It waits, saying so (`ElasticQuota`'s reason), holding no
            // one back; once the limit is raised it is judged afresh.
            return;
        }
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
            start_by: None,
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
        if !competes || self.backfills(r, wk.id) {
            return false;
        }
        let reason = WaitReason::ReservedBehind {
            unit: Arc::clone(&r.key.key),
            resource: self.state.resource_name(r.resource).clone(),
        };
        self.note_reason(wk.id, reason, 0);
        true
    }

    /// Whether unit `id`, which competes with the reserving head `r`, ends
    /// before the head can start at the latest (EASY backfill): its run is
    /// bounded and the bound ends no later than the time by which the
    /// bounded runs holding what the head is short of have freed enough.
    /// Whatever else frees up earlier only lets the head start sooner; a
    /// unit so backfilled is gone by then, so it never delays the head.
    fn backfills(&mut self, r: &mut Reservation, id: UnitId) -> bool {
        let Some(run_ms) = self.units.get(id).and_then(|u| u.max_run_ms) else {
            return false;
        };
        let start_by = match r.start_by {
            Some((cycle, start_by)) if cycle == self.cycle_no => start_by,
            _ => {
                let start_by = self.head_start_by(r);
                r.start_by = Some((self.cycle_no, start_by));
                start_by
            }
        };
        start_by.is_some_and(|start_by| self.now_ms.saturating_add(run_ms) <= start_by)
    }

    /// The latest time the reserving head `r` can start: the end of the
    /// bounded runs, earliest first, of the units holding the resource it is
    /// short of under the limit that stops it, once they free what it
    /// misses (units whose runs are unbounded may end sooner, which only
    /// lets the head start earlier). `None` when the bounded runs cannot
    /// free enough, or the limit is not a quota's max or the capacity.
    fn head_start_by(&self, r: &Reservation) -> Option<i64> {
        let shortfall = self.units.get(r.key.id)?.reason()?.shortfall()?;
        let missing = shortfall.missing();
        if missing <= 0 {
            return Some(self.now_ms);
        }
        let (scope, resource) = match shortfall.blocker {
            Blocker::QuotaMax(quota, resource) => (Some(quota), resource),
            Blocker::Capacity(resource) => (None, resource),
            _ => return None,
        };
        let mut ends: Vec<(i64, i64)> = self
            .units
            .iter()
            .filter_map(|u| {
                let (amount, since) = u.holding()?;
                let held = amount.get(resource);
                if held <= 0 {
                    return None;
                }
                if let Some(scope) = scope {
                    let path = self.state.quotas.path(u.quota?).ok()?;
                    if !path.contains(&scope) {
                        return None;
                    }
                }
                Some((since.ms.saturating_add(u.max_run_ms?), held))
            })
            .collect();
        ends.sort_unstable();
        let mut freed = 0i64;
        for (end, held) in ends {
            freed = freed.saturating_add(held);
            if freed >= missing {
                return Some(end.max(self.now_ms));
            }
        }
        None
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
