//! A Queue's page: its backlog in serving order (position, reason, waiting
//! since, the estimated start when the scheduler gives one), paged and
//! searchable, and the units it has admitted or runs.

use koord_queue_api::QueueUnit;
use serde_json::{Value, json};

use super::{ViewError, ViewParams, matches};
use crate::reads::{self, ReadError, Window};
use crate::viewer::{Viewer, name_of};

/// Items a page unless asked otherwise, and at most.
const PAGE: usize = 50;
const MAX_PAGE: usize = 500;
/// Admitted units listed at most (the count is always whole).
const ADMITTED_SHOWN: usize = 200;

/// Builds Queue `name`'s page.
pub async fn build(viewer: &Viewer, name: &str, params: &ViewParams) -> Result<Value, ViewError> {
    let size = params.size.unwrap_or(PAGE).clamp(1, MAX_PAGE);
    let page = params.page.unwrap_or(0);
    let q = params.q.as_deref().unwrap_or("").trim().to_string();
    let mut problems = Vec::new();

    // The backlog: one page straight from the Queue's list when the user
    // may read it and does not search; else the whole list (the Queue's,
    // or the user's namespaces' units of this queue), filtered here.
    let (items, total) = match backlog_page(viewer, name, page, size, &q).await {
        Ok(found) => found,
        Err(ReadError::Forbidden(why)) => {
            let seen = viewer
                .pending_where(|u| u["queue"].as_str() == Some(name) && matches(u, &q))
                .await?;
            problems.extend(seen.problems);
            if seen.value.is_empty() && !seen.cluster_wide && viewer.namespaces.is_empty() {
                problems.push(format!("the Queue's backlog: not allowed: {why}"));
            }
            let total = seen.value.len() as u64;
            let items = seen
                .value
                .into_iter()
                .skip(page * size)
                .take(size)
                .collect();
            (items, total)
        }
        Err(e) => return Err(e.into()),
    };

    let quotas = viewer.quotas().await?;
    problems.extend(quotas.problems);
    let quota = quotas.value.iter().find(|q| name_of(q) == name).cloned();

    let units = viewer.holding_in_queue(name).await?;
    problems.extend(units.problems);
    let mut admitted: Vec<&QueueUnit> = units.value.iter().collect();
    admitted.sort_by(|a, b| {
        let at = |u: &QueueUnit| u.status.as_ref().and_then(|s| s.last_allocate_time.clone());
        at(b)
            .cmp(&at(a))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let admitted_total = admitted.len();
    let admitted: Vec<Value> = admitted
        .into_iter()
        .take(ADMITTED_SHOWN)
        .map(|u| {
            let status = u.status.as_ref();
            json!({
                "namespace": u.metadata.namespace, "name": u.metadata.name,
                "job": u.spec.consumer_ref.name,
                "phase": status.and_then(|s| s.phase).map(|p| p.as_str()),
                "releasedAt": status.and_then(|s| s.last_allocate_time.as_ref()).map(|t| t.0.to_string()),
                "requests": crate::amounts::show_list(&u.spec.resource),
            })
        })
        .collect();

    Ok(json!({
        "view": "queue",
        "queue": name,
        "quota": quota,
        "page": page,
        "size": size,
        "search": q,
        "total": total,
        "backlog": items,
        "admittedTotal": admitted_total,
        "admitted": admitted,
        "problems": problems,
    }))
}

/// The page of the Queue's own list (a search reads it whole and filters).
async fn backlog_page(
    viewer: &Viewer,
    name: &str,
    page: usize,
    size: usize,
    q: &str,
) -> Result<(Vec<Value>, u64), ReadError> {
    if q.is_empty() {
        let window = Window {
            offset: page * size,
            limit: size,
        };
        let got = reads::backlog(&viewer.client, name, window).await?;
        let total = (page * size) as u64 + got.items.len() as u64 + got.remaining;
        return Ok((got.items, total));
    }
    let all = reads::backlog(&viewer.client, name, Window::default()).await?;
    let kept: Vec<Value> = all.items.into_iter().filter(|u| matches(u, q)).collect();
    let total = kept.len() as u64;
    Ok((
        kept.into_iter().skip(page * size).take(size).collect(),
        total,
    ))
}
