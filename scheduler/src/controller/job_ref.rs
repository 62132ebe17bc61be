//! The job a write concerns: its kind's adapter and its identity, and the
//! API and object reference that follow from them.

use k8s_openapi::api::core::v1::ObjectReference;
use koord_queue_api::jobs::JobAdapter;
use kube::Resource;
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::core::DynamicResourceScope;

/// The job a write concerns.
#[derive(Debug, Clone)]
pub struct JobRef {
    /// Its adapter.
    pub adapter: &'static dyn JobAdapter,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
    /// The pod group the write concerns, when it is one: the fields above
    /// are then one member's (the oldest), on which Events are recorded and
    /// from which a missing unit is re-created.
    pub group: Option<GroupTarget>,
}

/// A pod group a write concerns (see `writes/group.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTarget {
    /// The group's name.
    pub name: String,
    /// The label selector of its members.
    pub selector: String,
    /// The uid its unit names in `consumerRef.uid` once adopted.
    pub uid: String,
    /// Its size.
    pub size: i32,
}

impl JobRef {
    /// The API of the job's kind in its namespace.
    pub(super) fn api<K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>>(
        &self,
        client: &kube::Client,
    ) -> Api<K> {
        let kind = self.adapter.kind();
        let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
        Api::namespaced_with(client.clone(), &self.namespace, &resource)
    }

    /// The same write's target, one member pod `name` (`uid`) of the group.
    pub(super) fn member(&self, name: &str, uid: Option<&str>) -> Self {
        Self {
            adapter: self.adapter,
            namespace: self.namespace.clone(),
            name: name.to_string(),
            uid: uid.unwrap_or_default().to_string(),
            group: None,
        }
    }

    pub(super) fn object_ref(&self) -> ObjectReference {
        let kind = self.adapter.kind();
        ObjectReference {
            api_version: Some(kind.api_version()),
            kind: Some(kind.kind.to_string()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()).filter(|u| !u.is_empty()),
            ..Default::default()
        }
    }
}
