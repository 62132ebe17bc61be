//! Sending a unit back (`state/backoff.rs`): the delay, the reason a
//! send-back repeats when it was interrupted, and the Event the job hears.

use std::time::Duration;

use crate::controller::state::backoff::{
    BACK_IN_QUEUE, FAIR_SHARE, PREEMPTED, QUEUE_DRAINED, RECLAIMED, backoff_delay, event_reason,
    sched_failed_reason,
};

#[test]
fn backoff_doubles_from_ten_seconds_up_to_fifteen_minutes_with_jitter() {
    let mid = 100; // jitter factor 1.0
    assert_eq!(backoff_delay(1, mid), Duration::from_secs(10));
    assert_eq!(backoff_delay(2, mid), Duration::from_secs(20));
    assert_eq!(backoff_delay(4, mid), Duration::from_secs(80));
    assert_eq!(backoff_delay(8, mid), Duration::from_secs(900));
    assert_eq!(backoff_delay(50, mid), Duration::from_secs(900));
    assert_eq!(backoff_delay(1, 0), Duration::from_secs(9));
    assert_eq!(backoff_delay(1, 199), Duration::from_millis(10_990));
}

#[test]
fn an_interrupted_sched_failed_send_back_repeats_its_reason_once() {
    let written =
        "SchedFailed: pod p unschedulable: no node after 8s; suspended again, quota released";
    let left = format!("{written}{BACK_IN_QUEUE}q at 2026-01-01T00:00:00Z (attempt 1)");
    assert_eq!(sched_failed_reason(Some(&left)), written);
    assert_eq!(sched_failed_reason(Some(written)), written);
    for other in [None, Some("position 3 in queue q"), Some("")] {
        let reason = sched_failed_reason(other);
        assert!(reason.starts_with("SchedFailed: "), "{reason}");
        assert!(!reason.contains(BACK_IN_QUEUE), "{reason}");
    }
}

#[test]
fn the_job_hears_why_its_unit_was_sent_back() {
    // Each reason `decide.rs` and `release.rs` send a unit back for.
    let cases = [
        (RECLAIMED, "Reclaimed"),
        (PREEMPTED, "Preempted"),
        (FAIR_SHARE, "FairShareReclaimed"),
        // A drained queue is an administrator's act, not a job too slow to
        // start (it read RunningTimeout).
        (QUEUE_DRAINED, "QueueDrained"),
        ("AdmissionCheck", "AdmissionCheckFailed"),
        ("SchedulingTimeout", "SchedulingFailed"),
        ("RunningTimeout", "RunningTimeout"),
    ];
    for (reason, event) in cases {
        assert_eq!(event_reason(reason), event, "{reason}");
    }
}
