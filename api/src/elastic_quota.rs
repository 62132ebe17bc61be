//! Typed client view of Koordinator's `ElasticQuota`
//! (`scheduling.sigs.k8s.io/v1alpha1`). Koord-Queue only reads it; the schema
//! generated from it is installed only on clusters without Koordinator.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::queue_unit::ResourceList;

/// Guaranteed and maximum resources of the quota.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.sigs.k8s.io",
    version = "v1alpha1",
    kind = "ElasticQuota",
    doc = "ElasticQuota (Koordinator) is a node of the quota tree: guaranteed `min` and ceiling `max` of resources. The parent is named by the label `quota.scheduling.koordinator.sh/parent` (absent: the root `koordinator-root-quota`); an inner node carries `quota.scheduling.koordinator.sh/is-parent: \"true\"` and no job maps to it.",
    namespaced,
    status = "ElasticQuotaStatus",
    shortname = "eq",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaSpec {
    /// Guaranteed resources: units within `min` are released even when others borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<ResourceList>,
    /// Ceiling of resources in use by the quota's subtree; a resource not named
    /// here is unlimited at this level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<ResourceList>,
}

/// Usage as observed by the quota's owner.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaStatus {
    /// Resources in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<ResourceList>,
}

impl ElasticQuota {
    /// Name of the parent quota (the root quota when the label is absent).
    pub fn parent_name(&self) -> &str {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::QUOTA_PARENT_LABEL))
            .map(String::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or(keys::ROOT_QUOTA_NAME)
    }

    /// Whether this quota is an inner node (no job may map to it).
    pub fn is_parent(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::QUOTA_IS_PARENT_LABEL))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}
