//! What each event does: a submission joins its queue, a job's end frees
//! its quota, a reclaim victim is sent back and returns after the
//! controller's backoff, a cycle asks the core and carries out its
//! decisions, a housekeeping tick starts a cycle for what became due.

use std::sync::Arc;

use crate::controller::{backoff_delay, jitter_seed};
use koord_queue_core::ReclaimKind;

use super::events::Kind;
use super::{Phase, Simulation};

impl Simulation {
    fn request_cycle(&mut self) {
        if self.cycle_due.is_none() {
            let at = self.now + self.settings.cycle_batch_ms;
            self.cycle_due = Some(at);
            self.calendar.push(at, Kind::Cycle);
        }
    }

    /// The first housekeeping tick at or after `t`.
    fn tick_at(&self, t: i64) -> i64 {
        let h = self.settings.housekeeping_ms.max(1);
        let since = (t - self.start_ms).max(0);
        self.start_ms + (since + h - 1) / h * h
    }

    pub(super) fn handle(&mut self, kind: Kind) {
        match kind {
            Kind::Arrive(i) => self.enqueue(i),
            Kind::Requeue(i)
                if self.phase[i as usize] == Phase::Backoff
                    && self.requeue_due[i as usize] == self.now =>
            {
                self.back_in_queue(i);
            }
            Kind::Finish(i, g) if self.holds(i, g) => {
                self.outcomes[i as usize].end_ms = Some(self.pods_end[i as usize]);
                self.phase[i as usize] = Phase::Done;
                self.leave(i, true);
            }
            Kind::Evict(i, g) if self.holds(i, g) => self.evict(i),
            Kind::Cycle => self.cycle(),
            Kind::Tick => {
                self.tick_due = None;
                let returned = self.room_free_returns();
                match self.next_due() {
                    Some(due) if due <= self.now => self.request_cycle(),
                    Some(due) => {
                        self.schedule_tick(due);
                        if !returned {
                            return;
                        }
                    }
                    // A tick that finds nothing to do (its due time went
                    // with a unit released otherwise) is not the run's end.
                    None if !returned => return,
                    None => {}
                }
            }
            Kind::Requeue(_) | Kind::Finish(..) | Kind::Evict(..) => return,
        }
        // The run's end is its last event that did something (a stale
        // requeue of a unit back early is none).
        self.stats.end_ms = self.now;
    }

    /// A job's backoff ends: it waits in its queue again.
    fn back_in_queue(&mut self, i: u32) {
        self.backing_off = self.backing_off.saturating_sub(1);
        self.requeue_due[i as usize] = i64::MIN;
        self.enqueue(i);
    }

    /// At a housekeeping tick, as the controller's (`decide.rs`): a job a
    /// reclaim or preemption sent back returns at once when the core says
    /// its room is free; while some still back off, the next tick looks
    /// again. Whether a job returned.
    fn room_free_returns(&mut self) -> bool {
        let mut waiting = std::mem::take(&mut self.backoff);
        let mut returned = false;
        waiting.retain(|&i| {
            if self.phase[i as usize] != Phase::Backoff {
                return false;
            }
            let job = &self.jobs[i as usize];
            if self.core.has_room_for(job.quota.as_deref(), &job.request) {
                self.back_in_queue(i);
                returned = true;
                return false;
            }
            true
        });
        self.backoff = waiting;
        if !self.backoff.is_empty() {
            self.schedule_tick(self.now + 1);
        }
        returned
    }

    fn holds(&self, i: u32, generation: u32) -> bool {
        self.phase[i as usize] == Phase::Holding && self.generation[i as usize] == generation
    }

    /// The unit waits in its queue.
    fn enqueue(&mut self, i: u32) {
        let job = &self.jobs[i as usize];
        let key: Arc<str> = Arc::from(job.key());
        if self.keys.get(&key).is_some_and(|j| *j != i) {
            // A job of that name still exists: the API refuses the create
            // (a name may be used again once the first job is gone).
            self.phase[i as usize] = Phase::Done;
            self.stats.refused += 1;
            self.unreleased = self.unreleased.saturating_sub(1);
            return;
        }
        if self.core.upsert_unit(&job.unit_def()).is_err() {
            // A name the core refuses: the scheduler logs it and never
            // releases the unit.
            self.phase[i as usize] = Phase::Done;
            if self.outcomes[i as usize].first_release_ms.is_none() {
                self.unreleased = self.unreleased.saturating_sub(1);
            }
            return;
        }
        self.keys.insert(key, i);
        self.phase[i as usize] = Phase::Waiting;
        self.waiting += 1;
        self.stats.peak_waiting = self.stats.peak_waiting.max(self.waiting);
        self.request_cycle();
    }

    /// The unit leaves the core, its quota free; with `gone`, its name too
    /// (a unit sent back keeps it through its backoff).
    fn leave(&mut self, i: u32, gone: bool) {
        let key = self.jobs[i as usize].key();
        self.core.remove_unit(&key);
        if gone {
            self.keys.remove(key.as_str());
        }
        self.charge(i, -1);
        self.request_cycle();
    }

    /// A reclaim victim's job is held again: its quota is free, and it
    /// waits out the controller's backoff.
    fn evict(&mut self, i: u32) {
        let idx = i as usize;
        self.generation[idx] += 1;
        self.phase[idx] = Phase::Backoff;
        self.backing_off += 1;
        self.leave(i, false);
        let count = self.requeues[idx].saturating_add(1);
        self.requeues[idx] = count;
        let key = self.jobs[idx].key();
        let delay = backoff_delay(count, jitter_seed(self.settings.seed, &key, count));
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        // Written when decided (the eviction's latency after), noticed at
        // the housekeeping tick after it ends.
        let decided = self.now - self.settings.latency.evict_ms;
        let at = self.tick_at(decided.saturating_add(delay_ms)) + self.settings.latency.requeue_ms;
        let at = at.max(self.now);
        self.requeue_due[idx] = at;
        self.calendar.push(at, Kind::Requeue(i));
        // Noticed at the next tick if its room is free before then.
        self.backoff.push(i);
        self.schedule_tick(self.now + 1);
    }

    fn cycle(&mut self) {
        self.cycle_due = None;
        self.stats.cycles += 1;
        self.core.set_now(self.now);
        let out = self.core.run_cycle();
        for decision in out.decisions {
            let Some(&i) = self.keys.get(&decision.unit) else {
                let _ = self.core.unreserve(&decision.unit);
                continue;
            };
            let idx = i as usize;
            if self.phase[idx] == Phase::Waiting {
                self.waiting = self.waiting.saturating_sub(1);
            }
            self.phase[idx] = Phase::Holding;
            self.generation[idx] += 1;
            let o = &mut self.outcomes[idx];
            if o.first_release_ms.is_none() {
                self.unreleased = self.unreleased.saturating_sub(1);
            }
            o.first_release_ms.get_or_insert(self.now);
            o.last_release_ms = Some(self.now);
            o.releases += 1;
            self.charge(i, 1);
            let l = &self.settings.latency;
            let start = (l.start_at(self.now) + self.spread(i, self.outcomes[idx].releases)).max(0);
            let pods_end = self.now + start + self.jobs[idx].run_ms;
            let end = pods_end + l.free_at(pods_end);
            self.pods_end[idx] = pods_end;
            self.calendar
                .push(end, Kind::Finish(i, self.generation[idx]));
        }
        for reclaim in out.reclaims {
            let Some(&i) = self.keys.get(&reclaim.victim) else {
                let _ = self.core.cancel_reclaim(&reclaim.victim);
                continue;
            };
            let o = &mut self.outcomes[i as usize];
            match reclaim.kind {
                ReclaimKind::Borrowed => o.reclaimed += 1,
                ReclaimKind::Preempted { .. } => o.preempted += 1,
                ReclaimKind::FairShare { .. } => o.fair_share_reclaimed += 1,
            }
            if self.settings.latency.evict_ms == 0 {
                self.evict(i);
            } else {
                let at = self.now + self.settings.latency.evict_ms;
                self.calendar
                    .push(at, Kind::Evict(i, self.generation[i as usize]));
            }
        }
        if let Some(due) = self.next_due() {
            self.schedule_tick(due);
        }
    }

    /// When a preemption or a reserving head is due (the controller's
    /// housekeeping asks the core the same).
    fn next_due(&self) -> Option<i64> {
        self.core
            .next_preemption_due()
            .into_iter()
            .chain(self.core.next_reservation_due())
            .min()
    }

    fn schedule_tick(&mut self, due: i64) {
        let at = self.tick_at(due.max(self.now + 1));
        if self.tick_due.is_none_or(|t| at < t) {
            self.tick_due = Some(at);
            self.calendar.push(at, Kind::Tick);
        }
    }
}
