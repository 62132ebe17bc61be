//! The real controllers of job frameworks against a local control plane, as
//! processes of the harness (built by `tests/provision/provision.sh` from the
//! module proxy): the LeaderWorkerSet controller (v0.9.0), the JobSet
//! controller (v0.12.0) and the Kubeflow Trainer v2 controller (v2.3.0).
//! All are kubebuilder managers: their webhooks (defaulting and validation
//! of their kinds, for some a pod webhook for their pods)
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

/// Where a framework's manager takes its webhook serving certificate from.
#[derive(Clone, Copy, Debug)]
pub enum Certs {
    /// A `certDir` in its configuration, rotation off under this key
    /// (`internalCertManagement`, kubebuilder's scaffold).
    ConfigDir(&'static str),
    /// controller-runtime's default directory under the temporary
    /// directory (`$TMPDIR/k8s-webhook-server/serving-certs`): its
    /// configuration has no `certDir`; rotation off under this key.
    TempDir(&'static str),
}

/// A framework controller: its binary, configuration API, the kinds it
/// defaults and validates and the label its pod webhooks select pods by.
#[derive(Clone, Copy, Debug)]
pub struct Framework {
    /// Short name (logs, webhook configurations' names).
    pub name: &'static str,
    /// Its binary.
    pub tool: Tool,
    /// `apiVersion` of its configuration file.
    pub config_api: &'static str,
    /// Its kinds' API group.
    pub group: &'static str,
    /// Its kinds' version.
    pub version: &'static str,
    /// Its kinds (plural) with whether each has a defaulting and a
    /// validating webhook.
    pub kinds: &'static [(&'static str, Hooks)],
    /// The label its pod webhooks (defaulting and validation on create)
    /// select pods by, where it has them.
    pub pod_label: Option<&'static str>,
    /// Its serving certificate.
    pub certs: Certs,
}

/// Which webhooks a kind has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hooks {
    /// Defaulting and validation.
    Both,
    /// Validation only.
    Validate,
}

/// LeaderWorkerSet v0.9.0 (the newest the module proxy serves).
pub const LWS: Framework = Framework {
    name: "lws",
    tool: Tool::LwsController,
    config_api: "config.lws.x-k8s.io/v1alpha1",
    group: "leaderworkerset.x-k8s.io",
    version: "v1",
    kinds: &[("leaderworkersets", Hooks::Both)],
    pod_label: Some("leaderworkerset.sigs.k8s.io/name"),
    certs: Certs::ConfigDir("internalCertManagement"),
};

/// JobSet v0.12.0.
pub const JOBSET: Framework = Framework {
    name: "jobset",
    tool: Tool::JobSetController,
    config_api: "config.jobset.x-k8s.io/v1alpha1",
    group: "jobset.x-k8s.io",
    version: "v1alpha2",
    kinds: &[("jobsets", Hooks::Both)],
    pod_label: Some("jobset.sigs.k8s.io/jobset-name"),
    certs: Certs::ConfigDir("internalCertManagement"),
};

/// Kubeflow Trainer v2.3.0: TrainJobs, and the runtimes they name (it
/// builds a JobSet per TrainJob: run [`JOBSET`] with it).
pub const TRAINER: Framework = Framework {
    name: "trainer",
    tool: Tool::TrainerController,
    config_api: "config.trainer.kubeflow.org/v1alpha1",
    group: "trainer.kubeflow.org",
    version: "v1alpha1",
    kinds: &[
        ("trainjobs", Hooks::Both),
        ("trainingruntimes", Hooks::Validate),
        ("clustertrainingruntimes", Hooks::Validate),
    ],
    pod_label: None,
    certs: Certs::TempDir("certManagement"),
};

/// A running framework controller; killed on drop.
#[derive(Debug)]
pub struct Controller {
    /// The process.
    pub process: Process,
}

impl Framework {
    /// One webhook of its configurations, by URL: of one of its kinds
    /// (kubebuilder's path `/<verb>-<group>-<version>-<kind>`) on create
    /// and update, or (`None`) of the pods carrying its label, on create.
    fn hook(&self, verb: &str, url: &str, ca: &str, plural: Option<&str>) -> Value {
        let (name, path, rule) = match plural {
            Some(plural) => {
                let kind = plural.trim_end_matches('s');
                (
                    format!("{}{kind}.kb.io", &verb[..1]),
                    format!(
                        "/{verb}-{}-{}-{kind}",
                        self.group.replace('.', "-"),
                        self.version
                    ),
                    json!({ "apiGroups": [self.group], "apiVersions": [self.version],
                            "resources": [plural], "operations": ["CREATE", "UPDATE"] }),
                )
            }
            None => (
                format!("{}pod.kb.io", &verb[..1]),
                format!("/{verb}--v1-pod"),
                json!({ "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                        "operations": ["CREATE"] }),
            ),
        };
        let mut hook = json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": { "url": format!("{url}{path}"), "caBundle": ca },
            "rules": [rule],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
        });
        if let (None, Some(label)) = (plural, self.pod_label) {
            hook["objectSelector"] = json!({ "matchExpressions": [
                { "key": label, "operator": "Exists" }] });
        }
        hook
    }

    /// Its webhooks of one verb (`mutate`, `validate`).
    fn hooks(&self, verb: &str, url: &str, ca: &str) -> Vec<Value> {
        let mut hooks: Vec<Value> = self
            .kinds
            .iter()
            .filter(|(_, hooks)| verb == "validate" || *hooks == Hooks::Both)
            .map(|(plural, _)| self.hook(verb, url, ca, Some(plural)))
            .collect();
        if self.pod_label.is_some() {
            hooks.push(self.hook(verb, url, ca, None));
        }
        hooks
    }

    /// Starts the controller as the cluster admin and registers its
    /// webhooks; returns once its webhook server answers.
    pub async fn start(&self, cp: &ControlPlane) -> Result<Controller> {
        use base64::Engine;
        let dir = cp.dir().join(self.name);
        let (rotation, certs, cert_dir_line) = match self.certs {
            Certs::ConfigDir(key) => {
                let certs = dir.join("certs");
                let line = format!("  certDir: {}\n", certs.display());
                (key, certs, line)
            }
            Certs::TempDir(key) => (
                key,
                dir.join("k8s-webhook-server").join("serving-certs"),
                String::new(),
            ),
        };
        crate::webhook::write_serving_cert(cp, &certs)?;
        let port = free_port()?;
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: {}\nkind: Configuration\n\
                 leaderElection:\n  leaderElect: false\n\
                 {rotation}:\n  enable: false\n\
                 webhook:\n  host: 127.0.0.1\n  port: {port}\n{cert_dir_line}\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: 127.0.0.1:{}\n",
                self.config_api,
                free_port()?
            ),
        )?;
        let mut controller = Controller {
            process: Process::start_with_env(
                &format!("{}-controller", self.name),
                &tools::path(self.tool)?,
                &[
                    format!("--kubeconfig={}", cp.kubeconfig().display()),
                    format!("--config={}", config.display()),
                ],
                // Only `Certs::TempDir` reads it; harmless to the others.
                &[("TMPDIR", dir.as_os_str())],
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
                "webhooks": self.hooks(verb, &url, &ca),
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

/// Koord-Queue as a framework's end-to-end test runs it beside the
/// framework's controllers: the framework's upstream CRDs applied, the
/// webhook registered and a leading scheduler. Stopped on drop.
#[derive(Debug)]
pub struct Queueing {
    /// The webhook.
    pub webhook: crate::webhook::RunningWebhook,
    /// The scheduler.
    pub scheduler: crate::scheduler::SchedulerReplica,
}

/// Applies the upstream CRDs `crd_files` and starts [`Queueing`]
/// (`name` names the scheduler's lease).
pub async fn start_queueing(cp: &ControlPlane, crd_files: &[&str], name: &str) -> Result<Queueing> {
    let crds = crate::job_crds::upstream_crds(crd_files)?;
    crate::fixtures::apply_crds(&cp.client().await?, &crds).await?;
    let webhook = crate::webhook::start_and_register(cp).await?;
    let scheduler = crate::scheduler::start_leader(cp, crate::scheduler::test_args(name)).await?;
    Ok(Queueing { webhook, scheduler })
}
