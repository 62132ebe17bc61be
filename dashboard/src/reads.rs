//! Every read the dashboard makes, each with the signed-in user's client:
//! the visibility API's lists and the objects behind them. A refusal by
//! RBAC is kept apart from other failures, because a page shows what the
//! user may see and says what it may not.

use k8s_openapi::api::core::v1::{Event, Node};
use koord_queue_api::QueueUnit;
use koord_queue_api::keys::SYSTEM_NAMESPACE;
use koord_queue_api::queue_unit::QueueUnitPhase;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// The visibility API's base path.
const VISIBILITY: &str = "/apis/visibility.koord-queue.io/v1alpha1";

/// Why a read gave nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// RBAC says no (401/403): the user may not see it.
    #[error("not allowed: {0}")]
    Forbidden(String),
    /// It does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else (the API server or the scheduler unavailable…).
    #[error("{0}")]
    Failed(String),
}

impl From<kube::Error> for ReadError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.code == 401 || s.code == 403 => Self::Forbidden(s.message),
            kube::Error::Api(s) if s.code == 404 => Self::NotFound(s.message),
            other => Self::Failed(other.to_string()),
        }
    }
}

/// Which part of a visibility list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Items skipped.
    pub offset: usize,
    /// Items at most (`0`: all).
    pub limit: usize,
}

/// A page of a visibility list and how many items follow it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    /// The items.
    pub items: Vec<Value>,
    /// Items after the page.
    pub remaining: u64,
}

/// GETs a visibility list at `path` (below the group version).
async fn visibility_list(
    client: &kube::Client,
    path: &str,
    window: Window,
) -> Result<ListPage, ReadError> {
    let uri = format!(
        "{VISIBILITY}/{path}?limit={}&offset={}",
        window.limit, window.offset
    );
    let request = http::Request::get(uri)
        .body(Vec::new())
        .map_err(|e| ReadError::Failed(e.to_string()))?;
    let mut list: Value = client.request(request).await?;
    let remaining = list["metadata"]["remainingItemCount"].as_u64().unwrap_or(0);
    let items = match list.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    Ok(ListPage { items, remaining })
}

/// Waiting units of `namespace` (`None`: every namespace), by queue and position.
pub async fn pending_in(
    client: &kube::Client,
    namespace: Option<&str>,
    window: Window,
) -> Result<ListPage, ReadError> {
    let path = match namespace {
        Some(ns) => format!("namespaces/{ns}/pendingunits"),
        None => "pendingunits".to_string(),
    };
    visibility_list(client, &path, window).await
}

/// Queue `name`'s backlog in serving order.
pub async fn backlog(
    client: &kube::Client,
    name: &str,
    window: Window,
) -> Result<ListPage, ReadError> {
    let path = format!("namespaces/{SYSTEM_NAMESPACE}/queues/{name}/pendingunits");
    visibility_list(client, &path, window).await
}

/// The quotas serving `namespace` and their ancestors (`None`: all), parents first.
pub async fn quotas(
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<Vec<Value>, ReadError> {
    let path = match namespace {
        Some(ns) => format!("namespaces/{ns}/quotausages"),
        None => "quotausages".to_string(),
    };
    Ok(visibility_list(client, &path, Window::default())
        .await?
        .items)
}

/// The QueueUnits of `namespace` (`None`: every namespace) in Queue
/// `queue` that hold quota, selected by the API server (the CRD's
/// selectable fields `spec.queue` and `status.phase`): the backlog, which
/// may be 10,000 units, stays out of the read. An API server that cannot
/// select on them (older than 1.31, or the CRD from before the fields) is
/// read whole and filtered here.
pub async fn holding_in_queue(
    client: &kube::Client,
    namespace: Option<&str>,
    queue: &str,
) -> Result<Vec<QueueUnit>, ReadError> {
    let api: Api<QueueUnit> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let selected = ListParams::default()
        .match_any()
        .fields(&holding_selector(queue));
    let units = match api.list(&selected).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 400 => {
            api.list(&ListParams::default().match_any()).await?.items
        }
        Err(e) => return Err(e.into()),
    };
    Ok(units
        .into_iter()
        .filter(|u| u.spec.queue == queue)
        .filter(|u| {
            u.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(|p| p.holds_quota())
        })
        .collect())
}

/// The field selector of Queue `queue`'s units that hold quota. Field
/// selectors only say `=` and `!=`, so it names every phase that holds
/// none, and the empty one (a unit not yet adopted).
fn holding_selector(queue: &str) -> String {
    let mut selector = format!("spec.queue={queue},status.phase!=");
    for phase in QueueUnitPhase::ALL.into_iter().filter(|p| !p.holds_quota()) {
        if let Ok(Value::String(name)) = serde_json::to_value(phase) {
            selector.push_str(",status.phase!=");
            selector.push_str(&name);
        }
    }
    selector
}

/// QueueUnit `namespace/name`.
pub async fn unit(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<QueueUnit, ReadError> {
    Ok(Api::<QueueUnit>::namespaced(client.clone(), namespace)
        .get(name)
        .await?)
}

/// The Events of object `name` in `namespace`.
pub async fn events_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Event>, ReadError> {
    let params = ListParams::default().fields(&format!("involvedObject.name={name}"));
    Ok(Api::<Event>::namespaced(client.clone(), namespace)
        .list(&params)
        .await?
        .items)
}

/// The nodes (their allocatable is the root's capacity).
pub async fn nodes(client: &kube::Client) -> Result<Vec<Node>, ReadError> {
    Ok(Api::<Node>::all(client.clone())
        .list(&ListParams::default().match_any())
        .await?
        .items)
}

/// The scheduler's history: samples of the last hours, of every quota and
/// queue (`None`), or of those serving `namespace`.
pub async fn history(client: &kube::Client, namespace: Option<&str>) -> Result<Value, ReadError> {
    let uri = match namespace {
        Some(ns) => format!("{VISIBILITY}/namespaces/{ns}/histories"),
        None => format!("{VISIBILITY}/histories"),
    };
    let request = http::Request::get(uri)
        .body(Vec::new())
        .map_err(|e| ReadError::Failed(e.to_string()))?;
    Ok(client.request(request).await?)
}

#[cfg(test)]
mod tests {
    use super::holding_selector;

    #[test]
    fn the_holding_selector_leaves_out_every_phase_that_holds_nothing() {
        assert_eq!(
            holding_selector("q"),
            "spec.queue=q,status.phase!=,status.phase!=Enqueued,status.phase!=SchedFailed,\
             status.phase!=Succeed,status.phase!=Failed,status.phase!=TimeoutBackoff"
        );
    }
}
