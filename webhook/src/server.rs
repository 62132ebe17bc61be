//! The HTTPS admission endpoint: an axum router (exported so tests drive it
//! without a socket) served over rustls, with the serving certificate
//! re-read on a timer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use http_body_util::BodyExt;
use koord_queue_certs::CertReloader;
use tokio::sync::Semaphore;

use crate::review_budget::{self, Charge, DEFAULT_MAX_REVIEW_BYTES, Refusal, ReviewBudget};
use crate::service::Webhook;

/// How many reviews, and how many bytes of them, may be in flight.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Reviews in flight at most; more are answered 429 at once.
    pub max_concurrent: usize,
    /// Bytes of the bodies being read or decided at most
    /// ([`crate::review_budget`]); at least `max_body_bytes`.
    pub max_review_bytes: usize,
}

#[derive(Clone)]
struct RouterState {
    webhook: Arc<Webhook>,
    max_body_bytes: usize,
    /// One permit per review in flight.
    in_flight: Arc<Semaphore>,
    /// One permit per byte of the bodies being read or decided.
    budget: ReviewBudget,
}

/// The admission routes: `POST /mutate`, at most `max_concurrent` reviews in
/// flight (more are answered 429 at once, not queued), with the default
/// byte budget (or `max_body_bytes`, if larger).
pub fn router(webhook: Arc<Webhook>, max_body_bytes: usize, max_concurrent: usize) -> Router {
    let limits = Limits {
        max_body_bytes,
        max_concurrent,
        max_review_bytes: DEFAULT_MAX_REVIEW_BYTES.max(max_body_bytes),
    };
    let budget = ReviewBudget::clamped(
        limits.max_review_bytes,
        webhook.metrics.review_bytes_in_flight.clone(),
    );
    with_budget(webhook, limits, budget)
}

/// The admission routes with `limits`; `Err` names a limit that cannot be
/// used (a budget smaller than the largest body, or larger than a
/// semaphore holds).
pub fn router_with_limits(webhook: Arc<Webhook>, limits: Limits) -> Result<Router, String> {
    if limits.max_review_bytes < limits.max_body_bytes {
        return Err(format!(
            "--max-review-bytes ({}) must be at least --max-body-bytes ({}): a body that size could never be decided",
            limits.max_review_bytes, limits.max_body_bytes
        ));
    }
    let budget = ReviewBudget::new(
        limits.max_review_bytes,
        webhook.metrics.review_bytes_in_flight.clone(),
    )?;
    Ok(with_budget(webhook, limits, budget))
}

fn with_budget(webhook: Arc<Webhook>, limits: Limits, budget: ReviewBudget) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .with_state(RouterState {
            webhook,
            max_body_bytes: limits.max_body_bytes,
            in_flight: Arc::new(Semaphore::new(
                limits.max_concurrent.clamp(1, Semaphore::MAX_PERMITS),
            )),
            budget,
        })
}

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// A 429: the API server fails the call with the message (a retryable
/// error for the user), and its client may retry by itself after a second.
fn busy(message: String) -> Response {
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_large(state: &RouterState, message: String) -> Response {
    state.webhook.metrics.reviews_too_large.inc();
    error(StatusCode::PAYLOAD_TOO_LARGE, message)
}

/// Why a body could not be read.
enum ReadError {
    TooLarge,
    Broken(axum::Error),
}

/// Reads `body` into one buffer of its declared length (no second copy),
/// at most `limit` bytes.
async fn read_body(
    mut body: Body,
    limit: usize,
    declared: Option<usize>,
) -> Result<Vec<u8>, ReadError> {
    let mut buffer = Vec::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(ReadError::Broken)?.into_data() else {
            continue;
        };
        if buffer.len().saturating_add(data.len()) > limit {
            return Err(ReadError::TooLarge);
        }
        buffer.extend_from_slice(&data);
    }
    if declared.is_none() {
        // Grown by doubling: give the slack back before the parse.
        buffer.shrink_to_fit();
    }
    Ok(buffer)
}

async fn mutate(State(state): State<RouterState>, request: Request) -> Response {
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        state.webhook.metrics.reviews_shed.inc();
        return busy("too many admission reviews in flight; retry".into());
    };
    let timeout = state.webhook.review_timeout;
    // Waiting for bytes and receiving the body share the review timeout:
    // the answer must reach the API server before it gives up.
    let deadline = Instant::now() + timeout;
    let body: Body = request.into_body();
    // hyper's exact size is the Content-Length, which it enforces.
    let declared = body
        .size_hint()
        .exact()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if let Some(length) = declared
        && length > state.max_body_bytes
    {
        return too_large(
            &state,
            format!(
                "request body of {length} bytes exceeds {} bytes",
                state.max_body_bytes
            ),
        );
    }
    // Before a byte is read: the body's length, or the most it may be.
    let upfront = declared.unwrap_or(state.max_body_bytes);
    let mut charge = match state.budget.acquire(upfront, deadline).await {
        Ok(charge) => charge,
        Err(refusal) => return refused(&state, refusal, upfront, timeout),
    };
    let bytes = match tokio::time::timeout_at(
        deadline.into(),
        read_body(body, state.max_body_bytes, declared),
    )
    .await
    {
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!("request body not received within {timeout:?}"),
            );
        }
        Ok(Err(ReadError::TooLarge)) => {
            return too_large(
                &state,
                format!("request body exceeds {} bytes", state.max_body_bytes),
            );
        }
        Ok(Err(ReadError::Broken(e))) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {e}"),
            );
        }
        Ok(Ok(bytes)) => bytes,
    };
    match state.budget.charge_shape(&mut charge, &bytes) {
        Ok(()) => {}
        // Not waited for (see `charge_shape`): the rest of the budget is
        // taken right now.
        Err(Refusal::Busy) => {
            state.webhook.metrics.reviews_shed_bytes.inc();
            return busy(format!(
                "Koord-Queue's webhook is deciding other large admission reviews: this body of {} bytes \
                 (many small JSON values) needs {} bytes of its budget of {}, and they are taken; retry",
                bytes.len(),
                review_budget::charge_for(&bytes),
                state.budget.total()
            ));
        }
        Err(refusal) => return refused(&state, refusal, bytes.len(), timeout),
    }
    let (status, body) = state.webhook.review(&bytes).await;
    drop(bytes);
    answer_holding(status, body, charge)
}

/// The answer to a review whose bytes could not be had.
fn refused(state: &RouterState, refusal: Refusal, length: usize, timeout: Duration) -> Response {
    match refusal {
        Refusal::Busy => {
            state.webhook.metrics.reviews_shed_bytes.inc();
            busy(format!(
                "Koord-Queue's webhook is deciding other large admission reviews: {length} bytes of its \
                 budget of {} were not free within {timeout:?}; retry",
                state.budget.total()
            ))
        }
        Refusal::TooLarge { needed, budget } => too_large(
            state,
            format!(
                "request body of {length} bytes would take about {} MiB to decide (it is made of many \
                 small JSON values), more than the webhook's review budget allows ({budget} bytes \
                 charged at most, this body {needed})",
                (needed.saturating_mul(review_budget::PARSE_OVERHEAD)) >> 20
            ),
        ),
    }
}

/// The answer's bytes and the charge of its review: the charge is given
/// back when the last reference to the bytes is dropped, once hyper has
/// written them (or the connection dropped them).
struct HeldAnswer {
    json: Vec<u8>,
    _charge: Charge,
}

impl AsRef<[u8]> for HeldAnswer {
    fn as_ref(&self) -> &[u8] {
        &self.json
    }
}

/// The JSON answer, holding `charge` until it has been sent; one buffer of
/// known length, so the answer has a Content-Length.
fn answer_holding(status: StatusCode, body: serde_json::Value, charge: Charge) -> Response {
    match serde_json::to_vec(&body) {
        Ok(json) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            Bytes::from_owner(HeldAnswer {
                json,
                _charge: charge,
            }),
        )
            .into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the answer: {e}"),
        ),
    }
}

/// Re-reads the certificate files every `interval`; a changed, valid pair
/// replaces the served certificate for new connections.
pub async fn reload_certificates(
    mut reloader: CertReloader,
    config: RustlsConfig,
    interval: Duration,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match reloader.poll() {
            Ok(Some(new)) => {
                config.reload_from_config(Arc::new(new));
                tracing::info!(cert = %reloader.paths().cert.display(), "serving certificate reloaded");
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "serving certificate changed but cannot be loaded; keeping the current one")
            }
        }
    }
}

/// Largest read buffer of an HTTP/1 connection (hyper's minimum is 8 KiB;
/// request headers must fit in it).
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Serves `app` over TLS on `listener` until `handle` shuts it down. Slow
/// clients are cut off: the TLS handshake and the request headers must each
/// arrive within `header_timeout`.
pub async fn serve_tls(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    app: Router,
    header_timeout: Duration,
    handle: axum_server::Handle<std::net::SocketAddr>,
) -> std::io::Result<()> {
    // TCP_NODELAY, as the visibility API: an answer's last segment must not
    // wait for the API server's delayed ACK.
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
        .handshake_timeout(header_timeout)
        .acceptor(axum_server::accept::NoDelayAcceptor);
    let mut server = axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .handle(handle);
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        // hyper grows a connection's read buffer up to ~400 KiB while a large
        // body streams in, and keeps it: outside the review budget, 512
        // connections could hold 200 MiB. 64 KiB reads a body as fast.
        .max_buf_size(READ_BUFFER_BYTES);
    server.serve(app.into_make_service()).await
}
