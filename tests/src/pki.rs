//! TLS material of a local control plane, minted with `koord-queue-certs`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use koord_queue_certs::{Authority, IssuedCert, ServingNames};

const VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Files of the control plane's PKI.
#[derive(Debug)]
pub struct Pki {
    /// The cluster CA: signs the apiserver's serving cert and client certs.
    pub ca: Authority,
    /// CA certificate file (client CA of the apiserver, root CA of the cluster).
    pub ca_file: PathBuf,
    /// API server serving certificate and key files.
    pub apiserver_cert: PathBuf,
    /// API server serving key file.
    pub apiserver_key: PathBuf,
    /// Service-account token signing key (private key PEM).
    pub service_account_key: PathBuf,
    /// Service-account token verification key (public key PEM).
    pub service_account_pub: PathBuf,
    /// The admin user's client certificate (CN `koord-queue-admin`, O `system:masters`).
    pub admin: IssuedCert,
}

/// The admin user of test clusters.
pub const ADMIN_USER: &str = "koord-queue-admin";

impl Pki {
    /// Mints the PKI into `dir`.
    pub fn create(dir: &Path) -> Result<Self> {
        let ca = Authority::generate("koord-queue-test-ca", VALIDITY)?;
        let names = ServingNames {
            dns: vec![
                "localhost".into(),
                "kubernetes".into(),
                "kubernetes.default".into(),
                "kubernetes.default.svc".into(),
                "kubernetes.default.svc.cluster.local".into(),
            ],
            ips: vec![IpAddr::from([127, 0, 0, 1]), IpAddr::from([10, 0, 0, 1])],
        };
        let serving = ca.issue_serving("kube-apiserver", &names, VALIDITY)?;
        let admin = ca.issue_client(ADMIN_USER, &["system:masters"], VALIDITY)?;
        // Any certificate's key will do as the service-account signing key.
        let sa = ca.issue_client("service-accounts", &[], VALIDITY)?;

        let write = |name: &str, contents: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, contents)
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        Ok(Self {
            ca_file: write("ca.crt", ca.cert_pem())?,
            apiserver_cert: write("apiserver.crt", &serving.cert_pem)?,
            apiserver_key: write("apiserver.key", &serving.key_pem)?,
            service_account_key: write("sa.key", &sa.key_pem)?,
            service_account_pub: write(
                "sa.pub",
                &koord_queue_certs::inspect::public_key_pem(&sa.key_pem)?,
            )?,
            admin,
            ca,
        })
    }

    /// A client certificate for `user` in `groups`, signed by the cluster CA.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<IssuedCert> {
        Ok(self.ca.issue_client(user, groups, VALIDITY)?)
    }
}
