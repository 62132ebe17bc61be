//! Serving the API over TLS: the serving certificate from files (re-read on
//! a timer, as a mounted Secret changes), client certificates required and
//! verified against the request-header CA that kube-apiserver publishes (re-read
//! on the same timer, so a rotated front-proxy CA is picked up), and the
//! client's common name handed to the handlers.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum_server::accept::{Accept, NoDelayAcceptor};
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use koord_queue_certs::CertPaths;
use kube::Api;
use tokio::net::TcpStream;

use crate::authn::{AUTHENTICATION_CONFIGMAP, RequestHeaderConfig};
use crate::authz::Authorizer;
use crate::queries::Queries;
use crate::routes::{ApiState, PeerName, router};

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
    handle: axum_server::Handle<SocketAddr>,
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
        // Without TCP_NODELAY the last segment of a list that does not
        // fill one waits for the aggregator's delayed ACK: ~40 ms added to
        // every answer of more than a few items.
        inner: RustlsAcceptor::new(tls)
            .handshake_timeout(Duration::from_secs(10))
            .acceptor(NoDelayAcceptor),
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
    inner: RustlsAcceptor<NoDelayAcceptor>,
}

impl<S> Accept<TcpStream, S> for PeerNameAcceptor
where
    S: Send + 'static,
{
    type Stream = <RustlsAcceptor<NoDelayAcceptor> as Accept<TcpStream, S>>::Stream;
    type Service = WithPeer<S>;
    type Future = BoxFuture<'static, io::Result<(Self::Stream, Self::Service)>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
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

/// How often the serving certificate and the request-header CA are re-read.
const RELOAD_EVERY: Duration = Duration::from_secs(30);

/// The served API.

#[derive(Debug)]
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
}

impl Server {
    /// Binds `addr` and serves the API with the certificate in `cert_dir`.
    /// The scheduler binds it at start: a taken port or an unusable
    /// certificate stops the process there, with the reason.
    pub async fn start(
        addr: SocketAddr,
        cert_dir: Option<PathBuf>,
        client: kube::Client,
        queries: Queries,
        system_namespace: &str,
    ) -> anyhow::Result<Self> {
        let cert_dir = cert_dir.ok_or_else(|| {
            anyhow::anyhow!("--visibility-addr needs --visibility-cert-dir (tls.crt, tls.key)")
        })?;
        let cert = CertPaths::in_dir(&cert_dir);
        // Fail fast on a certificate that cannot serve (kubert's rule): a
        // pair that does not load now would never serve.
        for path in [&cert.cert, &cert.key] {
            std::fs::metadata(path).map_err(|e| {
                anyhow::anyhow!("visibility API certificate {}: {e}", path.display())
            })?;
        }
        koord_queue_certs::server_config(
            &std::fs::read(&cert.cert)?,
            &std::fs::read(&cert.key)?,
            None,
        )
        .map_err(|e| {
            anyhow::anyhow!("visibility API certificate in {}: {e}", cert_dir.display())
        })?;
        let listener = TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot bind the visibility address {addr}: {e}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let published = Arc::new(RwLock::new(Err(
            "the request-header settings are being read".to_string(),
        )));
        let app = router(ApiState {
            queries,
            authorizer: Arc::new(Authorizer::new(client.clone())),
            request_header: Arc::clone(&published),
            system_namespace: system_namespace.into(),
            cache: Arc::new(crate::cache::AnswerCache::new(
                crate::cache::DEFAULT_CACHE_BYTES,
            )),
        });
        let handle = axum_server::Handle::new();
        let serving = handle.clone();
        tokio::spawn(async move {
            let served = serve(
                listener,
                cert,
                client,
                published,
                app,
                RELOAD_EVERY,
                serving,
            )
            .await;
            if let Err(error) = served {
                tracing::error!(%error, "the visibility API stopped");
            }
        });
        tracing::info!(%addr, "visibility API");
        Ok(Self { addr, handle })
    }

    /// Stops taking connections; requests in flight get `drain` to finish.
    pub fn stop(&self, drain: Duration) {
        self.handle.graceful_shutdown(Some(drain));
    }
}
