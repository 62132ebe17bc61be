//! What the controller keeps of the cluster around the units: ElasticQuotas, Queues, nodes, namespaces' ResourceQuotas.

use koord_queue_api::ResourceListExt as _;
use kube::ResourceExt as _;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use koord_queue_api::{ElasticQuota, Queue, QueuePolicy, Resources, keys};

/// What the controller knows of an ElasticQuota.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaRecord {
    /// Name.
    pub name: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Parent name (root quota name when unlabeled).
    pub parent: String,
    /// Inner node.
    pub is_parent: bool,
    /// Its children share fairly.
    pub fair_sharing: bool,
    /// Its fair-sharing weight, in thousandths.
    pub weight_milli: i64,
    /// min.
    pub min: Resources,
    /// max.
    pub max: Resources,
    /// Policy of its queue.
    pub policy: QueuePolicy,
    /// A min/max that could not be read.
    pub invalid: Option<String>,
    /// Order among quotas of the same name
    /// ([`koord_queue_api::elastic_quota::precedence_key`]).
    pub precedence: (i64, String),
}

impl QuotaRecord {
    /// The record of `quota`.
    pub fn from_quota(quota: &ElasticQuota) -> Self {
        let parse = |list: &Option<koord_queue_api::queue_unit::ResourceList>| {
            list.as_ref()
                .map(Resources::from_list)
                .transpose()
                .map(Option::unwrap_or_default)
        };
        let (min, max, mut invalid) = match (parse(&quota.spec.min), parse(&quota.spec.max)) {
            (Ok(min), Ok(max)) => (min, max, None),
            (Err(e), _) | (_, Err(e)) => (Resources::new(), Resources::new(), Some(e.to_string())),
        };
        // A weight that cannot be read makes the quota invalid like a bad
        // min would: guessing a weight would share someone else's capacity.
        let weight_milli = quota.fair_share_weight_milli().unwrap_or_else(|e| {
            invalid.get_or_insert(e);
            1000
        });
        Self {
            name: quota.name_any(),
            namespace: quota.namespace().unwrap_or_default(),
            parent: quota.parent_name().to_string(),
            is_parent: quota.is_parent(),
            fair_sharing: quota.fair_sharing(),
            weight_milli,
            min,
            max,
            policy: quota
                .labels()
                .get(keys::QUEUE_POLICY_LABEL)
                .and_then(|v| QueuePolicy::from_label(v))
                .unwrap_or_default(),
            invalid,
            precedence: koord_queue_api::elastic_quota::precedence_key(&quota.metadata),
        }
    }
}

/// What the controller knows of a Queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueRecord {
    /// Name.
    pub name: String,
    /// Serving priority.
    pub priority: i32,
    /// Policy.
    pub policy: QueuePolicy,
    /// Quota this queue was created for (label), if any.
    pub managed_for: Option<String>,
    /// Published status (to write only when it changes).
    pub status: Option<PublishedQueueStatus>,
    /// Whether guaranteed units may reclaim borrowed quota.
    pub reclaim: bool,
    /// How units preempt inside the queue's quota.
    pub preemption: koord_queue_api::queue::Preemption,
    /// When its head reserves.
    pub reserve: koord_queue_api::queue::Reserve,
    /// Admission checks of the queue.
    pub checks: Vec<koord_queue_api::queue::AdmissionCheckRef>,
    /// Strict dequeue: `Some(Some(timeout))` on, `Some(None)` off, `None`
    /// when the queue leaves it to the scheduler's global setting.
    pub strict: Option<Option<std::time::Duration>>,
    /// Running timeout.
    pub running_timeout: Option<std::time::Duration>,
    /// Whether it is stopped, and drained (`spec.stopPolicy`).
    pub stop: koord_queue_api::queue::StopPolicy,
}

/// A Queue's status as last published, without its list of first waiting
/// units: that list, up to 1,000 entries of two strings for each Queue (~9
/// MB for 100,000 waiting units over 1,000 Queues), is only compared with
/// the next one, so a digest of it is kept ([`DetailsDigest`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PublishedQueueStatus {
    /// Digest of `queueItemDetails`.
    pub details: u64,
    /// `pending`.
    pub pending: Option<i64>,
    /// `admitted`.
    pub admitted: Option<i64>,
    /// `conditions`.
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

impl PublishedQueueStatus {
    /// What is kept of `status`.
    pub fn of(status: &koord_queue_api::QueueStatus) -> Self {
        let mut details = DetailsDigest::default();
        for (key, items) in &status.queue_item_details {
            details.key(key);
            for item in items {
                details.item(&item.namespace, &item.name, item.priority, item.position);
            }
        }
        Self {
            details: details.finish(),
            pending: status.pending,
            admitted: status.admitted,
            conditions: status.conditions.clone(),
        }
    }
}

/// A digest of `Queue.status.queueItemDetails`, fed its keys and entries in
/// order: from the published object, or from the core's line without
/// building the list. Two lists that differ share a digest with odds of
/// 2^-64 — the Queue's informational status would then wait for the next
/// change to be written.
#[derive(Debug, Default)]
pub struct DetailsDigest(std::hash::DefaultHasher);

impl DetailsDigest {
    /// A key of the map (`active`).
    pub fn key(&mut self, key: &str) {
        use std::hash::Hash as _;
        (0u8, key).hash(&mut self.0);
    }

    /// An entry under the last key.
    pub fn item(&mut self, namespace: &str, name: &str, priority: i32, position: i64) {
        use std::hash::Hash as _;
        (1u8, namespace, name, priority, position).hash(&mut self.0);
    }

    /// The digest.
    pub fn finish(&self) -> u64 {
        use std::hash::Hasher as _;
        self.0.finish()
    }
}

/// Label on Queues the scheduler keeps for an ElasticQuota.
pub const QUEUE_FOR_QUOTA_LABEL: &str = "koord-queue/elastic-quota";

impl QueueRecord {
    /// The record of `queue`.
    pub fn from_queue(queue: &Queue) -> Self {
        Self {
            name: queue.name_any(),
            priority: queue.spec.effective_priority(),
            policy: queue.spec.queue_policy,
            managed_for: queue.labels().get(QUEUE_FOR_QUOTA_LABEL).cloned(),
            status: queue.status.as_ref().map(PublishedQueueStatus::of),
            reclaim: queue.spec.reclaim.unwrap_or(true),
            preemption: queue
                .spec
                .preemption
                .as_ref()
                .map(koord_queue_api::queue::QueuePreemption::to_model)
                .unwrap_or_default(),
            reserve: queue
                .spec
                .reserve_head
                .as_ref()
                .map(koord_queue_api::queue::ReserveHead::to_model)
                .unwrap_or_default(),
            checks: queue.spec.admission_checks.clone(),
            strict: queue.spec.strict_dequeue.as_ref().map(|s| {
                s.enabled.then(|| {
                    std::time::Duration::from_secs(
                        s.timeout_seconds.unwrap_or(300).max(1).unsigned_abs(),
                    )
                })
            }),
            running_timeout: queue
                .spec
                .running_timeout_seconds
                .filter(|t| *t > 0)
                .map(|t| std::time::Duration::from_secs(t.unsigned_abs())),
            stop: queue.spec.effective_stop_policy(),
        }
    }
}

/// A node's contribution to the cluster capacity.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NodeRecord {
    /// Node name.
    pub name: String,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Condition Ready=True and schedulable.
    pub ready: bool,
}

impl NodeRecord {
    /// The record of `node`.
    pub fn from_node(node: &Node) -> Self {
        let status = node.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            && !node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable: status
                .allocatable
                .as_ref()
                .and_then(|a| Resources::from_list(a).ok())
                .unwrap_or_default(),
            ready,
        }
    }
}

/// A namespace ResourceQuota, reduced to the resources a unit's request
/// names: `requests.cpu` and `cpu` count as `cpu`, and so on; limits and
/// object counts are not checked.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NamespaceQuotaRecord {
    /// Namespace.
    pub namespace: String,
    /// Name of the ResourceQuota.
    pub name: String,
    /// Hard limits on requests.
    pub hard: Resources,
    /// Requests in use.
    pub used: Resources,
}

impl NamespaceQuotaRecord {
    /// The record of `quota`.
    pub fn from_quota(quota: &k8s_openapi::api::core::v1::ResourceQuota) -> Self {
        let requests = |list: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            let mut out = Resources::new();
            for (key, q) in list.into_iter().flatten() {
                let name = key.strip_prefix("requests.").unwrap_or(key);
                if key.starts_with("limits.")
                    || key.starts_with("count/")
                    || name == "pods"
                    || name.contains("services")
                {
                    continue;
                }
                if let Ok(v) = koord_queue_api::resources::parse_quantity(name, &q.0) {
                    // `cpu` and `requests.cpu` may both be set: the tighter wins.
                    let cur = if out.contains(name) {
                        out.get(name).min(v)
                    } else {
                        v
                    };
                    out.set(name, cur);
                }
            }
            out
        };
        let spec = quota.spec.as_ref();
        let status = quota.status.as_ref();
        Self {
            namespace: quota.namespace().unwrap_or_default(),
            name: quota.name_any(),
            hard: requests(
                status
                    .and_then(|s| s.hard.as_ref())
                    .or_else(|| spec.and_then(|s| s.hard.as_ref())),
            ),
            used: requests(status.and_then(|s| s.used.as_ref())),
        }
    }
}
