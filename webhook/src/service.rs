//! One admission review, from request bytes to response: parsing (with a
//! precise answer for every malformed input), the decision, metrics and the
//! review's span. The decision's effects (QueueUnit create, unit lookup on
//! UPDATE, a child's proof and count) are in `effects.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::Value;
use tracing::{Instrument, field};

use crate::admit;
use crate::api_access::ApiAccess;
use crate::children::ChildLedger;
use crate::metrics::{Metrics, ReviewLabels};
use crate::ownership::{self, NotProven};
use crate::policy::Policy;
use crate::unit_creator::UnitCreator;
use crate::verdict::{RequestObjects, Verdict};
use crate::view::ClusterView;

/// Everything a review needs; shared by all requests.
pub struct Webhook {
    /// Who may do what.
    pub policy: Policy,
    /// Cached cluster objects.
    pub view: Arc<dyn ClusterView>,
    /// API calls.
    pub api: Arc<dyn ApiAccess>,
    /// Metrics.
    pub metrics: Metrics,
    /// Creates the QueueUnits of held jobs.
    pub units: UnitCreator,
    /// Time budget of one review.
    pub review_timeout: Duration,
    /// Whether the caches have their initial lists; until then CREATEs are
    /// refused (a decision on an empty cache could refuse valid jobs).
    pub synced: AtomicBool,
    /// Children admitted here a moment ago, per paying unit
    /// ([`crate::children`]).
    pub children: ChildLedger,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// An HTTP answer: status and JSON body.
pub type Answer = (StatusCode, Value);

fn bad_request(message: String) -> Answer {
    (
        StatusCode::BAD_REQUEST,
        serde_json::json!({ "error": message }),
    )
}

fn review_json(mut response: AdmissionResponse) -> Answer {
    // kube-core serializes the patch bytes as a JSON array of numbers; the API
    // server reads the base64 string Go's encoding/json writes for []byte,
    // which is also about four times smaller.
    let patch = response.patch.take();
    match serde_json::to_value(response.into_review()) {
        Ok(mut body) => {
            if let (Some(patch), Some(out)) = (
                patch,
                body.get_mut("response").and_then(Value::as_object_mut),
            ) {
                use base64::Engine;
                out.insert(
                    "patch".into(),
                    Value::String(base64::engine::general_purpose::STANDARD.encode(patch)),
                );
            }
            (StatusCode::OK, body)
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({ "error": e.to_string() }),
        ),
    }
}

/// An `allowed: false` review for a request that could not be read fully
/// but whose uid is known.
fn invalid_review(uid: &str, api_version: &str, reason: String) -> Answer {
    let mut response = AdmissionResponse::invalid(reason);
    response.uid = uid.to_string();
    response.types.api_version = api_version.to_string();
    review_json(response)
}

impl Webhook {
    /// Answers the body of a `POST /mutate`.
    pub async fn review(&self, body: &[u8]) -> Answer {
        let started = Instant::now();
        let mut value: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return bad_request(format!("request body is not JSON: {e}")),
        };
        let Some(uid) = value
            .pointer("/request/uid")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return bad_request("not an AdmissionReview: request.uid is missing".into());
        };
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("admission.k8s.io/v1")
            .to_string();
        let kind_label = value
            .pointer("/request/kind/kind")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        let operation_label = value
            .pointer("/request/operation")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        let span = tracing::info_span!(
            "review",
            uid = %uid,
            kind = %kind_label,
            namespace = field::Empty,
            name = field::Empty,
            operation = %operation_label,
            verdict = field::Empty,
        );
        let (answer, verdict) = async {
            // The job is decided on as raw JSON: take it out before the typed parse.
            let objects = RequestObjects {
                object: value
                    .pointer_mut("/request/object")
                    .map(Value::take)
                    .filter(|v| !v.is_null()),
                old: value
                    .pointer_mut("/request/oldObject")
                    .map(Value::take)
                    .filter(|v| !v.is_null()),
            };
            let review: AdmissionReview<DynamicObject> = match serde_json::from_value(value) {
                Ok(r) => r,
                Err(e) => {
                    return (
                        invalid_review(
                            &uid,
                            &api_version,
                            format!("malformed AdmissionReview: {e}"),
                        ),
                        "error",
                    );
                }
            };
            let request: AdmissionRequest<DynamicObject> = match review.try_into() {
                Ok(r) => r,
                Err(e) => {
                    return (
                        invalid_review(
                            &uid,
                            &api_version,
                            format!("malformed AdmissionReview: {e}"),
                        ),
                        "error",
                    );
                }
            };
            let span = tracing::Span::current();
            span.record("namespace", request.namespace.as_deref().unwrap_or(""));
            span.record("name", request.name.as_str());
            match tokio::time::timeout(self.review_timeout, self.decide(&request, &objects)).await {
                Ok((response, verdict)) => (review_json(response), verdict),
                Err(_) => (
                    review_json(AdmissionResponse::from(&request).deny(format!(
                        "Koord-Queue could not decide within {:?}; retry the request",
                        self.review_timeout
                    ))),
                    "error",
                ),
            }
        }
        .instrument(span.clone())
        .await;
        span.record("verdict", verdict);
        let _entered = span.enter();
        match verdict {
            "denied" | "error" => tracing::info!("review answered"),
            _ => tracing::debug!("review answered"),
        }
        let labels = ReviewLabels::bounded(&kind_label, &operation_label, verdict);
        self.metrics.reviews.get_or_create(&labels).inc();
        self.metrics
            .review_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        answer
    }

    async fn decide(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        objects: &RequestObjects,
    ) -> (AdmissionResponse, &'static str) {
        let allow = AdmissionResponse::from(request);
        if !self.synced.load(Ordering::Acquire) {
            return (
                allow.deny("Koord-Queue's webhook is starting (caches not synced yet); retry"),
                "error",
            );
        }
        let sized = match self.sized_objects(request, objects).await {
            Ok(sized) => sized,
            Err(message) => return (allow.deny(message), "denied"),
        };
        let objects = sized.as_ref().unwrap_or(objects);
        let completed = self.completed_update(request, objects);
        let objects = completed.as_ref().unwrap_or(objects);
        let fresh = self.fresh_view(request, objects).await;
        let verdict = match &fresh {
            Some(view) => admit::decide(request, objects, view, &self.policy),
            None => admit::decide(request, objects, self.view.as_ref(), &self.policy),
        };
        match verdict {
            Verdict::CheckChild { claim, fallback } => {
                match ownership::prove(self.api.as_ref(), &claim).await {
                    Ok(proof) => self.admit_child(request, objects, &claim, &proof).await,
                    Err(NotProven::Unverifiable(e)) => (
                        allow.deny(format!(
                            "cannot verify that {} {}/{} is a child of {} {}: {e}; retry",
                            claim.adapter.kind().kind,
                            claim.namespace,
                            claim.name,
                            claim.owner.adapter.kind().kind,
                            claim.owner.name
                        )),
                        "error",
                    ),
                    Err(NotProven::Refuted(reason)) => match *fallback {
                        Verdict::Deny(message) => {
                            (allow.deny(format!("{message}: {reason}")), "denied")
                        }
                        other => {
                            let (mut response, verdict) = self.apply(request, other).await;
                            if response.allowed {
                                response.warnings = Some(vec![format!(
                                    "queued as a job of its own, not as its owner's child: {reason}"
                                )]);
                            }
                            (response, verdict)
                        }
                    },
                }
            }
            other => self.apply(request, other).await,
        }
    }
}
