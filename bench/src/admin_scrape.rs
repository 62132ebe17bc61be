//! Reading what the components say about themselves from outside, the one
//! way every run does it: a component's admin port (`/metrics`, `/readyz`,
//! `/livez`, plain HTTP), the API server's `/metrics` (through an admin
//! client), and the figures picked out of the Prometheus text. Nothing here
//! knows a phase, the chaos run or the fairness run; they say which figures
//! they keep.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};

/// Figures of a `/metrics` text by name (`name` or `name{label=value}`).
pub type Metrics = BTreeMap<String, f64>;

/// The scheduler's leader gauge: 1 while the replica leads.
pub const LEADER: &str = "koord_queue_scheduler_leader";
/// The scheduler's held amount per quota and resource.
pub const QUOTA_USED: &str = "koord_queue_scheduler_quota_used";
/// kube-apiserver's count of ValidatingAdmissionPolicy checks: those with
/// `enforcement_action="deny"` are the fenced writes it refused.
pub const POLICY_CHECKS: &str = "apiserver_validating_admission_policy_check_total";

/// Reads a component's `/metrics` over plain HTTP (bounded: a component
/// that hangs must not hang the run).
pub async fn scrape(addr: SocketAddr) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .context("reading /metrics timed out")??;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or(response))
}

/// Whether the admin port at `addr` answers `GET path` (`/readyz`,
/// `/livez`) with 200; an unreachable port is a no.
pub async fn answers_ok(addr: SocketAddr, path: &str) -> bool {
    matches!(
        koord_queue_tests::admin::get(addr, path).await,
        Ok((200, _))
    )
}

/// The API server's `/metrics` text, read through `client` (an admin
/// client: the endpoint is not open to ordinary users).
pub async fn apiserver_metrics(client: &kube::Client) -> Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    client
        .request_text(request)
        .await
        .context("reading the API server's /metrics")
}

/// Writes (POST, PUT, PATCH, DELETE) to the API `resources` (plural names,
/// any group) that reached the API server, from its
/// `apiserver_request_total`, read through an admin `client`.
pub async fn apiserver_writes(client: &kube::Client, resources: &[&str]) -> Result<f64> {
    let text = apiserver_metrics(client).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
                && resources
                    .iter()
                    .any(|r| l.contains(&format!("resource=\"{r}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Whether a scheduler's `/metrics` text says it leads.
pub fn leads(text: &str) -> bool {
    metric_sum(text, LEADER) >= 1.0
}

/// Sums the samples of metric `name` (exact name, any labels) in Prometheus text.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Samples of metric `name` by the value of label `label`.
pub fn metric_by_label(text: &str, name: &str, label: &str) -> Vec<(String, f64)> {
    let needle = format!("{label}=\"");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{')?;
            if metric != name {
                return None;
            }
            let start = labels.find(&needle)? + needle.len();
            let end = labels[start..].find('"')? + start;
            Some((labels[start..end].to_string(), value.parse::<f64>().ok()?))
        })
        .collect()
}

/// The sum of each metric of `names`, by name.
pub fn selected(text: &str, names: &[&str]) -> Metrics {
    names
        .iter()
        .map(|name| ((*name).to_string(), metric_sum(text, name)))
        .collect()
}

/// Adds metric `name`'s samples to `out` by the value of `label`, under
/// the key `name{label=value}` (the reports' spelling).
pub fn add_by_label(out: &mut Metrics, text: &str, name: &str, label: &str) {
    for (value, v) in metric_by_label(text, name, label) {
        *out.entry(format!("{name}{{{label}={value}}}")).or_default() += v;
    }
}

#[cfg(test)]
mod tests {
    use super::{Metrics, add_by_label, leads, metric_by_label, metric_sum, selected};

    const TEXT: &str = "\
# HELP koord_queue_scheduler_leader Whether this replica leads.
koord_queue_scheduler_leader 1
koord_queue_webhook_reviews_total{verdict=\"hold\"} 3
koord_queue_webhook_reviews_total{verdict=\"allow\",kind=\"Job\"} 2
koord_queue_webhook_reviews_total{verdict=\"hold\",kind=\"Pod\"} 4
koord_queue_webhook_reviews_total_other 100
";

    #[test]
    fn sums_and_labels_read_exact_names() {
        assert_eq!(metric_sum(TEXT, "koord_queue_webhook_reviews_total"), 9.0);
        assert_eq!(metric_sum(TEXT, "absent"), 0.0);
        assert!(leads(TEXT));
        assert!(!leads("koord_queue_scheduler_leader 0\n"));
        assert_eq!(
            metric_by_label(TEXT, "koord_queue_webhook_reviews_total", "verdict"),
            [
                ("hold".to_string(), 3.0),
                ("allow".to_string(), 2.0),
                ("hold".to_string(), 4.0)
            ]
        );
    }

    #[test]
    fn labelled_figures_are_keyed_as_the_reports_spell_them() {
        let mut out = Metrics::new();
        add_by_label(
            &mut out,
            TEXT,
            "koord_queue_webhook_reviews_total",
            "verdict",
        );
        assert_eq!(
            out.get("koord_queue_webhook_reviews_total{verdict=hold}"),
            Some(&7.0)
        );
        assert_eq!(
            out.get("koord_queue_webhook_reviews_total{verdict=allow}"),
            Some(&2.0)
        );
        let picked = selected(TEXT, &["koord_queue_scheduler_leader", "absent"]);
        assert_eq!(picked.get("koord_queue_scheduler_leader"), Some(&1.0));
        assert_eq!(picked.get("absent"), Some(&0.0));
    }
}
