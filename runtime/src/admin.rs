//! The admin server: `/livez`, `/readyz` and `/metrics` on a port of their own,
//! so probes and scrapes never compete with (or reach) the serving port.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::Readiness;

#[derive(Clone)]
struct AdminState {
    readiness: Readiness,
    registry: Arc<Mutex<Registry>>,
}

/// The admin routes over `readiness` and the metrics `registry`.
pub fn admin_router(readiness: Readiness, registry: Arc<Mutex<Registry>>) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState {
            readiness,
            registry,
        })
}

async fn readyz(State(state): State<AdminState>) -> Response {
    match state.readiness.check() {
        Ok(()) => {
            let degraded = state.readiness.degraded();
            if degraded.is_empty() {
                "ok".into_response()
            } else {
                format!("ok\ndegraded:\n{}", degraded.join("\n")).into_response()
            }
        }
        Err(reasons) => (StatusCode::SERVICE_UNAVAILABLE, reasons).into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut body = String::new();
    let registry = state
        .registry
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// A bound admin server.
#[derive(Debug)]
pub struct AdminServer {
    listener: tokio::net::TcpListener,
}

impl AdminServer {
    /// Binds `addr` now, so a bad address fails at start.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        Ok(Self {
            listener: tokio::net::TcpListener::bind(addr).await?,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the process ends. Probes keep answering during drain,
    /// so the orchestrator sees `/readyz` fail rather than a closed port.
    pub async fn serve(self, router: Router) -> std::io::Result<()> {
        axum::serve(self.listener, router).await
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    use super::*;

    async fn get(router: &Router, path: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let readiness = Readiness::new(&["caches"]);
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("things", "Things done", counter.clone());
        counter.inc();
        let router = admin_router(readiness.clone(), Arc::new(Mutex::new(registry)));

        assert_eq!(get(&router, "/livez").await.0, StatusCode::OK);
        let (status, body) = get(&router, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("caches"));
        readiness.set("caches", true);
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        readiness.start_draining();
        assert_eq!(
            get(&router, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let (status, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("things_total 1"), "{body}");
    }
}
