//! Sending a unit back: the backoff write (exponential from 10 s, capped at
//! 15 min, jittered per unit and attempt), its reasons and its message.
//! Decided by `decide.rs`; kept apart so that the lifecycle table there
//! reads as the steps of a unit, not the arithmetic of one of them.

use std::time::Duration;

use koord_queue_api::queue_unit::QueueUnitPhase;

use super::view::UnitView;
use super::{job_ref, millis, queue_of};
use crate::controller::clock::wall_time;
use crate::controller::records::JobRecord;
use crate::controller::writes::Write;

/// A backoff write: exponential from 10 s, doubling, capped at 15 min,
/// with ±10 % jitter so that units sent back together do not return together.
pub(super) fn backoff(
    v: &UnitView<'_>,
    job: Option<&JobRecord>,
    via: Option<QueueUnitPhase>,
    reason: &'static str,
    message: String,
) -> Write {
    let rec = v.rec;
    let count = rec.requeue_count.saturating_add(1);
    let delay = backoff_delay(count, jitter_seed(v.jitter_salt, v.key, count));
    let now = wall_time(v.now_ms);
    let requeue_at = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(millis(
            delay,
        )))
        .unwrap_or(now);
    let message = format!(
        "{message}{BACK_IN_QUEUE}{} at {requeue_at} (attempt {count})",
        queue_of(rec)
    );
    Write::Backoff {
        unit: v.key.clone(),
        job: job.map(job_ref),
        via,
        reason,
        message,
        count,
        requeue_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(requeue_at),
    }
}

/// Condition reason (and backoff reason) of a reclaimed unit.
pub(super) const RECLAIMED: &str = "Reclaimed";

/// Condition reason (and backoff reason) of a unit preempted inside its quota.
pub(super) const PREEMPTED: &str = "Preempted";
/// Reason of a unit sent back because its quota held more than its fair
/// share of a fair-sharing parent's pool.
pub(super) const FAIR_SHARE: &str = "FairShareReclaimed";

/// Reason of a unit sent back because its Queue was stopped with
/// `HoldAndDrain`.
pub(super) const QUEUE_DRAINED: &str = "QueueDrained";

/// The reason of the Event the job gets when its unit is sent back for
/// `reason` (the backoff's condition reason).
pub(super) fn event_reason(reason: &str) -> &'static str {
    match reason {
        RECLAIMED => "Reclaimed",
        PREEMPTED => "Preempted",
        FAIR_SHARE => "FairShareReclaimed",
        QUEUE_DRAINED => "QueueDrained",
        "AdmissionCheck" => "AdmissionCheckFailed",
        "SchedulingTimeout" => "SchedulingFailed",
        _ => "RunningTimeout",
    }
}

/// Where a backoff message says when the unit returns.
pub(super) const BACK_IN_QUEUE: &str = "; back in queue ";

/// The reason to repeat when finishing a SchedFailed send-back that was cut
/// short: the message its first write left, without the "back in queue"
/// tail that the new backoff writes afresh.
pub(super) fn sched_failed_reason(message: Option<&str>) -> String {
    message
        .and_then(|m| m.split(BACK_IN_QUEUE).next())
        .filter(|m| m.starts_with("SchedFailed"))
        .map_or_else(
            || {
                "SchedFailed: the job's pods were not all bound in time; suspended again, quota released"
                    .to_string()
            },
            str::to_string,
        )
}

/// Backoff before attempt `count` (1-based): 10 s × 2^(count-1), at most
/// 15 min, scaled by a jitter factor in [0.9, 1.1) drawn from `seed`.
pub fn backoff_delay(count: i32, seed: u64) -> Duration {
    const BASE_MS: u64 = 10_000;
    const CAP_MS: u64 = 15 * 60 * 1000;
    let exp = u32::try_from(count.saturating_sub(1).max(0))
        .unwrap_or(0)
        .min(20);
    let raw = BASE_MS.saturating_mul(1u64 << exp).min(CAP_MS);
    let jitter_permille = 900 + seed % 200; // 0.9 ..< 1.1
    Duration::from_millis(raw.saturating_mul(jitter_permille) / 1000)
}

/// A seed that differs between units, attempts and (by `salt`) processes.
pub fn jitter_seed(salt: u64, key: &str, count: i32) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (salt, key, count).hash(&mut h);
    h.finish()
}
