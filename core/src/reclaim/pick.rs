//! Picking reclaim victims: which units beside a guaranteed unit's path
//! may give, in victim order, and only as many as cover what it lacks
//! (see the planning in `mod.rs`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Deficit;
use super::state::{Eligible, SPARE_BOUNDED_WITHIN_MS, SPARED_AFTER, Source, VictimKey};
use crate::cycle::Pass;
use crate::ids::{QuotaId, ResId, UnitId};
use crate::units::UnitEntry;

/// Resources already picked in this plan, by quota.
#[derive(Default)]
struct Picked(Vec<(QuotaId, ResId, i64)>);

impl Picked {
    fn get(&self, q: QuotaId, k: ResId) -> i64 {
        self.0
            .iter()
            .find(|(a, b, _)| *a == q && *b == k)
            .map_or(0, |(_, _, v)| *v)
    }

    fn add(&mut self, q: QuotaId, k: ResId, v: i64) {
        match self.0.iter_mut().find(|(a, b, _)| *a == q && *b == k) {
            Some((_, _, x)) => *x = x.saturating_add(v),
            None => self.0.push((q, k, v)),
        }
    }
}

impl Pass<'_> {
    /// A quick necessary condition: under each limit short of room, the
    /// quotas beside the unit's path that use more than their min hold at
    /// least what is missing.
    pub(super) fn may_cover(&self, path: &[QuotaId], deficits: &[Deficit]) -> bool {
        let tree = &self.state.quotas;
        deficits.iter().all(|d| {
            // The path quotas whose other children's units free room under d.
            let top = match d.at {
                None => path.len(),
                Some(a) => path.iter().position(|x| *x == a).unwrap_or(0),
            };
            let k = d.resource;
            let mut levels: Vec<Option<QuotaId>> = path[1..=top.min(path.len() - 1)]
                .iter()
                .map(|a| Some(*a))
                .collect();
            if d.at.is_none() {
                levels.push(None);
            }
            let mut available = 0i64;
            if d.at.is_none() {
                // Units of no quota (bounded by what the top-level quotas
                // do not account for).
                let top: i64 = tree
                    .children(None)
                    .iter()
                    .map(|c| tree.kept(*c, k))
                    .fold(0, i64::saturating_add);
                available = tree.root_kept(k).saturating_sub(top).max(0);
            }
            for (i, level) in levels.iter().enumerate() {
                let on_path = path.get(i).copied();
                for &c in tree.children(*level) {
                    if Some(c) == on_path {
                        continue;
                    }
                    let kept = tree.kept(c, k);
                    if kept > tree.min_effective(c, k) {
                        available = available.saturating_add(kept);
                    }
                }
            }
            available >= d.left
        })
    }

    /// Picks victims until nothing is missing, in victim order. `None` if
    /// the candidates do not suffice.
    ///
    /// The candidates are the units under the quotas beside the unit's path
    /// (the other children of the path's quotas, up to the highest limit
    /// short of room) and, for the capacity, the units of no quota. They are
    /// merged in victim order; a quota of that frontier found at or below
    /// its min is dropped whole, and one with a child at or below its min is
    /// split into its children, so that what cannot be taken is not read
    /// unit by unit.
    /// Only units `eligible` allows are taken; a preemption victim too
    /// young to be taken yet sets `too_young` to when it will not be.
    pub(super) fn pick(
        &self,
        id: UnitId,
        path: &[QuotaId],
        deficits: &mut [Deficit],
        eligible: &Eligible,
        too_young: &mut Option<i64>,
    ) -> Option<Vec<UnitId>> {
        let tree = &self.state.quotas;
        let index = &self.reclaim.index;
        let mut fronts = frontier(tree, path, deficits);
        let mut picked = Picked::default();
        // Quotas found at or below their min for everything still missing:
        // nothing under them is taken in this plan (picks only lower usage).
        let mut dead: Vec<QuotaId> = Vec::new();
        // Whether quota `x` keeps the units under it from being taken for
        // resource `k`: it governs `k` and is not above its min.
        let holds_back = |x: QuotaId, k: ResId, picked: &Picked| {
            tree.governs(x, k)
                && tree.kept(x, k).saturating_sub(picked.get(x, k)) <= tree.min_effective(x, k)
        };
        let cannot_give = |deficits: &[Deficit], x: QuotaId, picked: &Picked| {
            deficits
                .iter()
                .filter(|d| d.left > 0)
                .all(|d| holds_back(x, d.resource, picked))
        };
        // Parts of the frontier that cannot give anything are not read.
        fronts.retain(|f| match f {
            Source::Quota(c) => !cannot_give(deficits, *c, &picked),
            Source::NoQuota => true,
        });
        let mut alive = vec![true; fronts.len()];
        let mut heap: BinaryHeap<Reverse<(VictimKey, usize)>> = fronts
            .iter()
            .enumerate()
            .filter_map(|(i, f)| index.next(*f, None).map(|k| Reverse((k, i))))
            .collect();
        let own_queue = self.units.get(id).and_then(|u| u.queue);
        let mut picks = Vec::new();
        while let Some(Reverse((key, i))) = heap.pop() {
            if !alive[i] {
                continue;
            }
            let source = fronts[i];
            // The victim's quotas below the lowest one it shares with the
            // unit (a quota does not reclaim from itself or its ancestors).
            let vpath: &[QuotaId] = match key.quota {
                None => &[],
                Some(m) => tree.path(m).unwrap_or(&[]),
            };
            let shared = vpath.iter().position(|x| path.contains(x));
            let chain = &vpath[..shared.unwrap_or(vpath.len())];
            if let Source::Quota(front) = source {
                if dead.contains(&front) || cannot_give(deficits, front, &picked) {
                    // Nothing under this part of the frontier can give.
                    if !dead.contains(&front) {
                        dead.push(front);
                    }
                    alive[i] = false;
                    continue;
                }
                // A quota under the frontier's that cannot give: read its
                // children separately (unless units are charged to the
                // frontier's quota itself, which the split would lose).
                if let Some(&below) = chain
                    .iter()
                    .take_while(|x| **x != front)
                    .find(|x| dead.contains(x) || cannot_give(deficits, **x, &picked))
                {
                    if !dead.contains(&below) {
                        dead.push(below);
                    }
                    if !tree.has_direct_usage(front) {
                        alive[i] = false;
                        for &c in tree.children(Some(front)) {
                            let n = fronts.len();
                            fronts.push(Source::Quota(c));
                            alive.push(true);
                            if let Some(k) = index.next(Source::Quota(c), Some(&key)) {
                                heap.push(Reverse((k, n)));
                            }
                        }
                        // This candidate is under `below`: not taken.
                        continue;
                    }
                }
            }
            if let Some(k) = index.next(source, Some(&key)) {
                heap.push(Reverse((k, i)));
            }
            if (key.quota.is_some() && chain.is_empty()) || chain.iter().any(|x| dead.contains(x)) {
                continue;
            }
            let Some(v) = self.units.get(key.id) else {
                continue;
            };
            let Some((amount, since)) = v.holding() else {
                continue;
            };
            if since.seq >= self.reclaim.cycle_start && v.queue == own_queue {
                // Released by this cycle in the queue being served: it
                // cannot be taken back from here, and it is not written yet.
                continue;
            }
            if !self.allowed(eligible, key.id, v, since.ms, too_young) {
                continue;
            }
            if matches!(eligible, Eligible::Preempt(_))
                && amount.iter().any(|(k, a)| {
                    chain.iter().any(|x| {
                        tree.governs(*x, k)
                            && tree
                                .kept(*x, k)
                                .saturating_sub(picked.get(*x, k))
                                .saturating_sub(a)
                                < tree.min_effective(*x, k)
                    })
                })
            {
                // A preemption never takes a quota below its min.
                continue;
            }
            let covers = |d: &Deficit| match d.at {
                None => true,
                Some(a) => vpath.contains(&a),
            };
            // Above its min in `k` is every quota of the chain that governs
            // `k`, and at least one does (or the unit has no quota at all).
            let eligible = amount.iter().any(|(k, _)| {
                deficits
                    .iter()
                    .any(|d| d.resource == k && d.left > 0 && covers(d))
                    && chain.iter().all(|x| !holds_back(*x, k, &picked))
                    && (key.quota.is_none() || chain.iter().any(|x| tree.governs(*x, k)))
            });
            if !eligible {
                continue;
            }
            picks.push(key.id);
            for (k, a) in amount.iter() {
                for d in deficits.iter_mut() {
                    if d.resource == k && covers(d) {
                        d.left = d.left.saturating_sub(a);
                    }
                }
                for x in vpath {
                    picked.add(*x, k, a);
                }
            }
            if deficits.iter().all(|d| d.left <= 0) {
                return Some(picks);
            }
        }
        None
    }
}

impl Pass<'_> {
    /// Whether `eligible` lets holding unit `v` (id `vid`, released at
    /// `since_ms`) be taken.
    fn allowed(
        &self,
        eligible: &Eligible,
        vid: UnitId,
        v: &UnitEntry,
        since_ms: i64,
        too_young: &mut Option<i64>,
    ) -> bool {
        match *eligible {
            Eligible::Reclaim {
                priority,
                spare_heads,
                spare_sent_back,
            } => {
                let senior = v.priority > priority;
                let head = v.released_reserving && senior;
                // A unit of higher priority whose run is bounded ends by
                // itself: the guaranteed unit waits at most that bound (when
                // it ends soon enough), and the senior unit keeps its room
                // (sent back, a large unit that always borrows would wait
                // again, and after two send-backs wait for an idle cluster).
                let ends_soon = v.max_run_ms.is_some_and(|bound| {
                    since_ms.saturating_add(bound)
                        <= self.now_ms.saturating_add(SPARE_BOUNDED_WITHIN_MS)
                });
                let bounded_senior = senior && ends_soon;
                let churned = self.reclaim.sent_back(&v.key) >= SPARED_AFTER;
                let spared =
                    bounded_senior || (spare_heads && head) || (spare_sent_back && churned);
                !spared
            }
            Eligible::Preempt(rule) => {
                if !rule.allows(v.priority, v.created_ms)
                    || self.displaced_by(vid, rule.by)
                    || self.reclaim.sent_back(&v.key) >= rule.max_per_unit
                {
                    return false;
                }
                let due = since_ms.saturating_add(rule.min_run_ms);
                if self.now_ms < due {
                    *too_young = Some(too_young.map_or(due, |t| t.min(due)));
                    return false;
                }
                true
            }
        }
    }
}

/// Where victims for a unit on `path` may come from: the other children of
/// the path's quotas, up to the highest one short of room (`deficits`), or,
/// when the capacity is short, all of them, the other top-level quotas and
/// the units of no quota.
fn frontier(
    tree: &crate::quota_tree::QuotaTree,
    path: &[QuotaId],
    deficits: &[Deficit],
) -> Vec<Source> {
    // The path's quotas whose other children may give: up to the
    // highest one short of room, or all of them and the top level for
    // the capacity.
    let capacity = deficits.iter().any(|d| d.at.is_none());
    let highest = if capacity {
        path.len().saturating_sub(1)
    } else {
        path.iter()
            .rposition(|a| deficits.iter().any(|d| d.at == Some(*a)))
            .unwrap_or(0)
    };
    let mut fronts: Vec<Source> = Vec::new();
    for j in 1..=highest {
        let on_path = path[j - 1];
        for &c in tree.children(Some(path[j])) {
            if c != on_path {
                fronts.push(Source::Quota(c));
            }
        }
    }
    if capacity {
        let top = path.last().copied();
        for &c in tree.children(None) {
            if Some(c) != top {
                fronts.push(Source::Quota(c));
            }
        }
        fronts.push(Source::NoQuota);
    }
    fronts
}
