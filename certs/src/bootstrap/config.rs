//! What the bootstrap keeps and where, and the check of those settings
//! before any pass (so a wrong flag fails at once, not at the first renewal).

use std::path::PathBuf;
use std::time::Duration;

use super::BootstrapError;
use crate::ServingNames;

/// What the bootstrap keeps and where.
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the `kubernetes.io/tls` Secret.
    pub secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the CA bundle.
    pub webhook_configuration: Option<String>,
    /// APIService (`v1alpha1.visibility.koord-queue.io`) that gets the CA
    /// bundle: the aggregation layer verifies the serving certificate with it.
    pub api_service: Option<String>,
    /// Names the serving certificate must cover.
    pub names: ServingNames,
    /// Common name of the serving certificate.
    pub common_name: String,
    /// Validity of a new serving certificate.
    pub cert_validity: Duration,
    /// The serving certificate is renewed this long before it expires.
    pub renew_before: Duration,
    /// Validity of a new CA.
    pub ca_validity: Duration,
    /// The CA is rotated this long before it expires.
    pub ca_renew_before: Duration,
    /// Also write `tls.crt`, `tls.key` and `ca.crt` here (an init container or
    /// sidecar sharing an emptyDir with the webhook).
    pub out_dir: Option<PathBuf>,
}

impl BootstrapConfig {
    /// Checks the settings; an error says which one is wrong.
    pub fn validate(&self) -> Result<(), BootstrapError> {
        let bad = |what: String| Err(BootstrapError::Config(what));
        if self.namespace.is_empty() || self.secret.is_empty() {
            return bad("the namespace and the Secret name must not be empty".into());
        }
        if self.names.dns.is_empty() && self.names.ips.is_empty() {
            return bad(
                "the serving certificate needs a name: give --service, --dns or --ip".into(),
            );
        }
        if self.renew_before >= self.cert_validity {
            return bad(format!(
                "--renew-before ({}) must be shorter than --cert-validity ({}), or every pass would renew",
                human(self.renew_before),
                human(self.cert_validity)
            ));
        }
        if self.ca_renew_before >= self.ca_validity {
            return bad(format!(
                "--ca-renew-before ({}) must be shorter than --ca-validity ({})",
                human(self.ca_renew_before),
                human(self.ca_validity)
            ));
        }
        Ok(())
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(86400) {
        format!("{}d", s / 86400)
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}
