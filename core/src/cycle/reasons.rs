//! Why each waiting unit waits: a verdict's reason is kept on the unit and
//! reported in the cycle's output when it changed (once per cycle, with its
//! latest value), and the limit that stopped it is indexed so that the queue
//! is looked at again only when that limit gets room.

use std::mem;
use std::sync::Arc;

use super::{CycleOutput, Pass, Verdict};
use crate::engine::Core;
use crate::ids::{QueueId, UnitId};
use crate::reason::{Blocker, WaitReason};
use crate::units::UnitState;

impl Core {
    /// Reports the units whose reason changed and that the walks did not
    /// report themselves.
    pub(super) fn flush_reasons(&mut self, out: &mut CycleOutput) {
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
        if self.reports_reasons && !e.reason_changed {
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

    /// Records a blocked verdict: the unit's reason and the queue's limits
    /// (`blockers`, and `beyond` those the unit can never fit under).
    pub(super) fn blocked(
        &mut self,
        q: QueueId,
        blockers: &mut Vec<(Blocker, i64)>,
        beyond: &mut Vec<(Blocker, i64)>,
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
            // (Its reason, new or kept, is the verdict's.)
            let never = self
                .units
                .get(id)
                .and_then(|u| u.reason())
                .and_then(WaitReason::shortfall)
                .filter(|s| s.blocker == b && s.never_fits());
            if let Some(s) = never
                && !beyond.contains(&(b, s.limit))
            {
                beyond.push((b, s.limit));
            }
        }
    }

    /// Records that queue `q` has a unit judged to borrow in its quota, to
    /// look at it again if the quota gets room under its min.
    fn watch(&mut self, q: QueueId, id: UnitId, reason: &WaitReason) {
        let borrows = if matches!(reason, WaitReason::SentBackTooOften { .. }) {
            // Held back while it borrows: within its min it runs at once.
            true
        } else {
            self.reclaim_on && reason.is_quota_limit() && !reason.is_guaranteed()
        };
        if !borrows {
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
}
