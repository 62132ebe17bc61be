//! `queues`: each Queue's policy, serving priority, pending / admitted /
//! running units, and whether it is stopped.

use std::collections::BTreeMap;

use koord_queue_api::{Queue, QueueUnitPhase, keys};
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};

use crate::connect::Cluster;
use crate::error::{Access, CliError};
use crate::read::{self, Scope};
use crate::render::table::Table;
use crate::render::{Human, Render};

/// One Queue, summed up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    /// Its name.
    pub name: String,
    /// `Priority` or `Block`.
    pub policy: String,
    /// Its serving priority.
    pub priority: i32,
    /// `Hold` or `HoldAndDrain` when stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_policy: Option<String>,
    /// Units waiting (its status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i64>,
    /// Units holding quota (its status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted: Option<i64>,
    /// Units whose jobs run (counted from the QueueUnits; absent when they
    /// may not be listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<u64>,
    /// Its admission checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<String>,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSummaryList {
    /// The Queues by name.
    pub items: Vec<QueueSummary>,
}

/// Reads the Queues and counts their running units; the note says when
/// they could not be counted.
pub async fn run(cluster: &Cluster) -> Result<(QueueSummaryList, Option<String>), CliError> {
    let ns = cluster.system_namespace.as_str();
    let access = Access::new("list", format!("queues.{}", keys::GROUP), Some(ns));
    let queues = Api::<Queue>::namespaced(cluster.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| CliError::from_kube(&access, e))?
        .items;
    let (running, note) = match read::list_units(cluster, &Scope::All).await {
        Ok(units) => {
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            for u in &units {
                if u.status.as_ref().and_then(|s| s.phase) == Some(QueueUnitPhase::Running) {
                    *counts.entry(read::queue_of(u)).or_default() += 1;
                }
            }
            (Some(counts), None)
        }
        Err(e) if e.is_forbidden() => {
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            (None, Some(format!("note: RUNNING not counted: {first}")))
        }
        Err(e) => return Err(e),
    };
    Ok((summarize(&queues, running.as_ref()), note))
}

/// The summaries of `queues`, by name, with `running` units by queue.
pub fn summarize(queues: &[Queue], running: Option<&BTreeMap<String, u64>>) -> QueueSummaryList {
    let mut items: Vec<QueueSummary> = queues
        .iter()
        .map(|q| {
            let name = q.metadata.name.clone().unwrap_or_default();
            let stop = q.spec.effective_stop_policy();
            let status = q.status.as_ref();
            QueueSummary {
                running: running.map(|r| r.get(&name).copied().unwrap_or(0)),
                policy: format!("{:?}", q.spec.queue_policy),
                priority: q.spec.effective_priority(),
                stop_policy: stop.stops().then(|| stop.as_str().to_string()),
                pending: status.and_then(|s| s.pending),
                admitted: status.and_then(|s| s.admitted),
                admission_checks: q
                    .spec
                    .admission_checks
                    .iter()
                    .map(|c| c.name.clone())
                    .collect(),
                name,
            }
        })
        .collect();
    items.sort_by(|a, b| a.name.cmp(&b.name));
    QueueSummaryList { items }
}

impl Render for QueueSummaryList {
    fn human(&self, how: &Human) -> String {
        if self.items.is_empty() {
            return String::new();
        }
        let mut headers = vec![
            "name", "policy", "priority", "pending", "admitted", "running", "stopped",
        ];
        if how.wide {
            headers.push("admission checks");
        }
        let mut t = Table::new(&headers);
        let count = |n: Option<i64>| n.map_or("-".into(), |n| n.to_string());
        for q in &self.items {
            let mut row = vec![
                q.name.clone(),
                q.policy.clone(),
                q.priority.to_string(),
                count(q.pending),
                count(q.admitted),
                q.running.map_or("-".into(), |n| n.to_string()),
                q.stop_policy.clone().unwrap_or_else(|| "-".into()),
            ];
            if how.wide {
                row.push(if q.admission_checks.is_empty() {
                    "-".into()
                } else {
                    q.admission_checks.join(",")
                });
            }
            t.row(row);
        }
        t.render()
    }

    fn names(&self) -> Vec<String> {
        self.items
            .iter()
            .map(|q| format!("queue.{}/{}", keys::GROUP, q.name))
            .collect()
    }

    fn empty_note(&self) -> Option<String> {
        Some("No queues.".into())
    }
}
