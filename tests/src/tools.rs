//! Where the provisioned control-plane binaries live. They are built once by
//! `tests/provision/provision.sh` into a cache outside the repository; tests
//! only look them up and never download anything.

use std::path::PathBuf;

use anyhow::{Result, bail};

/// A binary of the local control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// etcd server.
    Etcd,
    /// kube-apiserver.
    KubeApiserver,
    /// kube-controller-manager.
    KubeControllerManager,
    /// kube-scheduler.
    KubeScheduler,
    /// kwok (fake nodes and pod lifecycle).
    Kwok,
    /// kubectl.
    Kubectl,
    /// helm.
    Helm,
    /// cert-manager's controller (`cmd/controller`).
    CertManagerController,
    /// cert-manager's CA injector (`cmd/cainjector`).
    CertManagerCainjector,
    /// cert-manager's CRDs (a YAML file, the module's `deploy/crds`).
    CertManagerCrds,
    /// An in-memory OCI registry (go-containerregistry's `cmd/registry`).
    OciRegistry,
    /// The LeaderWorkerSet controller with its webhooks (`sigs.k8s.io/lws/cmd`).
    LwsController,
    /// The JobSet controller with its webhooks (`sigs.k8s.io/jobset`).
    JobSetController,
    /// The Kubeflow Trainer v2 controller with its webhooks
    /// (`github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager`).
    TrainerController,
}

impl Tool {
    /// File name of the binary.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Etcd => "etcd",
            Self::KubeApiserver => "kube-apiserver",
            Self::KubeControllerManager => "kube-controller-manager",
            Self::KubeScheduler => "kube-scheduler",
            Self::Kwok => "kwok",
            Self::Kubectl => "kubectl",
            Self::Helm => "helm",
            Self::CertManagerController => "cert-manager-controller",
            Self::CertManagerCainjector => "cert-manager-cainjector",
            Self::CertManagerCrds => "cert-manager-crds.yaml",
            Self::OciRegistry => "oci-registry",
            Self::LwsController => "lws-controller",
            Self::JobSetController => "jobset-controller",
            Self::TrainerController => "trainer-controller",
        }
    }
}

/// Directory of the provisioned binaries: `$KOORD_QUEUE_BIN_DIR`, else
/// `$KOORD_QUEUE_CACHE/bin`, else `~/.cache/koord-queue/bin`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KOORD_QUEUE_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("KOORD_QUEUE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/".into());
            home.join(".cache").join("koord-queue")
        });
    cache.join("bin")
}

/// Path of a provisioned binary; a clear error when it was not provisioned.
pub fn path(tool: Tool) -> Result<PathBuf> {
    let path = bin_dir().join(tool.file_name());
    if !path.exists() {
        bail!(
            "{} is not provisioned at {}: run `make provision` (tests/provision/provision.sh) first",
            tool.file_name(),
            path.display()
        );
    }
    Ok(path)
}
