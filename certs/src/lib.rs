//! TLS material for Koord-Queue: a certificate authority, serving certificates
//! (DNS and IP SANs) and client certificates (CN = user, O = groups), written
//! as PEM files. Used by the test harness, `make run`, and the self-signed
//! bootstrap of clusters without cert-manager.

mod authority;
pub mod bootstrap;
pub mod inspect;
mod pem_files;
mod serving;

pub use authority::{Authority, IssuedCert, MAX_CLIENT_GROUPS, ServingNames};
pub use pem_files::{CERT_FILE, KEY_FILE, write_pem_pair};
pub use serving::{
    CertPaths, CertReloader, install_crypto_provider, server_config, server_config_from_pem,
};

/// Errors while minting, loading or writing TLS material.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Certificate generation or parsing failed.
    #[error("certificate error: {0}")]
    Cert(#[from] rcgen::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A certificate or key could not be read.
    #[error("invalid certificate: {0}")]
    Invalid(String),
    /// A DNS name is not valid for a certificate.
    #[error("invalid DNS name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
}
