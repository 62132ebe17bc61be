//! The history page: the samples the scheduler keeps of the last hours
//! (per quota used against min and max, pending per queue, time to release,
//! reclaims and preemptions), read through the visibility API with the
//! user's token — a tenant gets its quotas' and queues' only.

use serde_json::{Value, json};

use super::ViewError;
use crate::reads::{self, ReadError};
use crate::viewer::Viewer;

/// Builds the history page.
pub async fn build(viewer: &Viewer) -> Result<Value, ViewError> {
    let mut problems = Vec::new();
    let mut read = reads::history(&viewer.client, None).await;
    if matches!(read, Err(ReadError::Forbidden(_))) {
        // Not the cluster's: each of the user's namespaces'.
        let mut merged: Option<Value> = None;
        for ns in &viewer.namespaces {
            match reads::history(&viewer.client, Some(ns)).await {
                Ok(h) => merged = Some(merge(merged, h)),
                Err(e) => problems.push(format!("history of {ns}: {e}")),
            }
        }
        read = merged.ok_or(ReadError::Forbidden(
            "no namespace of yours has a history".into(),
        ));
    }
    let history = match read {
        Ok(h) => h,
        Err(e @ (ReadError::Forbidden(_) | ReadError::NotFound(_))) => {
            problems.push(format!("history: {e}"));
            Value::Null
        }
        Err(e) => return Err(e.into()),
    };
    Ok(json!({
        "view": "history",
        "history": history,
        "problems": problems,
    }))
}

/// Two namespaces' histories as one: the samples' series side by side.
fn merge(into: Option<Value>, more: Value) -> Value {
    let Some(mut into) = into else { return more };
    let (Some(a), Some(b)) = (into["items"].as_array_mut(), more["items"].as_array()) else {
        return into;
    };
    for (sa, sb) in a.iter_mut().zip(b) {
        for key in ["quotas", "queues"] {
            if let (Some(x), Some(y)) = (sa[key].as_array_mut(), sb[key].as_array()) {
                for item in y {
                    if !x.contains(item) {
                        x.push(item.clone());
                    }
                }
            }
        }
    }
    into
}
