//! [`Core`]: the decision core's state and the calls the controller makes to
//! keep it in step with the cluster. The scheduling cycle itself is in
//! `cycle.rs`; reads (positions, counts, reasons) in `view.rs`; the calls
//! about units (membership and holding) in `engine/membership.rs`.
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

use super::config::{ConfigError, SchedulerConfig};
use super::framework::Framework;
use super::ids::{Id, NsId, QueueId, ResId, UnitId};
use super::model::{CapacitySource, QueueDef, QuotaDef, RootCapacity};
use super::queues::{Dirty, QueueState, Queues};
use super::quota_tree::QuotaChange;
use super::reason::{Blocker, WaitReason};
use super::reclaim::state::ReclaimState;
use super::registry::Registry;
use super::state::ClusterState;
use super::units::{UnitEntry, Units};

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
    /// Whether cycles list the waiting units whose reason changed
    /// ([`CycleOutput::waiting`](crate::CycleOutput)); see
    /// [`Core::report_reasons`].
    pub(crate) reports_reasons: bool,
    pub(crate) capacity_source: Option<CapacitySource>,
    /// Reused buffer for the queue order of a cycle.
    pub(crate) order_buf: Vec<QueueId>,
    /// Number of the running (or last) cycle, from 1.
    pub(crate) cycle_no: u32,
    /// Reclaim of borrowed quota.
    pub(crate) reclaim: ReclaimState,
    /// The controller's clock (ms since the epoch), as last set: the core
    /// has none of its own (see [`Core::set_now`]).
    pub(crate) now_ms: i64,
    /// Reserving heads that hold back the units of other queues
    /// (`reserve/across.rs`).
    pub(crate) holds: crate::reserve::holds::Holds,
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
            reports_reasons: true,
            capacity_source,
            order_buf: Vec::new(),
            cycle_no: 0,
            reclaim: ReclaimState::default(),
            now_ms: 0,
            holds: Default::default(),
        })
    }

    /// Whether cycles list the waiting units whose reason changed, with the
    /// new reason, in [`CycleOutput::waiting`](crate::CycleOutput) (on by
    /// default). A caller that reads reasons from the core when it needs
    /// them (the controller's visibility pass, the simulator) turns it off:
    /// the list costs a copy of the unit's key and reason for every waiting
    /// unit a cycle judges afresh — all 100,000 in a new leader's first
    /// cycle — which nobody then reads. The reasons themselves are kept
    /// either way.
    pub fn report_reasons(&mut self, on: bool) {
        self.reports_reasons = on;
        if !on {
            for id in self.changed.drain(..) {
                if let Some(e) = self.units.get_mut(id) {
                    e.reason_changed = false;
                }
            }
        }
    }

    /// Sets the clock the next cycles judge time-bound rules by (a
    /// preemption victim's minimum run time, the preemption cap): the
    /// controller's, in ms since the epoch. Units that could preempt once a
    /// victim has run long enough are looked at again when that time comes.
    pub fn set_now(&mut self, now_ms: i64) {
        let before = mem::replace(&mut self.now_ms, now_ms);
        // A reserving head whose time came: looked at again, so that its
        // message says it reserves even if nothing else changes in its queue.
        let heads: Vec<UnitId> = self
            .queues
            .entries
            .iter()
            .filter_map(|e| e.reservation.as_ref())
            .filter(|r| !r.active(before) && r.active(now_ms))
            .map(|r| r.key.id)
            .collect();
        for id in heads {
            if self.units.get(id).is_some_and(UnitEntry::is_waiting) {
                self.enqueue(id);
            }
        }
        let due: Vec<UnitId> = self
            .reclaim
            .preempt_later
            .iter()
            .filter(|(_, at)| **at <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.reclaim.preempt_later.remove(&id);
            if self.units.get(id).is_some_and(UnitEntry::is_waiting) {
                self.enqueue(id);
            }
        }
    }

    /// When a unit that waits for a preemption victim's minimum run time
    /// may preempt, the earliest (ms since the epoch): the controller runs
    /// a cycle then.
    pub fn next_preemption_due(&self) -> Option<i64> {
        self.reclaim.preempt_later.values().copied().min()
    }

    /// When the next queue head that does not fit starts to reserve (ms
    /// since the epoch), if one will: the controller runs a cycle then, for
    /// its message to say so.
    pub fn next_reservation_due(&self) -> Option<i64> {
        self.queues
            .entries
            .iter()
            .filter_map(|e| e.reservation.as_ref())
            .map(|r| r.from_ms)
            .filter(|from| *from > self.now_ms)
            .min()
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
            preemption: def.preemption,
            reserve: def.reserve,
            stopped: def.stopped,
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
        entry.beyond.clear();
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
}

pub(crate) mod membership;
mod room;
