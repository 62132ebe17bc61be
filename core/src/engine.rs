//! [`Core`]: the decision core's state and the calls the controller makes to
//! keep it in step with the cluster. The scheduling cycle itself is in
//! `cycle.rs`; reads (positions, counts, reasons) in `view.rs`.
//!
//! Every change records what it may have made possible, so that a cycle only
//! looks at queues and units that can have a different outcome:
//! - a unit added or changed goes on its queue's dirty list;
//! - freed usage, a raised max, more capacity or a roomier ResourceQuota are
//!   recorded as *relaxed limits*; queues that have units stopped by such a
//!   limit are looked at again if the limit now has room for them;
//! - a change of the tree's shape (or of plugin inputs the core cannot see)
//!   starts a new *epoch*: every queue is looked at in full and no earlier
//!   verdict is re-used;
//! - reclaim (see `reclaim.rs`) is told about every unit that starts or
//!   stops holding quota, so that its victim order and its view of the
//!   reclaims in flight stay exact.

use std::collections::{HashMap, HashSet};
use std::mem;
use std::sync::Arc;

use koord_queue_model::ROOT_QUOTA_NAME;
use koord_queue_model::Resources;

use super::amounts::ResVec;
use super::config::{ConfigError, SchedulerConfig};
use super::framework::Framework;
use super::ids::{Id, NsId, QueueId, QuotaId, ResId, UnitId};
use super::model::{CapacitySource, QueueDef, QuotaDef, RootCapacity, UnitDef};
use super::queues::{Dirty, QueueState, Queues, WaitKey};
use super::quota_tree::QuotaChange;
use super::reason::{Blocker, WaitReason};
use super::reclaim::state::ReclaimState;
use super::registry::Registry;
use super::state::ClusterState;
use super::units::{Stamp, UnitEntry, UnitState, Units};

/// A call the core cannot carry out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// No unit with this key is known.
    #[error("unknown queue unit {0}")]
    UnknownUnit(String),
    /// The unit does not hold quota.
    #[error("queue unit {0} holds no quota")]
    NotHolding(String),
    /// The unit is not being reclaimed.
    #[error("queue unit {0} is not being reclaimed")]
    NotReclaimed(String),
    /// A name that cannot be used.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// What was being named.
        what: &'static str,
        /// The name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
}

impl CoreError {
    /// Whether the step found nothing to do: the unit is gone, holds
    /// nothing, or is not being reclaimed. The controller repeats such steps
    /// safely (a release rolled back twice, a unit freed after it left);
    /// any other error is a bookkeeping bug.
    pub fn is_nothing_to_do(&self) -> bool {
        matches!(
            self,
            Self::UnknownUnit(_) | Self::NotHolding(_) | Self::NotReclaimed(_)
        )
    }
}

/// The scheduling decision core: pure state and decisions, no I/O.
#[derive(Debug)]
pub struct Core {
    pub(crate) framework: Framework,
    pub(crate) state: ClusterState,
    pub(crate) queues: Queues,
    pub(crate) units: Units,
    /// Queues with units stopped by each limit (may hold stale entries,
    /// dropped when the limit next relaxes).
    pub(crate) blocked_index: HashMap<Blocker, HashSet<QueueId>>,
    /// Limits that got room since the last cycle.
    pub(crate) relaxed: HashSet<Blocker>,
    pub(crate) epoch: u64,
    /// Units whose reason changed since the last cycle.
    pub(crate) changed: Vec<UnitId>,
    pub(crate) capacity_source: Option<CapacitySource>,
    /// Reused buffer for the queue order of a cycle.
    pub(crate) order_buf: Vec<QueueId>,
    /// Number of the running (or last) cycle, from 1.
    pub(crate) cycle_no: u32,
    /// Reclaim of borrowed quota.
    pub(crate) reclaim: ReclaimState,
}

/// What a unit held, taken from it to be given back (moved or replaced).
pub(crate) struct Held {
    amount: ResVec,
    started: bool,
    since: Stamp,
    /// `Some` if it was being reclaimed, with the unit waiting for it.
    victim_of: Option<Option<UnitId>>,
}

impl Core {
    /// Builds a core from a YAML configuration with the built-in plugins.
    pub fn from_yaml(config: &str) -> Result<Self, ConfigError> {
        Self::new(
            &SchedulerConfig::from_yaml(config)?,
            &Registry::with_builtins(),
        )
    }

    /// Builds a core from a parsed configuration and a plugin registry.
    pub fn new(config: &SchedulerConfig, registry: &Registry) -> Result<Self, ConfigError> {
        let framework = Framework::build(config, registry)?;
        let mut state = ClusterState::new();
        framework.init(&mut state);
        let capacity_source = framework.capacity_source().cloned();
        Ok(Self {
            framework,
            state,
            queues: Queues::default(),
            units: Units::default(),
            blocked_index: HashMap::new(),
            relaxed: HashSet::new(),
            epoch: 1,
            changed: Vec::new(),
            capacity_source,
            order_buf: Vec::new(),
            cycle_no: 0,
            reclaim: ReclaimState::default(),
        })
    }

    /// Where the root capacity comes from (`None` when the `ElasticQuota`
    /// plugin is not enabled and nothing checks the capacity). With
    /// [`CapacitySource::Auto`] the controller must call [`Core::set_capacity`]
    /// before anything can be released.
    pub fn capacity_source(&self) -> Option<&CapacitySource> {
        self.capacity_source.as_ref()
    }

    /// Names of the enabled plugins, in order.
    pub fn plugin_names(&self) -> Vec<&str> {
        self.framework.plugin_names()
    }

    // ---- queues ----

    /// Adds or changes a queue.
    pub fn upsert_queue(&mut self, def: &QueueDef) {
        let q = self.queues.intern(&def.name);
        let order = self.framework.queue_order(def);
        let new = QueueState {
            priority: def.priority,
            policy: def.policy,
            reclaim: def.reclaim,
            order,
        };
        let Some(entry) = self.queues.get_mut(q) else {
            return;
        };
        if entry.def.as_ref() == Some(&new) {
            return;
        }
        let name = Arc::clone(&entry.name);
        if let Some(old) = entry.def.replace(new) {
            self.queues.order.remove(&(old.order, Arc::clone(&name), q));
        }
        self.queues.order.insert((order, name, q));
        if let Some(entry) = self.queues.get_mut(q) {
            entry.dirty = Dirty::Forced;
            entry.head = None;
        }
    }

    /// Removes a queue: its waiting units stay (waiting for the queue to
    /// reappear or for a mapping change). Returns whether it was defined.
    pub fn remove_queue(&mut self, name: &str) -> bool {
        let Some(q) = self.queues.id(name) else {
            return false;
        };
        let Some(entry) = self.queues.get_mut(q) else {
            return false;
        };
        let Some(old) = entry.def.take() else {
            return false;
        };
        entry.head = None;
        entry.blockers.clear();
        let queue = Arc::clone(&entry.name);
        let ids: Vec<UnitId> = entry.waiting.iter().map(|w| w.id).collect();
        self.queues
            .order
            .remove(&(old.order, Arc::clone(&queue), q));
        for id in ids {
            self.set_reason(
                id,
                WaitReason::QueueMissing {
                    queue: Arc::clone(&queue),
                },
                0,
            );
        }
        true
    }

    // ---- quotas, capacity, namespaces ----

    /// Adds or changes a quota of the tree.
    pub fn upsert_quota(&mut self, def: &QuotaDef) -> Result<(), CoreError> {
        if def.name.is_empty() || def.name == ROOT_QUOTA_NAME {
            return Err(CoreError::InvalidName {
                what: "quota",
                name: def.name.clone(),
                reason: "the root quota is not a node; its max is the capacity (set_capacity)",
            });
        }
        let ClusterState {
            resources, quotas, ..
        } = &mut self.state;
        match quotas.upsert(def, resources) {
            QuotaChange::None => {}
            QuotaChange::Limits => {
                if let Some(q) = quotas.id(&def.name) {
                    for k in (0..resources.len()).map(ResId::from_index) {
                        self.relaxed.insert(Blocker::QuotaMax(q, k));
                    }
                }
                self.reclaim_limits_changed();
            }
            QuotaChange::Structure => self.restructured(),
        }
        Ok(())
    }

    /// Removes a quota from the tree (units charged to it then wait with a
    /// reason). Returns whether it was defined.
    pub fn remove_quota(&mut self, name: &str) -> bool {
        let removed = self.state.quotas.remove(name, &self.state.resources);
        if removed {
            self.restructured();
        }
        removed
    }

    /// Sets the root capacity (see [`Core::capacity_source`]).
    pub fn set_capacity(&mut self, capacity: &RootCapacity) {
        let ClusterState {
            resources, quotas, ..
        } = &mut self.state;
        if quotas.capacity_equals(capacity, resources) {
            return;
        }
        if quotas.set_capacity(capacity, resources) {
            self.new_epoch();
        } else {
            for k in (0..resources.len()).map(ResId::from_index) {
                self.relaxed.insert(Blocker::Capacity(k));
            }
        }
        // The top-level mins are scaled against the capacity.
        self.reclaim_limits_changed();
    }

    /// Sets a namespace's ResourceQuota hard limits and usage (for the
    /// `ResourceQuota` plugin).
    pub fn set_namespace_quota(&mut self, namespace: &str, hard: &Resources, used: &Resources) {
        let ClusterState {
            resources,
            namespaces,
            ..
        } = &mut self.state;
        namespaces.set(namespace, hard, used, resources);
        if let Some(ns) = namespaces.id(namespace) {
            self.relax_namespace(ns);
        }
    }

    /// Forgets a namespace's ResourceQuota.
    pub fn remove_namespace_quota(&mut self, namespace: &str) {
        if let Some(ns) = self.state.namespaces.clear(namespace) {
            self.relax_namespace(ns);
        }
    }

    fn relax_namespace(&mut self, ns: NsId) {
        for k in (0..self.state.resources.len()).map(ResId::from_index) {
            self.relaxed.insert(Blocker::Namespace(ns, k));
        }
    }

    /// Makes the next cycle evaluate every waiting unit from scratch: for
    /// plugins whose inputs the core does not track.
    pub fn mark_all_dirty(&mut self) {
        self.new_epoch();
    }

    fn new_epoch(&mut self) {
        self.epoch += 1;
        for e in &mut self.queues.entries {
            e.dirty = Dirty::Forced;
        }
    }

    /// The tree changed shape.
    fn restructured(&mut self) {
        self.new_epoch();
        self.reclaim_restructured();
    }

    // ---- units ----

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
                order,
                request,
                state: UnitState::Waiting {
                    reason: None,
                    trusted: 0,
                },
                dirty_in: None,
                reason_changed: false,
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
        if !matches!(new, WaitReason::Reclaiming { .. }) {
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
        if !mem::replace(&mut e.reason_changed, true) {
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
