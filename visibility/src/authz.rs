//! What the user may see: every request is authorized by the API server's
//! own authorizer through a SubjectAccessReview (RBAC decides, as for any
//! resource), cached for a few seconds as Kubernetes' delegated authorizer
//! does, so that a page of requests costs one review.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::authn::User;
use crate::types::GROUP;

/// How long a review's verdict is reused.
const CACHE_FOR: Duration = Duration::from_secs(10);
/// Verdicts kept at most (the cache is cleared when full).
const CACHE_SIZE: usize = 10_000;

/// What a request does, in RBAC's terms.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get` or `list`.
    pub verb: &'static str,
    /// `pendingunits`, `queues`, `quotausages`.
    pub resource: &'static str,
    /// `pendingunits` of a queue.
    pub subresource: Option<&'static str>,
    /// The namespace (`None`: across namespaces).
    pub namespace: Option<String>,
    /// The object's name (a queue).
    pub name: Option<String>,
}

impl Attributes {
    /// `kubectl auth can-i`'s phrasing, for a refusal.
    pub fn describe(&self) -> String {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_string(),
        };
        let name = self
            .name
            .as_deref()
            .map(|n| format!(" {n:?}"))
            .unwrap_or_default();
        let scope = match &self.namespace {
            Some(ns) => format!("in the namespace {ns:?}"),
            None => "at the cluster scope".to_string(),
        };
        format!("{} {resource}.{GROUP}{name} {scope}", self.verb)
    }
}

/// The API server's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed.
    Allowed,
    /// Denied, with the authorizer's reason if it gave one.
    Denied(String),
}

/// Authorizes through SubjectAccessReviews.
pub struct Authorizer {
    client: kube::Client,
    cache: Mutex<HashMap<(User, Attributes), (Verdict, Instant)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer asking through `client` (which needs `create` on
    /// `subjectaccessreviews`: the ClusterRole `system:auth-delegator`).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `user` may do `attrs`; an error when the review failed.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<Verdict, kube::Error> {
        let key = (user.clone(), attrs.clone());
        if let Ok(cache) = self.cache.lock()
            && let Some((verdict, at)) = cache.get(&key)
            && at.elapsed() < CACHE_FOR
        {
            return Ok(verdict.clone());
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(GROUP.into()),
                    version: Some(crate::types::VERSION.into()),
                    verb: Some(attrs.verb.into()),
                    resource: Some(attrs.resource.into()),
                    subresource: attrs.subresource.map(Into::into),
                    namespace: attrs.namespace.clone(),
                    name: attrs.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        let verdict = if status.allowed && !status.denied.unwrap_or(false) {
            Verdict::Allowed
        } else {
            Verdict::Denied(status.reason.unwrap_or_default())
        };
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_SIZE {
                cache.clear();
            }
            cache.insert(key, (verdict.clone(), Instant::now()));
        }
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_permission() {
        let attrs = Attributes {
            verb: "get",
            resource: "queues",
            subresource: Some("pendingunits"),
            namespace: Some("koord-queue".into()),
            name: Some("team-a".into()),
        };
        assert_eq!(
            attrs.describe(),
            "get queues/pendingunits.visibility.koord-queue.io \"team-a\" in the namespace \"koord-queue\""
        );
    }
}
