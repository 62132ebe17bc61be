//! The connection, found as kubectl finds it: `--kubeconfig` (else
//! `$KUBECONFIG`, else `~/.kube/config`, else the in-cluster ServiceAccount),
//! `--context`, and the namespace from `-n`, else the context's, else
//! `default`.

use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use crate::args::Global;
use crate::error::CliError;

/// A client and the namespace the command works in.
#[derive(Clone)]
pub struct Cluster {
    /// The client, with the kubeconfig's identity.
    pub client: kube::Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
    /// The system namespace (Queues).
    pub system_namespace: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// Connects as `global` says.
pub async fn connect(global: &Global) -> Result<Cluster, CliError> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        cluster: None,
        user: None,
    };
    let config = match &global.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?
        }
        None if global.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| CliError::Config(e.to_string()))?,
        None => Config::infer()
            .await
            .map_err(|e| CliError::Config(e.to_string()))?,
    };
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| CliError::Config(e.to_string()))?;
    Ok(Cluster {
        client,
        namespace,
        system_namespace: global.system_namespace.clone(),
    })
}
