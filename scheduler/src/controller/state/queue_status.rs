//! `Queue.status`: the first waiting units in order, the counts, and the
//! [`MIN_OVERCOMMITTED`] condition, written only when changed (part of the
//! visibility pass, `visibility.rs`).

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use koord_queue_api::QueueStatus;
use koord_queue_api::queue::{QueueItemDetail, StopPolicy};

use super::{Controller, split_key};
use crate::controller::records::{DetailsDigest, PublishedQueueStatus};
use crate::controller::writes::Write;

/// Condition type on the Queue of a quota whose children's guaranteed
/// minimum exceeds its own (they are then scaled down proportionally).
pub const MIN_OVERCOMMITTED: &str = "MinOvercommitted";

/// Condition type on a stopped Queue (`spec.stopPolicy` `Hold` or
/// `HoldAndDrain`, the condition's reason): it releases nothing.
pub const STOPPED: &str = "Stopped";

/// Most waiting units listed in `Queue.status.queueItemDetails`.
pub(super) const QUEUE_DETAILS_LIMIT: usize = 1000;

impl Controller {
    /// The digest of the `queueItemDetails` Queue `name` would publish now
    /// (see [`PublishedQueueStatus`]).
    fn waiting_digest(&self, name: &str) -> u64 {
        let mut digest = DetailsDigest::default();
        digest.key("active");
        for w in self.core.queue_waiting(name).take(QUEUE_DETAILS_LIMIT) {
            let (ns, n) = split_key(w.key);
            digest.item(ns, n, w.priority, position(w.position));
        }
        digest.finish()
    }

    /// `Queue.status`: the first waiting units in order and the counts,
    /// written only when changed. Returns whether every Queue was compared
    /// (none left for a later pass).
    pub(super) fn publish_queue_status(&mut self, now: Instant) -> bool {
        let mut complete = true;
        let warnings: Vec<(String, String)> = self
            .core
            .min_warnings()
            .iter()
            .map(|w| (w.quota.to_string(), w.to_string()))
            .collect();
        let names: Vec<String> = self.queues.keys().cloned().collect();
        for name in names {
            // A Queue with a write in flight is looked at again when its
            // result arrives (which reopens the gate).
            if self.visibility.queue_busy(&name) {
                continue;
            }
            if self
                .visibility
                .queue_status_recent(&name, now, self.settings.status_interval)
            {
                complete = false;
                continue;
            }
            let counts = self.core.queue_counts(&name).unwrap_or_default();
            let pending = Some(i64::try_from(counts.pending).unwrap_or(i64::MAX));
            let admitted = Some(i64::try_from(counts.admitted).unwrap_or(i64::MAX));
            let published = self.queues.get(&name).and_then(|q| q.status.as_ref());
            // Most passes change nothing: compare with the published status
            // before building a new one (up to 1,000 entries of two strings
            // for each of 1,000 queues, every pass).
            if let Some(published) = published
                && published.pending == pending
                && published.admitted == admitted
                && published.details == self.waiting_digest(&name)
                && self.queue_conditions(&name, &warnings, published.conditions.clone())
                    == published.conditions
            {
                continue;
            }
            let published_conditions = published.map(|p| p.conditions.clone()).unwrap_or_default();
            let details: Vec<QueueItemDetail> = self
                .core
                .queue_waiting(&name)
                .take(QUEUE_DETAILS_LIMIT)
                .map(|w| {
                    let (ns, n) = split_key(w.key);
                    QueueItemDetail {
                        name: n.to_string(),
                        namespace: ns.to_string(),
                        priority: w.priority,
                        position: position(w.position),
                    }
                })
                .collect();
            let status = QueueStatus {
                queue_item_details: BTreeMap::from([("active".to_string(), details)]),
                pending,
                admitted,
                conditions: self.queue_conditions(&name, &warnings, published_conditions),
            };
            let Some(queue) = self.queues.get_mut(&name) else {
                continue;
            };
            let kept = PublishedQueueStatus::of(&status);
            if queue.status.as_ref() == Some(&kept)
                || (queue.status.is_none() && status == empty_status())
            {
                continue;
            }
            queue.status = Some(kept);
            self.visibility.queue_status_sent(&name, now);
            self.writer.submit(Write::QueueStatus {
                name,
                status: Box::new(status),
            });
        }
        complete
    }
}

impl Controller {
    /// The conditions of Queue `name`: [`MIN_OVERCOMMITTED`] from
    /// `warnings`, [`STOPPED`] from its `spec.stopPolicy`.
    fn queue_conditions(
        &self,
        name: &str,
        warnings: &[(String, String)],
        conditions: Vec<Condition>,
    ) -> Vec<Condition> {
        let now = self.now.wall();
        let conditions = min_conditions(name, warnings, conditions, now);
        let stop = self.queues.get(name).map(|q| q.stop).unwrap_or_default();
        stop_conditions(stop, conditions, now)
    }
}

/// `conditions` with the [`STOPPED`] condition set when `stop` stops the
/// queue (its reason the policy, so that `kubectl get` and the CLI say
/// whether it drains), removed when it serves; other conditions are kept.
pub(super) fn stop_conditions(
    stop: StopPolicy,
    mut conditions: Vec<Condition>,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<Condition> {
    let existing = conditions.iter().position(|c| c.type_ == STOPPED);
    if !stop.stops() {
        if let Some(i) = existing {
            conditions.remove(i);
        }
        return conditions;
    }
    let message = if stop.drains() {
        "stopped: releases nothing; units that held quota were sent back"
    } else {
        "stopped: releases nothing; released jobs run on"
    };
    match existing {
        Some(i) if conditions[i].reason == stop.as_str() => {}
        Some(i) => {
            conditions[i].reason = stop.as_str().into();
            conditions[i].message = message.into();
        }
        None => conditions.push(Condition {
            type_: STOPPED.into(),
            status: "True".into(),
            reason: stop.as_str().into(),
            message: message.into(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
    conditions
}

/// `conditions` with the [`MIN_OVERCOMMITTED`] condition of queue `name` set
/// from `warnings` (quota name, text); other conditions are kept.
pub(super) fn min_conditions(
    name: &str,
    warnings: &[(String, String)],
    mut conditions: Vec<Condition>,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<Condition> {
    let texts: Vec<&str> = warnings
        .iter()
        .filter(|(q, _)| q == name)
        .map(|(_, t)| t.as_str())
        .collect();
    let existing = conditions.iter().position(|c| c.type_ == MIN_OVERCOMMITTED);
    if texts.is_empty() {
        if let Some(i) = existing {
            conditions.remove(i);
        }
        return conditions;
    }
    let message = texts.join("; ");
    match existing {
        Some(i) if conditions[i].message == message => {}
        Some(i) => conditions[i].message = message,
        None => conditions.push(Condition {
            type_: MIN_OVERCOMMITTED.into(),
            status: "True".into(),
            reason: "ChildrenMinExceedsMin".into(),
            message,
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
    conditions
}

pub(super) fn empty_status() -> QueueStatus {
    let mut status = QueueStatus::default();
    status
        .queue_item_details
        .insert("active".into(), Vec::new());
    status.pending = Some(0);
    status.admitted = Some(0);
    status
}

/// A 1-based place as `QueueItemDetail.position` has it.
fn position(place: usize) -> i64 {
    i64::try_from(place).unwrap_or(i64::MAX)
}
