//! The real LeaderWorkerSet controller (v0.9.0, built by
//! `tests/provision/provision.sh`) against a local control plane, as a
//! process of the harness: its controllers make each replica's leader
//! StatefulSet, the leader pods, and each leader's worker StatefulSet; its
//! webhooks (LeaderWorkerSet defaulting and validation, the pod webhook that
//! labels a group's pods) are served on 127.0.0.1 with a certificate of the
//! cluster CA and registered by URL, as the harness registers Koord-Queue's.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::ControlPlane;
use crate::process::{Process, free_port};
use crate::tools::{self, Tool};

/// The LWS controller process; killed on drop.
#[derive(Debug)]
pub struct LwsController {
    /// The process.
    pub process: Process,
}

/// One webhook of LWS's configurations, by URL.
fn hook(name: &str, url: &str, ca: &str, group: &str, resource: &str, pods: bool) -> Value {
    let mut hook = json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": { "url": url, "caBundle": ca },
        "rules": [{ "apiGroups": [group], "apiVersions": ["v1"], "resources": [resource],
                    "operations": ["CREATE", "UPDATE"] }],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": 10,
    });
    if pods {
        // As LWS's kustomize patch: only the pods of a LeaderWorkerSet.
        hook["objectSelector"] = json!({ "matchExpressions": [
            { "key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists" }] });
        hook["rules"][0]["operations"] = json!(["CREATE"]);
    }
    hook
}

impl LwsController {
    /// Starts the controller as the cluster admin (no leader election, no
    /// certificate rotation) and registers its webhooks; returns once its
    /// webhook server answers.
    pub async fn start(cp: &ControlPlane) -> Result<Self> {
        use base64::Engine;
        let dir = cp.dir().join("lws");
        crate::webhook::write_serving_cert(cp, &dir.join("certs"))?;
        let port = free_port()?;
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.lws.x-k8s.io/v1alpha1\nkind: Configuration\n\
                 leaderElection:\n  leaderElect: false\n\
                 internalCertManagement:\n  enable: false\n\
                 webhook:\n  host: 127.0.0.1\n  port: {port}\n  certDir: {}\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: 127.0.0.1:{}\n",
                dir.join("certs").display(),
                free_port()?
            ),
        )?;
        let process = Process::start(
            "lws-controller",
            &tools::path(Tool::LwsController)?,
            &[
                format!("--kubeconfig={}", cp.kubeconfig().display()),
                format!("--config={}", config.display()),
                "--zap-log-level=info".into(),
            ],
            cp.dir().join("lws-controller.log"),
        )?;
        let ca = base64::engine::general_purpose::STANDARD.encode(cp.pki().ca.cert_pem());
        let url = |path: &str| format!("https://127.0.0.1:{port}{path}");
        let group = "leaderworkerset.x-k8s.io";
        let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": { "name": "lws-mutating-webhook-configuration" },
            "webhooks": [
                hook("mleaderworkerset.kb.io", &url("/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset"), &ca, group, "leaderworkersets", false),
                hook("mpod.kb.io", &url("/mutate--v1-pod"), &ca, "", "pods", true),
            ],
        }))?;
        let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": { "name": "lws-validating-webhook-configuration" },
            "webhooks": [
                hook("vleaderworkerset.kb.io", &url("/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset"), &ca, group, "leaderworkersets", false),
                hook("vpod.kb.io", &url("/validate--v1-pod"), &ca, "", "pods", true),
            ],
        }))?;
        let client = cp.client().await?;
        let mut controller = Self { process };
        // Its webhook server starts with the manager: wait until it serves.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            controller.process.check_alive()?;
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the LWS controller's webhook server did not start:\n{}",
                controller.process.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &mutating)
            .await
            .context("registering LWS's mutating webhooks")?;
        Api::<ValidatingWebhookConfiguration>::all(client)
            .create(&PostParams::default(), &validating)
            .await
            .context("registering LWS's validating webhooks")?;
        Ok(controller)
    }
}
