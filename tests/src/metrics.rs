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

/// The upper bound of the bucket of histogram `family` (no labels) within
/// which its `q` quantile falls (`q` of 1: the bucket that holds every
/// observation, a bound on the largest); `None` without observations, and
/// infinity when it falls in the last bucket (`+Inf`).
pub fn histogram_quantile(text: &str, family: &str, q: f64) -> Option<f64> {
    let prefix = format!("{family}_bucket{{le=\"");
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix.as_str())?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let wanted = (q * total).ceil().max(1.0);
    buckets
        .iter()
        .find(|(_, cumulative)| *cumulative >= wanted)
        .map(|(le, _)| *le)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_histogram_quantile_is_the_bound_of_its_bucket() {
        let text = "# TYPE d histogram\n\
            d_bucket{le=\"0.001\"} 50\n\
            d_bucket{le=\"0.01\"} 98\n\
            d_bucket{le=\"0.1\"} 100\n\
            d_bucket{le=\"+Inf\"} 100\n\
            d_sum 1.0\nd_count 100\n";
        assert_eq!(histogram_quantile(text, "d", 0.5), Some(0.001));
        assert_eq!(histogram_quantile(text, "d", 0.98), Some(0.01));
        assert_eq!(histogram_quantile(text, "d", 0.99), Some(0.1));
        assert_eq!(histogram_quantile(text, "d", 1.0), Some(0.1));
        assert_eq!(histogram_quantile(text, "other", 0.5), None);
    }
}
