//! The decision of a pass, pure: given what the Secret holds and the time,
//! which material to keep and why (create, renew the serving certificate,
//! rotate the CA, prune expired CAs, or nothing).

use std::time::Duration;

use time::OffsetDateTime;

use super::BootstrapError;
use super::config::BootstrapConfig;
use super::material::{Material, split_pem};
use crate::{Authority, IssuedCert};

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
pub(super) fn signed_by(cert_pem: &str, ca_pem: &str) -> bool {
    let parse = |pem: &str| x509_parser::pem::parse_x509_pem(pem.as_bytes()).map(|(_, p)| p);
    let (Ok(cert), Ok(ca)) = (parse(cert_pem), parse(ca_pem)) else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (cert.parse_x509(), ca.parse_x509()) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}
