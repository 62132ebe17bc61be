//! The real controllers of job frameworks against a local control plane, as
//! processes of the harness (built by `tests/provision/provision.sh` from the
//! module proxy): the LeaderWorkerSet controller (v0.9.0) and the JobSet
//! controller (v0.12.0). Both are kubebuilder managers: their webhooks
//! (defaulting and validation of their kind, a pod webhook for their pods)
//! are served on 127.0.0.1 with a certificate of the cluster CA and
//! registered by URL, as the harness registers Koord-Queue's; no leader
//! election, no certificate rotation. What differs between them is data
//! ([`Framework`]).

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

/// A framework controller: its binary, configuration API, kind and the
/// label its pod webhooks select pods by.
#[derive(Clone, Copy, Debug)]
pub struct Framework {
    /// Short name (logs, webhook configurations' names).
    pub name: &'static str,
    /// Its binary.
    pub tool: Tool,
    /// `apiVersion` of its configuration file.
    pub config_api: &'static str,
    /// Its kind's API group, version and plural.
    pub group: &'static str,
    /// Its kind's version.
    pub version: &'static str,
    /// Its kind's plural.
    pub plural: &'static str,
    /// The label its pod webhooks select pods by.
    pub pod_label: &'static str,
}

/// LeaderWorkerSet v0.9.0 (the newest the module proxy serves).
pub const LWS: Framework = Framework {
    name: "lws",
    tool: Tool::LwsController,
    config_api: "config.lws.x-k8s.io/v1alpha1",
    group: "leaderworkerset.x-k8s.io",
    version: "v1",
    plural: "leaderworkersets",
    pod_label: "leaderworkerset.sigs.k8s.io/name",
};

/// JobSet v0.12.0.
pub const JOBSET: Framework = Framework {
    name: "jobset",
    tool: Tool::JobSetController,
    config_api: "config.jobset.x-k8s.io/v1alpha1",
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    plural: "jobsets",
    pod_label: "jobset.sigs.k8s.io/jobset-name",
};

/// A running framework controller; killed on drop.
#[derive(Debug)]
pub struct Controller {
    /// The process.
    pub process: Process,
}

impl Framework {
    /// kubebuilder's webhook path of this kind (`/mutate-<group>-<version>-<kind>`).
    fn kind_path(&self, verb: &str) -> String {
        let kind = self.plural.trim_end_matches('s');
        format!(
            "/{verb}-{}-{}-{kind}",
            self.group.replace('.', "-"),
            self.version
        )
    }

    /// One webhook of its configurations, by URL: of its kind, or (`pods`)
    /// of the pods carrying its label, on create.
    fn hook(&self, verb: &str, url: &str, ca: &str, pods: bool) -> Value {
        let (short, path, rule) = if pods {
            (
                format!("{}pod.kb.io", &verb[..1]),
                format!("/{verb}--v1-pod"),
                json!({ "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                        "operations": ["CREATE"] }),
            )
        } else {
            (
                format!("{}{}.kb.io", &verb[..1], self.plural.trim_end_matches('s')),
                self.kind_path(verb),
                json!({ "apiGroups": [self.group], "apiVersions": [self.version],
                        "resources": [self.plural], "operations": ["CREATE", "UPDATE"] }),
            )
        };
        let mut hook = json!({
            "name": short,
            "admissionReviewVersions": ["v1"],
            "clientConfig": { "url": format!("{url}{path}"), "caBundle": ca },
            "rules": [rule],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
        });
        if pods {
            hook["objectSelector"] = json!({ "matchExpressions": [
                { "key": self.pod_label, "operator": "Exists" }] });
        }
        hook
    }

    /// Starts the controller as the cluster admin and registers its
    /// webhooks; returns once its webhook server answers.
    pub async fn start(&self, cp: &ControlPlane) -> Result<Controller> {
        use base64::Engine;
        let dir = cp.dir().join(self.name);
        crate::webhook::write_serving_cert(cp, &dir.join("certs"))?;
        let port = free_port()?;
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: {}\nkind: Configuration\n\
                 leaderElection:\n  leaderElect: false\n\
                 internalCertManagement:\n  enable: false\n\
                 webhook:\n  host: 127.0.0.1\n  port: {port}\n  certDir: {}\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: 127.0.0.1:{}\n",
                self.config_api,
                dir.join("certs").display(),
                free_port()?
            ),
        )?;
        let mut controller = Controller {
            process: Process::start(
                &format!("{}-controller", self.name),
                &tools::path(self.tool)?,
                &[
                    format!("--kubeconfig={}", cp.kubeconfig().display()),
                    format!("--config={}", config.display()),
                ],
                cp.dir().join(format!("{}-controller.log", self.name)),
            )?,
        };
        // Its webhook server starts with the manager: wait until it serves.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            controller.process.check_alive()?;
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the {} controller's webhook server did not start:\n{}",
                self.name,
                controller.process.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let ca = base64::engine::general_purpose::STANDARD.encode(cp.pki().ca.cert_pem());
        let url = format!("https://127.0.0.1:{port}");
        let configuration = |verb: &str| {
            json!({
                "metadata": { "name": format!("{}-{verb}-webhook-configuration", self.name) },
                "webhooks": [self.hook(verb, &url, &ca, false), self.hook(verb, &url, &ca, true)],
            })
        };
        let client = cp.client().await?;
        let mutating: MutatingWebhookConfiguration =
            serde_json::from_value(configuration("mutate"))?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &mutating)
            .await
            .with_context(|| format!("registering {}'s mutating webhooks", self.name))?;
        let validating: ValidatingWebhookConfiguration =
            serde_json::from_value(configuration("validate"))?;
        Api::<ValidatingWebhookConfiguration>::all(client)
            .create(&PostParams::default(), &validating)
            .await
            .with_context(|| format!("registering {}'s validating webhooks", self.name))?;
        Ok(controller)
    }
}
