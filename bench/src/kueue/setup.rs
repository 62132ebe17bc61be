//! Kueue's CRDs, its webhooks registered by URL, and the queues of the
//! benchmark's shape as Kueue objects.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use super::{GROUP, Install, LOCAL_QUEUE, QUEUE_LABEL, VERSION};
use crate::shape::{LEAF_MAX_CPU, LEAF_MIN_CPU, Shape};
use koord_queue_tests::fixtures;
use koord_queue_tests::process::Process;

/// The one ResourceFlavor: the benchmark has no node types.
const FLAVOR: &str = "default";

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, kind))
}

/// Applies every CRD of `<cache>/kueue/crds` and waits until they are
/// established.
pub async fn apply_crds(admin: &kube::Client, install: &Install) -> Result<()> {
    let dir = install.dir.join("crds");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let crds = fixtures::read_crds(&refs)?;
    if crds.is_empty() {
        bail!("no CRDs in {}", dir.display());
    }
    fixtures::apply_crds(admin, &crds).await
}

/// Whether a webhook of Kueue's manifests is one this configuration serves:
/// its rules name only Kueue's own group or batch/v1 Jobs (the webhooks of
/// integrations that are not enabled are not served, and with
/// failurePolicy Fail they would refuse every such object).
fn served(webhook: &Value) -> bool {
    let rules = webhook["rules"].as_array().cloned().unwrap_or_default();
    !rules.is_empty()
        && rules.iter().all(|r| {
            r["apiGroups"].as_array().is_some_and(|groups| {
                groups
                    .iter()
                    .all(|g| g == GROUP || (g == "batch" && r["resources"] == json!(["jobs"])))
            })
        })
}

/// Kueue's webhook configurations (`config/components/webhook/manifests.yaml`
/// as provisioned) with only the served webhooks, each calling `url` + its
/// path, trusting `ca_pem`.
pub fn webhook_configurations(manifests: &str, url: &str, ca_pem: &str) -> Result<Vec<Value>> {
    use base64::Engine as _;
    use serde::Deserialize as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(manifests) {
        let mut config = Value::deserialize(doc).context("parsing Kueue's webhook manifests")?;
        if config.is_null() {
            continue;
        }
        let webhooks: Vec<Value> = config["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(served)
            .map(|mut w| {
                let path = w["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                w["clientConfig"] = json!({ "url": format!("{url}{path}"), "caBundle": ca });
                w
            })
            .collect();
        if webhooks
            .iter()
            .any(|w| w["clientConfig"]["url"] == json!(url))
        {
            bail!("a Kueue webhook without a service path");
        }
        let name = config["metadata"]["name"].as_str().unwrap_or_default();
        config["metadata"] = json!({ "name": format!("kueue-bench-{name}") });
        config["webhooks"] = Value::Array(webhooks);
        out.push(config);
    }
    Ok(out)
}

/// Registers Kueue's served webhooks at `url`.
pub async fn register_webhooks(
    admin: &kube::Client,
    install: &Install,
    url: &str,
    ca_pem: &str,
) -> Result<()> {
    let path = install.dir.join("webhooks.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut jobs = false;
    for config in webhook_configurations(&text, url, ca_pem)? {
        let pp = PostParams::default();
        match config["kind"].as_str() {
            Some("MutatingWebhookConfiguration") => {
                jobs |= config["webhooks"]
                    .as_array()
                    .is_some_and(|ws| ws.iter().any(|w| w["name"] == "mjob.kb.io"));
                let c: MutatingWebhookConfiguration = serde_json::from_value(config)?;
                Api::all(admin.clone()).create(&pp, &c).await?;
            }
            Some("ValidatingWebhookConfiguration") => {
                let c: ValidatingWebhookConfiguration = serde_json::from_value(config)?;
                Api::all(admin.clone()).create(&pp, &c).await?;
            }
            other => bail!("unexpected {other:?} in {}", path.display()),
        }
    }
    if !jobs {
        bail!("{} has no mjob.kb.io webhook", path.display());
    }
    Ok(())
}

/// Waits until Kueue's Job webhook suspends a queued Job (a dry-run create).
pub async fn wait_for_job_webhook(admin: &kube::Client, process: &mut Process) -> Result<()> {
    let ns = fixtures::create_namespace(admin, false).await?;
    let api: Api<Job> = Api::namespaced(admin.clone(), &ns);
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "kueue-probe", "labels": { QUEUE_LABEL: LOCAL_QUEUE } },
        "spec": { "template": { "spec": { "restartPolicy": "Never",
            "containers": [{ "name": "c", "image": "busybox" }] } } },
    }))?;
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        process.check_alive()?;
        let last = match api.create(&pp, &job).await {
            Ok(j) if j.spec.as_ref().and_then(|s| s.suspend) == Some(true) => return Ok(()),
            Ok(_) => "the job was not suspended".to_string(),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            bail!("Kueue's Job webhook did not hold a job within 60 s: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The Kueue objects of `shape`: the flavor, a WorkloadPriorityClass per
/// class, a ClusterQueue per leaf in its parent's cohort, a LocalQueue in
/// each leaf's namespace.
pub fn queue_objects(shape: &Shape) -> Vec<(&'static str, Value)> {
    let object = |kind: &str, name: &str, ns: Option<&str>, body: Value| {
        let mut v = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"), "kind": kind,
            "metadata": { "name": name },
        });
        if let Some(ns) = ns {
            v["metadata"]["namespace"] = json!(ns);
        }
        if let (Some(v), Some(body)) = (v.as_object_mut(), body.as_object()) {
            v.extend(body.clone());
        }
        v
    };
    let mut out = vec![(
        "ResourceFlavor",
        object("ResourceFlavor", FLAVOR, None, json!({ "spec": {} })),
    )];
    for class in &shape.classes {
        out.push((
            "WorkloadPriorityClass",
            object(
                "WorkloadPriorityClass",
                class.name,
                None,
                json!({ "value": class.priority, "description": "koord-queue benchmark class" }),
            ),
        ));
    }
    for leaf in &shape.leaves {
        let cohort = &shape.parents[leaf.parent].name;
        out.push((
            "ClusterQueue",
            object(
                "ClusterQueue",
                &leaf.name,
                None,
                json!({ "spec": {
                    "cohortName": cohort,
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": { "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority" },
                    "resourceGroups": [{
                        "coveredResources": ["cpu"],
                        "flavors": [{ "name": FLAVOR, "resources": [{
                            "name": "cpu",
                            "nominalQuota": LEAF_MIN_CPU.to_string(),
                            "borrowingLimit": (LEAF_MAX_CPU - LEAF_MIN_CPU).to_string(),
                        }]}],
                    }],
                }}),
            ),
        ));
        out.push((
            "LocalQueue",
            object(
                "LocalQueue",
                LOCAL_QUEUE,
                Some(&leaf.namespace),
                json!({ "spec": { "clusterQueue": leaf.name } }),
            ),
        ));
    }
    out
}

/// Creates [`queue_objects`] (an existing one counts as created).
pub async fn create_queues(admin: &kube::Client, shape: &Shape) -> Result<()> {
    for (kind, value) in queue_objects(shape) {
        let ar = resource(kind);
        let object: DynamicObject = serde_json::from_value(value)?;
        let api: Api<DynamicObject> = match object.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &ar),
            None => Api::all_with(admin.clone(), &ar),
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "creating {kind} {}",
                        object.metadata.name.unwrap_or_default()
                    )
                });
            }
        }
    }
    Ok(())
}

/// Waits until every ClusterQueue of `shape` says `Active`.
pub async fn wait_for_active_queues(
    admin: &kube::Client,
    shape: &Shape,
    process: &mut Process,
    within: Duration,
) -> Result<()> {
    let api: Api<DynamicObject> = Api::all_with(admin.clone(), &resource("ClusterQueue"));
    let deadline = Instant::now() + within;
    loop {
        process.check_alive()?;
        let active = api
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|cq| {
                cq.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Active" && c["status"] == "True")
                    })
            })
            .count();
        if active >= shape.leaves.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{active} of {} ClusterQueues active after {within:?}",
                shape.leaves.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFESTS: &str = r#"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: { name: webhook-service, namespace: system, path: /mutate-batch-v1-job }
  failurePolicy: Fail
  name: mjob.kb.io
  rules:
  - { apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs] }
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: { name: webhook-service, namespace: system, path: /mutate--v1-pod }
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - { apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods] }
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: { name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload }
  failurePolicy: Fail
  name: mworkload.kb.io
  rules:
  - { apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads] }
  sideEffects: None
"#;

    #[test]
    fn only_served_webhooks_are_registered_by_url() -> Result<()> {
        let configs = webhook_configurations(MANIFESTS, "https://127.0.0.1:9443", "CA")?;
        assert_eq!(configs.len(), 1);
        let c = &configs[0];
        assert_eq!(
            c["metadata"]["name"],
            "kueue-bench-mutating-webhook-configuration"
        );
        let names: Vec<&str> = c["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w["name"].as_str())
            .collect();
        assert_eq!(names, ["mjob.kb.io", "mworkload.kb.io"]);
        assert_eq!(
            c["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/mutate-batch-v1-job"
        );
        assert!(c["webhooks"][0]["clientConfig"]["service"].is_null());
        Ok(())
    }

    #[test]
    fn a_cluster_queue_per_leaf_in_its_parents_cohort() -> Result<()> {
        let shape = Shape::new("1k", 1000, 30, 5, crate::shape::CLASSES)?;
        let objects = queue_objects(&shape);
        let cqs: Vec<&Value> = objects
            .iter()
            .filter(|(k, _)| *k == "ClusterQueue")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(cqs.len(), 30);
        let cq = cqs[29];
        assert_eq!(cq["metadata"]["name"], "cq-4-29");
        assert_eq!(cq["spec"]["cohortName"], "cohort-4");
        let cpu = &cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0];
        assert_eq!(
            (cpu["nominalQuota"].as_str(), cpu["borrowingLimit"].as_str()),
            (Some("20"), Some("100"))
        );
        let lqs = objects.iter().filter(|(k, _)| *k == "LocalQueue").count();
        assert_eq!(lqs, 30);
        Ok(())
    }
}
