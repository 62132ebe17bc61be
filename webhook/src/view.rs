//! What the webhook knows about the cluster when it decides: namespaces'
//! default queues, ElasticQuotas, PriorityClasses. The live implementation
//! reads informer caches ([`crate::caches`]); tests use plain maps.

use koord_queue_api::jobs::pod_defaults::PodDefaults;

/// A quota as the mapping needs it: the one of its name that takes
/// precedence ([`koord_queue_api::elastic_quota::precedence`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaInfo {
    /// Name of the ElasticQuota.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Whether it is an inner node of the tree (no job may map to it).
    pub is_parent: bool,
    /// The namespaces whose jobs may use it: its own and those its
    /// `quota.scheduling.koordinator.sh/namespaces` annotation lists.
    pub serves: Vec<String>,
    /// The PriorityClasses its jobs may name (its
    /// `koord-queue/priority-classes` annotation); `None`: any allowed.
    pub priority_classes: Option<Vec<String>>,
}

impl QuotaInfo {
    /// Whether jobs of namespace `ns` may use this quota.
    pub fn serves(&self, ns: &str) -> bool {
        self.namespace == ns || self.serves.iter().any(|n| n == ns)
    }
}

/// Read-only view of the cluster objects the webhook's decisions depend on.
pub trait ClusterView: Send + Sync {
    /// Whether namespace `ns` is known (a brand-new one may not be cached yet).
    fn knows_namespace(&self, ns: &str) -> bool;
    /// The `koord-queue/default-queue` annotation of namespace `ns`, if any.
    fn namespace_default_queue(&self, ns: &str) -> Option<String>;
    /// Whether namespace `ns` queues its pods (label
    /// `koord-queue/queue-pods=true`).
    fn namespace_queues_pods(&self, _ns: &str) -> bool {
        false
    }
    /// Whether namespace `ns` lets pods run unqueued (label
    /// `koord-queue/unqueued-pods=allow`).
    fn namespace_allows_unqueued_pods(&self, _ns: &str) -> bool {
        false
    }
    /// The PriorityClasses the jobs of namespace `ns` may name (its
    /// `koord-queue/priority-classes` annotation); `None`: any allowed.
    fn namespace_priority_classes(&self, _ns: &str) -> Option<Vec<String>> {
        None
    }
    /// The ElasticQuota named `name`.
    fn quota(&self, name: &str) -> Option<QuotaInfo>;
    /// Names of the quotas jobs may name (leaves), sorted.
    fn leaf_quotas(&self) -> Vec<String>;
    /// Value of PriorityClass `name`.
    fn priority_class_value(&self, name: &str) -> Option<i32>;
    /// The cluster's global default PriorityClass (name, value), if any.
    fn global_default_priority(&self) -> Option<(String, i32)>;
    /// What the API server adds to the pods of namespace `ns` (LimitRange
    /// defaults, RuntimeClass overheads). A view that knows neither sees a
    /// cluster without LimitRanges or RuntimeClasses.
    fn pod_defaults(&self, _ns: &str) -> PodDefaults {
        PodDefaults::default()
    }
}
