//! Runtime policy of the webhook, derived from its flags.

use std::collections::BTreeSet;

use koord_queue_api::jobs::{self, JobAdapter, ObjectFilter};
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

    /// Whether objects of `adapter`'s kind like `objects` are queued: an
    /// enabled extension queues the kind and (its object filter) one of
    /// `objects` — a Pod of a LeaderWorkerSet also when the `lws` extension
    /// is on (its hook sends only such pods), whatever the `pod` extension
    /// says. The namespace is not judged here ([`Policy::queues`] does).
    pub fn enables(&self, adapter: &dyn JobAdapter, objects: &[Option<&Value>]) -> bool {
        jobs::extensions_of(adapter)
            .filter(|e| self.is_enabled(e.key))
            .any(|e| match e.objects {
                ObjectFilter::Labelled(_) => objects.iter().any(|o| e.objects.admits(*o, true)),
                ObjectFilter::Every | ObjectFilter::InQueueingNamespaces => true,
            })
    }

    /// Whether the webhook judges objects of `adapter`'s kind like
    /// `objects`: the kinds it queues, and pods when it reviews every pod
    /// (any pod may be a queued job's child).
    pub fn reviews(&self, adapter: &dyn JobAdapter, objects: &[Option<&Value>]) -> bool {
        self.enables(adapter, objects) || (adapter.grouping().is_some() && self.review_pods)
    }

    /// Whether `object`, of `adapter`'s kind, is queued in its namespace
    /// (`namespace_queues_pods`: whether that namespace queues pods,
    /// labelled `koord-queue/queue-pods=true`): an enabled extension's
    /// filter admits it — a LeaderWorkerSet's pod wherever the `lws`
    /// extension is on, any other pod where the `pod` extension is on and
    /// the namespace queues pods, any object of the other kinds.
    pub fn queues(
        &self,
        adapter: &dyn JobAdapter,
        object: &Value,
        namespace_queues_pods: bool,
    ) -> bool {
        jobs::extensions_of(adapter)
            .filter(|e| self.is_enabled(e.key))
            .any(|e| e.objects.admits(Some(object), namespace_queues_pods))
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
