//! Who a bearer token belongs to, as the API server says: a
//! `SelfSubjectReview` (authentication.k8s.io/v1) made with the token
//! itself. A token the API server does not accept is refused here, before
//! any session exists.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

/// The user a token authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user name (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub name: String,
    /// Its groups.
    pub groups: Vec<String>,
}

impl User {
    /// The namespace of a ServiceAccount user: where a tenant's things are.
    pub fn service_account_namespace(&self) -> Option<&str> {
        let rest = self.name.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':').map(|(ns, _)| ns)
    }
}

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SignInRefused {
    /// The API server does not know the token (expired, revoked, mistyped).
    #[error("the API server did not accept this token ({0}); ask for a new one")]
    BadToken(String),
    /// The API server could not be asked.
    #[error("the API server could not be reached to check the token: {0}")]
    Unreachable(String),
}

/// Asks the API server who `client`'s token is.
pub async fn review(client: &kube::Client) -> Result<User, SignInRefused> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview::default();
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) => {
            let info = answer.status.and_then(|s| s.user_info).unwrap_or_default();
            match info.username {
                Some(name) if !name.is_empty() => Ok(User {
                    name,
                    groups: info.groups.unwrap_or_default(),
                }),
                _ => Err(SignInRefused::BadToken("no user in the review".into())),
            }
        }
        Err(kube::Error::Api(status)) if status.code == 401 => {
            Err(SignInRefused::BadToken(status.message))
        }
        // Any other answer (403 on a server that forbids the review, 5xx)
        // is not a verdict on the token.
        Err(e) => Err(SignInRefused::Unreachable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_accounts_namespace_is_read_from_its_name() {
        let user = |name: &str| User {
            name: name.into(),
            groups: vec![],
        };
        assert_eq!(
            user("system:serviceaccount:team-a:tenant").service_account_namespace(),
            Some("team-a")
        );
        assert_eq!(user("alice").service_account_namespace(), None);
    }
}
