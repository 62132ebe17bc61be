//! The visibility API on a local control plane, as `make run` and the suites
//! register it: a serving certificate for the Service's name (signed by the
//! cluster CA), an ExternalName Service pointing the aggregation layer at
//! the scheduler's local port (`https://localhost:<port>`), and the
//! APIService with that CA as its bundle.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use koord_queue_api::keys;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::ControlPlane;

/// The Service the APIService names (as the chart's, without the release prefix).
pub const SERVICE: &str = "koord-queue-visibility";
/// The APIService.
pub const API_SERVICE: &str = "v1alpha1.visibility.koord-queue.io";

/// Writes a serving certificate for Service `service` of `namespace` (and
/// 127.0.0.1, for direct calls), signed by the cluster CA, into `dir`.
pub fn write_serving_cert(
    cp: &ControlPlane,
    service: &str,
    namespace: &str,
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut names = koord_queue_certs::ServingNames::for_service(service, namespace);
    names.ips.push([127, 0, 0, 1].into());
    let cert = cp
        .pki()
        .ca
        .issue_serving(service, &names, Duration::from_secs(24 * 3600))?;
    koord_queue_certs::write_pem_pair(dir, &cert.cert_pem, &cert.key_pem)?;
    Ok(())
}

/// [`write_serving_cert`] for [`SERVICE`] into a directory of the control
/// plane; returns the directory.
pub fn serving_dir(cp: &ControlPlane) -> Result<PathBuf> {
    let dir = cp.dir().join("visibility-tls");
    write_serving_cert(cp, SERVICE, keys::SYSTEM_NAMESPACE, &dir)?;
    Ok(dir)
}

/// `args` serving the visibility API on a free local port.
pub fn with_visibility(
    mut args: koord_queue_scheduler::Args,
    cp: &ControlPlane,
) -> Result<koord_queue_scheduler::Args> {
    args.visibility_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    args.visibility_cert_dir = Some(serving_dir(cp)?);
    Ok(args)
}

/// Registers the API served at `port` and waits until the aggregation layer
/// reports it available.
pub async fn register(cp: &ControlPlane, port: u16) -> Result<()> {
    let admin = cp.client().await?;
    let apply = PatchParams::apply("koord-queue-tests").force();
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": keys::SYSTEM_NAMESPACE },
    }))?;
    Api::<Namespace>::all(admin.clone())
        .patch(keys::SYSTEM_NAMESPACE, &apply, &Patch::Apply(&ns))
        .await?;
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": SERVICE, "namespace": keys::SYSTEM_NAMESPACE },
        "spec": { "type": "ExternalName", "externalName": "localhost",
                  "ports": [{ "name": "https", "port": port, "protocol": "TCP" }] },
    }))?;
    Api::<Service>::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE)
        .patch(SERVICE, &apply, &Patch::Apply(&service))
        .await?;
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(cp.pki().ca.cert_pem());
    let api_service: APIService = serde_json::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": { "name": API_SERVICE },
        "spec": { "group": "visibility.koord-queue.io", "version": "v1alpha1",
                  "service": { "name": SERVICE, "namespace": keys::SYSTEM_NAMESPACE, "port": port },
                  "caBundle": bundle, "groupPriorityMinimum": 1000, "versionPriority": 15 },
    }))?;
    let api = Api::<APIService>::all(admin);
    api.patch(API_SERVICE, &apply, &Patch::Apply(&api_service))
        .await?;
    crate::fixtures::eventually(Duration::from_secs(60), || async {
        let s = api.get(API_SERVICE).await?;
        Ok(s.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True"))
    })
    .await
    .context("the APIService did not become available")
}

/// GETs `path` of the visibility API through the API server as `client`
/// (its identity, its rights); the status code and the body.
pub async fn get(client: &kube::Client, path: &str) -> Result<(u16, serde_json::Value)> {
    let request = http::Request::get(path).body(Vec::new())?;
    match client.request::<serde_json::Value>(request).await {
        Ok(body) => Ok((200, body)),
        Err(kube::Error::Api(status)) => Ok((status.code, serde_json::to_value(&status)?)),
        Err(e) => Err(e.into()),
    }
}

pub use koord_queue_visibility::client::Wire;

/// GETs `uri` as JSON as `client` with `Accept-Encoding: gzip`, as
/// client-go (hence kubectl) asks by default, and gunzips a gzipped answer
/// (the CLI's reader, `koord_queue_visibility::client`).
pub async fn get_accepting_gzip(client: &kube::Client, uri: &str) -> Result<Wire> {
    Ok(koord_queue_visibility::client::get_wire(client, uri).await?)
}

/// The path of a namespace's pending units.
pub fn namespace_path(namespace: &str) -> String {
    format!("/apis/visibility.koord-queue.io/v1alpha1/namespaces/{namespace}/pendingunits")
}

/// The path of a Queue's backlog.
pub fn queue_path(queue: &str) -> String {
    format!(
        "/apis/visibility.koord-queue.io/v1alpha1/namespaces/{}/queues/{queue}/pendingunits",
        keys::SYSTEM_NAMESPACE
    )
}

/// The names of a list's items, in order.
pub fn names(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Applies the chart's ClusterRoles of the API, as `helm template` renders
/// them (the reader aggregated to `view`/`edit`/`admin`, and the admin
/// one), so that tenants bound to the built-in roles get what a cluster
/// with the chart gives them.
pub async fn install_chart_roles(cp: &ControlPlane) -> Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koord-queue");
    let out = std::process::Command::new(crate::tools::path(crate::tools::Tool::Helm)?)
        .args([
            "template",
            "koord-queue",
            chart,
            "-n",
            keys::SYSTEM_NAMESPACE,
        ])
        .args(["--show-only", "templates/visibility.yaml"])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let roles = Api::<ClusterRole>::all(cp.client().await?);
    let apply = PatchParams::apply("koord-queue-tests").force();
    for doc in serde_yaml::Deserializer::from_slice(&out.stdout) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if value["kind"] == "ClusterRole" {
            let role: ClusterRole = serde_json::from_value(value)?;
            let name = role
                .metadata
                .name
                .clone()
                .context("a ClusterRole without a name")?;
            roles.patch(&name, &apply, &Patch::Apply(&role)).await?;
        }
    }
    Ok(())
}

/// The chart's roles, the webhook, and a leading scheduler `identity` that
/// serves the API, registered with the aggregation layer: what a suite
/// that reads through the API starts once.
pub async fn start_serving_leader(
    cp: &ControlPlane,
    identity: &str,
) -> Result<crate::scheduler::SchedulerReplica> {
    install_chart_roles(cp).await?;
    crate::webhook::start_and_register(cp).await?;
    let args = with_visibility(crate::scheduler::test_args(identity), cp)?;
    let leader = crate::scheduler::start_leader(cp, args).await?;
    let port = leader
        .visibility_addr
        .context("the scheduler does not serve the visibility API")?
        .port();
    register(cp, port).await?;
    Ok(leader)
}

/// The shared tier 2 control plane with [`start_serving_leader`] run once
/// for this test binary (each suite is its own process).
pub async fn shared_serving(identity: &str) -> Result<&'static ControlPlane> {
    static LEADER: tokio::sync::OnceCell<crate::scheduler::SchedulerReplica> =
        tokio::sync::OnceCell::const_new();
    let cp = crate::shared::tier2().await?;
    LEADER
        .get_or_try_init(|| start_serving_leader(cp, identity))
        .await?;
    Ok(cp)
}
