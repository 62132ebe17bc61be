//! What each page shows, as JSON the page's script draws: one builder per
//! page, each reading with the user's own client. A view is also what the
//! live stream compares between two reads (`live.rs`), so a builder puts
//! nothing in it that changes without the cluster changing.

pub mod history;
pub mod overview;
pub mod queue;
pub mod unit;

use serde::Deserialize;
use serde_json::Value;

use crate::reads::ReadError;
use crate::viewer::Viewer;

/// Which page, with its parameters (the query string of `/api/view` and
/// `/api/live`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct ViewParams {
    /// `overview`, `queue`, `unit` or `history`.
    pub view: String,
    /// The Queue (queue page) or the unit (unit page).
    #[serde(default)]
    pub name: Option<String>,
    /// The unit's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// 0-based page of a long list.
    #[serde(default)]
    pub page: Option<usize>,
    /// Items a page (default 50, at most 500).
    #[serde(default)]
    pub size: Option<usize>,
    /// Search text: a list keeps items whose name, namespace, job or reason
    /// contains it.
    #[serde(default)]
    pub q: Option<String>,
}

/// Why a view could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The parameters do not name a page.
    #[error("{0}")]
    BadRequest(String),
    /// A read failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Builds the view `params` asks for, as `viewer`.
pub async fn build(viewer: &Viewer, params: &ViewParams) -> Result<Value, ViewError> {
    // Names go into API paths and selectors: only what Kubernetes allows
    // in an object's name, so that none can change what is asked.
    let required = |v: &Option<String>, what: &str| match v.as_deref() {
        None | Some("") => Err(ViewError::BadRequest(format!("the {what} is missing"))),
        Some(name) if !is_object_name(name) => Err(ViewError::BadRequest(format!(
            "the {what} {name:?} is not a Kubernetes name"
        ))),
        Some(name) => Ok(name.to_string()),
    };
    match params.view.as_str() {
        "overview" => overview::build(viewer).await,
        "queue" => {
            let name = required(&params.name, "queue's name")?;
            queue::build(viewer, &name, params).await
        }
        "unit" => {
            let namespace = required(&params.namespace, "unit's namespace")?;
            let name = required(&params.name, "unit's name")?;
            unit::build(viewer, &namespace, &name).await
        }
        "history" => history::build(viewer).await,
        other => Err(ViewError::BadRequest(format!("no page {other:?}"))),
    }
}

/// Whether `name` is a Kubernetes object name (a DNS subdomain: lower-case
/// letters, digits, `-` and `.`, at most 253).
pub fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// Whether `item` (a PendingUnit or QueueUnit as JSON) matches search `q`
/// (case-insensitive; an empty search matches all).
pub fn matches(item: &Value, q: &str) -> bool {
    if q.is_empty() {
        return true;
    }
    let q = q.to_lowercase();
    [
        &item["metadata"]["name"],
        &item["metadata"]["namespace"],
        &item["job"]["name"],
        &item["reason"]["type"],
        &item["spec"]["consumerRef"]["name"],
    ]
    .iter()
    .filter_map(|v| v.as_str())
    .any(|s| s.to_lowercase().contains(&q))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_that_could_change_a_path_are_refused() {
        assert!(is_object_name("team-a.queue-1"));
        for bad in ["", "a/b", "a?b", "A", "q,metadata.name=x", "..%2f"] {
            assert!(!is_object_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_search_matches_name_namespace_job_or_reason() {
        let unit = json!({ "metadata": { "name": "u-1", "namespace": "team-a" },
                           "job": { "name": "train" }, "reason": { "type": "QuotaExceeded" } });
        for q in ["", "U-1", "team", "train", "quotaex"] {
            assert!(matches(&unit, q), "{q}");
        }
        assert!(!matches(&unit, "other"));
    }
}
