//! How long listing through the visibility API takes, measured as a client
//! sees it: requests to the kube-apiserver, which authenticates them and
//! proxies them through the aggregation layer to the scheduler (issue 39's
//! goal: a 10,000-unit Queue backlog listed with p99 ≤ 100 ms).
//!
//! Two ways a client lists, both measured: the whole list in one request
//! (`kubectl get --raw`, a client library's `list`), and page by page with
//! `?limit=` and `continue` as `kubectl get` does (500 a page by default),
//! where one listing is the walk over every page.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::report::Distribution;

/// Latencies of repeated listings of one path.
#[derive(Clone, Debug, Serialize)]
pub struct Listing {
    /// The path listed.
    pub path: String,
    /// Page size (`?limit=`), or none for the whole list in one request.
    pub page_limit: Option<usize>,
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
            "{} {}: {} items in {} request(s), {:.0} KB on the wire ({:.0} KB of JSON); p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} listings); of which the client parsing the JSON p50 {:.1} ms, p99 {:.1} ms",
            self.path,
            self.page_limit
                .map_or("(whole list)".to_string(), |l| format!("(pages of {l})")),
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
        )
    }
}

/// Lists `path` `repetitions` times as `client` (after one unmeasured
/// warm-up listing that fills connection pools and the authorizer's cache,
/// as a client that lists more than once sees), one listing at a time.
pub async fn measure(
    client: &kube::Client,
    path: &str,
    page_limit: Option<usize>,
    repetitions: usize,
) -> Result<Listing> {
    list_once(client, path, page_limit).await?;
    let mut samples = Vec::with_capacity(repetitions);
    let mut parsing = Vec::with_capacity(repetitions);
    let (mut items, mut walk) = (0, Walk::default());
    for _ in 0..repetitions {
        let started = Instant::now();
        (items, walk) = list_once(client, path, page_limit).await?;
        samples.push(started.elapsed().as_secs_f64());
        parsing.push(walk.parsing_s);
    }
    Ok(Listing {
        path: path.to_string(),
        page_limit,
        items,
        requests_per_listing: walk.requests,
        latency: Distribution::of(samples),
        parsing: Distribution::of(parsing),
        wire_bytes: walk.wire_bytes,
        json_bytes: walk.json_bytes,
    })
}

/// One listing: the items it returned and what it took.
async fn list_once(
    client: &kube::Client,
    path: &str,
    page_limit: Option<usize>,
) -> Result<(usize, Walk)> {
    let mut items = 0;
    let walk = list_pages(client, path, page_limit, |page| items += page.len()).await?;
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

/// Lists `path` as `kubectl` does — page by page with `?limit=` and
/// `continue` (or in one request without a limit), asking for gzip — and
/// hands each page's items to `each_page`; the requests it took.
pub async fn list_pages(
    client: &kube::Client,
    path: &str,
    page_limit: Option<usize>,
    mut each_page: impl FnMut(&[serde_json::Value]),
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
        let list: serde_json::Value =
            serde_json::from_slice(&answer.body).with_context(|| format!("parsing GET {uri}"))?;
        walk.parsing_s += parsing.elapsed().as_secs_f64();
        walk.requests += 1;
        walk.wire_bytes += answer.wire_bytes;
        walk.json_bytes += answer.body.len();
        let Some(page) = list["items"].as_array() else {
            bail!("GET {uri} answered without items: {list}");
        };
        each_page(page);
        continue_token = list["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if continue_token.is_none() || page_limit.is_none() {
            return Ok(walk);
        }
    }
}
