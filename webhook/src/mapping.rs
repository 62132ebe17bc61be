//! Queue mapping (architecture §4.1, docs/security.md "Quotas belong to
//! namespaces"): which queue a new job waits in and which quota it is
//! charged to.

use std::collections::BTreeMap;

use koord_queue_api::keys;

use crate::policy::Policy;
use crate::view::ClusterView;

/// Most quota names listed in a refusal.
const MAX_LISTED_QUOTAS: usize = 20;

/// Where a job waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The queue.
    pub queue: String,
    /// The quota it is charged to: recorded as the job's (and its unit's)
    /// quota label. `None` only on clusters without any ElasticQuota.
    pub quota: Option<String>,
}

/// The job's quota label, else the namespace's default queue, else the
/// configured default; otherwise a refusal that says what to set. A quota
/// named by the job must serve the job's namespace; a default queue is the
/// administrator's choice and is charged as if the job named it.
pub fn route(
    labels: &BTreeMap<String, String>,
    namespace: &str,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Result<Route, String> {
    if let Some(quota) = labels.get(keys::QUOTA_NAME_LABEL).filter(|q| !q.is_empty()) {
        let label = keys::QUOTA_NAME_LABEL;
        return match view.quota(quota) {
            Some(info) if info.is_parent => Err(format!(
                "ElasticQuota {quota:?} (label {label}) is a parent quota; jobs must name a leaf quota: {}",
                list_quotas(view)
            )),
            Some(info) if !info.serves(namespace) && !policy.allow_cross_namespace_quota => {
                Err(format!(
                    "ElasticQuota {}/{quota} (label {label}) does not serve namespace {namespace}: a job may \
                     use a quota of its own namespace or one whose annotation {} lists its namespace",
                    info.namespace,
                    keys::QUOTA_NAMESPACES_ANNOTATION
                ))
            }
            Some(_) => Ok(Route {
                queue: quota.clone(),
                quota: Some(quota.clone()),
            }),
            None => Err(format!(
                "ElasticQuota {quota:?} (label {label}) does not exist; existing quotas: {}",
                list_quotas(view)
            )),
        };
    }
    let default = view
        .namespace_default_queue(namespace)
        .filter(|q| !q.is_empty())
        .map(|q| (q, format!("the default queue of namespace {namespace}")))
        .or_else(|| {
            policy
                .default_queue
                .clone()
                .map(|q| (q, "the webhook's --default-queue".to_string()))
        });
    if let Some((queue, origin)) = default {
        return match view.quota(&queue) {
            Some(info) if info.is_parent => Err(format!(
                "{origin}, {queue:?}, is a parent ElasticQuota; it must name a leaf quota"
            )),
            Some(_) => Ok(Route {
                quota: Some(queue.clone()),
                queue,
            }),
            // No quotas at all: queues without quota (the DefaultQueue plugin).
            None if view.leaf_quotas().is_empty() => Ok(Route { queue, quota: None }),
            None => Err(format!(
                "{origin}, {queue:?}, names no ElasticQuota, so nothing would limit the job; \
                 existing quotas: {}",
                list_quotas(view)
            )),
        };
    }
    Err(format!(
        "it names no quota: set the label {}=<quota> on the job (existing quotas: {}) or the annotation {} on namespace {namespace}",
        keys::QUOTA_NAME_LABEL,
        list_quotas(view),
        keys::DEFAULT_QUEUE_ANNOTATION
    ))
}

fn list_quotas(view: &dyn ClusterView) -> String {
    let quotas = view.leaf_quotas();
    if quotas.is_empty() {
        return "none".into();
    }
    let mut text = quotas
        .iter()
        .take(MAX_LISTED_QUOTAS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if quotas.len() > MAX_LISTED_QUOTAS {
        text.push_str(&format!(" and {} more", quotas.len() - MAX_LISTED_QUOTAS));
    }
    text
}
