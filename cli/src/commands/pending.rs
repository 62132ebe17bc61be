//! `pending`: waiting units in the order the scheduler will serve them —
//! a namespace's (by queue, then position), every namespace's (`-A`), or one
//! Queue's backlog (`--queue`) — with position, reason, how long each has
//! waited and an estimate where there is one.

use koord_queue_api::keys;
use koord_queue_visibility::types::PendingUnitList;
use serde::{Serialize, Serializer};

use crate::connect::Cluster;
use crate::error::CliError;
use crate::read::{self, Scope};
use crate::render::table::Table;
use crate::render::text::{age, amounts, countdown};
use crate::render::{Human, Render};

/// The answer: the visibility API's list (printed as is by `-o json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The units in serving order.
    pub list: PendingUnitList,
    /// Whose they are.
    pub scope: Scope,
}

impl Serialize for Pending {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.list.serialize(s)
    }
}

/// Reads the waiting units of `scope`; the note says when they come from
/// the QueueUnits because the visibility API is not served.
pub async fn run(cluster: &Cluster, scope: Scope) -> Result<(Pending, Option<String>), CliError> {
    if read::visibility_served(&cluster.client).await {
        let list = read::pending(cluster, &scope).await?;
        return Ok((Pending { list, scope }, None));
    }
    let list = read::pending_from_units(cluster, &scope).await?;
    let note = "note: the visibility API (visibility.koord-queue.io) is not served; listing QueueUnits: no positions, reasons as their status last recorded".to_string();
    Ok((Pending { list, scope }, Some(note)))
}

impl Render for Pending {
    fn human(&self, how: &Human) -> String {
        let mut headers = Vec::new();
        if how.namespaces {
            headers.push("namespace");
        }
        headers.extend([
            "name", "job", "queue", "position", "priority", "reason", "waiting", "estimate",
        ]);
        if how.wide {
            headers.extend(["quota", "short", "requests", "message"]);
        }
        let mut t = Table::new(&headers);
        for p in &self.list.items {
            let mut row = Vec::new();
            if how.namespaces {
                row.push(p.metadata.namespace.clone().unwrap_or_default());
            }
            // The scheduler's estimate, else the end of a backoff.
            let estimate = match p.estimated_start.as_deref().or(p.reason.until.as_deref()) {
                Some(at) => countdown(Some(at), how.now),
                None => "-".into(),
            };
            row.extend([
                p.metadata.name.clone(),
                p.job
                    .as_ref()
                    .map_or("-".into(), |j| format!("{}/{}", j.kind, j.name)),
                p.queue.clone(),
                p.position.map_or("-".into(), |n| n.to_string()),
                p.priority.to_string(),
                p.reason.kind.to_string(),
                age(p.waiting_since.as_deref(), how.now),
                estimate,
            ]);
            if how.wide {
                let short = match (&p.reason.resource, &p.reason.short_by) {
                    (Some(r), Some(by)) => format!("{r} {by}"),
                    _ => "-".into(),
                };
                row.extend([
                    p.quota.clone().unwrap_or_else(|| "-".into()),
                    short,
                    amounts(&p.requests),
                    p.reason.message.clone(),
                ]);
            }
            t.row(row);
        }
        if t.is_empty() {
            return String::new();
        }
        t.render()
    }

    fn names(&self) -> Vec<String> {
        self.list
            .items
            .iter()
            .map(|p| format!("queueunit.{}/{}", keys::GROUP, p.metadata.name))
            .collect()
    }

    fn empty_note(&self) -> Option<String> {
        Some(match &self.scope {
            Scope::Namespace(ns) => format!("No pending units in namespace {ns}."),
            Scope::All => "No pending units.".into(),
            Scope::Queue(q) => format!("Queue {q} has no pending units."),
        })
    }
}
