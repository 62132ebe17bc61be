//! The pure decision core of the scheduler (architecture §4): given the queues,
//! units, quota tree, capacity and what is already held, it decides which
//! units to release and why the others wait. No I/O and no clock: the
//! controller feeds it changes and applies its decisions.
//!
//! The controller's calls, in short:
//! - build: [`Core::from_yaml`] (or [`Core::new`] with a [`Registry`]);
//! - keep in step: [`Core::upsert_queue`], [`Core::remove_queue`],
//!   [`Core::upsert_quota`], [`Core::remove_quota`], [`Core::set_capacity`],
//!   [`Core::set_namespace_quota`], [`Core::upsert_unit`], [`Core::remove_unit`],
//!   [`Core::hold`], [`Core::free`], [`Core::mark_started`];
//! - decide: [`Core::run_cycle`], then [`Core::unreserve`] for each decision
//!   whose write failed;
//! - reclaim: for each [`Reclaim`] of a cycle, re-suspend the victim's job,
//!   then report it freed with [`Core::remove_unit`] (or [`Core::free`]);
//!   if that write failed, [`Core::cancel_reclaim`]. After a restart, report
//!   held units with [`Core::hold_at`] and their `lastAllocateTime`;
//! - publish: [`Core::queue_waiting`] (positions), [`Core::queue_counts`],
//!   [`Core::reason`], [`Core::min_warnings`], [`Core::quota_figures`].

pub mod amounts;
pub mod config;
pub mod cycle;
pub mod engine;
pub mod framework;
pub mod ids;
pub mod model;
pub mod namespaces;
pub mod plugin;
pub mod plugins;
pub mod queues;
pub mod quota_tree;
pub mod reason;
pub mod reclaim;
pub mod registry;
pub(crate) mod reserve;
pub mod state;
pub mod synthetic;
pub mod units;
pub mod view;

#[cfg(test)]
mod tests;

pub use amounts::ResVec;
pub use config::{ConfigError, PluginEntry, SchedulerConfig};
pub use cycle::{CycleOutput, CycleStats, Decision};
pub use engine::{Core, CoreError};
pub use model::{CapacitySource, QueueCounts, QueueDef, QuotaDef, RootCapacity, UnitDef};
pub use plugin::{
    ExtensionPoint, Filter, MultiQueueSort, Plugin, QueueSort, QueueUnitMapping, Reserve, SortKey,
    UnitRef,
};
pub use quota_tree::{MinWarning, QuotaFigures};
pub use reason::{Blocker, Shortfall, WaitReason};
pub use reclaim::state::{Reclaim, ReclaimInFlight, ReclaimKind};
pub use registry::{PluginFactory, Registry};
pub use state::ClusterState;
pub use view::{QueueSummary, UnitStatus, WaitingUnit};
