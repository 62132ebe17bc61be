//! The overview: the root's capacity, what is used and how many wait; the
//! quota tree with each quota's figures; the queues with the most waiting.

use serde_json::{Value, json};

use super::ViewError;
use crate::amounts::{self, Amounts};
use crate::reads::{self, ReadError};
use crate::viewer::{Viewer, name_of};

/// How many of the busiest queues the overview lists.
const BUSIEST: usize = 10;

/// Builds the overview.
pub async fn build(viewer: &Viewer) -> Result<Value, ViewError> {
    let quotas = viewer.quotas().await?;
    let waiting = viewer.waiting().await?;
    let mut problems = quotas.problems.clone();
    problems.extend(waiting.problems.iter().cloned());

    // The root's capacity is the nodes' allocatable; a user who may not
    // list nodes is told so instead of shown a figure.
    let capacity = match reads::nodes(&viewer.client).await {
        Ok(nodes) => {
            let mut total = Amounts::new();
            for node in &nodes {
                let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
                for (k, v) in allocatable.into_iter().flatten() {
                    if let Ok(n) = koord_queue_model::parse_quantity(k, &v.0) {
                        *total.entry(k.clone()).or_default() += n;
                    }
                }
            }
            // Only what quotas count: pods and the like would crowd it.
            total.retain(|k, _| k == "cpu" || k == "memory" || k.contains('/'));
            Some(total)
        }
        Err(ReadError::Forbidden(_)) => None,
        Err(e) => {
            problems.push(format!("nodes: {e}"));
            None
        }
    };

    let mut used = Amounts::new();
    let mut tree = Vec::with_capacity(quotas.value.len());
    for q in &quotas.value {
        let figures = |field: &str| amounts::parse(&q[field]);
        let (q_used, q_max, q_min) = (figures("used"), figures("max"), figures("effectiveMin"));
        if q["parent"].is_null() {
            amounts::add(&mut used, &q_used);
        }
        tree.push(json!({
            "name": name_of(q),
            "parent": q["parent"],
            "isParent": q["isParent"],
            "used": amounts::show(&q_used),
            "min": amounts::show(&figures("min")),
            "effectiveMin": amounts::show(&q_min),
            "max": amounts::show(&q_max),
            "borrowed": amounts::show(&figures("borrowed")),
            "lent": amounts::show(&figures("lent")),
            "fairShareWeight": q["fairShareWeight"],
            "usedOfMax": amounts::percent(&q_used, &q_max),
            "usedOfMin": amounts::percent(&q_used, &q_min),
            "pending": q["pending"],
            "admitted": q["admitted"],
        }));
    }
    let mut busiest: Vec<&Value> = tree
        .iter()
        .filter(|q| q["pending"].as_u64().unwrap_or(0) + q["admitted"].as_u64().unwrap_or(0) > 0)
        .collect();
    busiest.sort_by(|a, b| {
        let key = |q: &Value| {
            (
                q["pending"].as_u64().unwrap_or(0),
                q["admitted"].as_u64().unwrap_or(0),
            )
        };
        key(b)
            .cmp(&key(a))
            .then_with(|| a["name"].as_str().cmp(&b["name"].as_str()))
    });
    let busiest: Vec<Value> = busiest
        .into_iter()
        .take(BUSIEST)
        .map(|q| {
            json!({ "queue": q["name"], "pending": q["pending"], "admitted": q["admitted"],
                         "usedOfMax": q["usedOfMax"] })
        })
        .collect();

    Ok(json!({
        "view": "overview",
        "clusterWide": quotas.cluster_wide && waiting.cluster_wide,
        "capacity": capacity.as_ref().map(amounts::show),
        "used": amounts::show(&used),
        "usedOfCapacity": capacity.as_ref().and_then(|c| amounts::percent(&used, c)),
        "waiting": waiting.value,
        "quotaCount": tree.len(),
        "quotas": tree,
        "busiest": busiest,
        "problems": problems,
    }))
}
