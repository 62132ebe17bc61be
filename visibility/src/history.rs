//! The scheduler's bounded history, as the visibility API serves it
//! (`histories`): one sample a minute (by default) for the last hours — per
//! quota what is used against its min and max, per queue how many wait and
//! hold, how long the units it released had waited, and how many of its
//! units were sent back for another (reclaimed, preempted). Enough for a
//! dashboard's "over the last hours" without Prometheus; Prometheus, where a
//! cluster has it, keeps longer.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::API_VERSION;

/// Amounts by resource, in the resource's integer unit: millicores for
/// `cpu`, bytes for memory, counts otherwise (a chart needs numbers, not
/// quantity text).
pub type Amounts = BTreeMap<String, i64>;

/// One quota in one sample.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSample {
    /// The quota.
    pub name: String,
    /// Held by its subtree.
    pub used: Amounts,
    /// Its effective min (what is guaranteed).
    pub min: Amounts,
    /// Its max (resources it names).
    pub max: Amounts,
}

/// How long the units released in a sample's minute had waited, seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One queue in one sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueSample {
    /// The Queue.
    pub name: String,
    /// Units waiting at the sample.
    pub pending: u64,
    /// Units holding quota at the sample.
    pub admitted: u64,
    /// Units released since the sample before.
    pub released: u64,
    /// How long those had waited (absent when none was released).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_seconds: Option<Percentiles>,
    /// Units sent back since the sample before so that another unit could
    /// have their quota back (borrowed beyond their min, or fair share).
    pub reclaimed: u64,
    /// Units sent back since the sample before for a higher-priority unit
    /// of their own quota.
    pub preempted: u64,
}

/// One sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// When it was taken (RFC 3339).
    pub time: String,
    /// The quotas (parents before children).
    pub quotas: Vec<QuotaSample>,
    /// The queues.
    pub queues: Vec<QueueSample>,
}

/// The history the user may see, oldest sample first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// `visibility.koord-queue.io/v1alpha1`.
    pub api_version: String,
    /// `History`.
    pub kind: String,
    /// Seconds between two samples.
    pub interval_seconds: u64,
    /// Seconds of samples kept.
    pub retention_seconds: u64,
    /// The samples.
    pub items: Vec<Sample>,
}

impl History {
    /// A history object of `items`.
    pub fn new(interval_seconds: u64, retention_seconds: u64, items: Vec<Sample>) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: "History".into(),
            interval_seconds,
            retention_seconds,
            items,
        }
    }
}

/// The `p`th percentile (0–100) of `sorted` (nearest rank); `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

impl Percentiles {
    /// The percentiles of `values` (any order); `None` when empty.
    pub fn of(mut values: Vec<f64>) -> Option<Self> {
        values.sort_by(f64::total_cmp);
        Some(Self {
            p50: percentile(&values, 50.0)?,
            p90: percentile(&values, 90.0)?,
            p99: percentile(&values, 99.0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).rev().collect()).unwrap();
        assert_eq!((p.p50, p.p90, p.p99), (50.0, 90.0, 99.0));
        let one = Percentiles::of(vec![7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert_eq!(Percentiles::of(vec![]), None);
    }

    #[test]
    fn a_history_serializes_as_an_object_of_the_group() {
        let h = History::new(60, 21600, vec![Sample::default()]);
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(v["kind"], "History");
        assert_eq!(v["intervalSeconds"], 60);
        assert_eq!(v["items"][0]["quotas"], serde_json::json!([]));
    }
}
