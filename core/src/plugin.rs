//! The extension points of the scheduling cycle (architecture §4.2), as traits.
//!
//! A plugin is one object that implements any number of extension points and
//! says which through the `as_*` accessors of [`Plugin`]. The framework calls
//! them in the order the configuration lists the plugins.

use std::fmt;

use super::amounts::ResVec;
use super::ids::{NsId, QueueId, QuotaId};
use super::model::{CapacitySource, QueueDef, UnitDef};
use super::reason::WaitReason;
use super::state::ClusterState;

/// An order key: keys are compared lexicographically and the smallest is
/// served first. The core breaks ties by name (the queue's name, or the
/// unit's `namespace/name`), so a key never needs to contain a string.
///
/// Keys are computed once, when a queue or unit is added or changed, and the
/// core keeps each queue's units in a sorted set by them: nothing is re-sorted
/// during a cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SortKey(pub [i64; 3]);

/// A unit as filters and reserves see it.
#[derive(Clone, Copy, Debug)]
pub struct UnitRef<'a> {
    /// `namespace/name`.
    pub key: &'a str,
    /// The unit's namespace.
    pub namespace: NsId,
    /// The quota the unit is charged to, if any.
    pub quota: Option<QuotaId>,
    /// The queue it waits (or waited) in.
    pub queue: Option<QueueId>,
    /// Priority of the job.
    pub priority: i32,
    /// What it requests (filters) or holds (reserve and unreserve).
    pub request: &'a ResVec,
    /// Whether the controller reported the job's pods as created (their
    /// usage is then in the namespace ResourceQuota's `used`).
    pub started: bool,
}

/// Orders the queues of a cycle.
pub trait MultiQueueSort: Send + Sync {
    /// The order key of `queue`.
    fn queue_order(&self, queue: &QueueDef) -> SortKey;
}

/// Orders the units inside a queue.
pub trait QueueSort: Send + Sync {
    /// The order key of `unit`.
    fn unit_order(&self, unit: &UnitDef) -> SortKey;
}

/// Chooses a unit's queue.
pub trait QueueUnitMapping: Send + Sync {
    /// The name of the unit's queue, or `None` to let the next plugin decide
    /// (after the last one, the queue named in the unit's spec is used).
    fn map_unit<'a>(&'a self, unit: &'a UnitDef) -> Option<&'a str>;
}

/// Decides whether a unit may be released now.
///
/// Filters must be *monotone*, because the core relies on it to skip work:
/// reservations made during a cycle never turn a rejection into a pass, and
/// when a filter rejects with a limit ([`WaitReason::shortfall`]), the unit
/// passes that check exactly when [`ClusterState::headroom`] of the limit is
/// at least the amount it needs. A filter whose verdict depends on anything
/// else must reject with [`WaitReason::Plugin`], and whoever changes that
/// input must call [`Core::mark_all_dirty`](super::Core::mark_all_dirty).
pub trait Filter: Send + Sync {
    /// `Ok` if the unit may be released, otherwise why not.
    fn filter(&self, unit: &UnitRef<'_>, state: &ClusterState) -> Result<(), WaitReason>;
}

/// Accounts what released (or already running) units hold.
pub trait Reserve: Send + Sync {
    /// The unit now holds `amount`.
    fn reserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState);
    /// The unit no longer holds `amount` (finished, removed, or a release
    /// whose write failed).
    fn unreserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState);
    /// The unit's pods now exist (called once while it holds `amount`).
    fn started(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        let _ = (unit, amount, state);
    }
}

/// A configured plugin: a name and the extension points it implements.
pub trait Plugin: Send + Sync + fmt::Debug {
    /// The plugin's name, as written in the configuration.
    fn name(&self) -> &str;

    /// Sets up the plugin's part of the cluster state once, when the core is built.
    fn init(&self, state: &mut ClusterState) {
        let _ = state;
    }

    /// The plugin as a [`MultiQueueSort`], if it is one.
    fn as_multi_queue_sort(&self) -> Option<&dyn MultiQueueSort> {
        None
    }

    /// The plugin as a [`QueueSort`], if it is one.
    fn as_queue_sort(&self) -> Option<&dyn QueueSort> {
        None
    }

    /// The plugin as a [`QueueUnitMapping`], if it is one.
    fn as_queue_unit_mapping(&self) -> Option<&dyn QueueUnitMapping> {
        None
    }

    /// The plugin as a [`Filter`], if it is one.
    fn as_filter(&self) -> Option<&dyn Filter> {
        None
    }

    /// The plugin as a [`Reserve`], if it is one.
    fn as_reserve(&self) -> Option<&dyn Reserve> {
        None
    }

    /// Capability: this plugin checks the root capacity, from this source
    /// (with [`CapacitySource::Auto`] the controller reports it). The core
    /// asks the plugins instead of knowing one by name.
    fn capacity_source(&self) -> Option<&CapacitySource> {
        None
    }

    /// Capability: this plugin's [`Filter`] checks quota limits — the limits
    /// reclaim makes room under. Before reclaiming for a unit the core asks
    /// only the other filters whether it would fit then.
    fn filters_quota_limits(&self) -> bool {
        false
    }
}

/// An extension point, for configuration errors and the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtensionPoint {
    /// [`MultiQueueSort`].
    MultiQueueSort,
    /// [`QueueSort`].
    QueueSort,
    /// [`QueueUnitMapping`].
    QueueUnitMapping,
    /// [`Filter`].
    Filter,
    /// [`Reserve`].
    Reserve,
}

impl ExtensionPoint {
    /// Which extension points `plugin` implements.
    pub fn of(plugin: &dyn Plugin) -> Vec<Self> {
        let mut out = Vec::new();
        if plugin.as_multi_queue_sort().is_some() {
            out.push(Self::MultiQueueSort);
        }
        if plugin.as_queue_sort().is_some() {
            out.push(Self::QueueSort);
        }
        if plugin.as_queue_unit_mapping().is_some() {
            out.push(Self::QueueUnitMapping);
        }
        if plugin.as_filter().is_some() {
            out.push(Self::Filter);
        }
        if plugin.as_reserve().is_some() {
            out.push(Self::Reserve);
        }
        out
    }
}

impl fmt::Display for ExtensionPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MultiQueueSort => "MultiQueueSort",
            Self::QueueSort => "QueueSort",
            Self::QueueUnitMapping => "QueueUnitMapping",
            Self::Filter => "Filter",
            Self::Reserve => "Reserve",
        })
    }
}
