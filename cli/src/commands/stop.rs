//! `stop` and `resume`: set or clear the Queue's `spec.stopPolicy` with a
//! merge patch (only that field; the scheduler's own apply of the Queue it
//! keeps for a quota leaves it alone). The scheduler honours it: a stopped
//! Queue releases nothing, and with `--drain` its running jobs are sent
//! back.

use koord_queue_api::queue::StopPolicy;
use koord_queue_api::{Queue, keys};
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::connect::Cluster;
use crate::error::{Access, CliError};
use crate::render::{Human, Render};

/// Field manager of the CLI's writes.
const FIELD_MANAGER: &str = "kubectl-koord_queue";

/// The answer: the Queue's stop policy after the change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    /// The Queue.
    pub queue: String,
    /// `None`, `Hold` or `HoldAndDrain`.
    pub stop_policy: String,
}

/// Sets Queue `queue`'s stop policy to `policy` (`None` clears it).
pub async fn run(cluster: &Cluster, queue: &str, policy: StopPolicy) -> Result<Stopped, CliError> {
    let ns = cluster.system_namespace.as_str();
    let access = Access::new("patch", format!("queues.{}", keys::GROUP), Some(ns)).named(queue);
    let value = if policy.stops() {
        json!(policy.as_str())
    } else {
        json!(null)
    };
    let patched = Api::<Queue>::namespaced(cluster.client.clone(), ns)
        .patch(
            queue,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({ "spec": { "stopPolicy": value } })),
        )
        .await
        .map_err(|e| CliError::from_kube(&access, e))?;
    Ok(Stopped {
        queue: queue.to_string(),
        stop_policy: patched.spec.effective_stop_policy().as_str().to_string(),
    })
}

impl Render for Stopped {
    fn human(&self, _: &Human) -> String {
        let what = match self.stop_policy.as_str() {
            "Hold" => "stopped (Hold: releases nothing; released jobs run on)",
            "HoldAndDrain" => {
                "stopped (HoldAndDrain: releases nothing; jobs holding quota are sent back)"
            }
            _ => "resumed",
        };
        format!("queue.{}/{} {what}\n", keys::GROUP, self.queue)
    }

    fn names(&self) -> Vec<String> {
        vec![format!("queue.{}/{}", keys::GROUP, self.queue)]
    }
}
