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
    /// The aggregation layer's front-proxy CA (`--requestheader-client-ca-file`),
    /// apart from the cluster CA as Kubernetes advises: a client certificate of
    /// the cluster CA must not be able to pose as the front proxy.
    pub front_proxy_ca_file: PathBuf,
    /// The front proxy's client certificate and key (`--proxy-client-*-file`).
    pub front_proxy_cert: PathBuf,
    /// Its key.
    pub front_proxy_key: PathBuf,
}

/// The front proxy's name (`--requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

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
        let front_proxy_ca = Authority::generate("koord-queue-test-front-proxy-ca", VALIDITY)?;
        let front_proxy = front_proxy_ca.issue_client(FRONT_PROXY_CLIENT, &[], VALIDITY)?;

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
            front_proxy_ca_file: write("front-proxy-ca.crt", front_proxy_ca.cert_pem())?,
            front_proxy_cert: write("front-proxy-client.crt", &front_proxy.cert_pem)?,
            front_proxy_key: write("front-proxy-client.key", &front_proxy.key_pem)?,
            ca,
        })
    }

    /// A client certificate for `user` in `groups`, signed by the cluster CA.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<IssuedCert> {
        Ok(self.ca.issue_client(user, groups, VALIDITY)?)
    }
}
