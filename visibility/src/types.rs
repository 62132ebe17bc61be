//! What the visibility API answers, as Kubernetes objects: a waiting unit
//! with its place and reason (`PendingUnit`), and a quota's figures
//! (`QuotaUsage`), each in a list object with `apiVersion`, `kind` and list
//! metadata, so that `kubectl get --raw`, client libraries and `kubectl get`
//! (through discovery) read them as they read any resource.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "visibility.koord-queue.io";
/// Its one version.
pub const VERSION: &str = "v1alpha1";
/// `group/version`.
pub const API_VERSION: &str = "visibility.koord-queue.io/v1alpha1";

/// Object metadata of an answer's item: the object it describes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemMeta {
    /// The QueueUnit's (or quota's) name.
    pub name: String,
    /// The QueueUnit's namespace (quotas: the system namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// When the QueueUnit was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
}

/// List metadata (`metadata` of a list): how many items follow the page,
/// and the token that asks for the next one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// Items after this page (absent on the last page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<u64>,
    /// Give it as `?continue=` for the next page (absent on the last page).
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_: Option<String>,
}

/// The job a unit queues.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobOf {
    /// `group/version` of the job.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name (in the unit's namespace).
    pub name: String,
}

/// Why a unit waits: one of a fixed list of types (`WaitType`), a sentence,
/// and the figures that make it actionable where there are any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitReasonView {
    /// The kind of wait (see [`WaitType`]).
    #[serde(rename = "type")]
    pub kind: WaitType,
    /// What a person reads: the same text as the unit's `status.message`.
    pub message: String,
    /// The quota (or namespace, for a ResourceQuota) whose limit stops it:
    /// the unit's own or an ancestor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// The resource that is short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// By how much (a quantity: `2`, `512Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_by: Option<String>,
    /// The unit it waits behind (`namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<String>,
    /// When the wait ends by itself (a backoff), RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// The fixed list of reasons a unit waits. The unit's status condition,
/// this API, the job's Events and docs/troubleshooting.md use the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum WaitType {
    /// A quota on its path (its own or an ancestor) would exceed its max.
    QuotaExceeded,
    /// The cluster's capacity (the root) would be exceeded, or is not known yet.
    ClusterCapacity,
    /// The namespace's ResourceQuota would be exceeded.
    NamespaceQuota,
    /// A `Block` queue stops at an earlier unit that does not fit.
    BehindHead,
    /// The reserving head of its queue keeps the room it waits for.
    BehindReservingHead,
    /// It is the head of its queue and reserves the room it waits for.
    Reserving,
    /// Guaranteed: units that borrow its quota's share are being reclaimed.
    Reclaiming,
    /// Lower-priority units of its quota are being preempted for it.
    Preempting,
    /// It would borrow while guaranteed units wait for reclaimed resources.
    BorrowingPaused,
    /// Guaranteed, but its queue does not reclaim what others borrow.
    ReclaimOff,
    /// Its quota is reserved; admission checks have not all passed.
    AdmissionChecks,
    /// Sent back (preempted, reclaimed, timed out, failed to start); it
    /// queues again at `until`.
    Backoff,
    /// The scheduler has not adopted it yet (its job not seen, or no cycle
    /// has looked at it).
    NotYetSeen,
    /// Its queue or quota is missing or misconfigured.
    Misconfigured,
    /// Its queue is stopped (`spec.stopPolicy`): it releases nothing until
    /// it is resumed.
    QueueStopped,
    /// A scheduler plugin's own reason.
    Plugin,
}

impl WaitType {
    /// The name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QuotaExceeded => "QuotaExceeded",
            Self::ClusterCapacity => "ClusterCapacity",
            Self::NamespaceQuota => "NamespaceQuota",
            Self::BehindHead => "BehindHead",
            Self::BehindReservingHead => "BehindReservingHead",
            Self::Reserving => "Reserving",
            Self::Reclaiming => "Reclaiming",
            Self::Preempting => "Preempting",
            Self::BorrowingPaused => "BorrowingPaused",
            Self::ReclaimOff => "ReclaimOff",
            Self::AdmissionChecks => "AdmissionChecks",
            Self::Backoff => "Backoff",
            Self::NotYetSeen => "NotYetSeen",
            Self::Misconfigured => "Misconfigured",
            Self::QueueStopped => "QueueStopped",
            Self::Plugin => "Plugin",
        }
    }

    /// The type named `name` (as [`WaitType::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Every type, in the documented order.
    pub const ALL: [WaitType; 16] = [
        Self::QuotaExceeded,
        Self::ClusterCapacity,
        Self::NamespaceQuota,
        Self::BehindHead,
        Self::BehindReservingHead,
        Self::Reserving,
        Self::Reclaiming,
        Self::Preempting,
        Self::BorrowingPaused,
        Self::ReclaimOff,
        Self::AdmissionChecks,
        Self::Backoff,
        Self::NotYetSeen,
        Self::Misconfigured,
        Self::QueueStopped,
        Self::Plugin,
    ];
}

impl std::fmt::Display for WaitType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit that waits: where, why, since when, asking for what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingUnit {
    /// The QueueUnit.
    pub metadata: ItemMeta,
    /// The job it queues, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobOf>,
    /// The Queue it waits in (its quota's queue, else the one it names).
    pub queue: String,
    /// The ElasticQuota it is charged to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// 1-based place in its queue, in the order the scheduler serves it;
    /// absent while it is not in line (backoff, admission checks, not yet seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// Its priority.
    pub priority: i32,
    /// What it asks for in all (quantities by resource).
    pub requests: BTreeMap<String, String>,
    /// Why it waits.
    pub reason: WaitReasonView,
    /// Since when it waits, RFC 3339: its creation. A unit sent back keeps
    /// its place in its queue, so this time too (its backoff's end is its
    /// reason's `until`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<String>,
    /// When the scheduler expects to release it, RFC 3339: a forward
    /// simulation of its state — the running units ending at their run
    /// bound or their queue's learned runtime, the queues served in their
    /// order; jobs not yet submitted are not foreseen. Absent: not estimated
    /// yet, out of line, or no estimate within the horizon (a runtime ahead
    /// of it is unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<String>,
}

/// A page of waiting units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingUnitList {
    /// `visibility.koord-queue.io/v1alpha1`.
    pub api_version: String,
    /// `PendingUnitList`.
    pub kind: String,
    /// How many follow.
    pub metadata: ListMeta,
    /// The units, in serving order (a namespace's: by queue, then position).
    pub items: Vec<PendingUnit>,
}

/// What one ElasticQuota holds, guarantees and lends, as the scheduler
/// counts it now (quantities by resource).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUsage {
    /// The quota (`namespace` is the system namespace).
    pub metadata: ItemMeta,
    /// Its parent quota (absent under the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Whether it is an inner node of the tree.
    pub is_parent: bool,
    /// Its guaranteed amount as defined.
    pub min: BTreeMap<String, String>,
    /// Its guaranteed amount after scaling when its siblings' mins exceed
    /// the parent's (what is actually guaranteed).
    pub effective_min: BTreeMap<String, String>,
    /// Its limit (resources it names).
    pub max: BTreeMap<String, String>,
    /// Held by units of its subtree.
    pub used: BTreeMap<String, String>,
    /// Used beyond its effective min: what it borrows from its siblings.
    pub borrowed: BTreeMap<String, String>,
    /// Effective min not used: what its siblings may borrow from it.
    pub lent: BTreeMap<String, String>,
    /// Its weight under a fair-sharing parent (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_weight: Option<String>,
    /// Units waiting in its queue.
    pub pending: u64,
    /// Units holding quota in its queue.
    pub admitted: u64,
}

/// The quotas, parents before their children.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUsageList {
    /// `visibility.koord-queue.io/v1alpha1`.
    pub api_version: String,
    /// `QuotaUsageList`.
    pub kind: String,
    /// List metadata.
    pub metadata: ListMeta,
    /// The quotas.
    pub items: Vec<QuotaUsage>,
}

impl PendingUnitList {
    /// A list object of `items`, `remaining` more after them.
    pub fn new(items: Vec<PendingUnit>, remaining: u64) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: "PendingUnitList".into(),
            metadata: ListMeta {
                remaining_item_count: (remaining > 0).then_some(remaining),
                continue_: None,
            },
            items,
        }
    }
}

impl QuotaUsageList {
    /// A list object of `items`.
    pub fn new(items: Vec<QuotaUsage>) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: "QuotaUsageList".into(),
            metadata: ListMeta::default(),
            items,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn wait_types_serialize_as_their_names() {
        for t in WaitType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }
}
