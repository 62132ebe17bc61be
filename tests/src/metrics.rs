//! Reading the Prometheus text of a component's admin endpoint.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The body of `GET /metrics` on the admin address `addr`.
pub async fn scrape(addr: SocketAddr) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// Sum of the samples of a metric family (0 when it has none).
pub fn sum_of(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of the sample of `family` with exactly `labels` (in the
/// order the exporter writes them), if there is one.
pub fn sample(text: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let rendered: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let name = format!("{family}{{{}}} ", rendered.join(","));
    text.lines()
        .find_map(|l| l.strip_prefix(name.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// The scheduler's view of the usage of quota `quota` in `resource`
/// (millicores for cpu), from the `quota_used` gauge; 0 when it has no
/// sample.
pub async fn scheduler_quota_used(addr: SocketAddr, quota: &str, resource: &str) -> Result<f64> {
    let text = scrape(addr).await?;
    Ok(sample(
        &text,
        "koord_queue_scheduler_quota_used",
        &[("quota", quota), ("resource", resource)],
    )
    .unwrap_or(0.0))
}

/// Waits until the scheduler at `addr` reports `expected` as the usage of
/// quota `quota` in `resource` (its gauges are refreshed every 500 ms).
pub async fn wait_scheduler_quota_used(
    addr: SocketAddr,
    quota: &str,
    resource: &str,
    expected: f64,
    timeout: std::time::Duration,
) -> Result<()> {
    let last = std::cell::Cell::new(None);
    let waited = crate::fixtures::eventually(timeout, || {
        let last = &last;
        async move {
            let used = scheduler_quota_used(addr, quota, resource).await?;
            last.set(Some(used));
            Ok(used == expected)
        }
    })
    .await;
    waited.with_context(|| {
        format!(
            "the scheduler reports {:?} used of {resource} in quota {quota}, wanted {expected}",
            last.get()
        )
    })
}
