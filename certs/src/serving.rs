//! Loading a serving certificate into rustls, and noticing when it changes.
//!
//! Kubernetes updates a mounted Secret by swapping the `..data` symlink of the
//! volume; watching the file paths with inotify misses that. Instead the files
//! are re-read on a timer and compared by content ([`CertReloader::poll`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

/// Paths of a PEM certificate chain and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPaths {
    /// Certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA bundle (PEM) that clients must present a certificate of; `None`
    /// accepts any client (TLS without client authentication).
    pub client_ca: Option<PathBuf>,
}

impl CertPaths {
    /// `dir/tls.crt` and `dir/tls.key`, as a mounted TLS Secret lays them out.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            cert: dir.join(crate::CERT_FILE),
            key: dir.join(crate::KEY_FILE),
            client_ca: None,
        }
    }

    /// The same, requiring client certificates signed by the CAs in `ca`.
    pub fn with_client_ca(mut self, ca: Option<PathBuf>) -> Self {
        self.client_ca = ca;
        self
    }

    fn read(&self) -> Result<Material, Error> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })
        };
        Ok(Material {
            cert: read(&self.cert)?,
            key: read(&self.key)?,
            client_ca: self.client_ca.as_deref().map(read).transpose()?,
        })
    }
}

/// The PEM bytes a server configuration is built from.
#[derive(Debug, PartialEq, Eq)]
struct Material {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

/// The process-wide rustls crypto provider (ring). Installing it is
/// idempotent; every TLS user in the workspace goes through this.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds a TLS 1.2+ server configuration (ALPN h2 and http/1.1) from PEM bytes.
pub fn server_config_from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerConfig, Error> {
    server_config(cert_pem, key_pem, None)
}

/// [`server_config_from_pem`] that, with `client_ca_pem`, accepts only
/// clients presenting a certificate signed by one of those CAs (the API
/// server authenticating itself to a webhook).
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<ServerConfig, Error> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Invalid(format!("certificate file: {e}")))?;
    if chain.is_empty() {
        return Err(Error::Invalid(
            "certificate file holds no certificate".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| Error::Invalid(format!("key file: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Invalid(format!("TLS versions: {e}")))?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(pem) {
                let ca = ca.map_err(|e| Error::Invalid(format!("client CA file: {e}")))?;
                roots
                    .add(ca)
                    .map_err(|e| Error::Invalid(format!("client CA file: {e}")))?;
            }
            if roots.is_empty() {
                return Err(Error::Invalid("client CA file holds no certificate".into()));
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| Error::Invalid(format!("client CA file: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        Error::Invalid(format!(
            "certificate and key do not form a usable pair: {e}"
        ))
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

impl Material {
    fn config(&self) -> Result<ServerConfig, Error> {
        server_config(&self.cert, &self.key, self.client_ca.as_deref())
    }
}

/// Re-reads a certificate pair and yields a new server configuration when
/// (and only when) the files' content changed.
#[derive(Debug)]
pub struct CertReloader {
    paths: CertPaths,
    current: Material,
}

impl CertReloader {
    /// Loads the pair now: an error here means the server must not start.
    pub fn load(paths: CertPaths) -> Result<(Self, ServerConfig), Error> {
        let current = paths.read()?;
        let config = current.config()?;
        Ok((Self { paths, current }, config))
    }

    /// The files being watched.
    pub fn paths(&self) -> &CertPaths {
        &self.paths
    }

    /// `Ok(Some(config))` when the files changed and form a valid pair;
    /// `Ok(None)` when unchanged; an error when they changed but are unusable
    /// (the caller keeps serving the previous certificate). A half-written
    /// pair (new cert, old key) fails to load and is picked up on a later poll.
    pub fn poll(&mut self) -> Result<Option<ServerConfig>, Error> {
        let now = self.paths.read()?;
        if now == self.current {
            return Ok(None);
        }
        let config = now.config()?;
        self.current = now;
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Authority, ServingNames, write_pem_pair};

    #[test]
    fn loads_detects_changes_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::generate("ca", Duration::from_secs(3600)).unwrap();
        let cert = ca
            .issue_serving("a", &ServingNames::loopback(), Duration::from_secs(3600))
            .unwrap();
        write_pem_pair(dir.path(), &cert.cert_pem, &cert.key_pem).unwrap();
        let (mut reloader, _) = CertReloader::load(CertPaths::in_dir(dir.path())).unwrap();
        assert!(reloader.poll().unwrap().is_none(), "unchanged files");

        let next = ca
            .issue_serving("b", &ServingNames::loopback(), Duration::from_secs(3600))
            .unwrap();
        write_pem_pair(dir.path(), &next.cert_pem, &next.key_pem).unwrap();
        assert!(reloader.poll().unwrap().is_some(), "new pair is picked up");

        std::fs::write(dir.path().join("tls.crt"), "garbage").unwrap();
        assert!(reloader.poll().is_err(), "garbage is an error");
        assert!(CertReloader::load(CertPaths::in_dir(dir.path())).is_err());
        assert!(CertReloader::load(CertPaths::in_dir(&dir.path().join("missing"))).is_err());

        // Mismatched key and certificate.
        write_pem_pair(dir.path(), &cert.cert_pem, &next.key_pem).unwrap();
        assert!(CertReloader::load(CertPaths::in_dir(dir.path())).is_err());
    }
}
