//! What a review is decided on besides its request: the objects with what
//! their size is read from attached (a TrainJob's runtime) or completed
//! with what the API server adds to pods (an UPDATE's), and the cluster view
//! completed by direct reads of what the caches have not seen yet.

use koord_queue_api::jobs::pod_defaults::{self, PodDefaults};
use koord_queue_api::keys;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use crate::service::Webhook;
use crate::verdict::RequestObjects;
use crate::view::{ClusterView, QuotaInfo};

impl Webhook {
    /// The request's objects with what their size is computed from attached
    /// (a TrainJob's runtime, [`crate::size_inputs`]); `None` when the kind
    /// needs nothing; `Err` is the refusal.
    pub(crate) async fn sized_objects(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        objects: &RequestObjects,
    ) -> Result<Option<RequestObjects>, String> {
        use crate::size_inputs::{self, Missing};
        let kind = &request.kind;
        let (Some(adapter), None) = (
            koord_queue_api::jobs::for_kind(&kind.group, &kind.kind),
            request.sub_resource.as_deref(),
        ) else {
            return Ok(None);
        };
        let Some(object) = objects.object.as_ref() else {
            return Ok(None);
        };
        if !self.policy.enables(adapter, &[Some(object)])
            || adapter.size_input(object).is_none()
            || self.policy.is_scheduler(request)
        {
            return Ok(None);
        }
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let what = format!("{} {namespace}/{}", kind.kind, request.name);
        let mut object = object.clone();
        match (&request.operation, objects.old.as_ref()) {
            (Operation::Create, _) => {
                size_inputs::attach(self.api.as_ref(), adapter, namespace, &mut object)
                    .await
                    .map_err(|m| match m {
                        Missing::Refused(m) => format!("{what} cannot be queued: {m}"),
                        Missing::Unreadable(m) => {
                            format!("{what} cannot be queued now: {m}; retry")
                        }
                    })?;
                Ok(Some(RequestObjects {
                    object: Some(object),
                    old: None,
                }))
            }
            // A pod's size input sizes its group, which an update cannot
            // grow (its own size is what an update may not grow): nothing
            // to read.
            (Operation::Update, _) if adapter.grouping().is_some() => Ok(None),
            (Operation::Update, Some(old)) => {
                let mut old = old.clone();
                match size_inputs::attach(self.api.as_ref(), adapter, namespace, &mut old).await {
                    Ok(()) => {
                        size_inputs::attach(self.api.as_ref(), adapter, namespace, &mut object)
                            .await
                            .map_err(|m| format!("{what}: {}; retry", m.message()))?;
                    }
                    // Its runtime is gone since it was queued: an update that
                    // leaves its trainer settings alone cannot grow it.
                    Err(Missing::Refused(m)) => {
                        if old.pointer("/spec/trainer") != object.pointer("/spec/trainer") {
                            return Err(format!("{what}: its size cannot be checked: {m}"));
                        }
                        size_inputs::attach_none(&mut old);
                        size_inputs::attach_none(&mut object);
                    }
                    Err(Missing::Unreadable(m)) => return Err(format!("{what}: {m}; retry")),
                }
                Ok(Some(RequestObjects {
                    object: Some(object),
                    old: Some(old),
                }))
            }
            _ => Ok(None),
        }
    }

    /// For an UPDATE of a job, both objects with what the API server will
    /// add to its pods (as admission wrote into its templates): an update
    /// that drops a request its LimitRange would give back larger, or names
    /// a RuntimeClass with an overhead, is growth. Both are completed alike,
    /// so a job queued before its namespace had defaults is not judged
    /// grown by them. `None` when there is nothing to add or it is no job's
    /// update (a Pod is completed by the API server before any webhook).
    pub(crate) fn completed_update(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        objects: &RequestObjects,
    ) -> Option<RequestObjects> {
        let kind = &request.kind;
        let adapter = koord_queue_api::jobs::for_kind(&kind.group, &kind.kind)?;
        if request.operation != Operation::Update
            || request.sub_resource.is_some()
            || adapter.grouping().is_some()
            || !self.policy.is_enabled(adapter.kind().extension)
        {
            return None;
        }
        let defaults = self
            .view
            .pod_defaults(request.namespace.as_deref().unwrap_or_default());
        if defaults == PodDefaults::default() {
            return None;
        }
        let complete = |object: Option<&Value>| {
            object.cloned().map(|mut object| {
                // A RuntimeClass gone since is no growth of this update's.
                let _ = pod_defaults::complete(&mut object, &defaults);
                object
            })
        };
        Some(RequestObjects {
            object: complete(objects.object.as_ref()),
            old: complete(objects.old.as_ref()),
        })
    }

    /// For a CREATE, a view completed by direct reads of what the caches
    /// have not seen yet: the namespace (its default queue) and the quota the
    /// job names (created a moment before the job, e.g. in the same `kubectl
    /// apply`). `None` when the caches know both.
    pub(crate) async fn fresh_view(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        objects: &RequestObjects,
    ) -> Option<FreshView<'_>> {
        if request.operation != Operation::Create {
            return None;
        }
        let mut fresh = FreshView {
            inner: self.view.as_ref(),
            namespace: None,
            quota: None,
        };
        if let Some(ns) = request.namespace.as_deref()
            && !self.view.knows_namespace(ns)
        {
            match self.api.namespace_default_queue(ns).await {
                Ok(Some(queue)) => fresh.namespace = Some((ns.to_string(), queue)),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, namespace = ns, "cannot read namespace"),
            }
        }
        let quota = objects
            .object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/labels"))
            .and_then(|l| l.get(keys::QUOTA_NAME_LABEL))
            .and_then(Value::as_str)
            .filter(|q| !q.is_empty());
        if let Some(quota) = quota
            && self.view.quota(quota).is_none()
        {
            match self.api.quota(quota).await {
                Ok(found) => fresh.quota = found,
                Err(error) => tracing::warn!(%error, quota, "cannot read ElasticQuota"),
            }
        }
        (fresh.namespace.is_some() || fresh.quota.is_some()).then_some(fresh)
    }
}

/// The caches' view, completed by fresh reads (see `Webhook::fresh_view`).
pub(crate) struct FreshView<'a> {
    inner: &'a dyn ClusterView,
    /// A namespace the caches have not seen, and its default queue.
    namespace: Option<(String, String)>,
    /// A quota the caches have not seen.
    quota: Option<QuotaInfo>,
}

impl ClusterView for FreshView<'_> {
    fn knows_namespace(&self, ns: &str) -> bool {
        self.namespace.as_ref().is_some_and(|(n, _)| n == ns) || self.inner.knows_namespace(ns)
    }
    fn namespace_default_queue(&self, ns: &str) -> Option<String> {
        match &self.namespace {
            Some((n, queue)) if n == ns => Some(queue.clone()),
            _ => self.inner.namespace_default_queue(ns),
        }
    }
    fn namespace_priority_classes(&self, ns: &str) -> Option<Vec<String>> {
        self.inner.namespace_priority_classes(ns)
    }
    fn namespace_queues_pods(&self, ns: &str) -> bool {
        self.inner.namespace_queues_pods(ns)
    }
    fn namespace_allows_unqueued_pods(&self, ns: &str) -> bool {
        self.inner.namespace_allows_unqueued_pods(ns)
    }
    fn quota(&self, name: &str) -> Option<QuotaInfo> {
        match &self.quota {
            Some(q) if q.name == name => Some(q.clone()),
            _ => self.inner.quota(name),
        }
    }
    fn leaf_quotas(&self) -> Vec<String> {
        let mut quotas = self.inner.leaf_quotas();
        if let Some(q) = self.quota.as_ref().filter(|q| !q.is_parent) {
            quotas.push(q.name.clone());
            quotas.sort();
        }
        quotas
    }
    fn priority_class_value(&self, name: &str) -> Option<i32> {
        self.inner.priority_class_value(name)
    }
    fn global_default_priority(&self) -> Option<(String, i32)> {
        self.inner.global_default_priority()
    }
    fn pod_defaults(&self, ns: &str) -> PodDefaults {
        self.inner.pod_defaults(ns)
    }
}
