//! A unit's page: its timeline (created, queued, reserved, released,
//! running, finished, sent back and why) from its status, conditions and
//! Events; why it waits now; the quota path it is charged to; its Events.

use k8s_openapi::api::core::v1::Event;
use koord_queue_api::QueueUnit;
use serde_json::{Value, json};

use super::ViewError;
use crate::reads::{self, ReadError, Window};
use crate::viewer::{Viewer, name_of};

/// Builds unit `namespace/name`'s page.
pub async fn build(viewer: &Viewer, namespace: &str, name: &str) -> Result<Value, ViewError> {
    let unit = reads::unit(&viewer.client, namespace, name).await?;
    let mut problems = Vec::new();
    let phase = unit.status.as_ref().and_then(|s| s.phase);
    let waiting = phase.is_none_or(|p| !p.is_released() && !p.is_finished());

    // Why it waits, as the scheduler says now (the namespace's list: a
    // unit has no path of its own in the API).
    let mut pending = Value::Null;
    if waiting {
        match reads::pending_in(&viewer.client, Some(namespace), Window::default()).await {
            Ok(page) => {
                if let Some(found) = page.items.into_iter().find(|u| name_of(u) == name) {
                    pending = found;
                }
            }
            Err(e) => problems.push(format!("why it waits: {e}")),
        }
    }

    // The quota it is charged to, and that quota's ancestors.
    let quota_name = pending["quota"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| unit.spec.queue.clone());
    let quotas = match reads::quotas(&viewer.client, Some(namespace)).await {
        Ok(q) => q,
        Err(e) => {
            problems.push(format!("quotas: {e}"));
            Vec::new()
        }
    };
    let path = quota_path(&quotas, &quota_name);

    let job = unit.spec.consumer_ref.name.clone().unwrap_or_default();
    let mut events = Vec::new();
    for object in [name, job.as_str()] {
        if object.is_empty() {
            continue;
        }
        match reads::events_of(&viewer.client, namespace, object).await {
            Ok(found) => events.extend(found),
            Err(ReadError::Forbidden(why)) => {
                problems.push(format!("Events of {object}: not allowed: {why}"))
            }
            Err(e) => problems.push(format!("Events of {object}: {e}")),
        }
    }
    let mut events: Vec<Value> = events.iter().map(event_json).collect();
    events.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));

    Ok(json!({
        "view": "unit",
        "namespace": namespace,
        "name": name,
        "job": { "kind": unit.spec.consumer_ref.kind, "name": job },
        "queue": unit.spec.queue,
        "phase": phase.map(|p| p.as_str()),
        "message": unit.status.as_ref().and_then(|s| s.message.clone()),
        "priority": unit.spec.effective_priority(),
        "requests": crate::amounts::show_list(&unit.spec.resource),
        "pending": pending,
        "quotaPath": path,
        "timeline": timeline(&unit, &events),
        "events": events,
        "problems": problems,
    }))
}

/// The quota `leaf` and its ancestors, leaf first, as far as `quotas` names them.
fn quota_path(quotas: &[Value], leaf: &str) -> Vec<Value> {
    let mut path = Vec::new();
    let mut at = Some(leaf.to_string());
    while let Some(name) = at.take() {
        let Some(q) = quotas.iter().find(|q| name_of(q) == name) else {
            break;
        };
        path.push(json!({ "name": name, "used": q["used"], "max": q["max"], "min": q["min"] }));
        at = q["parent"].as_str().map(str::to_string);
        if path.len() > quotas.len() {
            break;
        }
    }
    path
}

/// An Event as the page shows it.
fn event_json(e: &Event) -> Value {
    let time = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        });
    json!({
        "time": time,
        "type": e.type_,
        "reason": e.reason,
        "message": e.message,
        "object": format!("{}/{}", e.involved_object.kind.as_deref().unwrap_or(""), e.involved_object.name.as_deref().unwrap_or("")),
        "count": e.count,
    })
}

/// The unit's story in time order: created, each condition's last change,
/// released, sent back, and its Events.
fn timeline(unit: &QueueUnit, events: &[Value]) -> Vec<Value> {
    let mut steps = Vec::new();
    if let Some(t) = &unit.metadata.creation_timestamp {
        steps.push(json!({ "time": t.0.to_string(), "what": "Created", "detail": "queued by the webhook" }));
    }
    if let Some(status) = &unit.status {
        for c in &status.conditions {
            steps.push(json!({
                "time": c.last_transition_time.0.to_string(),
                "what": format!("{} {}", c.type_, c.status),
                // A condition without a message (Pending, PodsNotReady)
                // showed "Pending:" with nothing after the colon.
                "detail": if c.message.is_empty() {
                    c.reason.clone()
                } else {
                    format!("{}: {}", c.reason, c.message)
                },
            }));
        }
        if let Some(t) = &status.last_allocate_time {
            steps.push(json!({ "time": t.0.to_string(), "what": "Released", "detail": "its job's hold was lifted" }));
        }
        if let Some(requeue) = &status.requeue_state {
            let at = requeue.requeue_at.as_ref().map(|t| t.0.to_string());
            steps.push(json!({
                "time": at,
                "what": "Sent back",
                "detail": format!("{} time(s); queues again then", requeue.count),
            }));
        }
    }
    for e in events {
        steps.push(json!({
            "time": e["time"],
            "what": format!("Event {}", e["reason"].as_str().unwrap_or("")),
            "detail": e["message"],
        }));
    }
    steps.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));
    steps
}
