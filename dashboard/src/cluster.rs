//! How the dashboard reaches kube-apiserver: its URL and the CA its serving
//! certificate chains to — and nothing else. The dashboard has no
//! credentials of its own: every client it builds carries one user's bearer
//! token, so the API server's RBAC decides what that user reads.

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use secrecy::SecretString;

/// Why the API server cannot be reached as configured.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The server URL does not parse.
    #[error("--server {0:?} is not a URL: {1}")]
    Url(String, String),
    /// The CA file cannot be read or holds no certificate.
    #[error("--ca-file {0}: {1}")]
    Ca(String, String),
    /// Neither flags nor the in-cluster environment say where the API is.
    #[error("no --server given and not running in a cluster: {0}")]
    NotInCluster(String),
    /// kube could not build a client of the configuration.
    #[error("cannot build a client: {0}")]
    Client(String),
}

/// Where the API server is; cloned into every session.
#[derive(Clone, Debug)]
pub struct Cluster {
    url: http::Uri,
    /// The CA bundle (DER), `None`: the system's roots.
    roots: Option<Vec<Vec<u8>>>,
}

impl Cluster {
    /// The API server at `server` (else the in-cluster service address),
    /// trusting the PEM bundle `ca_file` (else, in a cluster, the
    /// ServiceAccount CA when it is mounted; else the system roots).
    pub fn new(server: Option<&str>, ca_file: Option<&Path>) -> Result<Self, ClusterError> {
        let roots = match ca_file {
            Some(path) => Some(read_bundle(path)?),
            None => None,
        };
        let url = match server {
            Some(s) => s
                .parse::<http::Uri>()
                .map_err(|e| ClusterError::Url(s.into(), e.to_string()))?,
            None => {
                // The chart mounts no ServiceAccount token: only the
                // address and (through --ca-file) the CA are taken.
                let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
                    ClusterError::NotInCluster("KUBERNETES_SERVICE_HOST unset".into())
                })?;
                let port =
                    std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                let text = format!("https://{host}:{port}");
                text.parse::<http::Uri>()
                    .map_err(|e| ClusterError::Url(text.clone(), e.to_string()))?
            }
        };
        Ok(Self { url, roots })
    }

    /// The API server's URL.
    pub fn url(&self) -> &http::Uri {
        &self.url
    }

    /// A client that authenticates as the holder of `token`.
    pub fn client_for(&self, token: &str) -> Result<kube::Client, ClusterError> {
        let mut config = kube::Config::new(self.url.clone());
        config.root_cert = self.roots.clone();
        config.auth_info.token = Some(SecretString::from(token.to_string()));
        config.connect_timeout = Some(std::time::Duration::from_secs(5));
        config.read_timeout = Some(std::time::Duration::from_secs(30));
        kube::Client::try_from(config).map_err(|e| ClusterError::Client(e.to_string()))
    }
}

/// The certificates of the PEM file `path`, DER-encoded.
fn read_bundle(path: &Path) -> Result<Vec<Vec<u8>>, ClusterError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|e| ClusterError::Ca(shown.clone(), e.to_string()))?;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&text)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| ClusterError::Ca(shown.clone(), e.to_string()))?;
    if certs.is_empty() {
        return Err(ClusterError::Ca(shown, "no certificate in the file".into()));
    }
    Ok(certs)
}
