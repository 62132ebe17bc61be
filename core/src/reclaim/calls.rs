//! The calls the controller and the rest of the core make about reclaims in
//! flight: a victim put back or freed, the plans woken when room appears,
//! and the housekeeping that keeps the victim index exact.

use super::state::{ReclaimInFlight, ReclaimState};
use crate::engine::{Core, CoreError};
use crate::ids::{QuotaId, UnitId};
use crate::units::UnitEntry;

impl Core {
    /// Puts back a unit chosen as a victim whose re-suspension could not be
    /// written: it holds its quota as before and may be chosen again; the
    /// guaranteed unit it was reclaimed for plans again in the next cycle.
    pub fn cancel_reclaim(&mut self, key: &str) -> Result<(), CoreError> {
        let id = self
            .units
            .lookup(key)
            .ok_or_else(|| CoreError::UnknownUnit(key.to_string()))?;
        let waiting = self
            .reclaim
            .victims
            .remove(&id)
            .ok_or_else(|| CoreError::NotReclaimed(key.to_string()))?;
        self.reclaim.unnote_sent_back(key);
        if let Some(u) = self.units.get(id)
            && let Some((amount, _)) = u.holding()
        {
            self.state.quotas.mark_reclaiming(u.quota, amount, false);
            self.reclaim.list(&self.state.quotas, id, u);
        }
        if let Some(w) = waiting {
            self.reclaim
                .drop_plan(w, &mut self.state.quotas, &mut self.relaxed);
            self.reclaim.touch.push(w);
        }
        self.wake_idle_plans();
        self.reclaim.stale = true;
        Ok(())
    }

    /// Whether unit `key` is being reclaimed (chosen as a victim, not freed yet).
    pub fn is_being_reclaimed(&self, key: &str) -> bool {
        self.units
            .lookup(key)
            .is_some_and(|id| self.reclaim.victims.contains_key(&id))
    }

    /// The units being reclaimed, and who waits for each.
    pub fn reclaims_in_flight(&self) -> impl Iterator<Item = ReclaimInFlight<'_>> {
        self.reclaim.victims.iter().filter_map(|(v, w)| {
            Some(ReclaimInFlight {
                victim: &self.units.get(*v)?.key,
                for_unit: w.and_then(|w| self.units.get(w)).map(|u| &*u.key),
            })
        })
    }

    /// A victim stopped holding for good (its job was re-suspended, or it
    /// finished): the unit waiting for it is looked at again in the next
    /// cycle (released if it fits, otherwise its reason gets the new figures
    /// and the number of victims left).
    pub(crate) fn victim_freed(&mut self, victim: UnitId, waiting: Option<UnitId>) {
        if let Some(w) = waiting
            && let Some(plan) = self.reclaim.plans.get_mut(&w)
        {
            plan.victims.retain(|v| *v != victim);
            self.reclaim.touch.push(w);
        }
        self.wake_idle_plans();
    }

    /// Units that wait only for reclaims made for others are looked at again
    /// whenever one of those ends.
    fn wake_idle_plans(&mut self) {
        let idle = self
            .reclaim
            .plans
            .iter()
            .filter(|(_, p)| p.victims.is_empty())
            .map(|(id, _)| *id);
        self.reclaim.touch.extend(idle);
    }

    /// Work reclaim left for the next pass of a cycle: units to look at
    /// again, quotas that got room under their min, guaranteed units to try
    /// again now that borrowing may have grown.
    pub(crate) fn reclaim_housekeeping(&mut self) {
        self.forget_old_preemptions();
        if self.reclaim.stale {
            self.reclaim.stale = false;
            let retry: Vec<UnitId> = self.reclaim.retry.drain().collect();
            self.reclaim.touch.extend(retry);
        }
        for id in std::mem::take(&mut self.reclaim.touch) {
            if self.units.get(id).is_some_and(UnitEntry::is_waiting) {
                self.enqueue(id);
            }
        }
        let mut checked: Vec<QuotaId> = Vec::new();
        for q in std::mem::take(&mut self.reclaim.room_check) {
            if checked.contains(&q) {
                continue;
            }
            checked.push(q);
            if !self.state.quotas.has_room_under_min(q) {
                continue;
            }
            let Some(watchers) = self.reclaim.watch.get(&q) else {
                continue;
            };
            for &queue in watchers {
                if let Some(e) = self.queues.get_mut(queue) {
                    e.dirty = crate::queues::Dirty::Forced;
                }
            }
        }
    }

    /// Min or capacity changed: guarantees may have changed anywhere.
    pub(crate) fn reclaim_limits_changed(&mut self) {
        self.reclaim.stale = true;
        let quotas: Vec<QuotaId> = self.reclaim.watch.keys().copied().collect();
        self.reclaim.room_check.extend(quotas);
    }

    /// The tree changed shape: plans are dropped (their units plan again,
    /// counting what is already being reclaimed) and the holder index is
    /// rebuilt along the new paths.
    pub(crate) fn reclaim_restructured(&mut self) {
        let planned: Vec<UnitId> = self.reclaim.plans.keys().copied().collect();
        for id in planned {
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, &mut self.relaxed);
        }
        let ReclaimState { index, victims, .. } = &mut self.reclaim;
        index.rebuild(&self.units, &self.state.quotas, victims);
        self.reclaim.stale = true;
    }

    /// At the end of a cycle: the units released into room taken back for
    /// them join the holder index.
    pub(crate) fn list_made_room(&mut self) {
        for id in std::mem::take(&mut self.reclaim.unlisted) {
            if let Some(u) = self.units.get(id)
                && !self.reclaim.victims.contains_key(&id)
            {
                self.reclaim.list(&self.state.quotas, id, u);
            }
        }
    }

    /// After a queue was served: units taken back from other queues go back
    /// in line.
    pub(crate) fn requeue_withdrawn(&mut self) {
        for id in std::mem::take(&mut self.reclaim.requeue) {
            let Some(e) = self.units.get(id) else {
                continue;
            };
            if !e.is_waiting() {
                continue;
            }
            if let Some(entry) = e.queue.and_then(|q| self.queues.get_mut(q)) {
                entry.admitted = entry.admitted.saturating_sub(1);
            }
            self.enqueue(id);
        }
    }
}

impl Core {
    /// Drops the preemption counts of units gone from the core for an hour
    /// (a unit in backoff is back within the backoff's cap of 15 min, so
    /// such a unit's job ended or was deleted).
    fn forget_old_preemptions(&mut self) {
        const GONE_MS: i64 = 3_600_000;
        if self.reclaim.sent_back_times.is_empty() {
            return;
        }
        let now = self.now_ms;
        let units = &self.units;
        self.reclaim.sent_back_times.retain(|key, (_, last)| {
            units.lookup(key).is_some() || now.saturating_sub(*last) < GONE_MS
        });
    }
}
