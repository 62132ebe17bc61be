//! The HTTP side: one handler per path, each authenticating the request
//! (the front proxy's headers), authorizing it (a SubjectAccessReview) and
//! answering from the state's owner; errors are Kubernetes `Status` objects.

use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use crate::authn::{Refusal, RequestHeaderConfig, User};
use crate::authz::{Attributes, Verdict};
use crate::cache::{AnswerCache, CacheKey, Kept};
use crate::discovery;
use crate::queries::{Answer, Ask, Page, Queries, Reply, Unanswered};
use crate::table;
use crate::types::{API_VERSION, PendingUnitList, QuotaUsageList};

/// The common name of the client certificate of a connection (`None`
/// without one), put into each request by the TLS acceptor.
#[derive(Clone, Debug, Default)]
pub struct PeerName(pub Option<String>);

/// Decides whether a user may do something (in production a
/// SubjectAccessReview; a test may decide itself).
pub trait Authorize: Send + Sync + std::fmt::Debug {
    /// The verdict, or why none could be had.
    fn authorize<'a>(
        &'a self,
        user: &'a User,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<Verdict, String>>;
}

impl Authorize for crate::authz::Authorizer {
    fn authorize<'a>(
        &'a self,
        user: &'a User,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<Verdict, String>> {
        Box::pin(async move {
            crate::authz::Authorizer::authorize(self, user, attrs)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct ApiState {
    /// Asks the state's owner.
    pub queries: Queries,
    /// Authorizes.
    pub authorizer: Arc<dyn Authorize>,
    /// The request-header settings (`Err`: not loaded, and why).
    pub request_header: Arc<RwLock<Result<RequestHeaderConfig, String>>>,
    /// The system namespace: the only one with Queues.
    pub system_namespace: Arc<str>,
    /// Answers kept while the state they were read from stands.
    pub cache: Arc<AnswerCache>,
}

/// The router of the API (discovery, OpenAPI and the seven read paths).
pub fn router(state: ApiState) -> Router {
    let base = format!("/apis/{API_VERSION}");
    Router::new()
        .route("/apis", get(|| async { Json(discovery::group_list()) }))
        .route(
            &format!("/apis/{}", crate::types::GROUP),
            get(|| async { Json(discovery::group()) }),
        )
        .route(&base, get(|| async { Json(discovery::resource_list()) }))
        .route(
            "/openapi/v2",
            get(|| async { Json(discovery::openapi_v2()) }),
        )
        .route(
            "/openapi/v3",
            get(|| async { Json(discovery::openapi_v3_index()) }),
        )
        .route(
            &format!("/openapi/v3/apis/{API_VERSION}"),
            get(|| async { Json(discovery::openapi_v3()) }),
        )
        .route(&format!("{base}/pendingunits"), get(all_pending))
        .route(
            &format!("{base}/namespaces/{{namespace}}/pendingunits"),
            get(namespace_pending),
        )
        .route(
            &format!("{base}/namespaces/{{namespace}}/queues/{{name}}/pendingunits"),
            get(queue_pending),
        )
        .route(&format!("{base}/quotausages"), get(all_quotas))
        .route(
            &format!("{base}/namespaces/{{namespace}}/quotausages"),
            get(namespace_quotas),
        )
        .route(&format!("{base}/histories"), get(all_history))
        .route(
            &format!("{base}/namespaces/{{namespace}}/histories"),
            get(namespace_history),
        )
        .fallback(|| async {
            status(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the path is not served here".into(),
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .with_state(state)
}

/// Answers above this size are gzipped for a client that accepts it; below
/// it the bytes saved do not pay for the work.
const COMPRESS_ABOVE_BYTES: usize = 16 * 1024;

/// A Kubernetes `Status` answer.
pub fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, Json(body)).into_response()
}

/// Authenticates every request (discovery too: only the API server may
/// call); the user goes into the request for the handlers.
async fn authenticate(
    State(state): State<ApiState>,
    peer: Option<Extension<PeerName>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let peer = peer.and_then(|Extension(p)| p.0);
    let user = match state.request_header.read() {
        Ok(guard) => match &*guard {
            Ok(config) => config.authenticate(peer.as_deref(), request.headers()),
            Err(why) => Err(Refusal::NotConfigured(why.clone())),
        },
        Err(_) => Err(Refusal::NotConfigured("lock poisoned".into())),
    };
    match user {
        Ok(user) => {
            use tracing::Instrument as _;
            let span =
                tracing::info_span!("visibility", user = %user.name, path = %request.uri().path());
            request.extensions_mut().insert(user);
            next.run(request).instrument(span).await
        }
        Err(refusal @ Refusal::NotConfigured(_)) => status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            refusal.to_string(),
        ),
        Err(refusal) => status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            refusal.to_string(),
        ),
    }
}

/// The query parameters of a list.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    limit: Option<String>,
    offset: Option<String>,
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

impl ListParams {
    /// The page asked for; `continue` (what an earlier page handed out) and
    /// `offset` both name the items skipped.
    fn page(&self) -> Result<Page, String> {
        let number = |name: &str, value: &Option<String>| -> Result<Option<usize>, String> {
            match value.as_deref() {
                None | Some("") => Ok(None),
                Some(v) => v
                    .parse::<usize>()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?}: not a non-negative integer")),
            }
        };
        let offset = number("continue", &self.continue_)?
            .or(number("offset", &self.offset)?)
            .unwrap_or(0);
        // `limit=0` is "no limit", as for any Kubernetes list.
        let limit = number("limit", &self.limit)?.filter(|l| *l > 0);
        Ok(Page { offset, limit })
    }
}

/// Whether the client asks for a `meta.k8s.io` Table (`kubectl get`).
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// Authorizes `ask` for `user`, then asks and renders the answer.
async fn answer(
    state: &ApiState,
    user: &User,
    ask: Ask,
    params: &ListParams,
    headers: &HeaderMap,
) -> Response {
    let attrs = attributes(&ask, &state.system_namespace);
    let page = match params.page() {
        Ok(p) => p,
        Err(why) => return status(StatusCode::BAD_REQUEST, "BadRequest", why),
    };
    match state.authorizer.authorize(user, &attrs).await {
        Ok(Verdict::Allowed) => {}
        Ok(Verdict::Denied(reason)) => {
            let because = if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            };
            return status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!("user {:?} cannot {}{because}", user.name, attrs.describe()),
            );
        }
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("cannot authorize the request: {e}"),
            );
        }
    }
    let table = wants_table(headers);
    let key = CacheKey {
        ask: ask.clone(),
        page,
        table,
        gzip: accepts_gzip(headers),
    };
    let known = state.cache.generation(&key);
    let mut reply = match state.queries.ask(ask.clone(), page, known).await {
        Ok(reply) => reply,
        Err(e) => return unavailable(e),
    };
    if reply.answer == Answer::Unchanged {
        if let Some(kept) = known.and_then(|g| state.cache.get(&key, g)) {
            return json_body(kept);
        }
        // Replaced or evicted since: ask for the answer itself.
        reply = match state.queries.ask(ask, page, None).await {
            Ok(reply) => reply,
            Err(e) => return unavailable(e),
        };
    }
    let Reply { answer, generation } = reply;
    // Serialized from the typed list, not through a `Value`: a 10,000-unit
    // backlog is a few MB, and a `Value` of it a map allocated per field.
    let body = match answer {
        Answer::Units { items, remaining } => {
            let next = (remaining > 0).then(|| page.offset + items.len());
            let mut list = PendingUnitList::new(items, remaining as u64);
            list.metadata.continue_ = next.map(|n| n.to_string());
            if table {
                serde_json::to_vec(&table::pending(&list))
            } else {
                serde_json::to_vec(&list)
            }
        }
        Answer::Quotas(items) => {
            let (items, remaining) = page.cut(items.into_iter());
            let next = (remaining > 0).then(|| page.offset + items.len());
            let mut list = QuotaUsageList::new(items);
            list.metadata.remaining_item_count = (remaining > 0).then_some(remaining as u64);
            list.metadata.continue_ = next.map(|n| n.to_string());
            if table {
                serde_json::to_vec(&table::quotas(&list))
            } else {
                serde_json::to_vec(&list)
            }
        }
        // One object: a history is not paged, and not kept (the owner
        // gives it no generation: it gains samples with time).
        Answer::History(history) => serde_json::to_vec(&history),
        Answer::NoSuchQueue => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!(
                    "queues.scheduling.x-k8s.io {:?} not found",
                    attrs.name.unwrap_or_default()
                ),
            );
        }
        // Asked without a generation, the owner always answers in full.
        Answer::Unchanged => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "the scheduler answered 'unchanged' to a question asked afresh".into(),
            );
        }
    };
    let kept = match body.map(|body| encode(body, key.gzip)) {
        Ok(Ok(kept)) => kept,
        Ok(Err(e)) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("cannot gzip the answer: {e}"),
            );
        }
        Err(e) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("cannot serialize the answer: {e}"),
            );
        }
    };
    if let Some(generation) = generation {
        state.cache.put(key, generation, kept.clone());
    }
    json_body(kept)
}

/// Whether the client accepts gzip (`Accept-Encoding: gzip`, `*`, not at
/// `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// The answer as sent: gzipped when the client accepts it and it is long
/// enough to be worth it — as kubectl and client-go ask by default, at the
/// fastest level: a 10,000-unit backlog is ~4.7 MB of JSON and ~320 KB
/// gzipped in a few ms, bytes that otherwise cross two TLS hops and the
/// aggregator's proxy (which passes the encoding through untouched).
fn encode(body: Vec<u8>, gzip: bool) -> std::io::Result<Kept> {
    use std::io::Write as _;
    if !gzip || body.len() <= COMPRESS_ABOVE_BYTES {
        return Ok(Kept {
            body: Bytes::from(body),
            gzipped: false,
        });
    }
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 16),
        flate2::Compression::fast(),
    );
    encoder.write_all(&body)?;
    Ok(Kept {
        body: Bytes::from(encoder.finish()?),
        gzipped: true,
    })
}

/// A JSON answer as kept.
fn json_body(kept: Kept) -> Response {
    let mut response = ([(header::CONTENT_TYPE, "application/json")], kept.body).into_response();
    if kept.gzipped {
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    response
}

/// The answer when the scheduler's state could not be asked.
fn unavailable(e: Unanswered) -> Response {
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        e.to_string(),
    )
}

async fn all_pending(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    answer(&state, &user, Ask::Namespace(None), &params, &headers).await
}

async fn namespace_pending(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Path(namespace): Path<String>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    let ask = Ask::Namespace(Some(namespace));
    answer(&state, &user, ask, &params, &headers).await
}

async fn queue_pending(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Path((namespace, name)): Path<(String, String)>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    if namespace != *state.system_namespace {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!(
                "Queues live in the namespace {:?}, not {namespace:?}",
                &*state.system_namespace
            ),
        );
    }
    answer(&state, &user, Ask::Queue(name), &params, &headers).await
}

async fn all_quotas(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    answer(&state, &user, Ask::Quotas(None), &params, &headers).await
}

async fn namespace_quotas(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Path(namespace): Path<String>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    let ask = Ask::Quotas(Some(namespace));
    answer(&state, &user, ask, &params, &headers).await
}

async fn all_history(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    answer(&state, &user, Ask::History(None), &params, &headers).await
}

async fn namespace_history(
    State(state): State<ApiState>,
    Extension(user): Extension<User>,
    Path(namespace): Path<String>,
    Query(params): Query<ListParams>,
    headers: HeaderMap,
) -> Response {
    let ask = Ask::History(Some(namespace));
    answer(&state, &user, ask, &params, &headers).await
}

/// What asking `ask` is in RBAC's terms: what the SubjectAccessReview
/// asks about the user (a Queue's backlog is a subresource of the Queue,
/// in the system namespace).
fn attributes(ask: &Ask, system_namespace: &str) -> Attributes {
    let list = |resource, namespace: &Option<String>| Attributes {
        verb: "list",
        resource,
        subresource: None,
        namespace: namespace.clone(),
        name: None,
    };
    match ask {
        Ask::Namespace(namespace) => list("pendingunits", namespace),
        Ask::Quotas(namespace) => list("quotausages", namespace),
        // The same rights as the quotas it is the history of.
        Ask::History(namespace) => list("histories", namespace),
        Ask::Queue(name) => Attributes {
            verb: "get",
            resource: "queues",
            subresource: Some("pendingunits"),
            namespace: Some(system_namespace.to_string()),
            name: Some(name.clone()),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn gzip_is_accepted_as_http_says() {
        let accepts = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT_ENCODING, value.parse().unwrap());
            accepts_gzip(&headers)
        };
        assert!(accepts("gzip"));
        assert!(accepts("deflate, GZIP;q=0.5"));
        assert!(accepts("*"));
        assert!(!accepts("gzip;q=0"));
        assert!(!accepts("br, deflate"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
