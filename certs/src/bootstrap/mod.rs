//! The self-signed bootstrap for clusters without cert-manager: keep a CA and
//! the webhook's serving certificate in a `kubernetes.io/tls` Secret, keep the
//! `caBundle` of the MutatingWebhookConfiguration in step with it, and rotate
//! both before they expire.
//!
//! The Secret holds `tls.crt`/`tls.key` (the serving pair the webhook mounts),
//! `ca.crt` (the CA bundle clients must trust: the current CA first, then a
//! previous CA while it is still valid, so a rotation never leaves a served
//! certificate untrusted) and `ca.key` (the current CA's key).
//!
//! One pass ([`reconcile`]) decides from what it finds ([`plan`], pure) and
//! writes only what changed; [`watch`] repeats it. Writes are ordered so the
//! API server always trusts what the webhook serves: the caBundle (which
//! already includes a new CA) is patched before the Secret that starts using
//! it is written.
//!
//! `config.rs` holds the settings, `material.rs` the Secret's keys and PEM
//! texts, `plan.rs` the decision, `apply.rs` the writes and the loop,
//! `report.rs` what a pass reports and logs.

use std::path::PathBuf;
use std::time::Duration;

mod apply;
mod config;
mod material;
mod plan;
mod report;
#[cfg(test)]
mod tests;

pub use apply::{reconcile, watch};
pub use config::BootstrapConfig;
pub use material::{
    CA_CERT_KEY, CA_KEY_KEY, MANAGER, Material, SECRET_TYPE, TLS_CERT_KEY, TLS_KEY_KEY,
};
pub use plan::{Change, Plan, plan};
pub use report::{Report, log_report};

/// Errors of the bootstrap.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// Invalid settings.
    #[error("invalid settings: {0}")]
    Config(String),
    /// Minting or reading certificates failed.
    #[error(transparent)]
    Cert(#[from] crate::Error),
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// The error.
        source: kube::Error,
    },
    /// The Secret exists but cannot be used.
    #[error("Secret {0}: {1}")]
    Secret(String, String),
    /// Writing `--out-dir` failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// Other writers kept changing the Secret.
    #[error("the Secret {0} kept changing under this pass; try again")]
    Contended(String),
}

/// Parses `90s`, `10m`, `720h` or `30d`; a bare number is refused (the
/// workspace's one parser, [`koord_queue_model::parse_duration_with_unit`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    koord_queue_model::parse_duration_with_unit(text)
}
