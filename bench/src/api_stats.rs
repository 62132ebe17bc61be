//! Counting the API requests each in-process component makes (a tower layer
//! in front of its kube client) and reading the API server's own request
//! counters from its `/metrics`.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use http::{Request, Response};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;

use crate::admin_scrape;

/// Who made a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// The scheduler (in process).
    Scheduler,
    /// The webhook (in process).
    Webhook,
    /// The benchmark's job creators (an ordinary RBAC-bound user).
    Creator,
    /// The benchmark's job runtime and observers (Job and QueueUnit watches,
    /// job status writes).
    Runner,
    /// The null scheduler of the floor measurement.
    NullScheduler,
    /// Setup and metrics scrapes.
    Admin,
}

impl Component {
    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scheduler => "scheduler",
            Self::Webhook => "webhook",
            Self::Creator => "creator",
            Self::Runner => "runner",
            Self::NullScheduler => "null_scheduler",
            Self::Admin => "admin",
        }
    }
}

/// `(component, verb, resource)` of a request, e.g. `(scheduler, patch, queueunits/status)`.
pub type RequestKey = (Component, &'static str, String);

/// Counters of one kind of request.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RequestStat {
    /// Requests sent.
    pub count: u64,
    /// Answers with a status >= 400, or transport errors.
    pub errors: u64,
    /// Sum of the latencies until the response headers, seconds.
    pub total_seconds: f64,
    /// Largest latency, seconds.
    pub max_seconds: f64,
}

/// Request counters of every client built by [`client`].
#[derive(Debug, Default)]
pub struct ApiStats {
    stats: Mutex<BTreeMap<RequestKey, RequestStat>>,
}

impl ApiStats {
    fn record(&self, key: RequestKey, elapsed: Duration, error: bool) {
        let Ok(mut stats) = self.stats.lock() else {
            return;
        };
        let stat = stats.entry(key).or_default();
        stat.count += 1;
        stat.errors += u64::from(error);
        let secs = elapsed.as_secs_f64();
        stat.total_seconds += secs;
        stat.max_seconds = stat.max_seconds.max(secs);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> BTreeMap<RequestKey, RequestStat> {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Clears every counter.
    pub fn reset(&self) {
        if let Ok(mut stats) = self.stats.lock() {
            stats.clear();
        }
    }
}

/// Total requests of `component` in `snapshot`.
pub fn total_of(snapshot: &BTreeMap<RequestKey, RequestStat>, component: Component) -> u64 {
    snapshot
        .iter()
        .filter(|((c, _, _), _)| *c == component)
        .map(|(_, s)| s.count)
        .sum()
}

/// Requests of `component` with `verb` on `resource` in `snapshot`.
pub fn count_of(
    snapshot: &BTreeMap<RequestKey, RequestStat>,
    component: Component,
    verb: &str,
    resource: &str,
) -> u64 {
    snapshot
        .iter()
        .filter(|((c, v, r), _)| *c == component && *v == verb && r == resource)
        .map(|(_, s)| s.count)
        .sum()
}

/// Verb and resource (`resource` or `resource/subresource`) of an API request.
pub fn classify(method: &http::Method, uri: &http::Uri) -> (&'static str, String) {
    let path = uri.path();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return ("other", path.to_string()),
    };
    let rest = match rest {
        ["namespaces", _ns, inner @ ..] if !inner.is_empty() => inner,
        other => other,
    };
    let Some(resource) = rest.first() else {
        return ("discovery", path.to_string());
    };
    let named = rest.len() > 1;
    let resource = match rest.get(2) {
        Some(sub) => format!("{resource}/{sub}"),
        None => (*resource).to_string(),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::PUT => "update",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// Tower layer that counts requests into an [`ApiStats`].
#[derive(Clone, Debug)]
pub struct CountingLayer {
    stats: Arc<ApiStats>,
    component: Component,
}

impl<S> tower::Layer<S> for CountingLayer {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            stats: self.stats.clone(),
            component: self.component,
        }
    }
}

/// The service of [`CountingLayer`].
#[derive(Debug)]
pub struct Counting<S> {
    inner: S,
    stats: Arc<ApiStats>,
    component: Component,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> tower::Service<Request<B>> for Counting<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = classify(request.method(), request.uri());
        let key = (self.component, verb, resource);
        let stats = self.stats.clone();
        let started = Instant::now();
        let future = self.inner.call(request);
        Box::pin(async move {
            let result = future.await;
            let error = match &result {
                Ok(response) => response.status().as_u16() >= 400,
                Err(_) => true,
            };
            stats.record(key, started.elapsed(), error);
            result
        })
    }
}

/// A kube client for the kubeconfig at `path` whose requests are counted as
/// `component`. Build it on the runtime that will use it: the client's
/// connection tasks run where it is built.
pub async fn client(
    path: &Path,
    stats: Arc<ApiStats>,
    component: Component,
) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("loading kubeconfig")?;
    config.read_timeout = Some(Duration::from_secs(120));
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&CountingLayer { stats, component })
        .build())
}

/// The API server's request counters (`apiserver_request_total`), summed by
/// `(verb, resource[/subresource])`.
#[derive(Clone, Debug, Default)]
pub struct ServerRequests {
    /// Counters by `(verb, resource)`.
    pub by_kind: BTreeMap<(String, String), f64>,
}

impl ServerRequests {
    /// Reads the counters through `client` (an admin client).
    pub async fn scrape(client: &kube::Client) -> Result<Self> {
        Ok(Self::parse(&admin_scrape::apiserver_metrics(client).await?))
    }

    /// Parses Prometheus text.
    pub fn parse(text: &str) -> Self {
        let mut by_kind = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let labels = parse_labels(labels);
            let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let verb = get("verb").to_lowercase();
            let mut resource = get("resource");
            let sub = get("subresource");
            if resource.is_empty() {
                resource = "(non-resource)".into();
            } else if !sub.is_empty() {
                resource = format!("{resource}/{sub}");
            }
            *by_kind.entry((verb, resource)).or_insert(0.0) += value;
        }
        Self { by_kind }
    }

    /// Total of all counters.
    pub fn total(&self) -> f64 {
        self.by_kind.values().sum()
    }

    /// `self - earlier`, by kind.
    pub fn since(&self, earlier: &Self) -> Self {
        let by_kind = self
            .by_kind
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v - earlier.by_kind.get(k).copied().unwrap_or(0.0),
                )
            })
            .filter(|(_, v)| *v > 0.0)
            .collect();
        Self { by_kind }
    }
}

/// `a="x",b="y"` → map (values unescaped minimally).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap_or_default()
    }

    #[test]
    fn classifies_requests() {
        let get = http::Method::GET;
        assert_eq!(
            classify(
                &get,
                &uri("/apis/batch/v1/namespaces/a/jobs?watch=true&x=1")
            ),
            ("watch", "jobs".into())
        );
        assert_eq!(
            classify(&get, &uri("/apis/batch/v1/namespaces/a/jobs")),
            ("list", "jobs".into())
        );
        assert_eq!(
            classify(
                &http::Method::PATCH,
                &uri("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/a/queueunits/u/status")
            ),
            ("patch", "queueunits/status".into())
        );
        assert_eq!(
            classify(&http::Method::POST, &uri("/api/v1/namespaces")),
            ("create", "namespaces".into())
        );
        assert_eq!(
            classify(&get, &uri("/api/v1/namespaces/default")),
            ("get", "namespaces".into())
        );
        assert_eq!(
            classify(
                &get,
                &uri("/apis/coordination.k8s.io/v1/namespaces/kq/leases/l")
            ),
            ("get", "leases".into())
        );
        assert_eq!(classify(&get, &uri("/metrics")).0, "other");
    }

    #[test]
    fn parses_server_counters() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 2
"#;
        let parsed = ServerRequests::parse(text);
        assert_eq!(parsed.total(), 16.0);
        assert_eq!(
            parsed.by_kind.get(&("patch".into(), "jobs/status".into())),
            Some(&4.0)
        );
        assert_eq!(
            parsed.by_kind.get(&("post".into(), "jobs".into())),
            Some(&10.0)
        );
    }
}
