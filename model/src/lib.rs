//! Koord-Queue's model without Kubernetes client types: resource amounts as
//! integers and the quantity text they come from, and the policies a queue
//! can have. The decision core (`koord-queue-core`) depends on this crate
//! only; `koord-queue-api` re-exports it next to the CRD types.

pub mod duration;
pub mod resources;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use duration::{parse_duration, parse_duration_with_unit};
pub use resources::{QuantityError, Resources, format_quantity, parse_quantity};

/// Name of Koordinator's root quota; its `max` is the cluster capacity.
pub const ROOT_QUOTA_NAME: &str = "koordinator-root-quota";

/// How a queue treats a unit that does not fit right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum QueuePolicy {
    /// Best effort: a unit that does not fit is skipped and the next one is tried.
    #[default]
    Priority,
    /// Strict order: the first unit that does not fit blocks the rest of the queue
    /// until something changes; nothing overtakes it.
    Block,
}

impl QueuePolicy {
    /// Parses the value of the `koord-queue/queue-policy` label (case-insensitive).
    pub fn from_label(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "priority" => Some(Self::Priority),
            "block" => Some(Self::Block),
            _ => None,
        }
    }
}
