//! The dashboard on a local control plane, as `make run` and its browser
//! test start it: in-process on 127.0.0.1, reading kube-apiserver with the
//! signed-in user's token (its CA written beside the control plane), and a
//! demo administrator's token to sign in with.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use koord_queue_api::keys;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::ControlPlane;

/// The demo administrator's ServiceAccount (in the system namespace).
pub const ADMIN: &str = "dashboard-admin";

/// Starts the dashboard against `cp`, re-reading live pages every `refresh`,
/// on the binary-long runtime (it serves the tests that follow the first).
pub async fn start(cp: &ControlPlane, refresh: Duration) -> Result<koord_queue_dashboard::Running> {
    let args = args(cp, refresh)?;
    crate::background::run(async move { koord_queue_dashboard::serve(&args).await }).await?
}

/// The dashboard's settings against `cp`: 127.0.0.1 on a free port, the
/// control plane's API server and CA.
pub fn args(cp: &ControlPlane, refresh: Duration) -> Result<koord_queue_dashboard::Args> {
    use clap::Parser as _;
    let ca = cp.dir().join("dashboard-ca.pem");
    std::fs::write(&ca, cp.pki().ca.cert_pem())?;
    let mut args = koord_queue_dashboard::Args::parse_from(["koord-queue-dashboard"]);
    args.addr = SocketAddr::from(([127, 0, 0, 1], 0));
    args.server = Some(cp.server().to_string());
    args.ca_file = Some(ca);
    args.refresh = refresh;
    Ok(args)
}

/// A token of the demo administrator (a ServiceAccount bound to
/// `cluster-admin`), valid for `ttl`: what `make run` prints to sign in with.
pub async fn admin_token(cp: &ControlPlane, ttl: Duration) -> Result<String> {
    let admin = cp.client().await?;
    crate::fixtures::ensure_namespace(&admin, keys::SYSTEM_NAMESPACE).await?;
    let apply = PatchParams::apply("koord-queue-tests").force();
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": { "name": ADMIN, "namespace": keys::SYSTEM_NAMESPACE },
    }))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), keys::SYSTEM_NAMESPACE)
        .patch(ADMIN, &apply, &Patch::Apply(&sa))
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": ADMIN },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
        "subjects": [{ "kind": "ServiceAccount", "name": ADMIN, "namespace": keys::SYSTEM_NAMESPACE }],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(ADMIN, &apply, &Patch::Apply(&binding))
        .await?;
    crate::install::service_account_token(&admin, keys::SYSTEM_NAMESPACE, ADMIN, ttl).await
}
