//! The Helm chart against a local control plane: rendering and installing
//! it, ServiceAccount tokens of the identities it creates, and running the
//! webhook and the scheduler in this process with those identities and with
//! the flags the chart's Deployments pass — as `make run` and the RBAC tests
//! do. No image can be built here, so the chart is installed with its
//! Deployments at 0 replicas and the components run out of cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use crate::ControlPlane;
use crate::kubeconfig::{self, Credentials};
use crate::tools::{self, Tool};

/// Release name used by `make run` and the RBAC tests.
pub const RELEASE: &str = "koord-queue";

/// Every job kind, by its extension key.
pub const ALL_KINDS: [&str; 10] = [
    "batchjob", "tf", "pytorch", "mpi", "ray", "spark", "argo", "jobset", "trainjob", "pod",
];

/// The chart's directory in this repository.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("charts")
        .join("koord-queue")
}

/// Runs helm with private cache/config/data directories under `home` (never
/// the user's), against `kubeconfig` if given. Returns `(success, stdout +
/// stderr)`.
pub async fn helm(home: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Result<(bool, String)> {
    let mut command = tokio::process::Command::new(tools::path(Tool::Helm)?);
    command
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .kill_on_drop(true);
    match kubeconfig {
        Some(path) => command.env("KUBECONFIG", path),
        // Rendering must not depend on (or talk to) any cluster.
        None => command.env("KUBECONFIG", home.join("no-kubeconfig")),
    };
    let output = command.output().await.context("running helm")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), text))
}

/// Like [`helm`], an error (with the output) when helm fails.
pub async fn helm_ok(home: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> Result<String> {
    let (ok, out) = helm(home, kubeconfig, args).await?;
    if !ok {
        bail!("helm {} failed:\n{out}", args.join(" "));
    }
    Ok(out)
}

/// The YAML documents of a rendered manifest as JSON values (empty ones dropped).
pub fn parse_manifest(text: &str) -> Result<Vec<serde_json::Value>> {
    use serde::Deserialize as _;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(doc).context("parsing rendered YAML")?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Values of a chart install whose components run in this process.
#[derive(Debug, Clone)]
pub struct LocalInstall {
    /// Release name.
    pub release: String,
    /// Release namespace (Koord-Queue's system namespace).
    pub namespace: String,
    /// Where the API server calls the webhook (`https://127.0.0.1:<port>/mutate`).
    pub webhook_url: String,
    /// PEM of the CA that signed the webhook's serving certificate.
    pub ca_pem: String,
    /// Whether the chart installs the CRDs (false when they are there already).
    pub install_crds: bool,
    /// Serve the visibility API on this local port: the chart's Service
    /// points the aggregation layer at `localhost:<port>` (ExternalName).
    /// `None`: off — an APIService nobody serves would break the discovery
    /// that namespace deletion and the garbage collector need.
    pub visibility_port: Option<u16>,
}

impl LocalInstall {
    /// Chart values: every job kind, Deployments at 0 replicas, the webhook
    /// called by URL with the given CA (provided certificate mode).
    pub fn values(&self) -> serde_json::Value {
        let extension: serde_json::Map<String, serde_json::Value> = ALL_KINDS
            .iter()
            .map(|k| (k.to_string(), serde_json::json!({ "enable": true })))
            .collect();
        serde_json::json!({
            "crds": { "install": self.install_crds, "installElasticQuota": self.install_crds },
            "extension": extension,
            "webhook": { "replicas": 0, "url": self.webhook_url },
            "scheduler": { "replicas": 0 },
            "certs": { "mode": "provided", "provided": { "caBundle": self.ca_pem } },
            "visibility": match self.visibility_port {
                Some(port) => serde_json::json!({ "enable": true, "externalName": "localhost", "port": port }),
                None => serde_json::json!({ "enable": false }),
            },
        })
    }

    /// `helm install` into `cp` (values from a file: the CA's PEM spans lines).
    pub async fn install(&self, cp: &ControlPlane) -> Result<String> {
        self.helm_release(cp, "install", &chart_dir()).await
    }

    /// `helm <verb>` (`install` or `upgrade`) of `chart` with these values.
    pub async fn helm_release(
        &self,
        cp: &ControlPlane,
        verb: &str,
        chart: &Path,
    ) -> Result<String> {
        self.helm_release_with(cp, verb, chart, &self.values())
            .await
    }

    /// [`LocalInstall::helm_release`] with other `values` (e.g. only the
    /// job kinds an older chart knows).
    pub async fn helm_release_with(
        &self,
        cp: &ControlPlane,
        verb: &str,
        chart: &Path,
        values: &serde_json::Value,
    ) -> Result<String> {
        let values_file = cp.dir().join(format!("{}-values.yaml", self.release));
        std::fs::write(&values_file, serde_yaml::to_string(values)?)?;
        let values = values_file;
        let mut args = vec![
            verb.to_string(),
            self.release.clone(),
            chart.display().to_string(),
            "--namespace".into(),
            self.namespace.clone(),
            "--values".into(),
            values.display().to_string(),
        ];
        if verb == "install" {
            args.push("--create-namespace".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        helm_ok(&cp.dir().join("helm"), Some(cp.kubeconfig()), &args).await
    }

    /// Name of a component's objects (Deployment, ServiceAccount, ...).
    pub fn component(&self, component: &str) -> String {
        // The chart's full name is the release name when it contains the
        // chart name, else `<release>-koord-queue`.
        let fullname = if self.release.contains("koord-queue") {
            self.release.clone()
        } else {
            format!("{}-koord-queue", self.release)
        };
        format!("{fullname}-{component}")
    }

    /// The Kubernetes user of a component's ServiceAccount.
    pub fn user(&self, component: &str) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace,
            self.component(component)
        )
    }
}

/// A token for ServiceAccount `namespace/name` from the TokenRequest API.
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    ttl: Duration,
) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)),
            ..Default::default()
        },
        ..Default::default()
    };
    let response = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for ServiceAccount {namespace}/{name}"))?;
    let token = response
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .context("TokenRequest returned no token")?;
    Ok(token)
}

/// Writes a kubeconfig that authenticates as ServiceAccount `namespace/name`
/// (a TokenRequest token valid for `ttl`) and returns its path.
pub async fn service_account_kubeconfig(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    ttl: Duration,
) -> Result<PathBuf> {
    let client = cp.client().await?;
    let token = service_account_token(&client, namespace, name, ttl).await?;
    cp.write_kubeconfig(
        &format!("sa-{namespace}-{name}"),
        &format!("system:serviceaccount:{namespace}:{name}"),
        &Credentials::Token(token),
    )
}

/// The args of the first container of Deployment `namespace/name`.
pub async fn container_args(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<String>> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading Deployment {namespace}/{name}"))?;
    deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .with_context(|| format!("Deployment {namespace}/{name} has no container args"))
}

/// Writes key `key` of ConfigMap `namespace/name` to `dest`.
pub async fn config_map_to_file(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
    dest: &Path,
) -> Result<()> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("reading ConfigMap {namespace}/{name}"))?;
    let text = cm
        .data
        .and_then(|mut d| d.remove(key))
        .with_context(|| format!("ConfigMap {namespace}/{name} has no key {key}"))?;
    std::fs::write(dest, text)?;
    Ok(())
}

/// The webhook's flags as the chart's Deployment passes them, parsed by the
/// webhook itself, with the addresses moved to loopback and the certificate
/// read from `tls_dir` (in a pod: the mounted Secret).
pub fn webhook_args(
    chart_args: &[String],
    listen: SocketAddr,
    tls_dir: &Path,
) -> Result<koord_queue_webhook::Args> {
    use clap::Parser;
    let mut args = koord_queue_webhook::Args::try_parse_from(
        std::iter::once("koord-queue-webhook".to_string()).chain(chart_args.iter().cloned()),
    )
    .context("the chart's webhook flags do not parse")?;
    args.listen_addr = listen;
    args.admin_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    args.tls_dir = tls_dir.to_path_buf();
    args.cert_reload_interval = Duration::from_millis(500);
    Ok(args)
}

/// The scheduler's flags as the chart's Deployment passes them, parsed by the
/// scheduler itself; `$(POD_NAME)` (the downward API) becomes `identity`, the
/// configuration is read from `config` (in a pod: the mounted ConfigMap).
pub fn scheduler_args(
    chart_args: &[String],
    identity: &str,
    config: &Path,
) -> Result<koord_queue_scheduler::Args> {
    use clap::Parser;
    let expanded = chart_args
        .iter()
        .map(|a| a.replace("$(POD_NAME)", identity));
    let mut args = koord_queue_scheduler::Args::try_parse_from(
        std::iter::once("koord-queue-scheduler".to_string()).chain(expanded),
    )
    .context("the chart's scheduler flags do not parse")?;
    args.admin_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    args.config = Some(config.to_path_buf());
    Ok(args)
}

/// Kubeconfigs and flags of both components, read from a chart installed
/// with [`LocalInstall`]: the flags of its Deployments and the identities of
/// its ServiceAccounts.
#[derive(Debug)]
pub struct ComponentSetup {
    /// Webhook flags.
    pub webhook: koord_queue_webhook::Args,
    /// Kubeconfig of the webhook's ServiceAccount.
    pub webhook_kubeconfig: PathBuf,
    /// Scheduler flags.
    pub scheduler: koord_queue_scheduler::Args,
    /// Kubeconfig of the scheduler's ServiceAccount.
    pub scheduler_kubeconfig: PathBuf,
}

impl ComponentSetup {
    /// Reads the installed chart and prepares both components: serving
    /// certificate for 127.0.0.1 signed by the cluster CA (the chart was given
    /// that CA), tokens valid for `ttl`.
    pub async fn prepare(
        cp: &ControlPlane,
        install: &LocalInstall,
        listen: SocketAddr,
        ttl: Duration,
    ) -> Result<Self> {
        let client = cp.client().await?;
        let ns = &install.namespace;
        let dir = cp.dir().join(format!("{}-components", install.release));
        std::fs::create_dir_all(&dir)?;

        let tls_dir = dir.join("webhook-tls");
        crate::webhook::write_serving_cert(cp, &tls_dir)?;
        let webhook_flags = container_args(&client, ns, &install.component("webhook")).await?;
        let webhook = webhook_args(&webhook_flags, listen, &tls_dir)?;

        let config = dir.join("scheduler-config.yaml");
        config_map_to_file(
            &client,
            ns,
            &format!("{}-config", install.component("scheduler")),
            "config.yaml",
            &config,
        )
        .await?;
        let scheduler_flags = container_args(&client, ns, &install.component("scheduler")).await?;
        let identity = format!("{}-local-0", install.component("scheduler"));
        let mut scheduler = scheduler_args(&scheduler_flags, &identity, &config)?;
        if let (Some(_), Some(port)) = (scheduler.visibility_addr, install.visibility_port) {
            // The chart's Service names the scheduler; it serves on the port
            // the Service's ExternalName points at.
            let tls = dir.join("visibility-tls");
            crate::visibility::write_serving_cert(cp, &install.component("visibility"), ns, &tls)?;
            scheduler.visibility_addr = Some(SocketAddr::from(([127, 0, 0, 1], port)));
            scheduler.visibility_cert_dir = Some(tls);
        }

        Ok(Self {
            webhook,
            webhook_kubeconfig: service_account_kubeconfig(
                cp,
                ns,
                &install.component("webhook"),
                ttl,
            )
            .await?,
            scheduler,
            scheduler_kubeconfig: service_account_kubeconfig(
                cp,
                ns,
                &install.component("scheduler"),
                ttl,
            )
            .await?,
        })
    }
}

/// Both components running on the current runtime.
#[derive(Debug)]
pub struct Components {
    /// The webhook.
    pub webhook: koord_queue_webhook::Running,
    /// The scheduler.
    pub scheduler: koord_queue_scheduler::Running,
}

impl Components {
    /// Starts the webhook and the scheduler with their ServiceAccount
    /// kubeconfigs on the current runtime, and waits until the webhook is
    /// ready and the scheduler leads and is ready.
    pub async fn start(setup: ComponentSetup) -> Result<Self> {
        let webhook_client = kubeconfig::client_from_file(&setup.webhook_kubeconfig).await?;
        let webhook = koord_queue_webhook::start(setup.webhook, webhook_client)
            .await
            .context("starting the webhook")?;
        let scheduler_client = kubeconfig::client_from_file(&setup.scheduler_kubeconfig).await?;
        let scheduler = koord_queue_scheduler::start(setup.scheduler, scheduler_client)
            .await
            .context("starting the scheduler")?;
        let this = Self { webhook, scheduler };
        crate::fixtures::eventually(Duration::from_secs(60), || {
            let ready = this.webhook.readiness.check().is_ok()
                && this.scheduler.is_leader()
                && this.scheduler.readiness.check().is_ok();
            async move { Ok(ready) }
        })
        .await
        .context("the webhook did not become ready, or the scheduler a ready leader")?;
        Ok(this)
    }

    /// Graceful stop of both: the scheduler gives up its Lease, the webhook
    /// drains.
    pub async fn stop(self) -> Result<()> {
        self.scheduler.shutdown().await;
        self.webhook.shutdown().await
    }
}

/// Waits until the API server calls the webhook for jobs in `namespace` (a
/// dry-run create is held or refused by it).
pub async fn wait_webhook_effective(client: &kube::Client, namespace: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let last = match crate::webhook::probe(client, namespace).await {
            Ok(true) => return Ok(()),
            Ok(false) => "the probe job was not held".to_string(),
            Err(e) => format!("{e:#}"),
        };
        if std::time::Instant::now() > deadline {
            bail!("the API server does not call the webhook for namespace {namespace}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl auth can-i <args> --as=<user>` as admin: whether it is allowed.
pub async fn can_i(cp: &ControlPlane, user: &str, args: &[&str]) -> Result<bool> {
    let output = tokio::process::Command::new(tools::path(Tool::Kubectl)?)
        .arg("auth")
        .arg("can-i")
        .args(args)
        .arg(format!("--as={user}"))
        .env("KUBECONFIG", cp.kubeconfig())
        .kill_on_drop(true)
        .output()
        .await
        .context("running kubectl auth can-i")?;
    let answer = String::from_utf8_lossy(&output.stdout).trim().to_string();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl auth can-i {} --as={user}: {answer} {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// Minimal cert-manager CRDs (Issuer, ClusterIssuer, Certificate) so the
/// chart's cert-manager objects can be installed on a cluster without
/// cert-manager: real group, versions, kinds and scopes; schemas open.
pub fn cert_manager_crds() -> Result<Vec<CustomResourceDefinition>> {
    [
        ("Issuer", "issuers", "Namespaced"),
        ("ClusterIssuer", "clusterissuers", "Cluster"),
        ("Certificate", "certificates", "Namespaced"),
    ]
    .iter()
    .map(|(kind, plural, scope)| {
        Ok(serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("{plural}.cert-manager.io") },
            "spec": {
                "group": "cert-manager.io",
                "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List") },
                "scope": scope,
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": { "status": {} },
                    "schema": { "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                    }},
                }],
            },
        }))?)
    })
    .collect()
}

/// Applies the chart's fencing policy (`templates/scheduler-fencing.yaml`,
/// rendered by helm) for the scheduler Lease `lease` in `namespace`, as a
/// release named after the Lease would install it.
pub async fn fencing_policy(cp: &ControlPlane, namespace: &str, lease: &str) -> Result<()> {
    let home = cp.dir().join(format!("helm-fencing-{lease}"));
    std::fs::create_dir_all(&home)?;
    let chart = chart_dir();
    let rendered = helm_ok(
        &home,
        None,
        &[
            "template",
            lease,
            &chart.display().to_string(),
            "--namespace",
            namespace,
            "--show-only",
            "templates/scheduler-fencing.yaml",
            "--set",
            &format!("scheduler.leaderElection.leaseName={lease}"),
        ],
    )
    .await?;
    let path = home.join("fencing.yaml");
    std::fs::write(&path, rendered)?;
    cp.kubectl(&["apply", "-f", &path.display().to_string()])
        .await?;
    Ok(())
}
