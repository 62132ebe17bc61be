//! Running Koord-Queue's webhook in-process against a local control plane,
//! registered by URL with a caBundle, as the API server would call it in a
//! cluster.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use koord_queue_api::keys;
use koord_queue_certs::ServingNames;
use kube::api::{Api, PostParams};

use crate::ControlPlane;
use crate::kubeconfig::{self, Credentials};

/// Name of the MutatingWebhookConfiguration the harness registers.
pub const WEBHOOK_CONFIGURATION: &str = "koord-queue-test";

/// Kinds whose CRD has a `/scale` subresource (the chart's kind table).
pub const SCALABLE: &[&str] = &["pytorchjobs"];

/// User the harness's scheduler identity runs as.
pub const SCHEDULER_USER: &str = "koord-queue-scheduler";

/// A webhook running in this process.
#[derive(Debug)]
pub struct RunningWebhook {
    /// HTTPS endpoint.
    pub listen_addr: SocketAddr,
    /// Admin endpoint.
    pub admin_addr: SocketAddr,
    /// Directory of the serving certificate (`tls.crt`, `tls.key`).
    pub tls_dir: std::path::PathBuf,
}

/// Default flags for a test webhook: loopback ports, certificate from `tls_dir`.
pub fn test_args(tls_dir: &Path) -> koord_queue_webhook::Args {
    use clap::Parser;
    let mut args = koord_queue_webhook::Args::parse_from(["koord-queue-webhook"]);
    args.listen_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    args.admin_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    args.tls_dir = tls_dir.to_path_buf();
    args.cert_reload_interval = Duration::from_millis(200);
    args.scheduler_user = SCHEDULER_USER.into();
    // The scheduling suites keep every quota in the system namespace, as
    // before quotas belonged to namespaces; the tenant suite and the chart's
    // flags run the default rule.
    args.allow_cross_namespace_quota = true;
    // Every kind, Pods too: pods are queued only in namespaces labelled to
    // queue them, which only the pod suites label; as the chart, the pods of
    // every opted-in namespace are reviewed (a job's pods as its children).
    args.review_pods = true;
    args.enabled_kinds = koord_queue_api::jobs::extensions()
        .iter()
        .map(|k| k.to_string())
        .collect();
    args
}

/// Starts the webhook with `args` on the binary-long runtime, authenticated
/// as the cluster admin, and waits until `/readyz` says ready.
pub async fn start(cp: &ControlPlane, args: koord_queue_webhook::Args) -> Result<RunningWebhook> {
    let tls_dir = args.tls_dir.clone();
    let kubeconfig = cp.kubeconfig().to_path_buf();
    let running = crate::background::run(async move {
        let client = kubeconfig::client_from_file(&kubeconfig).await?;
        let running = koord_queue_webhook::start(args, client).await?;
        let ready = running.readiness.clone();
        crate::fixtures::eventually(Duration::from_secs(30), || {
            let ok = ready.check().is_ok();
            async move { Ok(ok) }
        })
        .await
        .context("webhook not ready")?;
        let addrs = (running.listen_addr, running.admin_addr);
        // Keep it running for the rest of the binary.
        std::mem::forget(running);
        anyhow::Ok(addrs)
    })
    .await??;
    Ok(RunningWebhook {
        listen_addr: running.0,
        admin_addr: running.1,
        tls_dir,
    })
}

/// Mints a serving certificate for 127.0.0.1 signed by the cluster CA into `dir`.
pub fn write_serving_cert(cp: &ControlPlane, dir: &Path) -> Result<()> {
    let cert = cp.pki().ca.issue_serving(
        "koord-queue-webhook",
        &ServingNames::loopback(),
        Duration::from_secs(24 * 3600),
    )?;
    koord_queue_certs::write_pem_pair(dir, &cert.cert_pem, &cert.key_pem)?;
    Ok(())
}

/// The webhooks the chart registers with every kind enabled: every create,
/// and the updates of anyone but the scheduler; of jobs, and of the pods of
/// every opted-in namespace.
pub fn configuration(url: &str, ca_pem: &str) -> Result<MutatingWebhookConfiguration> {
    use base64::Engine;
    use koord_queue_api::jobs::pod_group;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, operation: &str, pods: bool| {
        let rules: Vec<serde_json::Value> = koord_queue_api::jobs::all()
            .iter()
            .filter(|a| (a.kind().plural == "pods") == pods)
            .map(|a| {
                let kind = a.kind();
                // As the chart: updates through a CRD's /scale are reviewed.
                let mut resources = vec![kind.plural.to_string()];
                if operation == "UPDATE" && SCALABLE.contains(&kind.plural) {
                    resources.push(format!("{}/scale", kind.plural));
                }
                if operation == "UPDATE" && pods {
                    resources.push("pods/resize".into());
                }
                serde_json::json!({
                    "apiGroups": [kind.group],
                    "apiVersions": [kind.version],
                    "resources": resources,
                    "operations": [operation],
                    "scope": "Namespaced",
                })
            })
            .collect();
        // As the chart (webhook.reviewPods): the pods of every opted-in
        // namespace, but a LeaderWorkerSet's by their own hook (`lws_hook`).
        let namespace_labels = serde_json::json!({ keys::ENABLED_NAMESPACE_LABEL: "true" });
        let mut object_selector = serde_json::json!({});
        if pods {
            object_selector = serde_json::json!({ "matchExpressions": [
                { "key": pod_group::LWS_NAME_LABEL, "operator": "DoesNotExist" }] });
        }
        serde_json::json!({
            "objectSelector": object_selector,
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": { "url": url, "caBundle": ca_bundle },
            "rules": rules,
            "namespaceSelector": { "matchLabels": namespace_labels },
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": 10,
            "reinvocationPolicy": "Never",
        })
    };
    let not_by_the_scheduler = serde_json::json!([{
        "name": "not-by-the-scheduler",
        "expression": format!("request.userInfo.username != '{SCHEDULER_USER}'"),
    }]);
    let mut updates = hook("job-updates.koord-queue.x-k8s.io", "UPDATE", false);
    updates["matchConditions"] = not_by_the_scheduler.clone();
    let mut pod_updates = hook("pod-updates.koord-queue.x-k8s.io", "UPDATE", true);
    pod_updates["matchConditions"] = not_by_the_scheduler.clone();
    let lws_hook = |name: &str, operation: &str| {
        let mut hook = hook(name, operation, true);
        hook["namespaceSelector"] =
            serde_json::json!({ "matchLabels": { keys::ENABLED_NAMESPACE_LABEL: "true" } });
        hook["objectSelector"] = serde_json::json!({ "matchExpressions": [
            { "key": pod_group::LWS_NAME_LABEL, "operator": "Exists" }] });
        hook
    };
    let mut lws_updates = lws_hook("lws-pod-updates.koord-queue.x-k8s.io", "UPDATE");
    lws_updates["matchConditions"] = not_by_the_scheduler;
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": { "name": WEBHOOK_CONFIGURATION },
        "webhooks": [
            hook("jobs.koord-queue.x-k8s.io", "CREATE", false),
            updates,
            hook("pods.koord-queue.x-k8s.io", "CREATE", true),
            pod_updates,
            lws_hook("lws-pods.koord-queue.x-k8s.io", "CREATE"),
            lws_updates,
        ],
    }))?)
}

/// A dry-run Job create in an opted-in namespace that reports whether the
/// webhook's mutation was applied.
pub async fn probe(client: &kube::Client, namespace: &str) -> Result<bool> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let job: Job = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "webhook-probe", "labels": { keys::QUOTA_NAME_LABEL: "probe" } },
        "spec": { "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "c", "image": "busybox" }],
        }}},
    }))?;
    let created = jobs
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &job,
        )
        .await;
    Ok(match created {
        Ok(job) => job.spec.and_then(|s| s.suspend) == Some(true),
        // The probe names a quota that need not exist: a refusal from the
        // webhook proves it is called, too.
        Err(kube::Error::Api(e)) => {
            e.message.contains("Koord-Queue") || e.message.contains("cannot be queued")
        }
        Err(e) => return Err(e.into()),
    })
}

/// Starts a webhook for `cp` and registers it; returns once the API server
/// demonstrably calls it.
pub async fn start_and_register(cp: &ControlPlane) -> Result<RunningWebhook> {
    start_and_register_with(cp, |_| {}).await
}

/// [`start_and_register`] with the test flags changed by `adjust`.
pub async fn start_and_register_with(
    cp: &ControlPlane,
    adjust: impl FnOnce(&mut koord_queue_webhook::Args),
) -> Result<RunningWebhook> {
    let tls_dir = cp.dir().join("webhook-tls");
    write_serving_cert(cp, &tls_dir)?;
    let mut args = test_args(&tls_dir);
    adjust(&mut args);
    let running = start(cp, args).await?;
    let client = cp.client().await?;
    let url = format!("https://{}/mutate", running.listen_addr);
    let config = configuration(&url, cp.pki().ca.cert_pem())?;
    let ns = crate::fixtures::create_namespace(&client, true).await?;
    crate::fixtures::register_mutating_webhook(&client, &config, || probe(&client, &ns)).await?;
    Ok(running)
}

/// Writes a kubeconfig for the scheduler identity (a client certificate
/// for [`SCHEDULER_USER`]) and returns a client using it.
pub async fn scheduler_client(cp: &ControlPlane) -> Result<kube::Client> {
    let cert = cp.pki().client_cert(SCHEDULER_USER, &["system:masters"])?;
    let path = cp.write_kubeconfig(
        "scheduler",
        SCHEDULER_USER,
        &Credentials::Certificate {
            cert_pem: cert.cert_pem,
            key_pem: cert.key_pem,
        },
    )?;
    kubeconfig::client_from_file(&path).await
}
