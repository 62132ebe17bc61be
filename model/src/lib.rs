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

/// Which running units of its own quota a waiting unit may preempt when
/// that makes it fit (named as Kueue names its `withinClusterQueue`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PreemptionPolicy {
    /// None: a unit waits for its quota to free up (the default).
    #[default]
    Never,
    /// Units of lower priority.
    LowerPriority,
    /// Units of lower priority, and units of equal priority created after
    /// the waiting unit.
    LowerOrNewerEqualPriority,
}

/// How a queue preempts inside its quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Preemption {
    /// Which units may be preempted.
    pub policy: PreemptionPolicy,
    /// A unit that has held quota for less than this is not preempted: what
    /// it did so far would be lost for little.
    pub min_run_ms: i64,
    /// At most this many preemptions in the quota per minute (`None`: no cap).
    pub max_per_minute: Option<u32>,
    /// Which running units of *sibling* quotas a unit stopped by an
    /// ancestor's max (or the capacity) may preempt: only units of quotas
    /// that borrow beyond their min, never taking one below it (Kueue's
    /// `reclaimWithinCohort` / `borrowWithinCohort`). `Never` by default.
    pub within_parent: PreemptionPolicy,
    /// A unit is preempted at most this many times in its life (`None`:
    /// [`Preemption::DEFAULT_MAX_PER_UNIT`]).
    pub max_per_unit: Option<u32>,
}

impl Preemption {
    /// Preemptions of one unit in its life, unless the queue says otherwise.
    pub const DEFAULT_MAX_PER_UNIT: u32 = 2;

    /// The most times one unit may be preempted.
    pub fn max_per_unit(&self) -> u32 {
        self.max_per_unit.unwrap_or(Self::DEFAULT_MAX_PER_UNIT)
    }
}

/// When the head of a `Priority` queue that does not fit stops smaller units
/// from passing it (it *reserves*): after it has waited `after_ms`, or at
/// once when its priority is at least `above_priority`. Both unset: never.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reserve {
    /// Wait after which the head reserves (ms since its creation).
    pub after_ms: Option<i64>,
    /// Priority from which the head reserves at once.
    pub above_priority: Option<i32>,
}

impl Reserve {
    /// From when a unit created at `created_ms` with `priority` reserves, if
    /// it ever does.
    pub fn from_ms(&self, created_ms: i64, priority: i32) -> Option<i64> {
        let at_once = self
            .above_priority
            .is_some_and(|p| priority >= p)
            .then_some(i64::MIN);
        let after = self.after_ms.map(|a| created_ms.saturating_add(a));
        match (at_once, after) {
            (Some(a), _) => Some(a),
            (None, b) => b,
        }
    }
}
