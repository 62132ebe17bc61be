//! Priority preemption inside a quota (architecture §4.4, rule 4).
//!
//! A waiting unit stopped by its own quota's max may, if its queue says so
//! ([`PreemptionPolicy`]), take the quota of running units of the same quota
//! with lower priority (or, with `LowerOrNewerEqualPriority`, of equal
//! priority and created after it). Victims are taken lowest priority first,
//! most recently released first, only as many as make it fit at every limit
//! on its path — then the set is made minimal by giving back, last taken
//! first, any victim it can do without — and never when even all of them
//! would not make it fit. Preemption does not thrash: a victim that has held
//! quota for less than the queue's minimum run time is not taken (the unit
//! is looked at again when it could be); a unit never preempts the unit
//! that displaced it; a quota preempts at most so many units a minute.
//!
//! Victims are taken back like reclaim victims ([`Pass::commit`]): a unit
//! released by this very cycle is withdrawn at once, the others are
//! reported ([`ReclaimKind::Preempted`]) for the controller to send back,
//! and the preemptor waits for them, the room promised to it.

use koord_queue_model::PreemptionPolicy;

use super::state::{Source, Taking};
use super::{Deficit, Outcome, minimal};
use crate::amounts::{ResVec, UNLIMITED};
use crate::cycle::Pass;
use crate::ids::{QuotaId, UnitId};
use crate::reason::{Blocker, WaitReason};

/// How long the per-minute cap looks back.
const CAP_WINDOW_MS: i64 = 60_000;

impl Pass<'_> {
    /// Preemption for unit `id`, stopped by `reason`: `None` when it does not
    /// apply (the queue does not preempt, another limit than its own quota's
    /// max stops it, no victims would make it fit), else its outcome.
    pub(super) fn preempt(&mut self, id: UnitId, reason: &WaitReason) -> Option<Outcome> {
        let own = match reason.shortfall()?.blocker {
            Blocker::QuotaMax(at, _) => self.units.get(id)?.quota == Some(at),
            _ => false,
        };
        if !own {
            return self.preempt_siblings(id, reason);
        }
        if self.preemption.policy == PreemptionPolicy::Never {
            return None;
        }
        let u = self.units.get(id)?;
        let leaf = u.quota?;
        if self
            .framework
            .filter_beyond_quota_limits(&u.as_ref(), self.state)
            .is_err()
        {
            // Something else stops it too: preempting would not help.
            return None;
        }
        if self.over_cap(leaf) {
            return None;
        }
        let mut deficits = self.deficits(id, leaf)?;
        if deficits.is_empty() {
            // What is in flight frees enough: it waits for that.
            return None;
        }
        let picks = self.pick_lower(id, leaf, &mut deficits)?;
        self.record_preemption(id, leaf, &picks);
        // No pause of borrowing: the freed room is in its own quota, whose
        // queue serves it before the lower-priority units it displaced.
        Some(self.commit(id, reason.clone(), picks, Vec::new(), Taking::Preempting))
    }

    /// What unit `id` lacks at each limit on its path (and the capacity),
    /// once the reclaims in flight are done.
    pub(super) fn deficits(&self, id: UnitId, leaf: QuotaId) -> Option<Vec<Deficit>> {
        let u = self.units.get(id)?;
        let tree = &self.state.quotas;
        let path = tree.path(leaf).ok()?;
        let mut deficits = Vec::new();
        for &a in path {
            for (k, r) in u.request.iter() {
                let max = tree.max(a, k);
                if max == UNLIMITED {
                    continue;
                }
                let left = tree.projected(a, k).saturating_add(r).saturating_sub(max);
                if left > 0 {
                    deficits.push(Deficit {
                        at: Some(a),
                        resource: k,
                        left,
                    });
                }
            }
        }
        for (k, r) in u.request.iter() {
            let cap = tree.capacity_of(k)?;
            if cap == UNLIMITED {
                continue;
            }
            let left = tree.root_projected(k).saturating_add(r).saturating_sub(cap);
            if left > 0 {
                deficits.push(Deficit {
                    at: None,
                    resource: k,
                    left,
                });
            }
        }
        Some(deficits)
    }

    /// The victims in `leaf` that make unit `id` fit (every deficit covered:
    /// each victim frees what it holds at every limit above it), made
    /// minimal; `None` if the eligible ones cannot.
    fn pick_lower(
        &mut self,
        id: UnitId,
        leaf: QuotaId,
        deficits: &mut [Deficit],
    ) -> Option<Vec<UnitId>> {
        let u = self.units.get(id)?;
        let (priority, created_ms, queue) = (u.priority, u.created_ms, u.queue);
        let policy = self.preemption.policy;
        let min_run_ms = self.preemption.min_run_ms;
        let now_ms = self.now_ms;
        let mut picks: Vec<(UnitId, ResVec)> = Vec::new();
        let mut too_young: Option<i64> = None;
        let mut after = None;
        while let Some(key) = self.reclaim.index.next(Source::Quota(leaf), after.as_ref()) {
            after = Some(key);
            if key.quota != Some(leaf) || key.id == id {
                continue;
            }
            let Some(v) = self.units.get(key.id) else {
                continue;
            };
            let eligible = match policy {
                PreemptionPolicy::Never => false,
                PreemptionPolicy::LowerPriority => v.priority < priority,
                PreemptionPolicy::LowerOrNewerEqualPriority => {
                    v.priority < priority || (v.priority == priority && v.created_ms > created_ms)
                }
            };
            if !eligible {
                if v.priority > priority {
                    // The index is in priority order: none after it is.
                    break;
                }
                continue;
            }
            let Some((amount, since)) = v.holding() else {
                continue;
            };
            if since.seq >= self.reclaim.cycle_start && v.queue == queue {
                // Released by this cycle in the queue being served, in its
                // order: a later unit of lower priority cannot have taken
                // room it could use.
                continue;
            }
            if self.displaced_by(key.id, id) || self.preempted_enough(&v.key) {
                continue;
            }
            let ran = now_ms.saturating_sub(since.ms);
            if ran < min_run_ms {
                let due = since.ms.saturating_add(min_run_ms);
                too_young = Some(too_young.map_or(due, |t| t.min(due)));
                continue;
            }
            let amount = amount.clone();
            for d in deficits.iter_mut() {
                d.left = d.left.saturating_sub(amount.get(d.resource));
            }
            picks.push((key.id, amount));
            if deficits.iter().all(|d| d.left <= 0) {
                break;
            }
        }
        self.settle(id, picks, deficits, too_young)
    }

    /// The smallest set of `picks` if they cover every deficit of unit
    /// `id`; otherwise `None`, and if victims too young now (until `too_young`)
    /// may do later, the unit is looked at again then.
    pub(super) fn settle(
        &mut self,
        id: UnitId,
        picks: Vec<(UnitId, ResVec)>,
        deficits: &mut [Deficit],
        too_young: Option<i64>,
    ) -> Option<Vec<UnitId>> {
        if deficits.iter().any(|d| d.left > 0) {
            if let Some(due) = too_young {
                self.reclaim.preempt_later.insert(id, due);
            }
            return None;
        }
        self.reclaim.preempt_later.remove(&id);
        Some(minimal(picks, deficits))
    }

    /// Whether `victim` was admitted by displacing `preemptor` (who must not
    /// take it back in turn).
    pub(super) fn displaced_by(&self, victim: UnitId, preemptor: UnitId) -> bool {
        self.reclaim
            .displaced
            .get(&victim)
            .is_some_and(|d| d.contains(&preemptor))
    }

    /// Whether `leaf` has preempted its cap's worth in the last minute.
    pub(super) fn over_cap(&mut self, leaf: QuotaId) -> bool {
        let Some(cap) = self.preemption.max_per_minute else {
            return false;
        };
        let since = self.now_ms.saturating_sub(CAP_WINDOW_MS);
        let recent = self.reclaim.preempted_at.entry(leaf).or_default();
        recent.retain(|t| *t > since);
        recent.len() >= usize::try_from(cap).unwrap_or(usize::MAX)
    }

    /// Whether the unit of `key` was sent back (preempted, reclaimed or
    /// taken for fair sharing) as often as a preemption allows in its life.
    pub(super) fn preempted_enough(&self, key: &str) -> bool {
        self.reclaim.sent_back(key) >= self.preemption.max_per_unit()
    }

    /// Records a preemption's victims for the per-minute cap and against
    /// swapping back (their send-backs are counted as they are taken,
    /// `Pass::mark_victim`).
    pub(super) fn record_preemption(&mut self, id: UnitId, leaf: QuotaId, picks: &[UnitId]) {
        let now = self.now_ms;
        self.reclaim
            .preempted_at
            .entry(leaf)
            .or_default()
            .extend(picks.iter().map(|_| now));
        self.reclaim
            .displaced
            .entry(id)
            .or_default()
            .extend_from_slice(picks);
    }
}
