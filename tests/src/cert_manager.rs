//! The real cert-manager against a local control plane: its CRDs as the
//! module ships them and its controller and CA injector (v1.11.5, built by
//! `tests/provision/provision.sh`) as processes of the harness. Its webhook
//! is not run: every field it would default is set by the chart.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::ControlPlane;
use crate::process::{Process, free_port};
use crate::tools::{self, Tool};

/// cert-manager's controller and CA injector; both are killed on drop.
#[derive(Debug)]
pub struct CertManager {
    /// `cert-manager-controller`.
    pub controller: Process,
    /// `cert-manager-cainjector`.
    pub cainjector: Process,
}

/// cert-manager's real CRDs (Certificate, CertificateRequest, Issuer,
/// ClusterIssuer, Order, Challenge), applied and Established.
pub async fn apply_crds(client: &kube::Client) -> Result<()> {
    let path = tools::path(Tool::CertManagerCrds)?;
    let crds = crate::fixtures::read_crds(&[path.as_path()])?;
    anyhow::ensure!(
        crds.len() == 6,
        "{} holds {} CRDs, not cert-manager's 6",
        path.display(),
        crds.len()
    );
    crate::fixtures::apply_crds(client, &crds).await
}

impl CertManager {
    /// Starts the controller and the CA injector as the cluster admin, without
    /// leader election; their logs go to `cert-manager-*.log` in the control
    /// plane's directory. ClusterIssuer resources live in
    /// `cluster_resource_namespace`.
    pub fn start(cp: &ControlPlane, cluster_resource_namespace: &str) -> Result<Self> {
        let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig().display());
        let controller = Process::start(
            "cert-manager-controller",
            &tools::path(Tool::CertManagerController)?,
            &[
                kubeconfig.clone(),
                "--leader-elect=false".into(),
                format!("--cluster-resource-namespace={cluster_resource_namespace}"),
                format!("--metrics-listen-address=127.0.0.1:{}", free_port()?),
                "--v=2".into(),
            ],
            cp.dir().join("cert-manager-controller.log"),
        )?;
        let cainjector = Process::start(
            "cert-manager-cainjector",
            &tools::path(Tool::CertManagerCainjector)?,
            &[kubeconfig, "--leader-elect=false".into(), "--v=2".into()],
            cp.dir().join("cert-manager-cainjector.log"),
        )?;
        Ok(Self {
            controller,
            cainjector,
        })
    }

    /// An error with the end of their logs if either has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.controller.check_alive()?;
        self.cainjector.check_alive()
    }

    /// The last lines of both logs (for a failure message).
    pub fn log_tails(&self, lines: usize) -> String {
        format!(
            "--- cert-manager-controller\n{}\n--- cert-manager-cainjector\n{}",
            self.controller.log_tail(lines),
            self.cainjector.log_tail(lines)
        )
    }
}

/// The API of cert-manager's Certificates in `namespace`.
pub fn certificates(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
        "certificates",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// The status of condition `type_` of a cert-manager object (`"True"`, …).
pub fn condition(object: &DynamicObject, type_: &str) -> Option<String> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// Waits until Certificate `namespace/name` is Ready with `status.revision`
/// at least `revision`; returns it.
pub async fn wait_ready(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    revision: i64,
    timeout: Duration,
) -> Result<DynamicObject> {
    let api = certificates(client, namespace);
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let cert = api.get_opt(name).await?;
        if let Some(cert) = cert {
            let ready = condition(&cert, "Ready").as_deref() == Some("True");
            let at = cert.data["status"]["revision"].as_i64().unwrap_or(0);
            if ready && at >= revision {
                return Ok(cert);
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!(
                    "Certificate {namespace}/{name} not Ready at revision {revision} after {timeout:?}: status {}",
                    cert.data["status"]
                );
            }
        } else if std::time::Instant::now() > deadline {
            anyhow::bail!("no Certificate {namespace}/{name} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What `cmctl renew` does: the condition Issuing=True (reason
/// ManuallyTriggered) in the Certificate's status, which makes cert-manager
/// issue it again now.
pub async fn trigger_renewal(client: &kube::Client, namespace: &str, name: &str) -> Result<()> {
    let api = certificates(client, namespace);
    let cert = api.get(name).await?;
    let mut conditions: Vec<serde_json::Value> = cert.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Issuing");
    conditions.push(serde_json::json!({
        "type": "Issuing",
        "status": "True",
        "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": time::OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or_else(|_| time::OffsetDateTime::now_utc())
            .format(&time::format_description::well_known::Rfc3339)?,
        "observedGeneration": cert.metadata.generation,
    }));
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "status": { "conditions": conditions } })),
    )
    .await
    .with_context(|| format!("setting Issuing on Certificate {namespace}/{name}"))?;
    Ok(())
}

/// Writes `files` into `dir` as the kubelet updates a mounted Secret: into a
/// new timestamped directory, then one atomic rename of the `..data` link;
/// `dir/<file>` are links through `..data`. A reader never sees a new
/// certificate with an old key.
pub fn write_like_kubelet(dir: &Path, files: &[(&str, &[u8])]) -> Result<()> {
    use std::os::unix::fs::symlink;
    std::fs::create_dir_all(dir)?;
    let stamp = format!(
        "..{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let version = dir.join(&stamp);
    std::fs::create_dir(&version)?;
    for (name, data) in files {
        std::fs::write(version.join(name), data)?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&stamp, &tmp)?;
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::fs::rename(&tmp, dir.join("..data"))?;
    for (name, _) in files {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(name), &link)?;
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}
