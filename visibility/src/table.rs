//! The answers as `meta.k8s.io/v1` Tables: what `kubectl get pendingunits`
//! asks for and prints, with the columns a person wants to see.

use serde_json::{Value, json};

use crate::types::{PendingUnitList, QuotaUsageList};

fn column(name: &str, kind: &str, description: &str, priority: u8) -> Value {
    json!({ "name": name, "type": kind, "format": "", "description": description, "priority": priority })
}

fn table(columns: Vec<Value>, rows: Vec<Value>, list_meta: Value) -> Value {
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": columns, "rows": rows,
    })
}

fn row(cells: Vec<Value>, name: &str, namespace: Option<&str>, created: Option<&str>) -> Value {
    json!({ "cells": cells, "object": {
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "name": name, "namespace": namespace, "creationTimestamp": created },
    }})
}

/// `key=value,…` of amounts, resources in order.
fn amounts(a: &std::collections::BTreeMap<String, String>) -> String {
    a.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Waiting units: name, queue, position, priority, reason, message,
/// requests, waiting since, estimated start.
pub fn pending(list: &PendingUnitList) -> Value {
    let columns = vec![
        column("Name", "string", "The QueueUnit.", 0),
        column("Queue", "string", "The Queue it waits in.", 0),
        column("Position", "integer", "Its place in the queue.", 0),
        column("Priority", "integer", "Its priority.", 0),
        column("Reason", "string", "Why it waits.", 0),
        column("Message", "string", "Why it waits, in words.", 1),
        column("Requests", "string", "What it asks for.", 1),
        column("Waiting Since", "date", "Since when it waits.", 0),
        // A string: kubectl prints a date column as an age, and an age of a
        // time to come as "<invalid>".
        column(
            "Estimated Start",
            "string",
            "When the scheduler expects to release it (RFC 3339).",
            0,
        ),
    ];
    let rows = list
        .items
        .iter()
        .map(|u| {
            row(
                vec![
                    json!(u.metadata.name),
                    json!(u.queue),
                    json!(u.position),
                    json!(u.priority),
                    json!(u.reason.kind.as_str()),
                    json!(u.reason.message),
                    json!(amounts(&u.requests)),
                    json!(u.waiting_since),
                    json!(u.estimated_start),
                ],
                &u.metadata.name,
                u.metadata.namespace.as_deref(),
                u.metadata.creation_timestamp.as_deref(),
            )
        })
        .collect();
    table(
        columns,
        rows,
        serde_json::to_value(&list.metadata).unwrap_or_default(),
    )
}

/// Quotas: name, parent, used, min, max, borrowed, lent, pending.
pub fn quotas(list: &QuotaUsageList) -> Value {
    let columns = vec![
        column("Name", "string", "The ElasticQuota.", 0),
        column("Parent", "string", "Its parent.", 0),
        column("Used", "string", "Held by its subtree.", 0),
        column("Min", "string", "Guaranteed (effective).", 0),
        column("Max", "string", "Its limit.", 0),
        column("Borrowed", "string", "Used beyond its min.", 0),
        column("Lent", "string", "Its min not used.", 1),
        column("Pending", "integer", "Units waiting in its queue.", 0),
        column(
            "Admitted",
            "integer",
            "Units holding quota in its queue.",
            1,
        ),
    ];
    let rows = list
        .items
        .iter()
        .map(|q| {
            row(
                vec![
                    json!(q.metadata.name),
                    json!(q.parent.as_deref().unwrap_or("")),
                    json!(amounts(&q.used)),
                    json!(amounts(&q.effective_min)),
                    json!(amounts(&q.max)),
                    json!(amounts(&q.borrowed)),
                    json!(amounts(&q.lent)),
                    json!(q.pending),
                    json!(q.admitted),
                ],
                &q.metadata.name,
                q.metadata.namespace.as_deref(),
                None,
            )
        })
        .collect();
    table(
        columns,
        rows,
        serde_json::to_value(&list.metadata).unwrap_or_default(),
    )
}
