//! `DefaultQueue`: maps every unit to one queue (`default` unless the `queue`
//! argument names another), for clusters that do not use elastic quotas.
//! Listed after `ElasticQuota`, it catches the units that name no quota.

use serde_yaml::Value;

use super::{args_map, describe};
use crate::model::UnitDef;
use crate::plugin::{Plugin, QueueUnitMapping};

/// Registered name.
pub const NAME: &str = "DefaultQueue";

/// The `DefaultQueue` plugin.
#[derive(Clone, Debug)]
pub struct DefaultQueuePlugin {
    queue: String,
}

impl DefaultQueuePlugin {
    /// Builds the plugin from `{ queue: NAME }` (optional).
    pub fn from_args(args: Option<&Value>) -> Result<Self, String> {
        let mut queue = "default".to_string();
        for (key, value) in args_map(args, &["queue"])? {
            if key == "queue" {
                queue = value
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        format!("queue must be a non-empty string, got {}", describe(value))
                    })?
                    .to_string();
            }
        }
        Ok(Self { queue })
    }

    /// The queue every unit goes to.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}

impl Plugin for DefaultQueuePlugin {
    fn name(&self) -> &str {
        NAME
    }
    fn as_queue_unit_mapping(&self) -> Option<&dyn QueueUnitMapping> {
        Some(self)
    }
}

impl QueueUnitMapping for DefaultQueuePlugin {
    fn map_unit<'a>(&'a self, _unit: &'a UnitDef) -> Option<&'a str> {
        Some(&self.queue)
    }
}
