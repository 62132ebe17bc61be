//! The webhook's few calls to the API server, behind a trait so the router
//! can be exercised (tests, benchmarks) without one.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use koord_queue_api::jobs::JobKind;
use koord_queue_api::{ElasticQuota, QueueUnit, WriteAck, elastic_quota, keys};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::Value;

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
    /// Asks the API server whether `unit` could be created now, creating
    /// nothing (`dryRun=All`). A name that is taken is no error.
    fn check_unit_create<'a>(
        &'a self,
        unit: &'a QueueUnit,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
    /// Reads a QueueUnit.
    fn get_unit<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<QueueUnit>, kube::Error>>;
    /// Reads a job (or a job's owner, or what a job's size depends on) of
    /// `kind` as JSON; `namespace` empty for a cluster-scoped kind.
    fn get_job<'a>(
        &'a self,
        kind: &'static JobKind,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>>;
    /// Reads a namespace's `koord-queue/default-queue` annotation directly
    /// (for namespaces the cache has not seen yet).
    fn namespace_default_queue<'a>(
        &'a self,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, kube::Error>>;
    /// Reads the ElasticQuota of a name directly (one the cache has not seen yet).
    fn quota<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<QuotaInfo>, kube::Error>>;
    /// Lists the pods of `namespace` that `selector` (a label selector)
    /// selects, as JSON: the children one unit pays for.
    fn list_pods<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Value>, kube::Error>>;
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

/// The dynamic API resource of a job kind.
pub fn api_resource(kind: &JobKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(kind.group, kind.version, kind.kind),
        kind.plural,
    )
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

    fn check_unit_create<'a>(
        &'a self,
        unit: &'a QueueUnit,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        let namespace = unit.metadata.namespace.clone().unwrap_or_default();
        let api: Api<QueueUnit> = Api::namespaced(self.client.clone(), &namespace);
        Box::pin(async move {
            let params = PostParams {
                dry_run: true,
                ..Default::default()
            };
            match api.create(&params, unit).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
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

    fn get_job<'a>(
        &'a self,
        kind: &'static JobKind,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        // An empty namespace reads a cluster-scoped object.
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(self.client.clone(), &api_resource(kind))
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &api_resource(kind))
        };
        Box::pin(async move {
            // A quorum read: the API server's cache lags the create by more
            // than the answer's linger under load (measured: 28,507 of
            // 43,507 cached reads in the 15,000-job benchmark missed the job
            // and were repeated), a quorum read finds it at once.
            match api.get_opt(name).await {
                Ok(Some(object)) => serde_json::to_value(object)
                    .map(Some)
                    .map_err(kube::Error::SerdeError),
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            }
        })
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
            let (winners, _) = elastic_quota::winners(found.items.iter(), |q| &q.metadata);
            Ok(winners.get(name).map(|q| crate::caches::quota_info(q)))
        })
    }

    fn list_pods<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Value>, kube::Error>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        Box::pin(async move {
            // A consistent list (no resourceVersion): a child created a
            // moment ago is in it once stored.
            api.list(&ListParams::default().labels(selector))
                .await?
                .items
                .into_iter()
                .map(|pod| serde_json::to_value(pod).map_err(kube::Error::SerdeError))
                .collect()
        })
    }
}
