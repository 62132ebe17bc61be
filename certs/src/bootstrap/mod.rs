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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use time::OffsetDateTime;

use crate::{Authority, IssuedCert, ServingNames};

/// Key of the CA bundle in the Secret (what goes into `caBundle`).
pub const CA_CERT_KEY: &str = "ca.crt";
/// Key of the current CA's private key in the Secret.
pub const CA_KEY_KEY: &str = "ca.key";
/// Key of the serving certificate in the Secret.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Key of the serving key in the Secret.
pub const TLS_KEY_KEY: &str = "tls.key";
/// Type of the Secret.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";
/// Field manager and `managed-by` label of what the bootstrap writes.
pub const MANAGER: &str = "koord-queue-certs";

/// What the bootstrap keeps and where.
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the `kubernetes.io/tls` Secret.
    pub secret: String,
    /// MutatingWebhookConfiguration whose webhooks get the CA bundle.
    pub webhook_configuration: Option<String>,
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

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> BootstrapError {
    let what = what.into();
    move |source| BootstrapError::Api { what, source }
}

/// The TLS material kept in the Secret, PEM-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Material {
    /// Certificates clients trust, current CA first.
    pub ca_bundle: String,
    /// Key of the current CA.
    pub ca_key: String,
    /// Serving certificate.
    pub cert: String,
    /// Serving key.
    pub key: String,
}

impl Material {
    /// Reads the material from a Secret's data; `None` if a key is missing.
    pub fn from_secret(secret: &Secret) -> Option<Self> {
        let data = secret.data.as_ref()?;
        let get = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .filter(|s| !s.trim().is_empty())
        };
        Some(Self {
            ca_bundle: get(CA_CERT_KEY)?,
            ca_key: get(CA_KEY_KEY)?,
            cert: get(TLS_CERT_KEY)?,
            key: get(TLS_KEY_KEY)?,
        })
    }

    fn data(&self) -> BTreeMap<String, ByteString> {
        [
            (CA_CERT_KEY, &self.ca_bundle),
            (CA_KEY_KEY, &self.ca_key),
            (TLS_CERT_KEY, &self.cert),
            (TLS_KEY_KEY, &self.key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect()
    }
}

/// What a pass did to the material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Everything was valid and is kept.
    Unchanged,
    /// A new CA and serving certificate were minted (why).
    Created(String),
    /// A new serving certificate from the same CA (why).
    RenewedServing(String),
    /// A new CA (the previous one stays trusted until it expires) and a new
    /// serving certificate (why).
    RotatedCa(String),
    /// Only the bundle changed: expired CAs were dropped.
    PrunedBundle,
}

/// The material a pass wants and why.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The material to keep.
    pub material: Material,
    /// How it differs from what was found.
    pub change: Change,
}

/// Decides what to keep, given what the Secret holds (`None`: no usable
/// material) at time `now`. Pure: no I/O.
pub fn plan(
    existing: Option<&Material>,
    config: &BootstrapConfig,
    now: OffsetDateTime,
) -> Result<Plan, BootstrapError> {
    let Some(found) = existing else {
        return fresh(config, Change::Created("no certificate yet".into()));
    };
    let bundle = split_pem(&found.ca_bundle);
    let ca = match bundle.first() {
        Some(first) => Authority::from_pem(first, &found.ca_key).and_then(|ca| {
            if key_matches(ca.cert_pem(), &found.ca_key)? {
                Ok(ca)
            } else {
                Err(crate::Error::Invalid(
                    "ca.key does not belong to ca.crt".into(),
                ))
            }
        }),
        None => Err(crate::Error::Invalid("ca.crt holds no certificate".into())),
    };
    let ca = match ca {
        Ok(ca) => ca,
        Err(e) => return fresh(config, Change::Created(format!("the CA is unusable: {e}"))),
    };

    if remaining(ca.cert().not_after, now) <= config.ca_renew_before {
        let next = Authority::generate(&ca_common_name(config), config.ca_validity)?;
        let serving = issue(&next, config)?;
        // The previous CA (and any still-valid older one) stays trusted: the
        // webhook may serve a certificate of it until it reloads.
        let mut trusted = vec![next.cert_pem().to_string()];
        trusted.extend(still_valid(&bundle, now));
        return Ok(Plan {
            material: Material {
                ca_bundle: trusted.concat(),
                ca_key: next.cert().key_pem.clone(),
                cert: serving.cert_pem,
                key: serving.key_pem,
            },
            change: Change::RotatedCa(format!("the CA expires at {}", ca.cert().not_after.date())),
        });
    }

    let mut trusted = vec![ca.cert_pem().to_string()];
    trusted.extend(still_valid(&bundle[1..], now));
    let ca_bundle = trusted.concat();
    match serving_problem(found, &ca, config, now) {
        Some(reason) => {
            let serving = issue(&ca, config)?;
            Ok(Plan {
                material: Material {
                    ca_bundle,
                    ca_key: found.ca_key.clone(),
                    cert: serving.cert_pem,
                    key: serving.key_pem,
                },
                change: Change::RenewedServing(reason),
            })
        }
        None if ca_bundle != found.ca_bundle => Ok(Plan {
            material: Material {
                ca_bundle,
                ..found.clone()
            },
            change: Change::PrunedBundle,
        }),
        None => Ok(Plan {
            material: found.clone(),
            change: Change::Unchanged,
        }),
    }
}

fn fresh(config: &BootstrapConfig, change: Change) -> Result<Plan, BootstrapError> {
    let ca = Authority::generate(&ca_common_name(config), config.ca_validity)?;
    let serving = issue(&ca, config)?;
    Ok(Plan {
        material: Material {
            ca_bundle: ca.cert_pem().to_string(),
            ca_key: ca.cert().key_pem.clone(),
            cert: serving.cert_pem,
            key: serving.key_pem,
        },
        change,
    })
}

fn ca_common_name(config: &BootstrapConfig) -> String {
    format!("koord-queue-webhook-ca.{}", config.namespace)
}

fn issue(ca: &Authority, config: &BootstrapConfig) -> Result<IssuedCert, BootstrapError> {
    Ok(ca.issue_serving(&config.common_name, &config.names, config.cert_validity)?)
}

/// Why the serving certificate must be replaced, if it must.
fn serving_problem(
    found: &Material,
    ca: &Authority,
    config: &BootstrapConfig,
    now: OffsetDateTime,
) -> Option<String> {
    let summary = match crate::inspect::summarize(&found.cert) {
        Ok(s) => s,
        Err(e) => return Some(format!("tls.crt is unreadable: {e}")),
    };
    match key_matches(&found.cert, &found.key) {
        Ok(true) => {}
        Ok(false) => return Some("tls.key does not belong to tls.crt".into()),
        Err(e) => return Some(format!("tls.key is unreadable: {e}")),
    }
    if !signed_by(&found.cert, ca.cert_pem()) {
        return Some("tls.crt was not issued by the current CA".into());
    }
    if remaining(summary.not_after, now) <= config.renew_before {
        return Some(format!(
            "the serving certificate expires at {}",
            summary.not_after.date()
        ));
    }
    let missing: Vec<String> = config
        .names
        .dns
        .iter()
        .filter(|d| !summary.dns_names.contains(d))
        .cloned()
        .chain(
            config
                .names
                .ips
                .iter()
                .filter(|ip| !summary.ips.contains(ip))
                .map(ToString::to_string),
        )
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "the serving certificate does not cover {}",
            missing.join(", ")
        ));
    }
    None
}

fn remaining(not_after: OffsetDateTime, now: OffsetDateTime) -> Duration {
    Duration::try_from(not_after - now).unwrap_or(Duration::ZERO)
}

/// The certificates of a PEM bundle, each as its own PEM text (original
/// bytes, so an unchanged bundle compares equal).
fn split_pem(bundle: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = bundle;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let stop = start + len + END.len();
        out.push(format!("{}\n", &rest[start..stop]));
        rest = &rest[stop..];
    }
    out
}

fn still_valid(certs: &[String], now: OffsetDateTime) -> Vec<String> {
    certs
        .iter()
        .filter(|c| crate::inspect::not_after(c).is_ok_and(|t| t > now))
        .cloned()
        .collect()
}

/// Whether the private key `key_pem` is the key of certificate `cert_pem`.
fn key_matches(cert_pem: &str, key_pem: &str) -> Result<bool, crate::Error> {
    let key = rcgen::KeyPair::from_pem(key_pem)?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| crate::Error::Invalid(format!("not PEM: {e}")))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| crate::Error::Invalid(format!("not a certificate: {e}")))?;
    // Compare the raw public keys (the BIT STRING of the SubjectPublicKeyInfo).
    Ok(rcgen::PublicKeyData::der_bytes(&key) == &*cert.public_key().subject_public_key.data)
}

/// Whether `cert_pem` carries a valid signature of the CA `ca_pem`.
fn signed_by(cert_pem: &str, ca_pem: &str) -> bool {
    let parse = |pem: &str| x509_parser::pem::parse_x509_pem(pem.as_bytes()).map(|(_, p)| p);
    let (Ok(cert), Ok(ca)) = (parse(cert_pem), parse(ca_pem)) else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (cert.parse_x509(), ca.parse_x509()) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// What one pass found and did.
#[derive(Clone, Debug)]
pub struct Report {
    /// What changed in the Secret.
    pub change: Change,
    /// Webhooks whose caBundle was patched.
    pub patched_webhooks: usize,
    /// `false` when the named webhook configuration does not exist (yet).
    pub webhook_configuration_found: bool,
    /// End of validity of the serving certificate kept.
    pub cert_not_after: OffsetDateTime,
    /// End of validity of the current CA.
    pub ca_not_after: OffsetDateTime,
}

/// One pass at time `now`: read the Secret, decide, patch the caBundle, write
/// the Secret (only when it changes) and `out_dir`.
pub async fn reconcile(
    client: &kube::Client,
    config: &BootstrapConfig,
    now: OffsetDateTime,
) -> Result<Report, BootstrapError> {
    config.validate()?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let what = format!("{}/{}", config.namespace, config.secret);
    // Another writer (a second replica, a rerun init container) may win a
    // race for the Secret: re-read and decide again.
    for _ in 0..5 {
        let current = secrets
            .get_opt(&config.secret)
            .await
            .map_err(api_error(format!("reading Secret {what}")))?;
        if let Some(secret) = &current {
            let type_ = secret.type_.as_deref().unwrap_or("Opaque");
            if type_ != SECRET_TYPE {
                return Err(BootstrapError::Secret(
                    what,
                    format!(
                        "has type {type_}, not {SECRET_TYPE}; delete it or choose another name"
                    ),
                ));
            }
        }
        let found = current.as_ref().and_then(Material::from_secret);
        let plan = plan(found.as_ref(), config, now)?;

        // Trust first: the bundle already holds any new CA.
        let (found_config, patched) =
            patch_ca_bundle(client, config, &plan.material.ca_bundle).await?;

        if plan.change != Change::Unchanged {
            match write_secret(&secrets, config, current, &plan.material).await {
                Ok(()) => {}
                Err(BootstrapError::Api {
                    source: kube::Error::Api(e),
                    ..
                }) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        if let Some(dir) = &config.out_dir {
            write_out_dir(dir, &plan.material)?;
        }
        let first_ca = split_pem(&plan.material.ca_bundle)
            .into_iter()
            .next()
            .unwrap_or_default();
        return Ok(Report {
            change: plan.change,
            patched_webhooks: patched,
            webhook_configuration_found: found_config,
            cert_not_after: crate::inspect::not_after(&plan.material.cert)?,
            ca_not_after: crate::inspect::not_after(&first_ca)?,
        });
    }
    Err(BootstrapError::Contended(what))
}

async fn write_secret(
    secrets: &Api<Secret>,
    config: &BootstrapConfig,
    current: Option<Secret>,
    material: &Material,
) -> Result<(), BootstrapError> {
    let what = format!("{}/{}", config.namespace, config.secret);
    match current {
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(config.secret.clone()),
                    namespace: Some(config.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_string(),
                        MANAGER.to_string(),
                    )])),
                    ..Default::default()
                },
                type_: Some(SECRET_TYPE.into()),
                data: Some(material.data()),
                ..Default::default()
            };
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(api_error(format!("creating Secret {what}")))?;
        }
        Some(mut secret) => {
            // Replace with the resourceVersion read: a concurrent change
            // makes this fail with 409 instead of being overwritten.
            let mut data = secret.data.take().unwrap_or_default();
            data.extend(material.data());
            secret.data = Some(data);
            secret.metadata.managed_fields = None;
            secrets
                .replace(&config.secret, &PostParams::default(), &secret)
                .await
                .map_err(api_error(format!("updating Secret {what}")))?;
        }
    }
    Ok(())
}

/// Sets every webhook's `caBundle` of the configuration to `bundle` where it
/// differs. Returns whether the configuration exists and how many webhooks
/// were patched.
async fn patch_ca_bundle(
    client: &kube::Client,
    config: &BootstrapConfig,
    bundle: &str,
) -> Result<(bool, usize), BootstrapError> {
    let Some(name) = &config.webhook_configuration else {
        return Ok((true, 0));
    };
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let Some(current) = api.get_opt(name).await.map_err(api_error(format!(
        "reading MutatingWebhookConfiguration {name}"
    )))?
    else {
        return Ok((false, 0));
    };
    let stale: Vec<String> = current
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .filter(|w| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle.as_bytes())
        })
        .map(|w| w.name)
        .collect();
    if stale.is_empty() {
        return Ok((true, 0));
    }
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle);
    // Strategic merge: `webhooks` merge by name, so only caBundle changes.
    let patch = serde_json::json!({
        "webhooks": stale.iter().map(|n| serde_json::json!({
            "name": n, "clientConfig": { "caBundle": encoded },
        })).collect::<Vec<_>>(),
    });
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(api_error(format!("patching the caBundle of {name}")))?;
    Ok((true, stale.len()))
}

fn write_out_dir(dir: &Path, material: &Material) -> Result<(), BootstrapError> {
    let ca = dir.join(CA_CERT_KEY);
    let same = |path: &Path, text: &str| std::fs::read_to_string(path).is_ok_and(|t| t == text);
    if !same(&dir.join(TLS_CERT_KEY), &material.cert)
        || !same(&dir.join(TLS_KEY_KEY), &material.key)
    {
        crate::write_pem_pair(dir, &material.cert, &material.key)?;
    }
    if !same(&ca, &material.ca_bundle) {
        std::fs::write(&ca, &material.ca_bundle)
            .map_err(|source| BootstrapError::Io { path: ca, source })?;
    }
    Ok(())
}

/// Runs [`reconcile`] every `interval` until `stop` resolves. A failed pass
/// is logged and retried sooner (within a minute).
pub async fn watch(
    client: &kube::Client,
    config: &BootstrapConfig,
    interval: Duration,
    stop: impl Future<Output = ()>,
) -> Result<(), BootstrapError> {
    config.validate()?;
    tokio::pin!(stop);
    loop {
        let wait = match reconcile(client, config, OffsetDateTime::now_utc()).await {
            Ok(report) => {
                log_report(config, &report);
                interval
            }
            Err(error) => {
                tracing::warn!(%error, "certificate pass failed; retrying");
                interval.min(Duration::from_secs(60))
            }
        };
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
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
    if !report.webhook_configuration_found {
        tracing::warn!(
            configuration = ?config.webhook_configuration,
            "the webhook configuration does not exist (yet); its caBundle is set once it does"
        );
    }
}

/// Parses `90s`, `10m`, `720h` or `30d`; a bare number is refused (the
/// workspace's one parser, [`koord_queue_model::parse_duration_with_unit`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    koord_queue_model::parse_duration_with_unit(text)
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

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn config() -> BootstrapConfig {
        BootstrapConfig {
            namespace: "koord-queue".into(),
            secret: "tls".into(),
            webhook_configuration: Some("kq".into()),
            names: ServingNames::for_service("kq-webhook", "koord-queue"),
            common_name: "kq-webhook".into(),
            cert_validity: 365 * DAY,
            renew_before: 30 * DAY,
            ca_validity: 3650 * DAY,
            ca_renew_before: 365 * DAY,
            out_dir: None,
        }
    }

    fn later(days: u64) -> OffsetDateTime {
        OffsetDateTime::now_utc() + DAY * days as u32
    }

    #[test]
    fn creates_then_reuses() {
        let cfg = config();
        let first = plan(None, &cfg, OffsetDateTime::now_utc()).unwrap();
        assert!(matches!(first.change, Change::Created(_)));
        assert_eq!(split_pem(&first.material.ca_bundle).len(), 1);
        assert!(signed_by(&first.material.cert, &first.material.ca_bundle));
        let again = plan(Some(&first.material), &cfg, OffsetDateTime::now_utc()).unwrap();
        assert_eq!(again.change, Change::Unchanged);
        assert_eq!(again.material, first.material);
    }

    #[test]
    fn renews_the_serving_certificate_before_it_expires() {
        let cfg = config();
        let first = plan(None, &cfg, OffsetDateTime::now_utc())
            .unwrap()
            .material;
        // 340 days on, 25 days are left: under the 30 days of renew-before.
        let renewed = plan(Some(&first), &cfg, later(340)).unwrap();
        assert!(
            matches!(renewed.change, Change::RenewedServing(ref r) if r.contains("expires")),
            "{:?}",
            renewed.change
        );
        assert_eq!(renewed.material.ca_bundle, first.ca_bundle, "same CA");
        assert_eq!(renewed.material.ca_key, first.ca_key);
        assert_ne!(renewed.material.cert, first.cert);
        assert!(signed_by(&renewed.material.cert, &first.ca_bundle));
    }

    #[test]
    fn rotates_the_ca_and_keeps_the_old_one_trusted() {
        let cfg = config();
        let first = plan(None, &cfg, OffsetDateTime::now_utc())
            .unwrap()
            .material;
        let rotated = plan(Some(&first), &cfg, later(3300)).unwrap();
        assert!(
            matches!(rotated.change, Change::RotatedCa(_)),
            "{:?}",
            rotated.change
        );
        let bundle = split_pem(&rotated.material.ca_bundle);
        assert_eq!(bundle.len(), 2, "new CA first, then the previous one");
        assert_eq!(bundle[1], first.ca_bundle);
        assert!(signed_by(&rotated.material.cert, &bundle[0]));
    }

    #[test]
    fn expired_cas_leave_the_bundle() {
        let cfg = config();
        let good = plan(None, &cfg, OffsetDateTime::now_utc())
            .unwrap()
            .material;
        let old = Authority::generate("old", Duration::from_secs(1)).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let found = Material {
            ca_bundle: format!("{}{}", good.ca_bundle, old.cert_pem()),
            ..good.clone()
        };
        let p = plan(Some(&found), &cfg, OffsetDateTime::now_utc()).unwrap();
        assert_eq!(p.change, Change::PrunedBundle);
        assert_eq!(p.material, good);
    }

    #[test]
    fn repairs_broken_or_foreign_material() {
        let cfg = config();
        let good = plan(None, &cfg, OffsetDateTime::now_utc())
            .unwrap()
            .material;
        let other = plan(None, &cfg, OffsetDateTime::now_utc())
            .unwrap()
            .material;

        let wrong_key = Material {
            key: other.key.clone(),
            ..good.clone()
        };
        let p = plan(Some(&wrong_key), &cfg, OffsetDateTime::now_utc()).unwrap();
        assert!(
            matches!(p.change, Change::RenewedServing(ref r) if r.contains("tls.key")),
            "{:?}",
            p.change
        );

        let foreign = Material {
            cert: other.cert.clone(),
            key: other.key.clone(),
            ..good.clone()
        };
        let p = plan(Some(&foreign), &cfg, OffsetDateTime::now_utc()).unwrap();
        assert!(
            matches!(p.change, Change::RenewedServing(ref r) if r.contains("not issued")),
            "{:?}",
            p.change
        );

        let mut more = cfg.clone();
        more.names.ips.push([127, 0, 0, 1].into());
        let p = plan(Some(&good), &more, OffsetDateTime::now_utc()).unwrap();
        assert!(
            matches!(p.change, Change::RenewedServing(ref r) if r.contains("127.0.0.1")),
            "{:?}",
            p.change
        );

        let bad_ca = Material {
            ca_key: other.ca_key.clone(),
            ..good.clone()
        };
        let p = plan(Some(&bad_ca), &cfg, OffsetDateTime::now_utc()).unwrap();
        assert!(
            matches!(p.change, Change::Created(ref r) if r.contains("ca.key")),
            "{:?}",
            p.change
        );

        let garbage = Material {
            ca_bundle: "garbage".into(),
            ..good
        };
        assert!(matches!(
            plan(Some(&garbage), &cfg, OffsetDateTime::now_utc())
                .unwrap()
                .change,
            Change::Created(_)
        ));
    }

    #[test]
    fn settings_and_durations_are_checked() {
        let mut cfg = config();
        cfg.renew_before = cfg.cert_validity;
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("--renew-before (365d)")
        );
        let mut cfg = config();
        cfg.names = ServingNames::default();
        assert!(cfg.validate().is_err());
        assert_eq!(parse_duration("30d"), Ok(30 * DAY));
        assert_eq!(parse_duration("720h"), Ok(30 * DAY));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("1y").is_err());
    }
}
