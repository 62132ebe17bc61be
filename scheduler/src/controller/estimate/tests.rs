//! Estimates on hand-made cases whose answer is known.

use std::time::Duration;

use super::*;
use crate::DEFAULT_CONFIG;
use koord_queue_api::Resources;

use crate::core::{QueueDef, QuotaDef, UnitDef};

const T0: i64 = 1_700_000_000_000;
const SEC: i64 = 1_000;

fn settings() -> EstimateSettings {
    let config = SchedulerConfig::from_yaml(DEFAULT_CONFIG).expect("the default configuration");
    EstimateSettings::new(config)
}

fn cpu(cores: i64) -> Resources {
    let mut r = Resources::new();
    r.set("cpu", cores * 1000);
    r
}

/// A job of 4-core quota `q`'s queue, asking `cores`, created `age_s`
/// before T0, running `run_s` once released.
fn job(name: &str, cores: i64, age_s: i64, run_s: i64) -> Job {
    let def = UnitDef::new("ns", name)
        .with_quota("q")
        .with_queue("q")
        .created_at(T0 - age_s * SEC)
        .requesting("cpu", cores * 1000);
    Job::from_unit_def(&def, run_s * SEC, "default")
}

fn snapshot(running: Vec<(Job, i64, i64)>, waiting: Vec<Job>) -> Snapshot {
    Snapshot {
        now_ms: T0,
        quotas: vec![QuotaDef::new("q").max("cpu", 4_000)],
        queues: vec![QueueDef::new("q")],
        capacity: Some(RootCapacity::Limited(cpu(100))),
        running,
        waiting,
        cycle_batch_ms: 20,
        jitter_salt: 7,
        stopwatch: Stopwatch::start(),
        snapshot_took: Duration::ZERO,
    }
}

fn start_s(e: &Estimates, name: &str) -> Option<f64> {
    e.starts
        .get(format!("ns/{name}").as_str())
        .map(|ms| (ms - T0) as f64 / 1000.0)
}

#[test]
fn waiting_units_start_as_the_running_ones_end_in_serving_order() {
    // 4 cores held until T0+100 s; a (2 cores, 50 s), b (2, 30 s), then c
    // (4 cores): a and b together at 100 s, c once both ended, at 150 s.
    let running = vec![(job("r", 4, 300, 0), T0 - 200 * SEC, T0 + 100 * SEC)];
    let waiting = vec![job("a", 2, 30, 50), job("b", 2, 20, 30), job("c", 4, 10, 5)];
    let e = estimate(&settings(), snapshot(running, waiting)).expect("estimated");
    assert_eq!(e.waiting, 3);
    for (name, at) in [("a", 100.0), ("b", 100.0), ("c", 150.0)] {
        let got = start_s(&e, name).unwrap_or_else(|| panic!("{name} has an estimate"));
        assert!((got - at).abs() < 0.1, "{name}: {got} s, expected {at} s");
    }
}

#[test]
fn a_unit_behind_one_of_unknown_runtime_gets_no_estimate() {
    let running = vec![(job("r", 4, 300, 0), T0 - 200 * SEC, T0 + 10 * SEC)];
    let waiting = vec![
        job("unknown", 4, 30, UNKNOWN_RUN_MS / SEC),
        job("behind", 1, 20, 5),
    ];
    let e = estimate(&settings(), snapshot(running, waiting)).expect("estimated");
    let got = start_s(&e, "unknown").expect("it starts when the room is free");
    assert!((got - 10.0).abs() < 0.1, "{got}");
    assert_eq!(start_s(&e, "behind"), None, "never an invented estimate");
}

#[test]
fn a_higher_priority_unit_goes_first_and_a_bound_ends_a_job() {
    // r holds 4 cores until 60 s; low (older) and high both want 4: high
    // first at 60 s, bounded to 20 s though it would run 1,000 s (its
    // bound plus the pods' grace is what the core is told), low after it.
    let running = vec![(job("r", 4, 300, 0), T0 - 10 * SEC, T0 + 60 * SEC)];
    let low = job("low", 4, 50, 10);
    let high = UnitDef::new("ns", "high")
        .with_quota("q")
        .with_queue("q")
        .with_priority(100)
        .created_at(T0 - 5 * SEC)
        .requesting("cpu", 4_000)
        .running_at_most(20 * SEC);
    let high = Job::from_unit_def(&high, 1_000 * SEC, "high");
    let e = estimate(&settings(), snapshot(running, vec![low, high])).expect("estimated");
    let high_at = start_s(&e, "high").expect("high");
    let low_at = start_s(&e, "low").expect("low");
    assert!((high_at - 60.0).abs() < 0.1, "{high_at}");
    assert!((low_at - 80.0).abs() < 1.0, "{low_at}");
}

#[test]
fn nothing_past_the_horizon() {
    let mut s = settings();
    s.horizon = Duration::from_secs(60);
    let running = vec![(job("r", 4, 300, 0), T0 - 10 * SEC, T0 + 120 * SEC)];
    let e = estimate(&s, snapshot(running, vec![job("a", 1, 5, 5)])).expect("estimated");
    assert_eq!(start_s(&e, "a"), None);
}

#[test]
fn the_status_hears_of_large_steps_only() {
    const MIN: i64 = 60 * SEC;
    // A first estimate: written when it is at least 5 minutes ahead.
    assert!(!status_step(None, Some(T0 + 4 * MIN), T0));
    assert!(status_step(None, Some(T0 + 5 * MIN), T0));
    assert!(!status_step(None, None, T0));
    // None any more: cleared.
    assert!(status_step(Some(T0 + 10 * MIN), None, T0));
    // 2 hours announced: a move of 20 minutes is less than a quarter.
    assert!(!status_step(Some(T0 + 120 * MIN), Some(T0 + 140 * MIN), T0));
    assert!(status_step(Some(T0 + 120 * MIN), Some(T0 + 150 * MIN), T0));
    // 8 minutes announced: 5 minutes either way.
    assert!(!status_step(Some(T0 + 8 * MIN), Some(T0 + 12 * MIN), T0));
    assert!(status_step(Some(T0 + 8 * MIN), Some(T0 + 3 * MIN), T0));
    // An announced start that passed: 5 minutes.
    assert!(status_step(Some(T0 - 10 * MIN), Some(T0 + 5 * MIN), T0));
}

#[test]
fn an_overdue_unit_ends_soon_not_at_once() {
    // Expected to end 10 s ago after 100 s: ends in a minute (a tenth of
    // 100 s is less).
    assert_eq!(
        overdue_end(T0, T0 - 110 * SEC, T0 - 10 * SEC),
        T0 + 60 * SEC
    );
    // After 2,000 s: in 200 s.
    assert_eq!(
        overdue_end(T0, T0 - 2_100 * SEC, T0 - 100 * SEC),
        T0 + 200 * SEC
    );
    assert_eq!(overdue_end(T0, T0, T0 + 5 * SEC), T0 + 5 * SEC);
}
