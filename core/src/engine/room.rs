//! Whether a unit's room is free now (issue 44: no idle capacity while work
//! waits). A unit sent back by a reclaim or a preemption waits out a
//! backoff so that it does not thrash — but when the room it needs is
//! idle, waiting protects nothing: the controller asks here and puts it
//! back in its queue at once (the cycle still decides, in the queue's
//! order, whether it is released).

use koord_queue_model::Resources;

use super::Core;
use crate::amounts::UNLIMITED;

impl Core {
    /// Whether a unit charged to `quota` asking for `request` would fit now
    /// under every max on its quota's path and the capacity, counting the
    /// room promised to units waiting for reclaims as taken; and, unless it
    /// stays within its min, the cluster is idle (the root holds less than
    /// half its capacity), no borrowing pause is on for it and no reserving
    /// head of another queue holds it back. A
    /// resource the core has never seen, an unknown quota or an unknown
    /// capacity answer `false`: the backoff then runs its course.
    pub fn has_room_for(&self, quota: Option<&str>, request: &Resources) -> bool {
        let tree = &self.state.quotas;
        let leaf = match quota {
            Some(name) => match tree.id(name) {
                Some(id) => Some(id),
                None => return false,
            },
            None => None,
        };
        let path = match leaf {
            Some(l) => match tree.path(l) {
                Ok(p) => p,
                Err(_) => return false,
            },
            None => &[],
        };
        let mut ask = Vec::new();
        for (name, amount) in request.iter() {
            if amount <= 0 {
                continue;
            }
            let Some(k) = self.state.resources().get(name) else {
                return false;
            };
            ask.push((k, amount));
        }
        let request_vec = crate::amounts::ResVec::from_pairs(ask.iter().copied());
        let guaranteed = tree.is_guaranteed_projected(leaf, &request_vec);
        for &(k, amount) in &ask {
            for &a in path {
                let max = tree.max(a, k);
                if max == UNLIMITED {
                    continue;
                }
                let taken = tree.used(a, k).max(tree.projected(a, k));
                if taken.saturating_add(amount) > max {
                    return false;
                }
            }
            match tree.capacity_of(k) {
                None => return false,
                Some(UNLIMITED) => {}
                Some(cap) => {
                    let taken = tree.root_used(k).max(tree.root_projected(k));
                    if taken.saturating_add(amount) > cap {
                        return false;
                    }
                }
            }
            if guaranteed {
                continue;
            }
            // Borrowing: only idle room is free. While the cluster is busy, a
            // borrower back early is reclaimed again by the next guaranteed
            // unit (one unit was sent back 11 times in the simulator); the
            // backoff is what keeps that from thrashing. Idle is what the
            // benchmark measures: the root under half its capacity.
            match tree.capacity_of(k) {
                Some(UNLIMITED) => {}
                Some(cap) if tree.root_used(k).saturating_mul(2) < cap => {}
                _ => return false,
            }
            let scopes = path.iter().map(|a| Some(*a)).chain([None]);
            for scope in scopes {
                if tree.waiters(scope, k) > 0 {
                    return false;
                }
            }
            let held = self
                .holds
                .active
                .iter()
                .any(|h| h.resource() == k && h.scope.is_none_or(|s| path.contains(&s)));
            if held {
                return false;
            }
        }
        true
    }
}
