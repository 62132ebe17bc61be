//! Runtime policy of the webhook, derived from its flags.

use std::collections::BTreeSet;

use koord_queue_api::jobs::pod::POD_KIND;
use koord_queue_api::jobs::{self, JobAdapter, pod_group};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::Value;

/// Which kinds are queued, the fallback queue, and who the scheduler is.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Extension keys of the enabled kinds (`batchjob`, `tf`, …).
    pub enabled_kinds: BTreeSet<String>,
    /// Queue of jobs naming no quota in namespaces without a default queue.
    pub default_queue: Option<String>,
    /// User name of the scheduler.
    pub scheduler_user: String,
    /// Groups whose members count as the scheduler.
    pub scheduler_groups: Vec<String>,
    /// Koordinator's looser rule: a job may name any quota, whatever its
    /// namespace. Off by default (docs/security.md).
    pub allow_cross_namespace_quota: bool,
    /// Whether queued jobs may name the `system-…` PriorityClasses.
    pub allow_system_priority_classes: bool,
    /// Whether the pods of every opted-in namespace are reviewed (the
    /// chart's `webhook.reviewPods`), not only where pods are queued: a
    /// queued job's child passes when proven, any other pod is queued where
    /// the namespace queues pods and refused elsewhere (docs/security.md).
    pub review_pods: bool,
}

impl Policy {
    /// Whether the kind with extension key `extension` is queued.
    pub fn is_enabled(&self, extension: &str) -> bool {
        self.enabled_kinds.contains(extension)
    }

    /// Whether objects of `adapter`'s kind like `objects` are queued: a Pod
    /// of a LeaderWorkerSet also when the `lws` extension is on (its hook
    /// sends only such pods), whatever the `pod` extension says.
    pub fn enables(&self, adapter: &dyn JobAdapter, objects: &[Option<&Value>]) -> bool {
        let kind = adapter.kind();
        self.is_enabled(kind.extension)
            || (kind == &POD_KIND
                && self.is_enabled(jobs::registry::LWS_EXTENSION)
                && objects.iter().flatten().any(|o| {
                    o.pointer("/metadata/labels")
                        .and_then(|l| l.get(pod_group::LWS_NAME_LABEL))
                        .is_some()
                }))
    }

    /// Whether the webhook judges objects of `adapter`'s kind like
    /// `objects`: the kinds it queues, and Pods when it reviews every pod.
    pub fn reviews(&self, adapter: &dyn JobAdapter, objects: &[Option<&Value>]) -> bool {
        self.enables(adapter, objects) || (adapter.kind() == &POD_KIND && self.review_pods)
    }

    /// Whether a pod like `pod` is queued in namespace `ns` (labels `labels`
    /// of the namespace as `queues_pods`): a LeaderWorkerSet's wherever the
    /// `lws` extension is on, any other where the `pod` extension is on and
    /// the namespace is labelled `koord-queue/queue-pods=true`.
    pub fn queues_pod(&self, pod: &Value, namespace_queues_pods: bool) -> bool {
        (self.is_enabled(POD_KIND.extension) && namespace_queues_pods)
            || (self.is_enabled(jobs::registry::LWS_EXTENSION)
                && pod
                    .pointer("/metadata/labels")
                    .and_then(|l| l.get(pod_group::LWS_NAME_LABEL))
                    .is_some())
    }

    /// Whether `request` was made by the scheduler.
    pub fn is_scheduler(&self, request: &AdmissionRequest<DynamicObject>) -> bool {
        let user = &request.user_info;
        user.username.as_deref() == Some(self.scheduler_user.as_str())
            || user
                .groups
                .iter()
                .flatten()
                .any(|g| self.scheduler_groups.iter().any(|s| s == g))
    }
}
