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
    let required = |v: &Option<String>, what: &str| {
        v.clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ViewError::BadRequest(format!("the {what} is missing")))
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
