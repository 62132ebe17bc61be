//! Serving the API over TLS: the serving certificate from files (re-read on
//! a timer, as a mounted Secret changes), client certificates required and
//! verified against the request-header CA that kube-apiserver publishes (re-read
//! on the same timer, so a rotated front-proxy CA is picked up), and the
//! client's common name handed to the handlers.

use std::collections::BTreeMap;
use std::io;
use std::net::TcpListener;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum_server::accept::{Accept, DefaultAcceptor};
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use koord_queue_certs::CertPaths;
use kube::Api;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::authn::{AUTHENTICATION_CONFIGMAP, RequestHeaderConfig};
use crate::routes::PeerName;

/// Reads the request-header settings kube-apiserver publishes.
pub async fn read_request_header(client: &kube::Client) -> Result<RequestHeaderConfig, String> {
    let (namespace, name) = AUTHENTICATION_CONFIGMAP;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|e| {
            format!(
                "cannot read the ConfigMap {namespace}/{name} (the RoleBinding to extension-apiserver-authentication-reader?): {e}"
            )
        })?;
    let data: BTreeMap<String, String> = cm.data.unwrap_or_default();
    RequestHeaderConfig::from_configmap(&data).map_err(|e| e.to_string())
}

/// The serving configuration: the certificate pair of `cert`, clients
/// required to present a certificate of `request_header`'s CA.
fn tls_config(
    cert: &CertPaths,
    request_header: &RequestHeaderConfig,
) -> Result<rustls::ServerConfig, String> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    koord_queue_certs::server_config(
        &read(&cert.cert)?,
        &read(&cert.key)?,
        Some(request_header.client_ca_pem.as_bytes()),
    )
    .map_err(|e| e.to_string())
}

/// Serves `app` on `listener` over TLS until `handle` shuts it down.
/// Waits for the request-header settings first (retrying every `every`,
/// reported in `published` meanwhile); then re-reads them and the serving
/// certificate every `every`, serving new connections with what changed.
pub async fn serve(
    listener: TcpListener,
    cert: CertPaths,
    client: kube::Client,
    published: Arc<RwLock<Result<RequestHeaderConfig, String>>>,
    app: Router,
    every: Duration,
    handle: axum_server::Handle<std::net::SocketAddr>,
) -> io::Result<()> {
    let (mut current, config) = loop {
        let loaded = read_request_header(&client)
            .await
            .and_then(|rh| tls_config(&cert, &rh).map(|c| (rh, c)));
        match loaded {
            Ok(loaded) => break loaded,
            Err(why) => {
                tracing::warn!(%why, "visibility API not served yet");
                if let Ok(mut p) = published.write() {
                    *p = Err(why);
                }
                tokio::time::sleep(every).await;
            }
        }
    };
    if let Ok(mut p) = published.write() {
        *p = Ok(current.clone());
    }
    let tls = RustlsConfig::from_config(Arc::new(config));
    let reloading = tls.clone();
    let reload_published = Arc::clone(&published);
    let mut serving_files = read_pair(&cert);
    let reloader = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let Ok(rh) = read_request_header(&client).await.inspect_err(|why| {
                tracing::warn!(%why, "request-header settings not re-read; keeping the current ones");
            }) else {
                continue;
            };
            let files = read_pair(&cert);
            if rh == current && files == serving_files {
                continue;
            }
            match tls_config(&cert, &rh) {
                Ok(config) => {
                    reloading.reload_from_config(Arc::new(config));
                    if let Ok(mut p) = reload_published.write() {
                        *p = Ok(rh.clone());
                    }
                    current = rh;
                    serving_files = files;
                    tracing::info!(
                        "visibility API: serving certificate or request-header CA reloaded"
                    );
                }
                Err(why) => {
                    tracing::warn!(%why, "visibility API: changed certificates unusable; keeping the current ones")
                }
            }
        }
    });
    let acceptor = PeerNameAcceptor {
        inner: RustlsAcceptor::new(tls).handshake_timeout(Duration::from_secs(10)),
    };
    let served = axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .handle(handle)
        .serve(app.into_make_service())
        .await;
    reloader.abort();
    served
}

fn read_pair(cert: &CertPaths) -> Option<(Vec<u8>, Vec<u8>)> {
    Some((
        std::fs::read(&cert.cert).ok()?,
        std::fs::read(&cert.key).ok()?,
    ))
}

/// TLS, then the client certificate's common name into every request of
/// the connection.
#[derive(Clone, Debug)]
struct PeerNameAcceptor {
    inner: RustlsAcceptor<DefaultAcceptor>,
}

impl<I, S> Accept<I, S> for PeerNameAcceptor
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Send + 'static,
{
    type Stream = <RustlsAcceptor<DefaultAcceptor> as Accept<I, S>>::Stream;
    type Service = WithPeer<S>;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let handshake = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            let name = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| common_name(leaf.as_ref()));
            Ok((
                stream,
                WithPeer {
                    inner: service,
                    peer: PeerName(name),
                },
            ))
        })
    }
}

/// The subject common name of a DER certificate.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// A connection's service that puts the client's [`PeerName`] into every
/// request.
#[derive(Clone, Debug)]
pub struct WithPeer<S> {
    inner: S,
    peer: PeerName,
}

impl<S, B> tower::Service<http::Request<B>> for WithPeer<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.peer.clone());
        self.inner.call(request)
    }
}
