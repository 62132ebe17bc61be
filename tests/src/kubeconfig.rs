//! Kubeconfig files and clients for a local control plane.

use std::path::Path;

use anyhow::{Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Credentials of a kubeconfig user.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A client certificate and its key (PEM).
    Certificate {
        /// Certificate PEM.
        cert_pem: String,
        /// Key PEM.
        key_pem: String,
    },
    /// A bearer token (e.g. from a ServiceAccount TokenRequest).
    Token(String),
}

fn b64(data: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Renders a kubeconfig for `server` trusting `ca_pem`, as `user`.
pub fn render(server: &str, ca_pem: &str, user: &str, credentials: &Credentials) -> String {
    let user_fields = match credentials {
        Credentials::Certificate { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(cert_pem),
            b64(key_pem)
        ),
        Credentials::Token(token) => format!("    token: {token}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n{user_fields}contexts:\n- name: local\n  context:\n    cluster: local\n    user: {user}\ncurrent-context: local\n",
        ca = b64(ca_pem),
    )
}

/// A client for the kubeconfig at `path`.
pub async fn client_from_file(path: &Path) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("loading kubeconfig")?;
    // Waits in tests can be long (watches, slow first requests on a cold cache).
    config.read_timeout = Some(std::time::Duration::from_secs(60));
    Ok(kube::Client::try_from(config)?)
}
