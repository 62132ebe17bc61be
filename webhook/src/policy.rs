//! Runtime policy of the webhook, derived from its flags.

use std::collections::BTreeSet;

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

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
}

impl Policy {
    /// Whether the kind with extension key `extension` is queued.
    pub fn is_enabled(&self, extension: &str) -> bool {
        self.enabled_kinds.contains(extension)
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
