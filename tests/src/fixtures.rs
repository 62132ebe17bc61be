//! Helpers tests use against a control plane: namespaces, CRDs, webhook
//! registration, waiting, and running kubectl/helm.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};

use crate::tools::{self, Tool};

/// Field manager of objects the harness applies.
pub const FIELD_MANAGER: &str = "koord-queue-tests";

/// Whether a node reports condition Ready=True.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A name unique within this test binary run: `<prefix>-<pid>-<n>`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// Creates a fresh namespace; `opted_in` sets the `koord-queue/enabled` label.
pub async fn create_namespace(client: &kube::Client, opted_in: bool) -> Result<String> {
    let name = unique_name(if opted_in { "q" } else { "plain" });
    let mut labels = serde_json::Map::new();
    if opted_in {
        labels.insert(
            koord_queue_api::keys::ENABLED_NAMESPACE_LABEL.into(),
            "true".into(),
        );
    }
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name, "labels": labels },
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(name)
}

/// Creates the namespace `name` if it does not exist.
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name },
    }))?;
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await?;
    Ok(())
}

/// Server-side applies CRDs and waits until each is Established.
pub async fn apply_crds(client: &kube::Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        let mut crd = crd.clone();
        crd.metadata.managed_fields = None;
        crd.metadata.resource_version = None;
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not established after 30s"))??;
    }
    Ok(())
}

/// Reads CRD manifests (one or more YAML documents per file).
pub fn read_crds(paths: &[&Path]) -> Result<Vec<CustomResourceDefinition>> {
    let mut crds = Vec::new();
    for path in paths {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        crds.extend(
            read_crds_from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
        );
    }
    Ok(crds)
}

/// The CustomResourceDefinitions among the YAML documents of `text`.
pub fn read_crds_from_str(text: &str) -> Result<Vec<CustomResourceDefinition>> {
    use serde::Deserialize as _;
    let mut crds = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
            crds.push(serde_yaml::from_value(value)?);
        }
    }
    Ok(crds)
}

/// Applies Koord-Queue's CRDs as checked into the chart (the files users install).
pub async fn apply_koord_queue_crds(client: &kube::Client) -> Result<()> {
    let dir = koord_queue_api::crd::chart_crd_dir();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    apply_crds(client, &read_crds(&refs)?).await
}

/// Registers (creates or replaces) a MutatingWebhookConfiguration, then waits
/// until `probe` — typically a dry-run create that checks for the mutation —
/// returns true, i.e. until the API server actually calls the webhook.
pub async fn register_mutating_webhook<F, Fut>(
    client: &kube::Client,
    config: &MutatingWebhookConfiguration,
    probe: F,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let name = config
        .metadata
        .name
        .clone()
        .context("webhook configuration without a name")?;
    let mut config = config.clone();
    config.metadata.managed_fields = None;
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&config),
    )
    .await
    .with_context(|| format!("applying MutatingWebhookConfiguration {name}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = match probe().await {
            Ok(true) => return Ok(()),
            Ok(false) => "the probe never saw the mutation".to_string(),
            Err(error) => format!("{error:#}"),
        };
        if Instant::now() > deadline {
            bail!("webhook {name} not effective after 30s: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` every 100 ms until it returns true, failing after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("condition not met within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs a provisioned CLI (kubectl, helm) with `KUBECONFIG`; stdout on
/// success, an error with stderr otherwise.
pub async fn run_tool(tool: Tool, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let output = tokio::process::Command::new(tools::path(tool)?)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", kubeconfig.with_file_name("helm-cache"))
        .env("HELM_CONFIG_HOME", kubeconfig.with_file_name("helm-config"))
        .env("HELM_DATA_HOME", kubeconfig.with_file_name("helm-data"))
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {}", tool.file_name()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "{} {} failed ({}): {}{}",
            tool.file_name(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr),
            stdout
        );
    }
    Ok(stdout)
}
