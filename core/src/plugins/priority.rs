//! `Priority`: serves queues by `spec.priority` (higher first, then by name)
//! and units by priority (higher first), then creation time (older first),
//! then `namespace/name`.

use serde_yaml::Value;

use super::no_args;
use crate::model::{QueueDef, UnitDef};
use crate::plugin::{MultiQueueSort, Plugin, QueueSort, SortKey};

/// Registered name.
pub const NAME: &str = "Priority";

/// The `Priority` plugin.
#[derive(Clone, Copy, Debug, Default)]
pub struct PriorityPlugin;

impl PriorityPlugin {
    /// Builds the plugin; it takes no arguments.
    pub fn from_args(args: Option<&Value>) -> Result<Self, String> {
        no_args(args).map(|()| Self)
    }
}

impl Plugin for PriorityPlugin {
    fn name(&self) -> &str {
        NAME
    }
    fn as_multi_queue_sort(&self) -> Option<&dyn MultiQueueSort> {
        Some(self)
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSort> {
        Some(self)
    }
}

impl MultiQueueSort for PriorityPlugin {
    fn queue_order(&self, queue: &QueueDef) -> SortKey {
        // Negated so that the higher priority sorts first; the core breaks
        // ties by queue name.
        SortKey([-i64::from(queue.priority), 0, 0])
    }
}

impl QueueSort for PriorityPlugin {
    fn unit_order(&self, unit: &UnitDef) -> SortKey {
        // The core breaks remaining ties by `namespace/name`.
        SortKey([-i64::from(unit.priority), unit.created_ms, 0])
    }
}
