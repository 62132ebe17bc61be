//! No churn of one unit (issue 44). Victims are taken most recently
//! released first, so a unit back from its backoff was the next one a
//! guaranteed unit took: the simulator sent one unit back 8 times. Two
//! rules keep a unit from being sent back more than twice while its min
//! stays what it was:
//! - reclaim for a guaranteed unit spares a unit sent back twice while
//!   others can make room, and takes it only when nothing else does (the
//!   min stays a guarantee; `pick.rs`), and preemption and fair sharing,
//!   which guarantee nothing, never take it;
//! - a unit sent back twice borrows again only while the cluster is idle
//!   (under half the capacity of what it borrows is in use, the measure of
//!   the controller's early return): in a busy cluster the next guaranteed
//!   unit would take it once more. Within its quota's min it runs at once,
//!   and the cluster drains, so it never waits for ever.

use super::state::SPARED_AFTER;
use crate::amounts::UNLIMITED;
use crate::cycle::Pass;
use crate::ids::UnitId;
use crate::reason::{Blocker, WaitReason};

impl Pass<'_> {
    /// Whether unit `id`, which fits, must wait because it was sent back
    /// [`SPARED_AFTER`] times, borrows and the cluster is busy; the reason if so.
    pub(crate) fn sent_back_too_often(&self, id: UnitId) -> Option<WaitReason> {
        if self.reclaim.sent_back_times.is_empty() {
            return None;
        }
        let u = self.units.get(id)?;
        let times = self.reclaim.sent_back(&u.key);
        if times < SPARED_AFTER {
            return None;
        }
        let tree = &self.state.quotas;
        for (k, r) in u.request.iter() {
            if let Some(l) = u.quota
                && (tree.projected(l, k).saturating_add(r) <= tree.min_effective(l, k)
                    || !tree.governs(l, k))
            {
                // Within its min for this resource, or a resource its quota
                // does not govern: not borrowing it.
                continue;
            }
            let cap = match tree.capacity_of(k) {
                Some(cap) if cap != UNLIMITED && cap > 0 => cap,
                // Unknown (the filters stop it) or unlimited: no measure
                // of busy.
                _ => continue,
            };
            let used = tree.root_used(k);
            if used.saturating_mul(2) < cap {
                continue;
            }
            return Some(WaitReason::SentBackTooOften {
                times,
                quota: u.quota.map(|q| tree.name(q).clone()),
                resource: self.state.resource_name(k).clone(),
                used,
                capacity: cap,
                blocker: Blocker::Capacity(k),
                // The room at which the root holds under half: used ≤ (cap - 1) / 2.
                need: cap.saturating_sub(cap.saturating_sub(1) / 2),
            });
        }
        None
    }
}
