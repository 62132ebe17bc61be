//! Weighted fair sharing (architecture §4.4, fair sharing): under a parent
//! that turns it on, its children share what lies above their mins by
//! weight, by dominant resource share.
//!
//! A child's share of resource `k` is what it borrows there — its usage
//! beyond its effective min — over the parent's pool of `k`: the parent's
//! limit (its max, else the cluster capacity) less its children's mins. Its
//! dominant share is the largest over the resources with a finite pool; its
//! weighted share that divided by its weight. The cycle serves the waiting
//! child with the lowest weighted share first (`cycle.rs`), which fills the
//! pool in proportion to the weights when every child wants more.

use super::QuotaTree;
use crate::amounts::{ResVec, UNLIMITED};
use crate::ids::{QuotaId, ResId};

/// A weighted dominant share, in millionths of the pool per unit of weight
/// (fixed point, so that the order of children is the same on every replica).
pub type Share = i64;

/// Fixed-point scale of a [`Share`].
pub const SHARE_SCALE: i64 = 1_000_000;

impl QuotaTree {
    /// The nearest ancestor of quota `id` (itself excluded) whose children
    /// share fairly, with the child of it on `id`'s path.
    pub fn fair_scope(&self, id: QuotaId) -> Option<(QuotaId, QuotaId)> {
        let path = self.path(id).ok()?;
        path.windows(2).find_map(|w| {
            let (child, parent) = (w[0], w[1]);
            self.node(parent)
                .is_some_and(|n| n.defined && n.fair)
                .then_some((parent, child))
        })
    }

    /// Whether any defined quota turns fair sharing on (the cycle's fair
    /// round then has work; otherwise it costs one comparison).
    pub fn any_fair(&self) -> bool {
        self.nodes.iter().any(|n| n.defined && n.fair)
    }

    /// The pool of `resource` under fair-sharing parent `parent`: its limit
    /// less its children's effective mins, or `None` when unlimited.
    fn pool(&self, parent: QuotaId, resource: ResId) -> Option<i64> {
        let limit = match self.max(parent, resource) {
            UNLIMITED => match self.capacity_of(resource) {
                Some(UNLIMITED) | None => return None,
                Some(cap) => cap,
            },
            max => max,
        };
        let mins = self
            .children(Some(parent))
            .iter()
            .map(|c| self.min_effective(*c, resource))
            .fold(0i64, i64::saturating_add);
        Some(limit.saturating_sub(mins).max(1))
    }

    /// The weighted dominant share of `child` of fair-sharing parent
    /// `parent`, with `plus` added to its usage (a unit it would admit) and
    /// `minus` taken from it (units it would give back).
    pub fn weighted_share(
        &self,
        parent: QuotaId,
        child: QuotaId,
        plus: &ResVec,
        minus: &ResVec,
    ) -> Share {
        let Some(node) = self.node(child) else {
            return 0;
        };
        let resources = node
            .used
            .iter_set()
            .chain(node.promised.iter_set())
            .map(|(k, _)| k)
            .chain(plus.iter().map(|(k, _)| k));
        let mut dominant: i64 = 0;
        for k in resources {
            let Some(pool) = self.pool(parent, k) else {
                continue;
            };
            // As it will be once the reclaims in flight are done.
            let used = self
                .projected(child, k)
                .saturating_add(plus.get(k))
                .saturating_sub(minus.get(k));
            let borrowed = used.saturating_sub(node.min_eff.get(k)).max(0);
            let share = i128::from(borrowed) * i128::from(SHARE_SCALE) / i128::from(pool);
            dominant = dominant.max(i64::try_from(share).unwrap_or(i64::MAX));
        }
        let weighted = i128::from(dominant) * 1000 / i128::from(node.weight_milli.max(1));
        i64::try_from(weighted).unwrap_or(i64::MAX)
    }

    /// The weight of `id` in thousandths.
    pub fn weight_milli(&self, id: QuotaId) -> i64 {
        self.node(id)
            .map_or(crate::model::DEFAULT_WEIGHT_MILLI, |n| n.weight_milli)
    }

    /// Whether `id` turns fair sharing on for its children.
    pub fn is_fair(&self, id: QuotaId) -> bool {
        self.node(id).is_some_and(|n| n.defined && n.fair)
    }
}
