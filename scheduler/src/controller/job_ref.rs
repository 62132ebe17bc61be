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
