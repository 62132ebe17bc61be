//! Prometheus metrics of the scheduler (architecture §4.7).

use std::collections::HashSet;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a per-queue gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// Queue name.
    pub queue: String,
}

/// Labels of a per-quota, per-resource gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabels {
    /// Quota name.
    pub quota: String,
    /// Resource name.
    pub resource: String,
}

/// Labels of an admission attempt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// released, failed.
    pub result: String,
}

/// Labels of a failed write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// Operation.
    pub operation: &'static str,
}

/// Labels of a reclaim: why the quota is taken back.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Labels of a waiting unit's status write: what made it due.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    /// wait_type, estimate, position.
    pub cause: &'static str,
}

/// Labels naming a watch source (`queueunits`, a job kind, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

/// The scheduler's metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Waiting units per queue.
    pub pending: Family<QueueLabels, Gauge>,
    /// Units holding quota per queue.
    pub admitted: Family<QueueLabels, Gauge>,
    /// Quota min per quota and resource.
    pub quota_min: Family<QuotaLabels, Gauge>,
    /// Quota max per quota and resource.
    pub quota_max: Family<QuotaLabels, Gauge>,
    /// Quota used per quota and resource.
    pub quota_used: Family<QuotaLabels, Gauge>,
    /// Duration of scheduling cycles, seconds.
    pub cycle_duration: Histogram,
    /// Time from unit creation to release, seconds.
    pub dequeue_latency: Histogram,
    /// Admission attempts by result.
    pub attempts: Family<AttemptLabels, Counter>,
    /// Failed API writes by operation.
    pub write_errors: Family<WriteLabels, Counter>,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// API writes waiting for a slot.
    pub write_backlog: Gauge,
    /// Events dropped because too many were waiting.
    pub events_dropped: Counter,
    /// Writes not sent (or refused by the fencing policy) because this
    /// replica no longer led.
    pub fenced_writes: Counter,
    /// Releases whose outcome the API server did not tell (the connection
    /// broke): the reservation was kept and the release sent again.
    pub releases_uncertain: Counter,
    /// ElasticQuotas ignored because an older one holds their name.
    pub quota_name_conflicts: Gauge,
    /// Relists of a watch after its first list (a 410 Gone, a restart).
    pub watch_relists: Family<SourceLabels, Counter>,
    /// Records dropped by a relist: objects deleted while the watch was away.
    pub relist_dropped: Family<SourceLabels, Counter>,
    /// 1 while a source's list or watch fails.
    pub watch_failing: Family<SourceLabels, Gauge>,
    /// Units sent back to free quota, by reason (`Reclaimed`, `Preempted`).
    pub reclaims: Family<ReasonLabels, Counter>,
    /// Status writes of waiting units after their Enqueued write, by cause.
    pub status_publishes: Family<CauseLabels, Counter>,
    /// Duration of a start-time estimate (its snapshot and simulation).
    pub estimate_duration: Histogram,
    /// Duration of an estimate's snapshot, on the controller's task.
    pub estimate_snapshot_duration: Histogram,
    /// Waiting units with a start-time estimate.
    pub estimated_units: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them under `koord_queue_scheduler`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            pending: Family::default(),
            admitted: Family::default(),
            quota_min: Family::default(),
            quota_max: Family::default(),
            quota_used: Family::default(),
            cycle_duration: Histogram::new(one_two_five(10, 20)),
            dequeue_latency: Histogram::new(exponential_buckets(0.01, 2.0, 20)),
            attempts: Family::default(),
            write_errors: Family::default(),
            leader: Gauge::default(),
            write_backlog: Gauge::default(),
            events_dropped: Counter::default(),
            fenced_writes: Counter::default(),
            releases_uncertain: Counter::default(),
            quota_name_conflicts: Gauge::default(),
            watch_relists: Family::default(),
            relist_dropped: Family::default(),
            watch_failing: Family::default(),
            reclaims: Family::default(),
            status_publishes: Family::default(),
            estimate_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 20)),
            estimate_snapshot_duration: Histogram::new(exponential_buckets(0.00001, 2.0, 20)),
            estimated_units: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("koord_queue_scheduler");
        r.register(
            "pending_units",
            "Units waiting, per queue",
            m.pending.clone(),
        );
        r.register(
            "admitted_units",
            "Units holding quota, per queue",
            m.admitted.clone(),
        );
        r.register(
            "quota_min",
            "Guaranteed amount per quota and resource (cpu in millicores)",
            m.quota_min.clone(),
        );
        r.register(
            "quota_max",
            "Maximum per quota and resource (cpu in millicores)",
            m.quota_max.clone(),
        );
        r.register(
            "quota_used",
            "Held amount per quota and resource (cpu in millicores)",
            m.quota_used.clone(),
        );
        r.register(
            "cycle_duration_seconds",
            "Duration of scheduling cycles",
            m.cycle_duration.clone(),
        );
        r.register(
            "dequeue_latency_seconds",
            "Time from QueueUnit creation to release",
            m.dequeue_latency.clone(),
        );
        r.register(
            "admission_attempts",
            "Releases attempted, by result",
            m.attempts.clone(),
        );
        r.register(
            "api_write_errors",
            "API writes that failed, by operation",
            m.write_errors.clone(),
        );
        r.register(
            "watch_relists",
            "Relists of a watch after its first list, per source",
            m.watch_relists.clone(),
        );
        r.register(
            "relist_dropped_records",
            "Records dropped by a relist (deleted while the watch was away), per source",
            m.relist_dropped.clone(),
        );
        r.register(
            "preemptions",
            "Units sent back to free quota for another, by reason (Reclaimed: borrowed beyond min; Preempted: lower priority in the same quota)",
            m.reclaims.clone(),
        );
        r.register(
            "unit_status_publishes",
            "Status writes of waiting units after their Enqueued write, by cause (wait_type: the wait type changed; estimate: the estimated start moved by a large step; position: a position an older version wrote is cleared)",
            m.status_publishes.clone(),
        );
        r.register(
            "watch_failing",
            "1 while a source's list or watch fails (it keeps retrying), per source",
            m.watch_failing.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader Lease",
            m.leader.clone(),
        );
        r.register(
            "write_backlog",
            "API writes waiting for a slot (releases and freeing phases go first)",
            m.write_backlog.clone(),
        );
        r.register(
            "events_dropped",
            "Events on jobs not written because too many were waiting",
            m.events_dropped.clone(),
        );
        r.register(
            "fenced_writes",
            "Writes not sent, or refused by the fencing policy, because this replica no longer led",
            m.fenced_writes.clone(),
        );
        r.register(
            "releases_uncertain",
            "Releases whose outcome was not known (connection broken, server error): quota kept, release sent again",
            m.releases_uncertain.clone(),
        );
        r.register(
            "estimate_duration_seconds",
            "Duration of a start-time estimate: its snapshot of the state and its simulation (run off the decision path)",
            m.estimate_duration.clone(),
        );
        r.register(
            "estimate_snapshot_duration_seconds",
            "Duration of a start-time estimate's snapshot, taken on the controller's task",
            m.estimate_snapshot_duration.clone(),
        );
        r.register(
            "estimated_units",
            "Waiting units with a start-time estimate",
            m.estimated_units.clone(),
        );
        r.register(
            "quota_name_conflicts",
            "ElasticQuotas ignored because an older quota in another namespace holds their name",
            m.quota_name_conflicts.clone(),
        );
        m
    }
}

impl Metrics {
    /// A start-time estimate was made.
    pub fn observe_estimate(&self, e: &super::estimate::Estimates) {
        self.estimate_duration.observe(e.took.as_secs_f64());
        self.estimate_snapshot_duration
            .observe(e.snapshot_took.as_secs_f64());
        self.estimated_units
            .set(i64::try_from(e.starts.len()).unwrap_or(i64::MAX));
    }

    /// Publishes the usage of every quota and resource in use, `now`, and
    /// sets to 0 the series of `before` (the last call's result) that are
    /// not in it: a quota's figures leave out a resource once its usage is
    /// back to 0, and the gauge must not keep the last amount. Returns the
    /// series in use, for the next call.
    pub fn publish_quota_used(
        &self,
        before: &HashSet<QuotaLabels>,
        now: Vec<(QuotaLabels, i64)>,
    ) -> HashSet<QuotaLabels> {
        let mut in_use = HashSet::with_capacity(now.len());
        for (labels, amount) in now {
            self.quota_used.get_or_create(&labels).set(amount);
            in_use.insert(labels);
        }
        for idle in before.difference(&in_use) {
            self.quota_used.get_or_create(idle).set(0);
        }
        in_use
    }
}

/// `count` bucket bounds (seconds) from `start_micros` in steps of 1, 2, 5
/// (10 µs, 20 µs, 50 µs, 100 µs, …): round figures, so a goal such as "a
/// full cycle ≤ 50 ms" is a bucket's bound and can be read off the
/// histogram (doubling buckets put 50 ms inside 41–82 ms). Made from whole
/// microseconds, so each bound prints as the round figure it is.
fn one_two_five(start_micros: u64, count: usize) -> impl Iterator<Item = f64> {
    [1, 2, 5]
        .into_iter()
        .cycle()
        .enumerate()
        .take(count)
        .map(move |(i, step)| (start_micros * step * 10u64.pow((i / 3) as u32)) as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::{Metrics, QuotaLabels, one_two_five};
    use prometheus_client::registry::Registry;
    use std::collections::HashSet;

    fn labels(quota: &str) -> QuotaLabels {
        QuotaLabels {
            quota: quota.into(),
            resource: "cpu".into(),
        }
    }

    fn used(metrics: &Metrics, quota: &str) -> i64 {
        metrics.quota_used.get_or_create(&labels(quota)).get()
    }

    #[test]
    fn cycle_buckets_step_1_2_5_and_have_the_goal_as_a_bound() {
        let bounds: Vec<f64> = one_two_five(10, 20).collect();
        assert_eq!(&bounds[..4], &[0.00001, 0.00002, 0.00005, 0.0001]);
        assert!(bounds.contains(&0.05), "{bounds:?}");
        assert_eq!(bounds.last(), Some(&20.0));
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn quota_usage_back_to_zero_is_published_as_zero() {
        let metrics = Metrics::register(&mut Registry::default());
        let in_use = metrics.publish_quota_used(
            &HashSet::new(),
            vec![(labels("a"), 3000), (labels("b"), 2000)],
        );
        assert_eq!((used(&metrics, "a"), used(&metrics, "b")), (3000, 2000));
        // b's usage is gone from the figures: its gauge says 0.
        let in_use = metrics.publish_quota_used(&in_use, vec![(labels("a"), 1000)]);
        assert_eq!((used(&metrics, "a"), used(&metrics, "b")), (1000, 0));
        assert_eq!(in_use, HashSet::from([labels("a")]));
        let in_use = metrics.publish_quota_used(&in_use, Vec::new());
        assert_eq!((used(&metrics, "a"), used(&metrics, "b")), (0, 0));
        assert!(in_use.is_empty());
    }
}
