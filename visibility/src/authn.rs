//! Who is asking. The aggregation layer authenticates the user and passes
//! it on in request headers; this server believes those headers only from a
//! client that presents the front proxy's certificate: signed by the
//! request-header CA and (when the list is not empty) named in the allowed
//! names, as kube-apiserver publishes them in the ConfigMap
//! `kube-system/extension-apiserver-authentication`.

use std::collections::BTreeMap;

use http::HeaderMap;

/// The ConfigMap kube-apiserver publishes its authentication settings in.
pub const AUTHENTICATION_CONFIGMAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");

/// The request-header settings, as published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// PEM of the CA(s) the front proxy's client certificate chains to.
    pub client_ca_pem: String,
    /// Common names the front proxy's certificate may have (empty: any).
    pub allowed_names: Vec<String>,
    /// Headers that carry the user name, first present wins.
    pub username_headers: Vec<String>,
    /// Headers that carry the groups (every value of each).
    pub group_headers: Vec<String>,
    /// Prefixes of the headers that carry extra attributes.
    pub extra_prefixes: Vec<String>,
}

/// Why the published settings cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The API server runs without the aggregation layer's flags.
    #[error(
        "{0} has no requestheader-client-ca-file: kube-apiserver runs without --requestheader-client-ca-file (the aggregation layer is off)"
    )]
    NoRequestHeaderCa(String),
    /// A list key is not a JSON list of strings.
    #[error("{key} of {configmap} is not a JSON list of strings: {value:?}")]
    BadList {
        /// The ConfigMap.
        configmap: String,
        /// The key.
        key: String,
        /// Its value.
        value: String,
    },
    /// No header names the user.
    #[error("{0} names no requestheader-username-headers")]
    NoUsernameHeader(String),
}

impl RequestHeaderConfig {
    /// Reads the settings from the ConfigMap's `data`.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let configmap = format!(
            "{}/{}",
            AUTHENTICATION_CONFIGMAP.0, AUTHENTICATION_CONFIGMAP.1
        );
        let list = |key: &str| -> Result<Vec<String>, ConfigError> {
            match data.get(key).map(|v| v.trim()) {
                None | Some("") => Ok(Vec::new()),
                Some(value) => serde_json::from_str(value).map_err(|_| ConfigError::BadList {
                    configmap: configmap.clone(),
                    key: key.to_string(),
                    value: value.to_string(),
                }),
            }
        };
        let client_ca_pem = data
            .get("requestheader-client-ca-file")
            .filter(|v| !v.trim().is_empty())
            .cloned()
            .ok_or_else(|| ConfigError::NoRequestHeaderCa(configmap.clone()))?;
        let config = Self {
            client_ca_pem,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_prefixes: list("requestheader-extra-headers-prefix")?,
        };
        if config.username_headers.is_empty() {
            return Err(ConfigError::NoUsernameHeader(configmap));
        }
        Ok(config)
    }

    /// The user the front proxy `peer` (its certificate's common name,
    /// `None` without a certificate) vouches for in `headers`.
    pub fn authenticate(&self, peer: Option<&str>, headers: &HeaderMap) -> Result<User, Refusal> {
        let Some(peer) = peer else {
            return Err(Refusal::NoClientCertificate);
        };
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|n| n == peer) {
            return Err(Refusal::NotAllowedName(peer.to_string()));
        }
        let name = self
            .username_headers
            .iter()
            .find_map(|h| headers.get(h.as_str()).and_then(|v| v.to_str().ok()))
            .filter(|v| !v.is_empty())
            .ok_or(Refusal::NoUser)?
            .to_string();
        let groups = self
            .group_headers
            .iter()
            .flat_map(|h| headers.get_all(h.as_str()))
            .filter_map(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let lower = header.as_str();
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| lower.strip_prefix(p.to_ascii_lowercase().as_str()))
            else {
                continue;
            };
            if let Ok(value) = value.to_str() {
                extra
                    .entry(unescape(key))
                    .or_default()
                    .push(value.to_string());
            }
        }
        Ok(User {
            name,
            groups,
            extra,
        })
    }
}

/// Extra keys travel percent-encoded in header names (they may hold `/`).
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes.get(i..i + 3) {
            Some([b'%', h, l]) if hex(*h).is_some() && hex(*l).is_some() => {
                let (h, l) = (hex(*h).unwrap_or(0), hex(*l).unwrap_or(0));
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            _ => {
                out.push(bytes[i].to_ascii_lowercase());
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An authenticated user, as the API server saw it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    /// Name (`system:serviceaccount:ns:sa`, `alice`).
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (scopes, the token's pod).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Why a request is not authenticated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No client certificate: the request did not come through the API server.
    #[error(
        "no client certificate: this API is served through the Kubernetes API server (kubectl get --raw /apis/visibility.koord-queue.io/...)"
    )]
    NoClientCertificate,
    /// Signed by the request-header CA, but not a front proxy.
    #[error("client certificate {0:?} is not one of the request-header allowed names")]
    NotAllowedName(String),
    /// The front proxy named no user.
    #[error("the front proxy named no user")]
    NoUser,
    /// The settings are not loaded yet.
    #[error("the request-header settings are not loaded yet: {0}")]
    NotConfigured(String),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(allowed: &str) -> RequestHeaderConfig {
        let data: BTreeMap<String, String> = [
            (
                "requestheader-client-ca-file",
                "-----BEGIN CERTIFICATE-----",
            ),
            ("requestheader-allowed-names", allowed),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        RequestHeaderConfig::from_configmap(&data).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_front_proxy_vouches_for_user_groups_and_extras() {
        let c = config(r#"["front-proxy-client"]"#);
        let user = c
            .authenticate(
                Some("front-proxy-client"),
                &headers(&[
                    ("x-remote-user", "alice"),
                    ("x-remote-group", "team-a"),
                    ("x-remote-group", "system:authenticated"),
                    (
                        "x-remote-extra-authentication.kubernetes.io%2fpod-name",
                        "p",
                    ),
                ]),
            )
            .unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["team-a", "system:authenticated"]);
        assert_eq!(
            user.extra["authentication.kubernetes.io/pod-name"],
            ["p".to_string()]
        );
    }

    #[test]
    fn anyone_else_is_refused() {
        let c = config(r#"["front-proxy-client"]"#);
        let h = headers(&[("x-remote-user", "system:admin")]);
        assert_eq!(c.authenticate(None, &h), Err(Refusal::NoClientCertificate));
        assert_eq!(
            c.authenticate(Some("kubelet"), &h),
            Err(Refusal::NotAllowedName("kubelet".into()))
        );
        assert_eq!(
            c.authenticate(Some("front-proxy-client"), &HeaderMap::new()),
            Err(Refusal::NoUser)
        );
        // No allowed names: any certificate of the CA is a front proxy.
        assert!(config("").authenticate(Some("kubelet"), &h).is_ok());
    }

    #[test]
    fn settings_without_the_aggregation_layer_say_so() {
        let err = RequestHeaderConfig::from_configmap(&BTreeMap::new()).unwrap_err();
        assert!(
            err.to_string().contains("--requestheader-client-ca-file"),
            "{err}"
        );
        let mut data = BTreeMap::new();
        data.insert("requestheader-client-ca-file".to_string(), "x".to_string());
        data.insert(
            "requestheader-allowed-names".to_string(),
            "front".to_string(),
        );
        assert!(matches!(
            RequestHeaderConfig::from_configmap(&data),
            Err(ConfigError::BadList { .. })
        ));
    }
}
