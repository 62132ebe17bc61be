//! Reclaim for fair share (architecture §4.4, fair sharing).
//!
//! Under a fair-sharing parent whose pool is full, a borrowing unit may take
//! back what a sibling holds beyond its fair share: from the sibling with
//! the highest weighted share first, lowest priority and most recently
//! released first, and only while that sibling keeps at least the share the
//! waiting unit's quota will have with it (Kueue's "less than or equal to
//! final share" rule), so a reclaim never makes the victim's quota the one
//! below its share, and two siblings never take turns taking from each
//! other. The guards of preemption apply: the queue's reclaim switch, the
//! victims' minimum run time, the per-minute cap of the quota, and a unit
//! never takes back from the unit that displaced it.

use super::state::{Source, Taking};
use super::{Deficit, Outcome};
use crate::amounts::ResVec;
use crate::cycle::Pass;
use crate::ids::{QuotaId, UnitId};
use crate::quota_tree::Share;
use crate::reason::{Blocker, WaitReason};

impl Pass<'_> {
    /// Reclaim for fair share for borrowing unit `id`, stopped by `reason`:
    /// `None` when it does not apply (no fair-sharing parent, another limit
    /// stops it, no sibling holds more than it would), else its outcome.
    pub(super) fn fair_reclaim(&mut self, id: UnitId, reason: &WaitReason) -> Option<Outcome> {
        if !self.reclaim_on {
            return None;
        }
        let Blocker::QuotaMax(at, _) = reason.shortfall()?.blocker else {
            return None;
        };
        let u = self.units.get(id)?;
        let leaf = u.quota?;
        let (parent, child) = self.state.quotas.fair_scope(leaf)?;
        if at != parent
            || self
                .framework
                .filter_beyond_quota_limits(&u.as_ref(), self.state)
                .is_err()
        {
            // Stopped elsewhere than by the full pool: taking from the
            // siblings would not help.
            return None;
        }
        let request = u.request.clone();
        let mut deficits = self.deficits(id, leaf)?;
        if deficits.is_empty() || deficits.iter().any(|d| d.at != Some(parent)) {
            // What is in flight frees enough, or it is short elsewhere too.
            return None;
        }
        if self.over_cap(leaf) {
            return None;
        }
        let tree = &self.state.quotas;
        let none = ResVec::default();
        let mine = tree.weighted_share(parent, child, &request, &none);
        let mut siblings: Vec<(Share, QuotaId)> = tree
            .children(Some(parent))
            .iter()
            .filter(|s| **s != child)
            .map(|s| (tree.weighted_share(parent, *s, &none, &none), *s))
            .filter(|(share, _)| *share > mine)
            .collect();
        siblings.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let picks = self.pick_above_share(id, parent, mine, &siblings, &mut deficits)?;
        self.record_preemption(id, leaf, &picks);
        Some(self.commit(id, reason.clone(), picks, Vec::new(), Taking::FairShare))
    }

    /// Victims from `siblings` (highest share first) that cover the
    /// deficits, each leaving its quota's share at least `mine`; made
    /// minimal; `None` if they cannot.
    fn pick_above_share(
        &mut self,
        id: UnitId,
        parent: QuotaId,
        mine: Share,
        siblings: &[(Share, QuotaId)],
        deficits: &mut [Deficit],
    ) -> Option<Vec<UnitId>> {
        let min_run_ms = self.preemption.min_run_ms;
        let now_ms = self.now_ms;
        let mut picks: Vec<(UnitId, ResVec)> = Vec::new();
        let mut too_young: Option<i64> = None;
        'siblings: for &(_, sibling) in siblings {
            let mut taken = ResVec::default();
            let mut after = None;
            while let Some(key) = self
                .reclaim
                .index
                .next(Source::Quota(sibling), after.as_ref())
            {
                after = Some(key);
                let Some(v) = self.units.get(key.id) else {
                    continue;
                };
                let Some((amount, since)) = v.holding() else {
                    continue;
                };
                if since.seq >= self.reclaim.cycle_start
                    || self.displaced_by(key.id, id)
                    || self.preempted_enough(&v.key)
                {
                    // Released by this cycle (by the fair round's own order),
                    // it displaced this unit before, or it was sent back as
                    // often as its life allows (fair sharing is no guarantee).
                    continue;
                }
                if now_ms.saturating_sub(since.ms) < min_run_ms {
                    let due = since.ms.saturating_add(min_run_ms);
                    too_young = Some(too_young.map_or(due, |t| t.min(due)));
                    continue;
                }
                let with = ResVec::from_pairs(taken.iter().chain(amount.iter()));
                let left =
                    self.state
                        .quotas
                        .weighted_share(parent, sibling, &ResVec::default(), &with);
                if left < mine {
                    // It would fall below what the waiting unit's quota
                    // gets: a smaller victim may still do.
                    continue;
                }
                let amount = amount.clone();
                for d in deficits.iter_mut() {
                    d.left = d.left.saturating_sub(amount.get(d.resource));
                }
                taken = with;
                picks.push((key.id, amount));
                if deficits.iter().all(|d| d.left <= 0) {
                    break 'siblings;
                }
            }
        }
        self.settle(id, picks, deficits, too_young)
    }
}
