//! The API server's answer to a write, read for its resourceVersion alone.
//!
//! `kube::Api` decodes the whole object a write returns. The scheduler and
//! the webhook write tens of thousands of QueueUnits and Jobs and read
//! nothing of the answer but whether it succeeded and, for units, the
//! resourceVersion it produced; decoding each unit's pod template and managed
//! fields only to drop them cost the scheduler CPU next to the API server's
//! (docs/performance.md). [`WriteAck`] skips all of it while parsing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, Resource};
use serde::Deserialize;

/// What a write's answer is read for: the object's resourceVersion. Use it
/// as the object type of an `Api` made with the written kind's
/// [`ApiResource`] (`Api::<WriteAck>::namespaced_with(client, ns, &resource)`),
/// whose `patch`/`patch_status` then return it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WriteAck {
    /// Only `resourceVersion` is read.
    #[serde(default, deserialize_with = "resource_version_only")]
    pub metadata: ObjectMeta,
}

impl WriteAck {
    /// The resourceVersion the write produced.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    /// Namespace `namespace` of the namespaced kind `K`, for writes whose
    /// answers are read as [`WriteAck`]s.
    pub fn api<K>(client: &kube::Client, namespace: &str) -> kube::Api<Self>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        kube::Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<K>(&()))
    }

    /// Creates `object` in `namespace` (`K` names the kind's collection).
    pub async fn create<K>(
        client: &kube::Client,
        namespace: &str,
        object: &K,
    ) -> Result<Self, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + serde::Serialize,
    {
        let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
        let mut request = kube::core::Request::new(K::url_path(&(), Some(namespace)))
            .create(&kube::api::PostParams::default(), body)
            .map_err(kube::Error::BuildRequest)?;
        request.extensions_mut().insert("create");
        client.request::<Self>(request).await
    }
}

fn resource_version_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    struct Kept {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    let kept = Kept::deserialize(d)?;
    Ok(ObjectMeta {
        resource_version: kept.resource_version,
        ..ObjectMeta::default()
    })
}

crate::dynamic_resource::dynamic_resource!(WriteAck);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_resource_version_is_read() -> Result<(), serde_json::Error> {
        let ack: WriteAck = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"n","resourceVersion":"42",
                "managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}]},
                "spec":{"template":{"spec":{"containers":[]}}},"status":{"phase":"Dequeued"}}"#,
        )?;
        assert_eq!(ack.resource_version(), Some("42"));
        assert!(ack.metadata.name.is_none());
        let empty: WriteAck = serde_json::from_str("{}")?;
        assert_eq!(empty.resource_version(), None);
        Ok(())
    }
}
