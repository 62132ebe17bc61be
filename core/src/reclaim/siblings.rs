//! Preemption across siblings (architecture §4.4, issue 44), opt-in per
//! Queue (`spec.preemption.withinParent`). Preemption inside a quota helps
//! only where the unit's own quota's max binds; where an ancestor's max (or
//! the capacity) binds, a high-priority unit would wait behind the
//! lower-priority units its sibling quotas borrow with. Here it may take
//! those back: units of the quotas beside its path below the limit that
//! stops it, of lower priority (or equal and newer, by the policy), taken
//! only while every quota between the victim and that limit stays above
//! its min (the picking of reclaim, `pick.rs`: a victim's min is never
//! broken), the fewest that make it fit, and never in vain.
//!
//! The guards of preemption hold: a victim that has run less than the
//! queue's minimum run time is not taken (the unit is looked at again when
//! it could be), a unit never preempts the unit that displaced it, the
//! per-minute cap of the preemptor's quota, and no unit is preempted more
//! than `maxPerUnit` times in its life (default 2, `Preemption::max_per_unit`).

use koord_queue_model::PreemptionPolicy;

use super::state::{Taking, VictimRule};
use super::{Deficit, Outcome};
use crate::cycle::Pass;
use crate::ids::{QuotaId, UnitId};
use crate::reason::{Blocker, WaitReason};

impl Pass<'_> {
    /// Preemption of sibling quotas' units for unit `id`, stopped by
    /// `reason` under an ancestor's max or the capacity: `None` when it does
    /// not apply or no allowed victims would make it fit.
    pub(super) fn preempt_siblings(&mut self, id: UnitId, reason: &WaitReason) -> Option<Outcome> {
        let policy = self.preemption.within_parent;
        if policy == PreemptionPolicy::Never {
            return None;
        }
        let u = self.units.get(id)?;
        let leaf = u.quota?;
        match reason.shortfall()?.blocker {
            Blocker::QuotaMax(at, _) if at != leaf => {}
            Blocker::Capacity(_) => {}
            _ => return None,
        }
        let rule = VictimRule {
            by: id,
            policy,
            priority: u.priority,
            created_ms: u.created_ms,
            min_run_ms: self.preemption.min_run_ms,
            max_per_unit: self.preemption.max_per_unit(),
        };
        if self
            .framework
            .filter_beyond_quota_limits(&u.as_ref(), self.state)
            .is_err()
            || self.over_cap(leaf)
        {
            return None;
        }
        let mut deficits = self.deficits(id, leaf)?;
        if deficits.is_empty() || deficits.iter().any(|d| d.at == Some(leaf)) {
            // In flight frees enough, or its own max binds (preemption
            // inside the quota is for that).
            return None;
        }
        let path: Vec<QuotaId> = self.state.quotas.path(leaf).ok()?.to_vec();
        let mut too_young = None;
        let Some(picks) = self.pick(id, &path, &mut deficits, &rule.into(), &mut too_young) else {
            if let Some(due) = too_young {
                self.reclaim.preempt_later.insert(id, due);
            }
            return None;
        };
        self.reclaim.preempt_later.remove(&id);
        let picks = self.fewest(id, leaf, picks);
        self.record_preemption(id, leaf, &picks);
        Some(self.commit(id, reason.clone(), picks, Vec::new(), Taking::Preempting))
    }

    /// The smallest set of `picks` (victims beside unit `id`'s path, in the
    /// order taken) that still covers every limit it lacks room under: last
    /// taken first, a victim it can do without is given back. A victim frees
    /// room only under the limits above it.
    fn fewest(&self, id: UnitId, leaf: QuotaId, mut picks: Vec<UnitId>) -> Vec<UnitId> {
        let Some(deficits) = self.deficits(id, leaf) else {
            return picks;
        };
        let tree = &self.state.quotas;
        let frees = |v: UnitId, d: &Deficit| -> i64 {
            let Some(u) = self.units.get(v) else {
                return 0;
            };
            let Some((amount, _)) = u.holding() else {
                return 0;
            };
            let under = match d.at {
                None => true,
                Some(a) => u
                    .quota
                    .and_then(|q| tree.path(q).ok())
                    .is_some_and(|p| p.contains(&a)),
            };
            if under { amount.get(d.resource) } else { 0 }
        };
        let covered = |picks: &[UnitId]| {
            deficits
                .iter()
                .all(|d| picks.iter().map(|v| frees(*v, d)).sum::<i64>() >= d.left)
        };
        let mut i = picks.len();
        while i > 0 {
            i -= 1;
            let v = picks.remove(i);
            if !covered(&picks) {
                picks.insert(i, v);
            }
        }
        picks
    }
}
