//! The webhook's few calls to the API server, behind a trait so the router
//! can be exercised (tests, benchmarks) without one.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use koord_queue_api::{ElasticQuota, QueueUnit, WriteAck, keys};
use kube::api::{Api, ListParams};

use crate::view::QuotaInfo;

/// Outcome of a QueueUnit create.
#[derive(Debug)]
pub enum Created {
    /// Created now.
    New,
    /// A unit of this name exists already (a retried admission call).
    Existing(Box<QueueUnit>),
}

/// Calls the webhook makes to the API server.
pub trait ApiAccess: Send + Sync {
    /// Creates `unit` (in its namespace).
    fn create_unit<'a>(
        &'a self,
        unit: &'a QueueUnit,
    ) -> BoxFuture<'a, Result<Created, kube::Error>>;
    /// Reads a QueueUnit.
    fn get_unit<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<QueueUnit>, kube::Error>>;
    /// Reads a namespace's `koord-queue/default-queue` annotation directly
    /// (for namespaces the cache has not seen yet).
    fn namespace_default_queue<'a>(
        &'a self,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, kube::Error>>;
    /// Reads an ElasticQuota directly (one the cache has not seen yet).
    fn quota<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<QuotaInfo>, kube::Error>>;
}

/// [`ApiAccess`] through a kube client.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // kube::Client is not Debug
pub struct KubeApi {
    client: kube::Client,
}

impl KubeApi {
    /// Uses `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl ApiAccess for KubeApi {
    fn create_unit<'a>(
        &'a self,
        unit: &'a QueueUnit,
    ) -> BoxFuture<'a, Result<Created, kube::Error>> {
        let namespace = unit.metadata.namespace.clone().unwrap_or_default();
        let api: Api<QueueUnit> = Api::namespaced(self.client.clone(), &namespace);
        Box::pin(async move {
            // The created unit comes back whole; only success is read of it.
            match WriteAck::create(&self.client, &namespace, unit).await {
                Ok(_) => Ok(Created::New),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let name = unit.metadata.name.clone().unwrap_or_default();
                    Ok(Created::Existing(Box::new(api.get(&name).await?)))
                }
                Err(e) => Err(e),
            }
        })
    }

    fn get_unit<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<QueueUnit>, kube::Error>> {
        let api: Api<QueueUnit> = Api::namespaced(self.client.clone(), namespace);
        Box::pin(async move { api.get_opt(name).await })
    }

    fn namespace_default_queue<'a>(
        &'a self,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, kube::Error>> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        Box::pin(async move {
            Ok(api
                .get_metadata_opt(namespace)
                .await?
                .and_then(|ns| ns.metadata.annotations)
                .and_then(|mut a| a.remove(keys::DEFAULT_QUEUE_ANNOTATION)))
        })
    }

    fn quota<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<QuotaInfo>, kube::Error>> {
        let api: Api<ElasticQuota> = Api::all(self.client.clone());
        Box::pin(async move {
            let found = api
                .list_metadata(&ListParams::default().fields(&format!("metadata.name={name}")))
                .await?;
            Ok(found.items.into_iter().next().map(|quota| QuotaInfo {
                name: name.to_string(),
                is_parent: crate::caches::is_parent(&quota),
            }))
        })
    }
}
