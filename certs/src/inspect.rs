//! Reading back what a PEM certificate says: names and expiry. Used to decide
//! when a certificate must be rotated and to report what was loaded.

use std::net::IpAddr;

use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

use crate::Error;

/// The parts of a certificate Koord-Queue cares about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSummary {
    /// Subject common name.
    pub common_name: String,
    /// Subject organizations (Kubernetes groups of a client certificate).
    pub organizations: Vec<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// End of validity.
    pub not_after: OffsetDateTime,
}

fn invalid(reason: impl std::fmt::Display) -> Error {
    Error::Invalid(reason.to_string())
}

/// Summarizes the first certificate of a PEM document.
pub fn summarize(cert_pem: &str) -> Result<CertSummary, Error> {
    let (_, pem) =
        parse_x509_pem(cert_pem.as_bytes()).map_err(|e| invalid(format!("not PEM: {e}")))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
    let subject = cert.subject();
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().map(str::to_string).unwrap_or_default()
    };
    let common_name = subject
        .iter_common_name()
        .next()
        .map(text)
        .unwrap_or_default();
    let organizations = subject.iter_organization().map(text).collect();
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => dns_names.push((*dns).to_string()),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*bytes).map_err(invalid)?)),
                    16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*bytes).map_err(invalid)?)),
                    n => return Err(invalid(format!("IP SAN of {n} bytes"))),
                },
                _ => {}
            }
        }
    }
    Ok(CertSummary {
        common_name,
        organizations,
        dns_names,
        ips,
        not_after: cert.validity().not_after.to_datetime(),
    })
}

/// End of validity of the first certificate of a PEM document.
pub fn not_after(cert_pem: &str) -> Result<OffsetDateTime, Error> {
    summarize(cert_pem).map(|s| s.not_after)
}

/// The public key (SubjectPublicKeyInfo PEM) of a PEM private key; e.g. the
/// verification key of a service-account signing key.
pub fn public_key_pem(key_pem: &str) -> Result<String, Error> {
    Ok(rcgen::KeyPair::from_pem(key_pem)?.public_key_pem())
}
