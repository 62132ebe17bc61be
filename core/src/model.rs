//! What the controller tells the core about the cluster: queues, units,
//! quotas and the root capacity. These are plain values built from the API
//! objects; the core interns their names and keeps its own compact copy.

use std::collections::BTreeMap;

use koord_queue_model::{Preemption, QueuePolicy, Reserve, Resources};

/// A queue (a `Queue` object in the system namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueDef {
    /// Name of the queue.
    pub name: String,
    /// Serving priority (`spec.priority`): higher queues are served first.
    pub priority: i32,
    /// What happens to a unit that does not fit.
    pub policy: QueuePolicy,
    /// Whether guaranteed units of this queue may reclaim quota borrowed by
    /// others (architecture §4.4). When off, they wait until the borrowed quota
    /// is freed by itself.
    pub reclaim: bool,
    /// Whether a waiting unit may preempt running units of its own quota
    /// (architecture §4.4 rule 4); off by default.
    pub preemption: Preemption,
    /// Whether the head of a `Priority` queue that does not fit keeps
    /// smaller units from passing it (architecture §4.3); off by default.
    pub reserve: Reserve,
    /// Stopped (the Queue's `spec.stopPolicy` is `Hold` or `HoldAndDrain`):
    /// the queue releases nothing and its waiting units wait with the
    /// reason `QueueStopped`. Sending its running units back (drain) is the
    /// controller's; the core only stops releasing.
    pub stopped: bool,
}

impl QueueDef {
    /// A queue with priority 0, the `Priority` policy and reclaim enabled.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            priority: 0,
            policy: QueuePolicy::Priority,
            reclaim: true,
            preemption: Preemption::default(),
            reserve: Reserve::default(),
            stopped: false,
        }
    }

    /// The same queue with serving priority `priority`.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The same queue with policy `policy`.
    pub fn with_policy(mut self, policy: QueuePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The same queue preempting as `preemption` says.
    pub fn with_preemption(mut self, preemption: Preemption) -> Self {
        self.preemption = preemption;
        self
    }

    /// The same queue reserving for its head as `reserve` says.
    pub fn with_reserve(mut self, reserve: Reserve) -> Self {
        self.reserve = reserve;
        self
    }

    /// The same queue stopped (releasing nothing) or serving.
    pub fn with_stopped(mut self, stopped: bool) -> Self {
        self.stopped = stopped;
        self
    }

    /// The same queue with reclaim switched on or off.
    pub fn with_reclaim(mut self, reclaim: bool) -> Self {
        self.reclaim = reclaim;
        self
    }
}

/// A queue unit: one job's need and where it waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitDef {
    /// Namespace of the unit (the job's namespace).
    pub namespace: String,
    /// Name of the unit.
    pub name: String,
    /// The queue named in the unit's spec; used when no mapping plugin
    /// chooses one. Empty means none.
    pub queue: String,
    /// Priority of the job (higher first within a queue).
    pub priority: i32,
    /// Creation time of the unit, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Total resources of the job.
    pub request: Resources,
    /// The leaf quota the job is charged to, if any.
    pub quota: Option<String>,
    /// Labels of the unit, for mapping and sorting plugins.
    pub labels: BTreeMap<String, String>,
    /// The longest the job runs once released (its `activeDeadlineSeconds`:
    /// its controller ends it then), in ms; `None` when unbounded. A bound
    /// lets it be backfilled behind a reserving head (`reserve.rs`).
    pub max_run_ms: Option<i64>,
}

impl UnitDef {
    /// A unit of priority 0 created at time 0 in no queue and no quota.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            queue: String::new(),
            priority: 0,
            created_ms: 0,
            request: Resources::new(),
            quota: None,
            labels: BTreeMap::new(),
            max_run_ms: None,
        }
    }

    /// The same unit ending at most `max_run_ms` after its release.
    pub fn running_at_most(mut self, max_run_ms: i64) -> Self {
        self.max_run_ms = Some(max_run_ms);
        self
    }

    /// The unit's key, `namespace/name`, by which the core knows it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The same unit charged to quota `quota`.
    pub fn with_quota(mut self, quota: impl Into<String>) -> Self {
        self.quota = Some(quota.into());
        self
    }

    /// The same unit naming queue `queue` in its spec.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The same unit with priority `priority`.
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The same unit created at `created_ms`.
    pub fn created_at(mut self, created_ms: i64) -> Self {
        self.created_ms = created_ms;
        self
    }

    /// The same unit requesting `amount` of `resource` (cpu in millicores).
    pub fn requesting(mut self, resource: &str, amount: i64) -> Self {
        self.request.set(resource, amount);
        self
    }
}

/// A node of the quota tree (an `ElasticQuota`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaDef {
    /// Name of the quota.
    pub name: String,
    /// Parent quota; `None` (or the root quota's name) means the root.
    pub parent: Option<String>,
    /// Guaranteed resources (absent resources: 0).
    pub min: Resources,
    /// Ceiling of the subtree's usage; a resource absent here is unlimited at
    /// this level.
    pub max: Resources,
    /// Whether this is an inner node: no job may be charged to it.
    pub is_parent: bool,
    /// On an inner node: its children share what lies above their mins by
    /// weight (lowest weighted dominant share first; architecture §4.4,
    /// fair sharing). Off, the first queue in the cycle's order takes it.
    pub fair_sharing: bool,
    /// Weight of this quota among its siblings under a fair-sharing parent,
    /// in thousandths (1000 = weight 1).
    pub weight_milli: i64,
}

/// The weight of a quota that names none.
pub const DEFAULT_WEIGHT_MILLI: i64 = 1000;

impl QuotaDef {
    /// A top-level leaf quota with no min and no max.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            parent: None,
            min: Resources::new(),
            max: Resources::new(),
            is_parent: false,
            fair_sharing: false,
            weight_milli: DEFAULT_WEIGHT_MILLI,
        }
    }

    /// The same quota, an inner node whose children share fairly.
    pub fn fair(mut self) -> Self {
        self.is_parent = true;
        self.fair_sharing = true;
        self
    }

    /// The same quota with weight `weight_milli` / 1000 among its siblings.
    pub fn weight(mut self, weight_milli: i64) -> Self {
        self.weight_milli = weight_milli;
        self
    }

    /// The same quota under `parent`.
    pub fn under(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// The same quota marked as an inner node.
    pub fn parent_node(mut self) -> Self {
        self.is_parent = true;
        self
    }

    /// The same quota with `min[resource] = amount`.
    pub fn min(mut self, resource: &str, amount: i64) -> Self {
        self.min.set(resource, amount);
        self
    }

    /// The same quota with `max[resource] = amount`.
    pub fn max(mut self, resource: &str, amount: i64) -> Self {
        self.max.set(resource, amount);
        self
    }
}

/// The cluster's capacity: the ceiling of the root of the quota tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCapacity {
    /// No ceiling.
    Unlimited,
    /// At most these resources in use in total; a resource not named is not
    /// limited by the capacity.
    Limited(Resources),
}

/// Where the root capacity comes from, as configured in the `ElasticQuota`
/// plugin's `rootCapacity` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapacitySource {
    /// The controller decides: the root quota's `max` if the root quota
    /// exists, otherwise the allocatable of Ready nodes. Until it calls
    /// [`Core::set_capacity`](super::Core::set_capacity) nothing is released.
    Auto,
    /// Configured as unlimited.
    Unlimited,
    /// Configured as a fixed value.
    Fixed(Resources),
}

/// Number of units of a queue by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Units waiting.
    pub pending: usize,
    /// Units holding quota.
    pub admitted: usize,
}
