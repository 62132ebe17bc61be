//! Informer caches of the objects the webhook decides on: namespaces (their
//! default-queue annotation), ElasticQuotas (names and is-parent label; both
//! metadata only), PriorityClasses, and what the API server adds to pods
//! (LimitRanges, RuntimeClasses).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{LimitRange, Namespace};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_queue_api::jobs::pod_defaults::PodDefaults;
use koord_queue_api::{ElasticQuota, elastic_quota, keys};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::view::{ClusterView, QuotaInfo};

/// The webhook's caches.
#[derive(Clone)]
pub struct Caches {
    namespaces: Store<PartialObjectMeta<Namespace>>,
    quotas: Store<PartialObjectMeta<ElasticQuota>>,
    priority_classes: Store<PriorityClass>,
    limit_ranges: Store<LimitRange>,
    runtime_classes: Store<RuntimeClass>,
    /// Set when the ElasticQuota API is not installed: no quota exists then,
    /// and the cache counts as synced (it fills once the CRD appears).
    quota_api_absent: Arc<AtomicBool>,
    /// Set while LimitRanges (RuntimeClasses) cannot be listed (403): jobs
    /// are sized without them meanwhile, and the cache counts as synced.
    limit_ranges_unreadable: Arc<AtomicBool>,
    runtime_classes_unreadable: Arc<AtomicBool>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

impl Caches {
    /// Starts the watches on the current runtime.
    pub fn start(client: kube::Client) -> Self {
        let config = watcher::Config::default();

        let (namespaces, writer) = reflector::store();
        let stream = watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            config.clone(),
        )
        .default_backoff()
        .reflect(writer);
        tokio::spawn(drain("namespaces", stream));

        let quota_api_absent = Arc::new(AtomicBool::new(false));
        let (quotas, writer) = reflector::store();
        let absent = quota_api_absent.clone();
        let stream = watcher(Api::<PartialObjectMeta<ElasticQuota>>::all(client.clone()), config.clone())
            .default_backoff()
            .reflect(writer)
            .inspect(move |event| match event {
                Err(watcher::Error::InitialListFailed(kube::Error::Api(e))) if e.code == 404 => {
                    if !absent.swap(true, Ordering::Relaxed) {
                        tracing::warn!("the ElasticQuota API is not installed: jobs can only use default queues until it is");
                    }
                }
                Ok(_) => absent.store(false, Ordering::Relaxed),
                Err(_) => {}
            });
        tokio::spawn(drain("elasticquotas", stream));

        let (priority_classes, writer) = reflector::store();
        let stream = watcher(Api::<PriorityClass>::all(client.clone()), config.clone())
            .default_backoff()
            .reflect(writer);
        tokio::spawn(drain("priorityclasses", stream));

        // What the API server adds to pods: a webhook whose RBAC predates
        // these reads (mid-upgrade, the old chart's Role) still serves,
        // sizing without them and saying so, until its rights arrive.
        let limit_ranges_unreadable = Arc::new(AtomicBool::new(false));
        let runtime_classes_unreadable = Arc::new(AtomicBool::new(false));
        let (limit_ranges, writer) = reflector::store();
        let stream = watcher(Api::<LimitRange>::all(client.clone()), config.clone())
            .default_backoff()
            .reflect(writer)
            .inspect(unreadable_while_forbidden(
                "limitranges",
                limit_ranges_unreadable.clone(),
            ));
        tokio::spawn(drain("limitranges", stream));

        let (runtime_classes, writer) = reflector::store();
        let stream = watcher(Api::<RuntimeClass>::all(client), config)
            .default_backoff()
            .reflect(writer)
            .inspect(unreadable_while_forbidden(
                "runtimeclasses",
                runtime_classes_unreadable.clone(),
            ));
        tokio::spawn(drain("runtimeclasses", stream));

        Self {
            namespaces,
            quotas,
            priority_classes,
            limit_ranges,
            runtime_classes,
            quota_api_absent,
            limit_ranges_unreadable,
            runtime_classes_unreadable,
        }
    }

    /// Resolves once every cache has its initial list.
    pub async fn synced(&self) {
        let _ = self.namespaces.wait_until_ready().await;
        let _ = self.priority_classes.wait_until_ready().await;
        for (ready, unreadable) in [
            (
                self.limit_ranges.wait_until_ready().boxed(),
                &self.limit_ranges_unreadable,
            ),
            (
                self.runtime_classes.wait_until_ready().boxed(),
                &self.runtime_classes_unreadable,
            ),
        ] {
            tokio::pin!(ready);
            loop {
                if unreadable.load(Ordering::Relaxed) {
                    break;
                }
                if tokio::time::timeout(std::time::Duration::from_millis(200), &mut ready)
                    .await
                    .is_ok()
                {
                    break;
                }
            }
        }
        loop {
            if self.quota_api_absent.load(Ordering::Relaxed) {
                return;
            }
            if tokio::time::timeout(
                std::time::Duration::from_millis(200),
                self.quotas.wait_until_ready(),
            )
            .await
            .is_ok()
            {
                return;
            }
        }
    }
}

/// A watch event inspector that sets `flag` while the initial list of
/// `what` is forbidden (and warns once), and clears it once events come.
fn unreadable_while_forbidden<T>(
    what: &'static str,
    flag: Arc<AtomicBool>,
) -> impl FnMut(&Result<T, watcher::Error>) {
    move |event| match event {
        Err(watcher::Error::InitialListFailed(kube::Error::Api(e))) if e.code == 403 => {
            if !flag.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    cache = what,
                    "cannot list {what} (forbidden): jobs are sized without what the API server \
                     adds to their pods until the webhook's ClusterRole allows it"
                );
            }
        }
        Ok(_) => flag.store(false, Ordering::Relaxed),
        Err(_) => {}
    }
}

async fn drain<S, T>(what: &'static str, stream: S)
where
    S: futures::Stream<Item = Result<T, watcher::Error>>,
{
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        if let Err(error) = event {
            tracing::debug!(cache = what, %error, "watch error; retrying with backoff");
        }
    }
}

impl ClusterView for Caches {
    fn knows_namespace(&self, ns: &str) -> bool {
        self.namespaces.get(&ObjectRef::new(ns)).is_some()
    }

    fn namespace_default_queue(&self, ns: &str) -> Option<String> {
        self.namespaces
            .get(&ObjectRef::new(ns))?
            .metadata
            .annotations
            .as_ref()?
            .get(keys::DEFAULT_QUEUE_ANNOTATION)
            .cloned()
    }

    fn namespace_queues_pods(&self, ns: &str) -> bool {
        self.namespace_label(ns, keys::QUEUE_PODS_NAMESPACE_LABEL)
            .is_some_and(|v| v == "true")
    }

    fn namespace_allows_unqueued_pods(&self, ns: &str) -> bool {
        self.namespace_label(ns, keys::UNQUEUED_PODS_NAMESPACE_LABEL)
            .is_some_and(|v| v == "allow")
    }

    fn namespace_priority_classes(&self, ns: &str) -> Option<Vec<String>> {
        priority_classes(
            self.namespaces
                .get(&ObjectRef::new(ns))?
                .metadata
                .annotations
                .as_ref(),
        )
    }

    fn quota(&self, name: &str) -> Option<QuotaInfo> {
        let same_name: Vec<_> = self
            .quotas
            .state()
            .into_iter()
            .filter(|q| q.metadata.name.as_deref() == Some(name))
            .collect();
        let (winners, _) = elastic_quota::winners(same_name.iter(), |q| &q.metadata);
        winners.get(name).map(|q| quota_info(q))
    }

    fn leaf_quotas(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .quotas
            .state()
            .iter()
            .filter(|q| !is_parent(q) && q.metadata.name.as_deref() != Some(keys::ROOT_QUOTA_NAME))
            .filter_map(|q| q.metadata.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn priority_class_value(&self, name: &str) -> Option<i32> {
        self.priority_classes
            .get(&ObjectRef::new(name))
            .map(|pc| pc.value)
    }

    fn global_default_priority(&self) -> Option<(String, i32)> {
        self.priority_classes
            .find(|pc| pc.global_default == Some(true))
            .map(|pc| (pc.metadata.name.clone().unwrap_or_default(), pc.value))
    }

    fn pod_defaults(&self, ns: &str) -> PodDefaults {
        let mut ranges: Vec<_> = self
            .limit_ranges
            .state()
            .into_iter()
            .filter(|r| r.metadata.namespace.as_deref() == Some(ns))
            .collect();
        // The LimitRanger lists them by name; a later one's defaults win.
        ranges.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut defaults = PodDefaults::default();
        for item in ranges
            .iter()
            .filter_map(|r| r.spec.as_ref())
            .flat_map(|s| s.limits.iter())
            .filter(|item| item.type_ == "Container")
        {
            for (list, into) in [
                (&item.default_request, &mut defaults.requests),
                (&item.default, &mut defaults.limits),
            ] {
                for (name, amount) in list.iter().flatten() {
                    into.insert(name.clone(), serde_json::Value::String(amount.0.clone()));
                }
            }
        }
        defaults.runtime_classes = self
            .runtime_classes
            .state()
            .iter()
            .map(|rc| {
                let overhead = rc
                    .overhead
                    .as_ref()
                    .and_then(|o| o.pod_fixed.as_ref())
                    .and_then(|fixed| serde_json::to_value(fixed).ok());
                (rc.metadata.name.clone().unwrap_or_default(), overhead)
            })
            .collect();
        defaults
    }
}

impl Caches {
    fn namespace_label(&self, ns: &str, key: &str) -> Option<String> {
        self.namespaces
            .get(&ObjectRef::new(ns))?
            .metadata
            .labels
            .as_ref()?
            .get(key)
            .cloned()
    }
}

/// The mapping's view of `quota`.
pub(crate) fn quota_info(quota: &PartialObjectMeta<ElasticQuota>) -> QuotaInfo {
    let (serves, error) = elastic_quota::served_namespaces(&quota.metadata);
    if let Some(error) = error {
        tracing::debug!(quota = quota.metadata.name.as_deref().unwrap_or(""), %error, "ElasticQuota serves only its own namespace");
    }
    QuotaInfo {
        name: quota.metadata.name.clone().unwrap_or_default(),
        namespace: quota.metadata.namespace.clone().unwrap_or_default(),
        is_parent: is_parent(quota),
        serves,
        priority_classes: priority_classes(quota.metadata.annotations.as_ref()),
    }
}

/// The classes a `koord-queue/priority-classes` annotation in `annotations`
/// lists, if it is there.
pub(crate) fn priority_classes(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<Vec<String>> {
    let listed = annotations?.get(keys::PRIORITY_CLASSES_ANNOTATION)?;
    Some(
        listed
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// Whether a quota is a parent (label `quota.scheduling.koordinator.sh/is-parent`).
pub(crate) fn is_parent(quota: &PartialObjectMeta<ElasticQuota>) -> bool {
    quota
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::QUOTA_IS_PARENT_LABEL))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
