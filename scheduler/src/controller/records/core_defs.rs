//! What the core is told of the cluster's objects: a quota's node of the
//! tree, a Queue's definition, the Queue kept for each quota and the root
//! capacity. Apart from the controller so that the simulator
//! (`koord-queue-sim`) builds its core from the same objects the same way.

use koord_queue_api::{Queue, QueueSpec, Resources, keys};

use super::cluster::{NodeRecord, QUEUE_FOR_QUOTA_LABEL, QueueRecord, QuotaRecord};
use crate::core::{QueueDef, QuotaDef, RootCapacity};

impl QuotaRecord {
    /// The quota's node of the core's tree; `None` for the root quota (its
    /// max is the capacity, [`root_capacity`]) and for a quota whose min,
    /// max or weight cannot be read (ignored, with a warning).
    pub fn to_def(&self) -> Option<QuotaDef> {
        if self.invalid.is_some() || self.name == keys::ROOT_QUOTA_NAME {
            return None;
        }
        let parent = Some(self.parent.clone()).filter(|p| p != keys::ROOT_QUOTA_NAME);
        Some(QuotaDef {
            name: self.name.clone(),
            parent,
            min: self.min.clone(),
            max: self.max.clone(),
            is_parent: self.is_parent,
            fair_sharing: self.fair_sharing,
            weight_milli: self.weight_milli,
        })
    }
}

impl QueueRecord {
    /// The queue as the core serves it.
    pub fn to_def(&self) -> QueueDef {
        let mut def = QueueDef::new(self.name.clone())
            .with_priority(self.priority)
            .with_policy(self.policy)
            .with_preemption(self.preemption)
            .with_reserve(self.reserve)
            .with_stopped(self.stop.stops());
        def.reclaim = self.reclaim;
        def
    }
}

/// The Queue the scheduler keeps for `quota` (one per ElasticQuota but the
/// root, in the system namespace `namespace`), with the policy of the
/// quota's `koord-queue/queue-policy` label.
pub fn queue_for_quota(quota: &QuotaRecord, namespace: &str) -> Queue {
    let mut queue = Queue::new(
        &quota.name,
        QueueSpec {
            queue_policy: quota.policy,
            ..Default::default()
        },
    );
    queue.metadata.namespace = Some(namespace.to_string());
    queue.metadata.labels = Some([(QUEUE_FOR_QUOTA_LABEL.to_string(), quota.name.clone())].into());
    queue
}

/// The root capacity of the `auto` source: the root quota's max (none set:
/// unlimited), else the allocatable of the Ready nodes.
pub fn root_capacity<'a>(
    root: Option<&QuotaRecord>,
    nodes: impl IntoIterator<Item = &'a NodeRecord>,
) -> RootCapacity {
    match root {
        Some(root) if !root.max.is_zero() => RootCapacity::Limited(root.max.clone()),
        Some(_) => RootCapacity::Unlimited,
        None => {
            let mut total = Resources::new();
            for node in nodes.into_iter().filter(|n| n.ready) {
                total.add(&node.allocatable);
            }
            RootCapacity::Limited(total)
        }
    }
}
