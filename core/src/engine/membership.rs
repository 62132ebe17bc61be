//! The core's calls about units: a unit joins, changes or leaves its queue
//! (membership), starts or stops holding quota (holding), and why it waits.
//! Each records what it may have made possible (see `engine/mod.rs`).

use std::collections::HashSet;
use std::mem;
use std::sync::Arc;

use koord_queue_model::Resources;

use super::{Core, CoreError};
use crate::amounts::ResVec;
use crate::ids::{NsId, QuotaId, UnitId};
use crate::model::UnitDef;
use crate::queues::{Dirty, WaitKey};
use crate::reason::{Blocker, WaitReason};
use crate::state::ClusterState;
use crate::units::{Stamp, UnitEntry, UnitState};

/// What a unit held, taken from it to be given back (moved or replaced).
pub(crate) struct Held {
    amount: ResVec,
    started: bool,
    since: Stamp,
    /// `Some` if it was being reclaimed, with the unit waiting for it.
    victim_of: Option<Option<UnitId>>,
}

impl Core {
    /// Adds a unit (waiting) or updates one. A waiting unit whose queue,
    /// order, request, quota or namespace changed is looked at again; a unit
    /// holding quota keeps holding it (moved to its new quota if that changed).
    pub fn upsert_unit(&mut self, def: &UnitDef) -> Result<(), CoreError> {
        if def.namespace.is_empty() || def.namespace.contains('/') {
            return Err(CoreError::InvalidName {
                what: "namespace",
                name: def.namespace.clone(),
                reason: "must be non-empty and contain no '/'",
            });
        }
        if def.name.is_empty() {
            return Err(CoreError::InvalidName {
                what: "queue unit",
                name: def.name.clone(),
                reason: "must be non-empty",
            });
        }
        let key = def.key();
        let queue = self.framework.map_unit(def).map(|n| self.queues.intern(n));
        let order = self.framework.unit_order(def);
        let request = ResVec::from_resources(&def.request, &mut self.state.resources);
        let quota = def
            .quota
            .as_deref()
            .filter(|q| !q.is_empty())
            .map(|q| self.state.quotas.intern(q));
        let namespace = self.state.namespaces.intern(&def.namespace);

        let Some(id) = self.units.lookup(&key) else {
            let id = self.units.insert(UnitEntry {
                key: Arc::from(key),
                namespace,
                quota,
                queue,
                priority: def.priority,
                created_ms: def.created_ms,
                max_run_ms: def.max_run_ms,
                order,
                request,
                state: UnitState::Waiting {
                    reason: None,
                    trusted: 0,
                },
                dirty_in: None,
                reason_changed: false,
                released_reserving: false,
                reported: (0, 0),
            });
            self.enqueue(id);
            return Ok(());
        };
        let Some(e) = self.units.get(id) else {
            return Ok(());
        };
        if e.queue == queue
            && e.order == order
            && e.request == request
            && e.quota == quota
            && e.namespace == namespace
            && e.priority == def.priority
            && e.max_run_ms == def.max_run_ms
        {
            return Ok(());
        }
        if e.is_waiting() {
            self.dequeue(id);
            // What it waits for reclaim with may no longer be right: it plans again.
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, &mut self.relaxed);
            if let Some(e) = self.units.get_mut(id) {
                e.queue = queue;
                e.order = order;
                e.request = request;
                e.quota = quota;
                e.namespace = namespace;
                e.priority = def.priority;
                e.created_ms = def.created_ms;
                e.max_run_ms = def.max_run_ms;
            }
            self.enqueue(id);
        } else {
            let moves = e.quota != quota || e.namespace != namespace || e.queue != queue;
            let reorders = e.priority != def.priority;
            // Taken and given back so that usage and the victim order follow.
            let held = if moves || reorders {
                self.take_holding(id)
            } else {
                None
            };
            if let Some(e) = self.units.get_mut(id) {
                e.queue = queue;
                e.order = order;
                e.request = request;
                e.quota = quota;
                e.namespace = namespace;
                e.priority = def.priority;
                e.created_ms = def.created_ms;
                e.max_run_ms = def.max_run_ms;
            }
            if let Some(held) = held {
                self.give_holding(id, held);
                // A moved or re-prioritized holder may change what a
                // guaranteed unit can reclaim.
                self.reclaim.stale = true;
            }
        }
        Ok(())
    }

    /// Forgets a unit (finished, deleted, or sent to backoff), freeing what
    /// it holds. Returns whether it was known.
    pub fn remove_unit(&mut self, key: &str) -> bool {
        let Some(id) = self.units.lookup(key) else {
            return false;
        };
        if self.units.get(id).is_some_and(UnitEntry::is_waiting) {
            self.dequeue(id);
            if self
                .reclaim
                .drop_plan(id, &mut self.state.quotas, &mut self.relaxed)
                .is_some()
            {
                // Less is promised: a plan that failed may work now.
                self.reclaim.stale = true;
            }
            self.reclaim.retry.remove(&id);
        } else if let Some(held) = self.take_holding(id)
            && let Some(waiting) = held.victim_of
        {
            self.victim_freed(id, waiting);
        }
        self.reclaim.displaced.remove(&id);
        self.reclaim.preempt_later.remove(&id);
        self.units.remove(id).is_some()
    }

    /// Records that a unit holds `resources` (it was released earlier, e.g.
    /// before a restart). A waiting unit leaves its queue; a holding one has
    /// its holding replaced. Counts as released now for the reclaim order
    /// (see [`Core::hold_at`]).
    pub fn hold(&mut self, key: &str, resources: &Resources) -> Result<(), CoreError> {
        self.hold_at(key, resources, None)
    }

    /// [`Core::hold`] with the time the unit was released, in milliseconds
    /// since the Unix epoch (its `status.lastAllocateTime`), so that after a
    /// restart the most recently released units are still reclaimed first.
    /// Units the core releases itself, or is told about without a time,
    /// count as released after every time it was given. `None` keeps the
    /// release time of a unit that already holds quota, and means "now" for
    /// a waiting one.
    pub fn hold_at(
        &mut self,
        key: &str,
        resources: &Resources,
        released_ms: Option<i64>,
    ) -> Result<(), CoreError> {
        let id = self
            .units
            .lookup(key)
            .ok_or_else(|| CoreError::UnknownUnit(key.to_string()))?;
        let amount = ResVec::from_resources(resources, &mut self.state.resources);
        let held = if self.units.get(id).is_some_and(UnitEntry::is_waiting) {
            self.dequeue(id);
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, &mut self.relaxed);
            self.reclaim.retry.remove(&id);
            Held {
                amount,
                started: false,
                since: match released_ms {
                    Some(ms) => self.reclaim.at(ms),
                    None => self.reclaim.now(),
                },
                victim_of: None,
            }
        } else {
            let before = self.take_holding(id);
            let since = match (released_ms, before.as_ref().map(|h| h.since)) {
                (Some(ms), _) => self.reclaim.at(ms),
                (None, Some(since)) => since,
                (None, None) => self.reclaim.now(),
            };
            Held {
                amount,
                started: before.as_ref().is_some_and(|h| h.started),
                since,
                victim_of: before.and_then(|h| h.victim_of),
            }
        };
        self.give_holding(id, held);
        // New holdings may be borrowing that a guaranteed unit can reclaim.
        self.reclaim.stale = true;
        Ok(())
    }

    /// The unit stops holding quota and waits again in its queue (for
    /// example its job was suspended by someone else).
    pub fn free(&mut self, key: &str) -> Result<(), CoreError> {
        let id = self
            .units
            .lookup(key)
            .ok_or_else(|| CoreError::UnknownUnit(key.to_string()))?;
        let Some(held) = self.take_holding(id) else {
            return Err(CoreError::NotHolding(key.to_string()));
        };
        if let Some(waiting) = held.victim_of {
            self.victim_freed(id, waiting);
        }
        if let Some(e) = self.units.get_mut(id) {
            e.state = UnitState::Waiting {
                reason: None,
                trusted: 0,
            };
        }
        self.enqueue(id);
        Ok(())
    }

    /// Rolls back a release decision whose API write failed: the unit's
    /// reservation is freed and it waits again, to be retried by a later
    /// cycle. Same as [`Core::free`].
    pub fn unreserve(&mut self, key: &str) -> Result<(), CoreError> {
        self.free(key)
    }

    /// Records that a holding unit's pods exist, so the `ResourceQuota`
    /// plugin stops counting it as reserved (its usage is now in the
    /// namespace ResourceQuota's `used`). Idempotent.
    pub fn mark_started(&mut self, key: &str) -> Result<(), CoreError> {
        let id = self
            .units
            .lookup(key)
            .ok_or_else(|| CoreError::UnknownUnit(key.to_string()))?;
        let Core {
            framework,
            state,
            units,
            ..
        } = self;
        let Some(e) = units.get_mut(id) else {
            return Ok(());
        };
        match &e.state {
            UnitState::Holding {
                started: false,
                amount,
                since,
            } => {
                let (amount, since) = (amount.clone(), *since);
                framework.started(&e.as_ref_with(&amount), &amount, state);
                e.state = UnitState::Holding {
                    amount,
                    started: true,
                    since,
                };
                Ok(())
            }
            UnitState::Holding { started: true, .. } => Ok(()),
            UnitState::Waiting { .. } => Err(CoreError::NotHolding(key.to_string())),
        }
    }

    // ---- internals shared with the cycle ----

    /// Puts a waiting unit in its queue's line and on its dirty list (also
    /// to have one already in line looked at again, its verdict not trusted).
    pub(crate) fn enqueue(&mut self, id: UnitId) {
        let Some(e) = self.units.get_mut(id) else {
            return;
        };
        if let UnitState::Waiting { trusted, .. } = &mut e.state {
            *trusted = 0;
        }
        let Some(q) = e.queue else {
            self.set_reason(id, WaitReason::NoQueue, 0);
            return;
        };
        let wait_key = WaitKey {
            order: e.order,
            key: Arc::clone(&e.key),
            id,
        };
        let newly_dirty = e.dirty_in != Some(q);
        e.dirty_in = Some(q);
        let Some(entry) = self.queues.get_mut(q) else {
            return;
        };
        entry.waiting.insert(wait_key);
        if newly_dirty {
            entry.dirty_units.push(id);
        }
        if entry.def.is_none() {
            let queue = Arc::clone(&entry.name);
            self.set_reason(id, WaitReason::QueueMissing { queue }, 0);
        }
    }

    /// Takes a waiting unit out of its queue's line.
    fn dequeue(&mut self, id: UnitId) {
        let Some(e) = self.units.get(id) else {
            return;
        };
        let Some(q) = e.queue else {
            return;
        };
        let wait_key = WaitKey {
            order: e.order,
            key: Arc::clone(&e.key),
            id,
        };
        if let Some(entry) = self.queues.get_mut(q) {
            entry.waiting.remove(&wait_key);
            if entry.head.as_ref() == Some(&wait_key) {
                // A Block queue lost the unit it stopped at: the next may fit.
                entry.head = None;
                entry.dirty = Dirty::Forced;
            }
        }
    }

    /// Makes the unit hold what `held` says, accounting it through the
    /// reserve plugins and listing it for reclaim (or as being reclaimed).
    fn give_holding(&mut self, id: UnitId, held: Held) {
        let Core {
            framework,
            state,
            units,
            queues,
            reclaim,
            ..
        } = self;
        let Some(e) = units.get_mut(id) else {
            return;
        };
        let Held {
            amount,
            started,
            since,
            victim_of,
        } = held;
        e.state = UnitState::Holding {
            amount: ResVec::default(),
            started,
            since,
        };
        framework.reserve(&e.as_ref_with(&amount), &amount, state);
        if let Some(waiting) = victim_of {
            state.quotas.mark_reclaiming(e.quota, &amount, true);
            reclaim.victims.insert(id, waiting);
        }
        e.state = UnitState::Holding {
            amount,
            started,
            since,
        };
        if victim_of.is_none() {
            reclaim.list(&state.quotas, id, e);
        }
        if let Some(entry) = e.queue.and_then(|q| queues.get_mut(q)) {
            entry.admitted += 1;
        }
    }

    /// Frees what the unit holds, recording the limits that got room.
    /// Returns what it held, or `None` if it held nothing. The unit is left
    /// in the `Waiting` state outside any queue; the caller decides what
    /// next (and whether a victim is freed for good: [`Core::victim_freed`]).
    fn take_holding(&mut self, id: UnitId) -> Option<Held> {
        let Core {
            framework,
            state,
            units,
            queues,
            relaxed,
            reclaim,
            ..
        } = self;
        let e = units.get_mut(id)?;
        let UnitState::Holding {
            amount,
            started,
            since,
        } = &e.state
        else {
            return None;
        };
        let (amount, started, since) = (amount.clone(), *started, *since);
        let victim_of = reclaim.victims.remove(&id);
        match victim_of {
            Some(_) => state.quotas.mark_reclaiming(e.quota, &amount, false),
            None => {
                reclaim.unlist(&state.quotas, id, e);
                if let Some(q) = e.quota {
                    // Its quota uses less: units there may be within the min now.
                    reclaim.room_check.push(q);
                }
            }
        }
        framework.unreserve(&e.as_ref_with(&amount), &amount, state);
        e.state = UnitState::Waiting {
            reason: None,
            trusted: 0,
        };
        if let Some(entry) = e.queue.and_then(|q| queues.get_mut(q)) {
            entry.admitted = entry.admitted.saturating_sub(1);
        }
        note_freed(relaxed, state, e.quota, e.namespace, &amount);
        Some(Held {
            amount,
            started,
            since,
            victim_of,
        })
    }

    /// Sets a waiting unit's reason (as of `epoch`, 0 for reasons that are
    /// not the filters' verdict) and lists it as changed if it differs.
    pub(crate) fn set_reason(&mut self, id: UnitId, new: WaitReason, epoch: u64) {
        if !matches!(
            new,
            WaitReason::Reclaiming { .. } | WaitReason::Preempting { .. }
        ) {
            // It no longer waits for reclaimed resources.
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, &mut self.relaxed);
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
        *reason = Some(new);
        if self.reports_reasons && !mem::replace(&mut e.reason_changed, true) {
            self.changed.push(id);
        }
    }
}

/// Records the limits that got room when `amount` charged to `quota` and
/// `namespace` was freed.
pub(crate) fn note_freed(
    relaxed: &mut HashSet<Blocker>,
    state: &ClusterState,
    quota: Option<QuotaId>,
    namespace: NsId,
    amount: &ResVec,
) {
    let path: &[QuotaId] = match quota {
        Some(q) => state.quotas.path(q).unwrap_or(&[]),
        None => &[],
    };
    for (k, _) in amount.iter() {
        relaxed.insert(Blocker::Capacity(k));
        relaxed.insert(Blocker::Namespace(namespace, k));
        for a in path {
            relaxed.insert(Blocker::QuotaMax(*a, k));
        }
    }
}
