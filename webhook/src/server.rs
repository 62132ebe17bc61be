//! The HTTPS admission endpoint: an axum router (exported so tests drive it
//! without a socket) served over rustls, with the serving certificate
//! re-read on a timer.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use koord_queue_certs::CertReloader;
use tokio::sync::Semaphore;

use crate::service::Webhook;

#[derive(Clone)]
struct RouterState {
    webhook: Arc<Webhook>,
    max_body_bytes: usize,
    /// One permit per review in flight.
    in_flight: Arc<Semaphore>,
}

/// The admission routes: `POST /mutate`, at most `max_concurrent` reviews in
/// flight (more are answered 429 at once, not queued).
pub fn router(webhook: Arc<Webhook>, max_body_bytes: usize, max_concurrent: usize) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .with_state(RouterState {
            webhook,
            max_body_bytes,
            in_flight: Arc::new(Semaphore::new(max_concurrent.max(1))),
        })
}

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

async fn mutate(State(state): State<RouterState>, request: Request) -> Response {
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        state.webhook.metrics.reviews_shed.inc();
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many admission reviews in flight; retry".into(),
        );
    };
    let timeout = state.webhook.review_timeout;
    let body: Body = request.into_body();
    let bytes =
        match tokio::time::timeout(timeout, axum::body::to_bytes(body, state.max_body_bytes)).await
        {
            Err(_) => {
                return error(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("request body not received within {timeout:?}"),
                );
            }
            Ok(Err(e)) => {
                let too_large = std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
                return if too_large {
                    error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("request body exceeds {} bytes", state.max_body_bytes),
                    )
                } else {
                    error(
                        StatusCode::BAD_REQUEST,
                        format!("cannot read request body: {e}"),
                    )
                };
            }
            Ok(Ok(bytes)) => bytes,
        };
    let (status, body) = state.webhook.review(&bytes).await;
    (status, axum::Json(body)).into_response()
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
    let acceptor =
        axum_server::tls_rustls::RustlsAcceptor::new(tls).handshake_timeout(header_timeout);
    let mut server = axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .handle(handle);
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
    server.serve(app.into_make_service()).await
}
