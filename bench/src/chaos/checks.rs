//! The chaos run's checks from outside: double releases in the runtime's
//! record, what the QueueUnits hold now, the leader's own quota figures.

use anyhow::Result;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::{QueueUnit, Resources};
use kube::api::Api;
use serde_json::{Value, json};
use tokio::sync::Mutex as AsyncMutex;

use super::fleet::Fleet;
use super::monitor;
use crate::admin_scrape;
use crate::runner::{JobTimeline, Runner};
use crate::shape::Shape;

/// Two releases of one job in a row without a suspension between them, in
/// the job runtime's own record.
pub(super) fn runtime_double_releases(timelines: &[JobTimeline]) -> usize {
    timelines
        .iter()
        .filter(|j| {
            let mut events: Vec<(f64, bool)> = j
                .releases
                .iter()
                .map(|t| (*t, true))
                .chain(j.suspensions.iter().map(|t| (*t, false)))
                .collect();
            events.sort_by(|a, b| a.0.total_cmp(&b.0));
            events.windows(2).any(|w| w[0].1 && w[1].1)
        })
        .count()
}

/// What the QueueUnits hold now, listed afresh.
pub(super) struct UnitsNow {
    /// Units in a phase that holds quota.
    pub(super) holding: usize,
    /// Their CPU, millicores.
    pub(super) holding_cpu: i64,
    /// Units not Succeed.
    pub(super) not_done: usize,
    /// The first of those, with their status and their job as the job
    /// runtime saw it.
    pub(super) not_done_examples: Vec<Value>,
}

pub(super) async fn units_now(
    admin: &kube::Client,
    shape: &Shape,
    runner: &Runner,
) -> Result<UnitsNow> {
    let api: Api<QueueUnit> = Api::all(admin.clone());
    let list = api
        .list(&kube::api::ListParams::default().labels(crate::shape::CLASS_LABEL))
        .await?;
    let mut holding = 0;
    let mut cpu = 0;
    let mut not_done = 0;
    let mut not_done_examples = Vec::new();
    for unit in &list.items {
        let status = unit.status.as_ref();
        let phase = status.and_then(|s| s.phase);
        if phase != Some(koord_queue_api::queue_unit::QueueUnitPhase::Succeed) {
            not_done += 1;
            if not_done_examples.len() < 20 {
                let ns = unit.metadata.namespace.as_deref().unwrap_or_default();
                let job = unit.spec.consumer_ref.name.as_deref().unwrap_or_default();
                let timeline = shape.job_index(ns, job).and_then(|i| runner.timeline(i));
                not_done_examples.push(json!({
                    "unit": format!("{ns}/{}", unit.metadata.name.as_deref().unwrap_or_default()),
                    "status": {
                        "phase": phase.map(|p| format!("{p:?}")),
                        "attempts": status.and_then(|s| s.attempts),
                        "message": status.and_then(|s| s.message.clone()),
                        "lastAllocateTime": status.and_then(|s| s.last_allocate_time.clone()),
                        "lastUpdateTime": status.and_then(|s| s.last_update_time.clone()),
                    },
                    "job": format!("{ns}/{job}"),
                    "job_runtime": timeline.map(|t| json!({
                        "created_s": t.created, "releases_s": t.releases,
                        "suspensions_s": t.suspensions, "finished_s": t.finished,
                    })),
                }));
            }
        }
        if phase.is_some_and(|p| p.holds_quota()) {
            holding += 1;
            cpu += status
                .map(|s| {
                    s.admissions
                        .iter()
                        .filter_map(|a| Resources::from_list(&a.resources).ok())
                        .map(|r| r.get("cpu"))
                        .sum::<i64>()
                })
                .unwrap_or(0);
        }
    }
    Ok(UnitsNow {
        holding,
        holding_cpu: cpu,
        not_done,
        not_done_examples,
    })
}

/// The leader's `quota_used` summed over every quota and resource, and who
/// it is.
pub(super) async fn leader_quota_used(fleet: &AsyncMutex<Fleet>) -> Option<(String, f64)> {
    let (i, text) = monitor::current_leader(fleet).await?;
    let name = fleet.lock().await.schedulers.get(i)?.name.clone();
    // + 0.0: an empty sum is -0.0 (a leader that never held anything has
    // no series).
    Some((
        name,
        admin_scrape::metric_sum(&text, admin_scrape::QUOTA_USED) + 0.0,
    ))
}
