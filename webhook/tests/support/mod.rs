//! In-memory stand-ins for the cluster view and the API calls, so the router
//! can be driven without an API server (the real API server is exercised by
//! the suites in `tests/`). The one fake of the webhook's tests: the
//! integration tests here, the benchmarks, and the unit tests of the
//! crate's own modules (`unit_creator`), which include this file by path.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use koord_queue_api::QueueUnit;
use koord_queue_webhook::{
    ApiAccess, ClusterView, Created, CreatorConfig, Metrics, Policy, QuotaInfo, UnitCreator,
    Webhook,
};
use kube::core::Status;
use tokio::sync::Notify;

/// A fixed cluster: quotas (name → is_parent), namespaces' default queues,
/// PriorityClasses.
#[derive(Default)]
pub struct FixedView {
    pub quotas: BTreeMap<String, bool>,
    /// Namespace of every quota, and the namespaces each also serves.
    pub quota_namespace: String,
    pub quota_serves: BTreeMap<String, Vec<String>>,
    pub default_queues: BTreeMap<String, String>,
    pub priority_classes: BTreeMap<String, i32>,
    pub global_default: Option<(String, i32)>,
    /// The `koord-queue/priority-classes` annotation of namespaces and quotas.
    pub namespace_priority_classes: BTreeMap<String, Vec<String>>,
    pub quota_priority_classes: BTreeMap<String, Vec<String>>,
}

impl ClusterView for FixedView {
    fn knows_namespace(&self, _: &str) -> bool {
        true
    }
    fn namespace_default_queue(&self, ns: &str) -> Option<String> {
        self.default_queues.get(ns).cloned()
    }
    fn quota(&self, name: &str) -> Option<QuotaInfo> {
        self.quotas.get(name).map(|p| QuotaInfo {
            name: name.into(),
            namespace: self.quota_namespace.clone(),
            is_parent: *p,
            serves: self.quota_serves.get(name).cloned().unwrap_or_default(),
            priority_classes: self.quota_priority_classes.get(name).cloned(),
        })
    }
    fn leaf_quotas(&self) -> Vec<String> {
        self.quotas
            .iter()
            .filter(|(_, p)| !**p)
            .map(|(n, _)| n.clone())
            .collect()
    }
    fn priority_class_value(&self, name: &str) -> Option<i32> {
        self.priority_classes.get(name).copied()
    }
    fn global_default_priority(&self) -> Option<(String, i32)> {
        self.global_default.clone()
    }
    fn namespace_priority_classes(&self, ns: &str) -> Option<Vec<String>> {
        self.namespace_priority_classes.get(ns).cloned()
    }
}

/// Records created units; serves units by name. Its unit creates wait for
/// `gate` when it is set, and creates and dry-run checks fail while
/// `failing` is nonzero (that many times) with HTTP `status`.
#[derive(Default)]
pub struct MemoryApi {
    pub gate: Option<Arc<Notify>>,
    pub failing: AtomicU32,
    pub status: u16,
    /// Dry-run create checks made.
    pub dry_runs: AtomicU32,
    pub units: Mutex<BTreeMap<(String, String), QueueUnit>>,
    pub creates: Mutex<u64>,
    /// Quotas only a direct read finds (name → is_parent): created a moment
    /// ago, not in the cached view yet.
    pub uncached_quotas: Mutex<BTreeMap<String, bool>>,
    /// Stored jobs by (namespace, name), as the API server keeps them.
    pub jobs: Mutex<BTreeMap<(String, String), serde_json::Value>>,
    pub job_reads: Mutex<u64>,
    /// Stored pods by namespace, listed by label selector `key=value`.
    pub pods: Mutex<BTreeMap<String, Vec<serde_json::Value>>>,
}

impl ApiAccess for MemoryApi {
    fn create_unit<'a>(
        &'a self,
        unit: &'a QueueUnit,
    ) -> BoxFuture<'a, Result<Created, kube::Error>> {
        Box::pin(async move {
            if let Some(gate) = &self.gate {
                gate.notified().await;
            }
            if let Some(e) = self.fail() {
                return Err(e);
            }
            let key = (
                unit.metadata.namespace.clone().unwrap_or_default(),
                unit.metadata.name.clone().unwrap_or_default(),
            );
            *self.creates.lock().unwrap() += 1;
            let mut units = self.units.lock().unwrap();
            Ok(match units.get(&key) {
                Some(existing) => Created::Existing(Box::new(existing.clone())),
                None => {
                    units.insert(key, unit.clone());
                    Created::New
                }
            })
        })
    }
    fn get_unit<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<QueueUnit>, kube::Error>> {
        let unit = self
            .units
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned();
        Box::pin(async move { Ok(unit) })
    }
    fn check_unit_create<'a>(&'a self, _: &'a QueueUnit) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            self.dry_runs.fetch_add(1, Ordering::AcqRel);
            match self.fail() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }
    fn get_job<'a>(
        &'a self,
        _: &'static koord_queue_api::jobs::JobKind,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<serde_json::Value>, kube::Error>> {
        *self.job_reads.lock().unwrap() += 1;
        let job = self
            .jobs
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned();
        Box::pin(async move { Ok(job) })
    }
    fn namespace_default_queue<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, kube::Error>> {
        Box::pin(async { Ok(None) })
    }
    fn quota<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<QuotaInfo>, kube::Error>> {
        let found = self
            .uncached_quotas
            .lock()
            .unwrap()
            .get(name)
            .map(|is_parent| QuotaInfo {
                name: name.into(),
                namespace: "team-ns".into(),
                is_parent: *is_parent,
                serves: vec![],
                priority_classes: None,
            });
        Box::pin(async move { Ok(found) })
    }
    fn list_pods<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<serde_json::Value>, kube::Error>> {
        let (key, value) = selector.split_once('=').unwrap();
        let pods = self
            .pods
            .lock()
            .unwrap()
            .get(namespace)
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["labels"][key] == value)
            .cloned()
            .collect();
        Box::pin(async move { Ok(pods) })
    }
}

impl MemoryApi {
    /// The error of a failing call, counting it down; `None` once
    /// `failing` is down to 0.
    fn fail(&self) -> Option<kube::Error> {
        self.failing
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
            .then(|| {
                kube::Error::Api(
                    Status::failure("etcd is down", "InternalError")
                        .with_code(self.status)
                        .boxed(),
                )
            })
    }

    /// Stores `job` as the API server would after admission (with a uid);
    /// returns it.
    pub fn store(&self, job: &serde_json::Value) -> serde_json::Value {
        let mut job = job.clone();
        let name = job["metadata"]["name"].as_str().unwrap().to_string();
        let namespace = job["metadata"]["namespace"].as_str().unwrap().to_string();
        job["metadata"]["uid"] = format!("uid-{namespace}-{name}").into();
        self.jobs
            .lock()
            .unwrap()
            .insert((namespace, name), job.clone());
        job
    }

    /// The unit `namespace/name` once it has been created (creates happen
    /// right after the review is answered); panics after 5 s.
    pub async fn created_unit(&self, namespace: &str, name: &str) -> QueueUnit {
        let key = (namespace.to_string(), name.to_string());
        for _ in 0..2500 {
            if let Some(unit) = self.units.lock().unwrap().get(&key) {
                return unit.clone();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("QueueUnit {namespace}/{name} was not created");
    }
}

/// A held batch/v1 Job `namespace/name` of two 1-CPU pods, naming unit
/// `unit` and queue `q`, as the webhook's patch leaves it.
pub fn held_job(namespace: &str, name: &str, unit: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
            "labels": {"quota.scheduling.koordinator.sh/name": "q"},
            "annotations": {"koord-queue/queue-unit": unit, "koord-queue/queue": "q"}},
        "spec": {"suspend": true, "parallelism": 2, "template": {"spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
    })
}

/// The view used by most tests: leaf quotas team-a/team-b under parent org,
/// PriorityClass high = 1000, namespace `defaulted` → queue team-b.
pub fn standard_view() -> FixedView {
    FixedView {
        quotas: [
            ("org".into(), true),
            ("team-a".into(), false),
            ("team-b".into(), false),
        ]
        .into(),
        quota_namespace: "team-ns".into(),
        quota_serves: [("team-b".into(), vec!["defaulted".into()])].into(),
        default_queues: [("defaulted".into(), "team-b".into())].into(),
        priority_classes: [("high".into(), 1000)].into(),
        global_default: None,
        ..Default::default()
    }
}

pub const SCHEDULER: &str = "system:serviceaccount:koord-queue:koord-queue-scheduler";

/// A webhook over `view` and `api`, caches synced, every kind enabled.
pub fn webhook(view: FixedView, api: Arc<MemoryApi>) -> Arc<Webhook> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    let view: Arc<dyn ClusterView> = Arc::new(view);
    let units = UnitCreator::start(
        api.clone(),
        view.clone(),
        metrics.clone(),
        CreatorConfig::new(16),
    );
    Arc::new(Webhook {
        policy: Policy {
            enabled_kinds: [
                "batchjob", "tf", "pytorch", "mpi", "ray", "spark", "argo", "jobset", "pod",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>(),
            default_queue: None,
            scheduler_user: SCHEDULER.into(),
            scheduler_groups: vec![],
            allow_cross_namespace_quota: false,
            allow_system_priority_classes: false,
            review_pods: false,
        },
        view,
        api,
        metrics,
        units,
        review_timeout: Duration::from_secs(5),
        synced: true.into(),
        children: Default::default(),
    })
}

/// An AdmissionReview of `operation` on `object` (and `old` for UPDATE).
pub fn review(
    operation: &str,
    object: serde_json::Value,
    old: Option<serde_json::Value>,
    user: &str,
) -> serde_json::Value {
    let api_version = object["apiVersion"]
        .as_str()
        .unwrap_or("batch/v1")
        .to_string();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let kind = object["kind"].as_str().unwrap_or("Job").to_string();
    let plural = format!("{}s", kind.to_lowercase());
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": group, "version": version, "kind": kind },
            "resource": { "group": group, "version": version, "resource": plural },
            "name": object["metadata"]["name"].as_str().unwrap_or(""),
            "namespace": object["metadata"]["namespace"].as_str().unwrap_or("team-ns"),
            "operation": operation,
            "userInfo": { "username": user, "groups": ["system:authenticated"] },
            "object": object,
            "oldObject": old,
            "dryRun": false,
        }
    })
}

/// A small batch/v1 Job naming quota `quota`.
pub fn job(name: &str, quota: Option<&str>) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    if let Some(q) = quota {
        labels.insert("quota.scheduling.koordinator.sh/name".into(), q.into());
    }
    serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "namespace": "team-ns", "labels": labels },
        "spec": { "parallelism": 3, "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "busybox",
                "resources": { "requests": { "cpu": "500m", "memory": "1Gi" } } }] } } }
    })
}

/// `object` with the JSON Patch of an admission `response` applied
/// (unchanged when the response carries no patch).
pub fn patched(object: &serde_json::Value, response: &serde_json::Value) -> serde_json::Value {
    use base64::Engine;
    let Some(patch) = response["response"]["patch"].as_str() else {
        return object.clone();
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut object = object.clone();
    json_patch::patch(&mut object, &patch).unwrap();
    object
}
