//! A live cluster's units as a trace (`koord-queue-simulate export`): each
//! QueueUnit created in the window becomes a job — submitted at its
//! creation, sized by its pod sets (or its total when they do not add up to
//! it: the total is what the scheduler charges), waiting where it waited,
//! running from its release (`status.lastAllocateTime`) to its job's end
//! (a batch Job's completion, else the unit's last status write once it
//! ended). What the cluster did is kept as `observed`.
//!
//! Pure: the command lists the objects (kube) and hands them here.

use std::collections::BTreeMap;

use koord_queue_api::jobs::pod_request::pod_template_requests;
use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_api::resources::ResourceListExt;
use koord_queue_api::{QueueUnit, Resources, keys};

use crate::trace::{Observed, Quantity, TraceJob, TracePodSet};

/// Why a unit is left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Created before the window.
    Old,
    /// Never released: how long it would run is unknown.
    NeverReleased,
    /// Released and not ended yet (kept with `include_running`).
    Running,
    /// Its size cannot be read.
    Unreadable,
}

/// When a job ended, as its own object says (a batch Job's completion or
/// failure time), ms.
pub type JobEnds = BTreeMap<(String, String), i64>;

fn ms(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    t.0.as_millisecond()
}

fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.to_quantities()
        .map(|(k, v)| (k.to_string(), Quantity(v)))
        .collect()
}

/// The unit's pod sets as the trace gives them, or one pod set of its total
/// when they do not add up to it.
fn pod_sets(unit: &QueueUnit, total: &Resources) -> Vec<TracePodSet> {
    let mut sets = Vec::new();
    let mut sum = Resources::new();
    for ps in &unit.spec.pod_set {
        let Ok(template) = serde_json::to_value(&ps.template) else {
            break;
        };
        let Ok(one) = pod_template_requests(&template) else {
            break;
        };
        sum.add(&one.scaled(i64::from(ps.count)));
        sets.push(TracePodSet {
            name: Some(ps.name.clone()),
            count: i64::from(ps.count),
            requests: quantities(&one),
            grace_seconds: ps
                .template
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds),
        });
    }
    if sets.is_empty() || sum != *total {
        return vec![TracePodSet {
            name: Some("unit".into()),
            count: 1,
            requests: quantities(total),
            grace_seconds: sets.iter().filter_map(|s| s.grace_seconds).max(),
        }];
    }
    sets
}

/// Unit `unit` as a trace job, or why it is left out. `since_ms`: the
/// window's start; `now_ms`: the export's time; `job_ends`: the jobs' own
/// end times by `(namespace, name)`; `include_running`: a running unit is
/// kept, with the time it has run so far as its runtime.
pub fn unit_job(
    unit: &QueueUnit,
    since_ms: i64,
    now_ms: i64,
    job_ends: &JobEnds,
    include_running: bool,
) -> Result<TraceJob, Skip> {
    let meta = &unit.metadata;
    let submit_ms = meta.creation_timestamp.as_ref().map(ms).ok_or(Skip::Old)?;
    if submit_ms < since_ms {
        return Err(Skip::Old);
    }
    let status = unit.status.clone().unwrap_or_default();
    let release_ms = status
        .last_allocate_time
        .as_ref()
        .map(ms)
        .ok_or(Skip::NeverReleased)?;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let job_name = unit.spec.consumer_ref.name.clone().unwrap_or_default();
    let ended = matches!(
        status.phase,
        Some(QueueUnitPhase::Succeed | QueueUnitPhase::Failed)
    );
    let finish_ms = job_ends
        .get(&(namespace.clone(), job_name))
        .copied()
        .or_else(|| {
            ended
                .then(|| status.last_update_time.as_ref().map(ms))
                .flatten()
        });
    let (runtime_ms, finish) = match finish_ms {
        Some(f) => (f - release_ms, Some(f)),
        None if include_running => (now_ms - release_ms, None),
        None => return Err(Skip::Running),
    };
    let total = Resources::from_list(&unit.spec.resource).map_err(|_| Skip::Unreadable)?;
    let quota = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::QUOTA_NAME_LABEL))
        .filter(|q| !q.is_empty())
        .cloned();
    Ok(TraceJob {
        name: meta.name.clone(),
        namespace,
        queue: (quota.is_none() && !unit.spec.queue.is_empty()).then(|| unit.spec.queue.clone()),
        quota,
        priority: unit.spec.priority,
        priority_class: unit.spec.priority_class_name.clone(),
        submit_ms,
        runtime_ms: runtime_ms.max(0),
        run_bound_seconds: unit.spec.max_run_seconds,
        pod_sets: pod_sets(unit, &total),
        labels: BTreeMap::new(),
        observed: Some(Observed {
            release_ms: Some(release_ms),
            finish_ms: finish,
            // The unit's own creation is the submission here.
            admitted_ms: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use koord_queue_api::QueueUnit;
    use serde_json::json;

    use super::{JobEnds, Skip, unit_job};

    /// A unit as the cluster stores it: created at 00:00:10, released at
    /// 00:00:30, its job (2 workers of 500m and 1Gi) ended at 00:01:30.
    fn unit(phase: &str, pods_cpu: &str) -> QueueUnit {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": "u", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:10Z",
                          "labels": { "quota.scheduling.koordinator.sh/name": "team-a" } },
            "spec": {
                "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "ns" },
                "queue": "team-a", "priority": 5, "priorityClassName": "high",
                "resource": { "cpu": "1", "memory": "2Gi" }, "maxRunSeconds": 600,
                "podSet": [{ "name": "worker", "count": 2, "template": { "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{ "name": "c", "resources": { "requests": { "cpu": pods_cpu, "memory": "1Gi" } } }] } } }],
            },
            "status": { "phase": phase, "lastAllocateTime": "2026-01-01T00:00:30Z",
                        "lastUpdateTime": "2026-01-01T00:01:40Z" },
        }))
        .unwrap()
    }

    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    #[test]
    fn a_finished_unit_is_a_job_with_its_times_and_pod_sets() {
        let mut ends = JobEnds::new();
        ends.insert(("ns".into(), "j".into()), T0 + 90_000);
        let job = unit_job(&unit("Succeed", "500m"), T0, T0 + 200_000, &ends, false).unwrap();
        assert_eq!(job.submit_ms, T0 + 10_000);
        // From its release to its job's completion.
        assert_eq!(job.runtime_ms, 60_000);
        assert_eq!(job.quota.as_deref(), Some("team-a"));
        assert_eq!(job.queue, None);
        assert_eq!((job.priority, job.run_bound_seconds), (Some(5), Some(600)));
        assert_eq!(job.pod_sets.len(), 1);
        assert_eq!(job.pod_sets[0].count, 2);
        assert_eq!(job.pod_sets[0].requests["cpu"].0, "500m");
        assert_eq!(job.pod_sets[0].grace_seconds, Some(5));
        let observed = job.observed.unwrap();
        assert_eq!(observed.release_ms, Some(T0 + 30_000));
        // Without the job's own time, the unit's last status write.
        let job = unit_job(&unit("Failed", "500m"), T0, T0, &JobEnds::new(), false).unwrap();
        assert_eq!(job.runtime_ms, 70_000);
    }

    #[test]
    fn pod_sets_that_do_not_add_up_give_the_total_and_others_are_skipped() {
        let job = unit_job(&unit("Succeed", "1"), T0, T0, &JobEnds::new(), false).unwrap();
        assert_eq!(job.pod_sets[0].count, 1);
        assert_eq!(job.pod_sets[0].requests["cpu"].0, "1");
        // Quantities as the model writes them (bytes).
        assert_eq!(job.pod_sets[0].requests["memory"].0, "2147483648");
        let running = unit("Running", "500m");
        assert_eq!(
            unit_job(&running, T0, T0 + 100_000, &JobEnds::new(), false).unwrap_err(),
            Skip::Running
        );
        let kept = unit_job(&running, T0, T0 + 100_000, &JobEnds::new(), true).unwrap();
        assert_eq!(kept.runtime_ms, 70_000);
        assert_eq!(
            unit_job(&running, T0 + 60_000, T0, &JobEnds::new(), true).unwrap_err(),
            Skip::Old
        );
        let mut waiting = unit("Enqueued", "500m");
        if let Some(s) = waiting.status.as_mut() {
            s.last_allocate_time = None;
        }
        assert_eq!(
            unit_job(&waiting, T0, T0, &JobEnds::new(), true).unwrap_err(),
            Skip::NeverReleased
        );
    }
}
