//! A small certificate authority that issues serving and client certificates.

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

use crate::Error;

/// Certificates are valid from a little before they are minted, so a peer
/// whose clock is slightly behind does not reject them.
const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// A certificate with its private key, both PEM-encoded.
#[derive(Clone, Debug)]
pub struct IssuedCert {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The private key (PKCS#8 PEM).
    pub key_pem: String,
    /// When the certificate stops being valid.
    pub not_after: OffsetDateTime,
}

/// Subject alternative names of a serving certificate.
#[derive(Clone, Debug, Default)]
pub struct ServingNames {
    /// DNS names, e.g. `localhost`, `koord-queue-webhook.koord-queue.svc`.
    pub dns: Vec<String>,
    /// IP addresses, e.g. `127.0.0.1`.
    pub ips: Vec<IpAddr>,
}

impl ServingNames {
    /// The DNS names under which a Service is reached in-cluster:
    /// `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`.
    pub fn for_service(service: &str, namespace: &str) -> Self {
        Self {
            dns: vec![
                service.to_string(),
                format!("{service}.{namespace}"),
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
            ],
            ips: Vec::new(),
        }
    }

    /// Loopback names: `localhost` and `127.0.0.1`.
    pub fn loopback() -> Self {
        Self {
            dns: vec!["localhost".to_string()],
            ips: vec![IpAddr::from([127, 0, 0, 1])],
        }
    }
}

/// A certificate authority: its certificate and signing key.
#[derive(Debug)]
pub struct Authority {
    issued: IssuedCert,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    /// Mints a new self-signed CA valid for `validity`.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let not_after = set_validity(&mut params, validity);
        let cert = params.self_signed(&key)?;
        let issued = IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        };
        Ok(Self {
            issued,
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads an existing CA from its PEM certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let issuer = Issuer::from_ca_cert_pem(cert_pem, KeyPair::from_pem(key_pem)?)?;
        let not_after = crate::inspect::not_after(cert_pem)?;
        Ok(Self {
            issued: IssuedCert {
                cert_pem: cert_pem.to_string(),
                key_pem: key_pem.to_string(),
                not_after,
            },
            issuer,
        })
    }

    /// The CA certificate and key.
    pub fn cert(&self) -> &IssuedCert {
        &self.issued
    }

    /// The CA certificate in PEM: what goes into a `caBundle` or a trust store.
    pub fn cert_pem(&self) -> &str {
        &self.issued.cert_pem
    }

    /// Issues a TLS server certificate for `names`.
    pub fn issue_serving(
        &self,
        common_name: &str,
        names: &ServingNames,
        validity: Duration,
    ) -> Result<IssuedCert, Error> {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, &[]);
        for dns in &names.dns {
            check_dns_name(dns)?;
            let san = dns
                .clone()
                .try_into()
                .map_err(|e: rcgen::Error| Error::InvalidName {
                    name: dns.clone(),
                    reason: e.to_string(),
                })?;
            params.subject_alt_names.push(SanType::DnsName(san));
        }
        params
            .subject_alt_names
            .extend(names.ips.iter().copied().map(SanType::IpAddress));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params, validity)
    }

    /// Issues a TLS client certificate for Kubernetes user `user` in `groups`
    /// (CN = user, one O per group, as the API server reads them).
    pub fn issue_client(
        &self,
        user: &str,
        groups: &[&str],
        validity: Duration,
    ) -> Result<IssuedCert, Error> {
        if groups.len() > MAX_CLIENT_GROUPS {
            return Err(Error::Invalid(format!(
                "a client certificate carries at most {MAX_CLIENT_GROUPS} groups, {} given",
                groups.len()
            )));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = name(user, groups);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, validity)
    }

    fn sign(&self, mut params: CertificateParams, validity: Duration) -> Result<IssuedCert, Error> {
        let not_after = set_validity(&mut params, validity);
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }
}

/// Most groups one client certificate can carry. rcgen keeps one value per
/// attribute type, so the second group is written under the organizationName
/// OID spelled as a custom type (the same attribute on the wire, which the API
/// server reads as a second group). More groups need another identity
/// mechanism (tokens or impersonation).
pub const MAX_CLIENT_GROUPS: usize = 2;

/// OID of the X.520 organizationName attribute.
const ORGANIZATION_NAME_OID: [u64; 4] = [2, 5, 4, 10];

fn name(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    let types = [
        DnType::OrganizationName,
        DnType::CustomDnType(ORGANIZATION_NAME_OID.to_vec()),
    ];
    for (ty, org) in types.into_iter().zip(organizations) {
        dn.push(ty, *org);
    }
    dn
}

/// Checks a DNS subject alternative name: dot-separated RFC 1123 labels,
/// optionally behind a leading `*.` wildcard.
fn check_dns_name(name: &str) -> Result<(), Error> {
    let refuse = |reason: &str| Error::InvalidName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let host = name.strip_prefix("*.").unwrap_or(name);
    if host.is_empty() || name.len() > 253 {
        return Err(refuse("must be 1 to 253 characters"));
    }
    for label in host.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(refuse("each label must be 1 to 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(refuse("labels may hold only letters, digits and '-'"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(refuse("labels may not start or end with '-'"));
        }
    }
    Ok(())
}

fn set_validity(params: &mut CertificateParams, validity: Duration) -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + validity;
    params.not_after
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn serving_cert_names_and_ca_round_trip() {
        let ca = Authority::generate("test-ca", DAY).unwrap();
        let mut names = ServingNames::for_service("koord-queue-webhook", "koord-queue");
        names.ips.push(IpAddr::from([127, 0, 0, 1]));
        let serving = ca.issue_serving("webhook", &names, DAY).unwrap();
        assert!(serving.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(serving.key_pem.contains("PRIVATE KEY"));
        let summary = crate::inspect::summarize(&serving.cert_pem).unwrap();
        assert!(
            summary
                .dns_names
                .iter()
                .any(|s| s == "koord-queue-webhook.koord-queue.svc")
        );
        assert_eq!(summary.ips, vec![IpAddr::from([127, 0, 0, 1])]);
        assert_eq!(summary.common_name, "webhook");

        // A CA reloaded from PEM keeps issuing under the same name.
        let again = Authority::from_pem(ca.cert_pem(), &ca.cert().key_pem).unwrap();
        let client = again
            .issue_client("alice", &["team-a", "devs"], DAY)
            .unwrap();
        let summary = crate::inspect::summarize(&client.cert_pem).unwrap();
        assert_eq!(summary.common_name, "alice");
        assert_eq!(summary.organizations, vec!["team-a", "devs"]);
    }

    #[test]
    fn invalid_dns_name_is_refused() {
        let ca = Authority::generate("test-ca", DAY).unwrap();
        for bad in ["bad name", "a..b", "-x.svc", "x\u{0}", ""] {
            let names = ServingNames {
                dns: vec![bad.into()],
                ips: vec![],
            };
            assert!(
                ca.issue_serving("x", &names, DAY).is_err(),
                "{bad:?} accepted"
            );
        }
        let ok = ServingNames {
            dns: vec!["*.koord-queue.svc".into()],
            ips: vec![],
        };
        assert!(ca.issue_serving("x", &ok, DAY).is_ok());
        assert!(ca.issue_client("u", &["a", "b", "c"], DAY).is_err());
    }
}
