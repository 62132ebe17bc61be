//! How long listing through the visibility API takes, measured as a client
//! sees it: requests to the kube-apiserver, which authenticates them and
//! proxies them through the aggregation layer to the scheduler (issue 39's
//! goal: a 10,000-unit Queue backlog listed with p99 ≤ 100 ms).
//!
//! Two ways a client lists, both measured: the whole list in one request
//! (`kubectl get --raw`, a client library's `list`), and page by page with
//! `?limit=` and `continue` as `kubectl get` does (500 a page by default),
//! where one listing is the walk over every page. And two ways a client
//! parses what it receives: into a document tree, as `kubectl get -o json`
//! and untyped clients do, or into the typed list, as `kubectl koord-queue
//! pending` and typed client libraries do; the time until the last byte
//! arrived is reported apart from the parse.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use koord_queue_visibility::types::PendingUnitList;
use serde::Serialize;

use crate::report::Distribution;

/// Latencies of repeated listings of one path.
#[derive(Clone, Debug, Serialize)]
pub struct Listing {
    /// The path listed.
    pub path: String,
    /// Page size (`?limit=`), or none for the whole list in one request.
    pub page_limit: Option<usize>,
    /// What the client parses each answer into ([`Page::PARSED_AS`]).
    pub parsed_as: &'static str,
    /// Items in one listing (the same in every repetition while nothing
    /// changes; the last one's).
    pub items: usize,
    /// Requests one listing took.
    pub requests_per_listing: usize,
    /// Time of one listing (all its pages), seconds.
    pub latency: Distribution,
    /// Of that, the time the client spent parsing the JSON it received
    /// (what a client does with the bytes, not what it waits for), seconds.
    pub parsing: Distribution,
    /// The rest: from the first request sent to the last page's last byte
    /// received and gunzipped, seconds.
    pub requests_only: Distribution,
    /// Bytes that crossed the wire in one listing (gzipped where the
    /// server gzips), and the JSON they carried.
    pub wire_bytes: usize,
    /// The JSON's bytes.
    pub json_bytes: usize,
}

impl Listing {
    /// One line for a report.
    pub fn line(&self) -> String {
        let ms = |s: f64| s * 1000.0;
        format!(
            "{} {}, parsed as {}: {} items in {} request(s), {:.0} KB on the wire ({:.0} KB of JSON); p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} listings); of which the client parsing the JSON p50 {:.1} ms, p99 {:.1} ms; the requests alone p50 {:.1} ms, p99 {:.1} ms",
            self.path,
            self.page_limit
                .map_or("(whole list)".to_string(), |l| format!("(pages of {l})")),
            self.parsed_as,
            self.items,
            self.requests_per_listing,
            self.wire_bytes as f64 / 1000.0,
            self.json_bytes as f64 / 1000.0,
            ms(self.latency.p50_s),
            ms(self.latency.p99_s),
            ms(self.latency.max_s),
            self.latency.count,
            ms(self.parsing.p50_s),
            ms(self.parsing.p99_s),
            ms(self.requests_only.p50_s),
            ms(self.requests_only.p99_s),
        )
    }
}

/// Lists `path` `repetitions` times as `client`, parsing each page as `P`
/// (after one unmeasured warm-up listing that fills connection pools and
/// the authorizer's cache, as a client that lists more than once sees), one
/// listing at a time.
pub async fn measure<P: Page>(
    client: &kube::Client,
    path: &str,
    page_limit: Option<usize>,
    repetitions: usize,
) -> Result<Listing> {
    list_once::<P>(client, path, page_limit).await?;
    let mut samples = Vec::with_capacity(repetitions);
    let mut parsing = Vec::with_capacity(repetitions);
    let mut requests_only = Vec::with_capacity(repetitions);
    let (mut items, mut walk) = (0, Walk::default());
    for _ in 0..repetitions {
        let started = Instant::now();
        (items, walk) = list_once::<P>(client, path, page_limit).await?;
        let took = started.elapsed().as_secs_f64();
        samples.push(took);
        parsing.push(walk.parsing_s);
        requests_only.push(took - walk.parsing_s);
    }
    Ok(Listing {
        path: path.to_string(),
        page_limit,
        parsed_as: P::PARSED_AS,
        items,
        requests_per_listing: walk.requests,
        latency: Distribution::of(samples),
        parsing: Distribution::of(parsing),
        requests_only: Distribution::of(requests_only),
        wire_bytes: walk.wire_bytes,
        json_bytes: walk.json_bytes,
    })
}

/// One listing: the items it returned and what it took.
async fn list_once<P: Page>(
    client: &kube::Client,
    path: &str,
    page_limit: Option<usize>,
) -> Result<(usize, Walk)> {
    let mut items = 0;
    let walk = list_pages(client, path, page_limit, |page: &P| items += page.len()).await?;
    Ok((items, walk))
}

/// What a walk over a listing's pages took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Walk {
    /// Requests.
    pub requests: usize,
    /// Bytes on the wire.
    pub wire_bytes: usize,
    /// Bytes of JSON they carried.
    pub json_bytes: usize,
    /// Seconds spent parsing the JSON.
    pub parsing_s: f64,
}

/// A page as a client holds it once parsed: how many items it carries and
/// the token for the next page.
pub trait Page: serde::de::DeserializeOwned {
    /// What it is, for a report.
    const PARSED_AS: &'static str;
    /// Its items.
    fn len(&self) -> usize;
    /// Whether it has none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `metadata.continue`, when a page follows.
    fn continue_token(&self) -> Option<&str>;
}

/// A document tree, as `kubectl get -o json` and other untyped clients
/// parse an answer.
impl Page for serde_json::Value {
    const PARSED_AS: &'static str = "a document tree";
    fn len(&self) -> usize {
        self["items"].as_array().map_or(0, Vec::len)
    }
    fn continue_token(&self) -> Option<&str> {
        self["metadata"]["continue"].as_str()
    }
}

/// The typed list, as `kubectl koord-queue pending` and typed client
/// libraries parse an answer.
impl Page for PendingUnitList {
    const PARSED_AS: &'static str = "PendingUnitList";
    fn len(&self) -> usize {
        self.items.len()
    }
    fn continue_token(&self) -> Option<&str> {
        self.metadata.continue_.as_deref()
    }
}

/// Lists `path` as `kubectl` does — page by page with `?limit=` and
/// `continue` (or in one request without a limit), asking for gzip — parses
/// each page as `P` and hands it to `each_page`; what the walk took.
pub async fn list_pages<P: Page>(
    client: &kube::Client,
    path: &str,
    page_limit: Option<usize>,
    mut each_page: impl FnMut(&P),
) -> Result<Walk> {
    let mut walk = Walk::default();
    let mut continue_token: Option<String> = None;
    loop {
        let mut query = Vec::new();
        if let Some(limit) = page_limit {
            query.push(format!("limit={limit}"));
        }
        if let Some(token) = &continue_token {
            query.push(format!("continue={token}"));
        }
        let uri = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{}", query.join("&"))
        };
        let answer = tokio::time::timeout(
            Duration::from_secs(30),
            koord_queue_tests::visibility::get_accepting_gzip(client, &uri),
        )
        .await
        .with_context(|| format!("GET {uri} took more than 30 s"))?
        .with_context(|| format!("GET {uri}"))?;
        if !(200..300).contains(&answer.status) {
            bail!(
                "GET {uri}: {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
        }
        let parsing = Instant::now();
        let page: P =
            serde_json::from_slice(&answer.body).with_context(|| format!("parsing GET {uri}"))?;
        walk.parsing_s += parsing.elapsed().as_secs_f64();
        walk.requests += 1;
        walk.wire_bytes += answer.wire_bytes;
        walk.json_bytes += answer.body.len();
        each_page(&page);
        continue_token = page
            .continue_token()
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if continue_token.is_none() || page_limit.is_none() {
            return Ok(walk);
        }
    }
}
