//! The TLS material as the Secret holds it: its keys, the four PEM texts,
//! and the CA bundle taken apart into its certificates.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

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

    pub(super) fn data(&self) -> BTreeMap<String, ByteString> {
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

/// The certificates of a PEM bundle, each as its own PEM text (original
/// bytes, so an unchanged bundle compares equal).
pub(super) fn split_pem(bundle: &str) -> Vec<String> {
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
