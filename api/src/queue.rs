//! `Queue`: a line of QueueUnits served under one policy. Queues live in the
//! system namespace `koord-queue`; the scheduler keeps one per ElasticQuota.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use koord_queue_model::{Preemption, PreemptionPolicy, QueuePolicy, Reserve};

/// How the queue is served.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "Queue",
    doc = "Queue is a line of QueueUnits served under one policy. Only Queues in the `koord-queue` namespace are served. The scheduler keeps one Queue per ElasticQuota, named after the quota; you may create others (for example the `default` queue of the DefaultQueue plugin).",
    namespaced,
    status = "QueueStatus",
    shortname = "kq",
    category = "koord-queue",
    printcolumn = r#"{"name":"Policy","type":"string","jsonPath":".spec.queuePolicy"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"Admitted","type":"integer","jsonPath":".status.admitted"}"#,
    printcolumn = r#"{"name":"Stopped","type":"string","jsonPath":".spec.stopPolicy"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// What happens to a unit that does not fit: `Priority` (default) skips it and
    /// tries the next; `Block` stops the queue at it until something changes.
    #[serde(default)]
    pub queue_policy: QueuePolicy,
    /// Order in which queues are served in a scheduling cycle: higher first,
    /// ties broken by name. Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Checks a unit of this queue must pass before its job is released. A unit
    /// matched by a check's selector first reserves quota (phase `Reserved`) and
    /// is released once every matching check reports `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckRef>,
    /// Whether a unit of this queue that is within its quota's guaranteed
    /// minimum may reclaim quota that other quotas borrow (their most
    /// recently released, lowest-priority jobs are suspended again).
    /// Defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<bool>,
    /// Strict dequeue: a released job counts as started only once every one
    /// of its pods is bound (`PodScheduled=True`); a pod still unschedulable
    /// after the timeout sends the job back (re-suspended, quota freed,
    /// backoff). Unset: the scheduler's global setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_dequeue: Option<StrictDequeue>,
    /// A released job whose pods are not running within this many seconds is
    /// suspended again, frees its quota and waits in backoff. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_timeout_seconds: Option<i64>,
    /// Whether a unit that does not fit its own quota's max may preempt
    /// running units of that quota (they go to TimeoutBackoff with the
    /// reason `Preempted`). Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<QueuePreemption>,
    /// `Priority` queues: when the first unit that does not fit stops the
    /// smaller units behind it that need what it is short of (so that a
    /// large job is not starved by small ones). Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_head: Option<ReserveHead>,
    /// Stops the queue (for maintenance, say): `Hold` releases nothing —
    /// its waiting units wait with the reason `QueueStopped`, jobs already
    /// released run on; `HoldAndDrain` also sends back the units holding
    /// quota (their jobs are suspended again, their quota freed, and they
    /// wait in the queue). `None` or unset: the queue serves. Kubectl:
    /// `kubectl koord-queue stop <queue> [--drain]`, `resume <queue>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<StopPolicy>,
}

/// Stops the queue: `Hold` releases nothing (its waiting units wait with the
/// reason `QueueStopped`; released jobs run on), `HoldAndDrain` also sends
/// back the units holding quota (jobs suspended again, quota freed; they wait
/// in the queue). `None` or unset: the queue serves. As Kueue's ClusterQueue
/// `stopPolicy`; `kubectl koord-queue stop <queue> [--drain]` and `resume`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StopPolicy {
    /// The queue serves.
    #[default]
    None,
    /// The queue releases nothing; released jobs run on.
    Hold,
    /// The queue releases nothing and sends back what it released.
    HoldAndDrain,
}

impl StopPolicy {
    /// The name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Hold => "Hold",
            Self::HoldAndDrain => "HoldAndDrain",
        }
    }

    /// Whether the queue releases nothing.
    pub fn stops(self) -> bool {
        self != Self::None
    }

    /// Whether the units holding quota are sent back.
    pub fn drains(self) -> bool {
        self == Self::HoldAndDrain
    }
}

/// When the head of a `Priority` queue reserves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReserveHead {
    /// After it has waited this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seconds: Option<i64>,
    /// At once when its priority is at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_priority: Option<i32>,
}

impl ReserveHead {
    /// The core's settings.
    pub fn to_model(&self) -> Reserve {
        Reserve {
            after_ms: self.after_seconds.map(|s| s.max(0).saturating_mul(1000)),
            above_priority: self.above_priority,
        }
    }
}

/// Preemption inside the queue's quota.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePreemption {
    /// Which running units of the quota may be preempted: `Never` (the
    /// default), `LowerPriority`, or `LowerOrNewerEqualPriority` (lower
    /// priority, or equal priority and created after the waiting unit).
    /// The fewest units that make it fit are taken, lowest priority and most
    /// recently released first, and none if even all would not.
    #[serde(default)]
    pub within_quota: PreemptionPolicy,
    /// A unit that has held quota for less than this many seconds is not
    /// preempted (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_run_seconds: Option<i64>,
    /// At most this many preemptions in the quota per minute (unset: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_minute: Option<u32>,
    /// Preemption across siblings: a unit stopped by an ancestor quota's max
    /// (or the cluster's capacity) may preempt running units of *other*
    /// quotas under that ancestor that borrow beyond their min — `Never`
    /// (the default), `LowerPriority`, or `LowerOrNewerEqualPriority`. The
    /// fewest units that make it fit, never one that would take its quota
    /// below its min, with the same guards as inside the quota.
    #[serde(default, skip_serializing_if = "is_never")]
    pub within_parent: PreemptionPolicy,
    /// A unit is preempted at most this many times in its life (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_unit: Option<u32>,
}

fn is_never(p: &PreemptionPolicy) -> bool {
    *p == PreemptionPolicy::Never
}

impl QueuePreemption {
    /// Default minimum run time of a preemption victim.
    pub const DEFAULT_MIN_RUN_SECONDS: i64 = 60;

    /// The core's settings of this preemption policy.
    pub fn to_model(&self) -> Preemption {
        Preemption {
            policy: self.within_quota,
            min_run_ms: self
                .min_run_seconds
                .unwrap_or(Self::DEFAULT_MIN_RUN_SECONDS)
                .max(0)
                .saturating_mul(1000),
            max_per_minute: self.max_per_minute,
            within_parent: self.within_parent,
            max_per_unit: self.max_per_unit,
        }
    }
}

/// Strict dequeue settings of a queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StrictDequeue {
    /// Whether strict dequeue is on for this queue.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How long every pod has to be bound after the release (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
}

fn default_true() -> bool {
    true
}

impl QueueSpec {
    /// The effective serving priority (`spec.priority`, default 0).
    pub fn effective_priority(&self) -> i32 {
        self.priority.unwrap_or(0)
    }

    /// The effective stop policy (`spec.stopPolicy`, default `None`).
    pub fn effective_stop_policy(&self) -> StopPolicy {
        self.stop_policy.unwrap_or_default()
    }
}

/// A named admission check and the units it applies to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckRef {
    /// Name of the check, as written into each unit's `status.admissionChecks`
    /// and used by the controller that runs the check.
    pub name: String,
    /// Units (by their labels) the check applies to; unset matches every unit
    /// of the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// What the scheduler observed about the queue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Waiting units in serving order, under the key `active`; bounded to the
    /// first entries of the line and written only when it changes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queue_item_details: BTreeMap<String, Vec<QueueItemDetail>>,
    /// Number of units waiting in the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i64>,
    /// Number of units of the queue currently holding quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<i64>,
    /// Standard conditions, e.g. a warning when the children's guaranteed minimum
    /// exceeds the parent's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One waiting unit in `status.queueItemDetails`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueItemDetail {
    /// Name of the QueueUnit.
    pub name: String,
    /// Namespace of the QueueUnit (the job's namespace).
    pub namespace: String,
    /// Priority of the unit.
    pub priority: i32,
    /// 1-based place in the queue.
    pub position: i64,
}
