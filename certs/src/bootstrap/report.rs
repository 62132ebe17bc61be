//! What a pass found and did, and how it is logged.

use time::OffsetDateTime;

use super::config::BootstrapConfig;
use super::plan::Change;

/// What one pass found and did.
#[derive(Clone, Debug)]
pub struct Report {
    /// What changed in the Secret.
    pub change: Change,
    /// Webhooks whose caBundle was patched.
    pub patched_webhooks: usize,
    /// `false` when the named webhook configuration does not exist (yet).
    pub webhook_configuration_found: bool,
    /// `false` when the named APIService does not exist (yet).
    pub api_service_found: bool,
    /// Whether the APIService's caBundle was patched.
    pub api_service_patched: bool,
    /// End of validity of the serving certificate kept.
    pub cert_not_after: OffsetDateTime,
    /// End of validity of the current CA.
    pub ca_not_after: OffsetDateTime,
}

/// Logs what a pass did.
pub fn log_report(config: &BootstrapConfig, report: &Report) {
    let secret = format!("{}/{}", config.namespace, config.secret);
    match &report.change {
        Change::Unchanged => tracing::debug!(%secret, "certificates valid"),
        Change::Created(why) => {
            tracing::info!(%secret, reason = %why, "created a CA and a serving certificate")
        }
        Change::RenewedServing(why) => {
            tracing::info!(%secret, reason = %why, "renewed the serving certificate")
        }
        Change::RotatedCa(why) => tracing::info!(%secret, reason = %why, "rotated the CA"),
        Change::PrunedBundle => tracing::info!(%secret, "dropped expired CAs from the bundle"),
    }
    if report.patched_webhooks > 0 {
        tracing::info!(
            configuration = ?config.webhook_configuration,
            webhooks = report.patched_webhooks,
            "patched the caBundle"
        );
    }
    if report.api_service_patched {
        tracing::info!(api_service = ?config.api_service, "patched the caBundle");
    }
    if !report.api_service_found {
        tracing::warn!(
            api_service = ?config.api_service,
            "the APIService does not exist (yet); its caBundle is set once it does"
        );
    }
    if !report.webhook_configuration_found {
        tracing::warn!(
            configuration = ?config.webhook_configuration,
            "the webhook configuration does not exist (yet); its caBundle is set once it does"
        );
    }
}
