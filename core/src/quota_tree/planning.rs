//! The figures reclaim plans with: next to each quota's usage, the part
//! held by units being reclaimed and the part promised to guaranteed units
//! waiting for them, and the waiting demand per scope — so that a plan sees
//! the state once the reclaims in flight are done (see `reclaim/mod.rs`).

use super::{Figure, QuotaTree, governs, has_min_for};
use crate::amounts::{ResVec, UNLIMITED};
use crate::ids::{Id, QuotaId, ResId};

impl QuotaTree {
    /// Records that a unit charged to `quota` holding `amount` is being
    /// reclaimed (`add`), or no longer is.
    pub(crate) fn mark_reclaiming(&mut self, quota: Option<QuotaId>, amount: &ResVec, add: bool) {
        self.apply(Figure::Reclaiming, quota, amount, add);
    }

    /// Records that a guaranteed unit charged to `quota` asking for `amount`
    /// waits for reclaimed resources (`add`), or no longer does.
    pub(crate) fn mark_promised(&mut self, quota: Option<QuotaId>, amount: &ResVec, add: bool) {
        self.apply(Figure::Promised, quota, amount, add);
    }

    /// Part of the usage of `id`'s subtree held by units being reclaimed.
    pub fn reclaiming(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| n.reclaiming.get(resource))
    }

    /// Usage of `id`'s subtree by units that are not being reclaimed: what
    /// it keeps once the reclaims in flight are done.
    pub fn kept(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| {
            n.used
                .get(resource)
                .saturating_sub(n.reclaiming.get(resource))
        })
    }

    /// Usage of `id`'s subtree once the reclaims in flight are done and the
    /// guaranteed units waiting for them are released.
    pub fn projected(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| {
            n.used
                .get(resource)
                .saturating_sub(n.reclaiming.get(resource))
                .saturating_add(n.promised.get(resource))
        })
    }

    /// [`QuotaTree::kept`] for the whole cluster.
    pub fn root_kept(&self, resource: ResId) -> i64 {
        self.root_used
            .get(resource)
            .saturating_sub(self.root_reclaiming.get(resource))
    }

    /// [`QuotaTree::projected`] for the whole cluster.
    pub fn root_projected(&self, resource: ResId) -> i64 {
        self.root_used
            .get(resource)
            .saturating_sub(self.root_reclaiming.get(resource))
            .saturating_add(self.root_promised.get(resource))
    }

    /// Whether a unit charged to `leaf` with `request` stays within the
    /// leaf's effective min once the reclaims in flight are done and the
    /// units waiting for them are released.
    pub fn is_guaranteed_projected(&self, leaf: Option<QuotaId>, request: &ResVec) -> bool {
        let Some(l) = leaf.filter(|l| self.is_defined(*l)) else {
            return false;
        };
        let Some(node) = self.node(l) else {
            return false;
        };
        has_min_for(node, request)
            && request
                .iter()
                .filter(|(k, _)| governs(node, *k))
                .all(|(k, r)| self.projected(l, k).saturating_add(r) <= self.min_effective(l, k))
    }

    /// Whether quota `id` would use less than its effective min of some
    /// resource once the reclaims in flight are done: units judged to borrow
    /// there may be guaranteed now.
    pub fn has_room_under_min(&self, id: QuotaId) -> bool {
        self.node(id).is_some_and(|n| {
            n.min_eff.iter_set().any(|(k, min)| {
                n.used
                    .get(k)
                    .saturating_sub(n.reclaiming.get(k))
                    .saturating_add(n.promised.get(k))
                    < min
            })
        })
    }

    /// Whether quota `id` governs `resource`: names it in its min or its
    /// max. Usage of a resource a quota does not govern is neither
    /// guaranteed nor borrowed there.
    pub fn governs(&self, id: QuotaId, resource: ResId) -> bool {
        self.node(id).is_some_and(|n| governs(n, resource))
    }

    /// Whether units are charged to quota `id` itself (not only to its
    /// children).
    pub fn has_direct_usage(&self, id: QuotaId) -> bool {
        self.node(id)
            .is_some_and(|n| n.direct_used.iter_set().next().is_some())
    }

    /// Number of guaranteed units waiting for reclaim whose shortage of
    /// `resource` is at `scope` (the capacity when `None`).
    pub fn waiters(&self, scope: Option<QuotaId>, resource: ResId) -> i64 {
        match scope {
            None => self.root_waiters.get(resource),
            Some(q) => self.node(q).map_or(0, |n| n.waiters.get(resource)),
        }
    }

    /// Whether any guaranteed unit waits for reclaim.
    pub fn has_waiters(&self) -> bool {
        self.total_waiters > 0
    }

    /// Adds `delta` to the waiters of `resource` at `scope`. Returns whether
    /// the count dropped to zero (borrowing there may resume).
    pub(crate) fn add_waiters(
        &mut self,
        scope: Option<QuotaId>,
        resource: ResId,
        delta: i64,
    ) -> bool {
        let slot = match scope {
            None => &mut self.root_waiters,
            Some(q) => match self.nodes.get_mut(q.index()) {
                Some(n) => &mut n.waiters,
                None => return false,
            },
        };
        let before = slot.get(resource);
        let after = before.saturating_add(delta).max(0);
        slot.set(resource, after);
        self.total_waiters = self.total_waiters.saturating_add(after - before).max(0);
        before > 0 && after == 0
    }

    /// Room for borrowing at `scope` for `resource`: none while guaranteed
    /// units wait for reclaim there, otherwise unlimited.
    pub fn reclaim_headroom(&self, scope: Option<QuotaId>, resource: ResId) -> i64 {
        if self.waiters(scope, resource) > 0 {
            0
        } else {
            UNLIMITED
        }
    }
}
