//! The reserving head of a `Priority` queue (architecture §4.3): smaller
//! units pass a unit that does not fit until it reserves; then those that
//! need what it is short of wait behind it, and it is released once its
//! room frees.

use koord_queue_model::{QueuePolicy, Reserve};

use super::{quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef};

fn core(reserve: Reserve) -> Core {
    let mut core = quota_core(1000);
    core.upsert_queue(
        &QueueDef::new("q")
            .with_policy(QueuePolicy::Priority)
            .with_reserve(reserve),
    );
    core.upsert_quota(&QuotaDef::new("q").max("cpu", 10_000))
        .unwrap();
    core.set_now(100_000);
    core
}

#[test]
fn small_units_pass_a_large_one_until_it_reserves() {
    let mut c = core(Reserve {
        after_ms: Some(60_000),
        above_priority: None,
    });
    // 8 of 10 cpu run; the large unit (4) does not fit.
    c.upsert_unit(&unit("ns", "running", "q", 8).created_at(0))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(&unit("ns", "large", "q", 4).created_at(90_000))
        .unwrap();
    c.upsert_unit(&unit("ns", "small-1", "q", 1).created_at(91_000))
        .unwrap();
    // Not waited 60 s yet: the small one passes.
    assert_eq!(released(&c.run_cycle()), ["ns/small-1"]);
    // 60 s after its creation the large unit reserves.
    c.set_now(150_000);
    c.upsert_unit(&unit("ns", "small-2", "q", 1).created_at(151_000))
        .unwrap();
    let out = c.run_cycle();
    assert!(out.decisions.is_empty(), "{:?}", released(&out));
    assert!(
        reason_text(&c, "ns/small-2").starts_with("waiting behind ns/large, which reserves cpu"),
        "{}",
        reason_text(&c, "ns/small-2")
    );
    // Its message says it reserves and how much it still needs.
    let reason = reason_text(&c, "ns/large");
    // (looked at again when its time came: the figures are current).
    assert!(
        reason.starts_with("reserving: quota q: cpu 9/10 used, needs 4"),
        "{reason}"
    );
    assert!(reason.contains("3 more to free"), "{reason}");
    // Room freed that is not enough yet is kept for it.
    c.remove_unit("ns/small-1");
    let out = c.run_cycle();
    assert!(out.decisions.is_empty(), "{:?}", released(&out));
    // Once its room frees it goes first; the small one follows.
    c.remove_unit("ns/running");
    let out = c.run_cycle();
    assert_eq!(released(&out)[0], "ns/large");
    assert!(released(&out).contains(&"ns/small-2"));
}

#[test]
fn a_unit_above_the_priority_reserves_at_once_and_units_not_competing_pass() {
    let mut c = core(Reserve {
        after_ms: None,
        above_priority: Some(100),
    });
    c.upsert_unit(&unit("ns", "running", "q", 8).created_at(0))
        .unwrap();
    c.run_cycle();
    c.upsert_unit(&unit("ns", "hero", "q", 4).with_priority(100).created_at(1))
        .unwrap();
    c.upsert_unit(&unit("ns", "small", "q", 1).created_at(2))
        .unwrap();
    // A unit needing no cpu does not compete for what hero reserves.
    c.upsert_unit(
        &crate::UnitDef::new("ns", "memory-only")
            .with_quota("q")
            .requesting("memory", 1 << 20)
            .created_at(3),
    )
    .unwrap();
    let out = c.run_cycle();
    assert_eq!(released(&out), ["ns/memory-only"]);
    assert!(reason_text(&c, "ns/small").starts_with("waiting behind ns/hero"));
}

#[test]
fn without_a_reserve_setting_smaller_units_always_pass() {
    let mut c = core(Reserve::default());
    c.upsert_unit(&unit("ns", "running", "q", 8).created_at(0))
        .unwrap();
    c.run_cycle();
    c.upsert_unit(&unit("ns", "large", "q", 4).created_at(1))
        .unwrap();
    c.set_now(10_000_000);
    c.upsert_unit(&unit("ns", "small", "q", 1).created_at(2))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/small"]);
}

#[test]
fn a_newer_unit_ahead_that_does_not_reserve_yet_leaves_the_reservation_in_place() {
    let mut c = core(Reserve {
        after_ms: Some(60_000),
        above_priority: None,
    });
    for name in ["running-a", "running-b"] {
        c.upsert_unit(&unit("ns", name, "q", 4).created_at(0))
            .unwrap();
    }
    c.run_cycle();
    c.upsert_unit(&unit("ns", "large", "q", 4).created_at(30_000))
        .unwrap();
    c.set_now(90_000);
    assert!(c.run_cycle().decisions.is_empty());
    assert!(reason_text(&c, "ns/large").starts_with("reserving: "));
    // Higher-priority units come ahead of it: one that fits, one that does
    // not and has not waited long enough to reserve. The latter must not
    // take the reservation away from the unit that does reserve.
    for (name, cpu, at) in [("first", 3, 90_000), ("urgent", 6, 90_001)] {
        c.upsert_unit(&unit("ns", name, "q", cpu).with_priority(10).created_at(at))
            .unwrap();
    }
    c.upsert_unit(&unit("ns", "small", "q", 1).created_at(90_002))
        .unwrap();
    // Room for large frees, and the unit ahead of it takes part of it.
    c.remove_unit("ns/running-b");
    let out = c.run_cycle();
    assert_eq!(released(&out), ["ns/first"]);
    assert!(
        reason_text(&c, "ns/small").starts_with("waiting behind ns/large"),
        "{}",
        reason_text(&c, "ns/small")
    );
    assert!(reason_text(&c, "ns/large").starts_with("reserving: "));
}

#[test]
fn a_unit_that_ends_before_the_head_can_start_is_backfilled() {
    let mut c = core(Reserve {
        after_ms: None,
        above_priority: Some(100),
    });
    // 8 of 10 cpu run for at most 60 s (released at t = 100 s): the head,
    // needing 4, can start by t = 160 s.
    c.upsert_unit(&unit("ns", "running", "q", 8).running_at_most(60_000))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(&unit("ns", "hero", "q", 4).with_priority(100).created_at(1))
        .unwrap();
    // Ends by t = 130 s: backfilled. Ends by t = 220 s, or unbounded: held back.
    c.upsert_unit(
        &unit("ns", "short", "q", 1)
            .running_at_most(30_000)
            .created_at(2),
    )
    .unwrap();
    c.upsert_unit(
        &unit("ns", "long", "q", 1)
            .running_at_most(120_000)
            .created_at(3),
    )
    .unwrap();
    c.upsert_unit(&unit("ns", "unbounded", "q", 1).created_at(4))
        .unwrap();
    let out = c.run_cycle();
    assert_eq!(
        released(&out),
        ["ns/short"],
        "short: {}; hero: {}",
        reason_text(&c, "ns/short"),
        reason_text(&c, "ns/hero")
    );
    for held in ["ns/long", "ns/unbounded"] {
        assert!(
            reason_text(&c, held).starts_with("waiting behind ns/hero"),
            "{held}: {}",
            reason_text(&c, held)
        );
    }
    // Later cycles compute the same start time: still only what ends by then.
    c.set_now(120_000);
    c.upsert_unit(
        &unit("ns", "short-2", "q", 1)
            .running_at_most(40_000)
            .created_at(5),
    )
    .unwrap();
    c.upsert_unit(
        &unit("ns", "too-long", "q", 1)
            .running_at_most(40_001)
            .created_at(6),
    )
    .unwrap();
    // At t = 120 s: short-2 ends by 160 s exactly, too-long 1 ms after.
    assert_eq!(released(&c.run_cycle()), ["ns/short-2"]);
    assert!(reason_text(&c, "ns/too-long").starts_with("waiting behind ns/hero"));
    c.remove_unit("ns/short");
    c.remove_unit("ns/short-2");
    // The head goes first once its room frees.
    c.remove_unit("ns/running");
    assert_eq!(released(&c.run_cycle())[0], "ns/hero");
}

#[test]
fn nothing_is_backfilled_while_what_the_head_needs_is_held_by_unbounded_runs() {
    let mut c = core(Reserve {
        after_ms: None,
        above_priority: Some(100),
    });
    c.upsert_unit(&unit("ns", "running", "q", 8)).unwrap();
    c.run_cycle();
    c.upsert_unit(&unit("ns", "hero", "q", 4).with_priority(100).created_at(1))
        .unwrap();
    c.upsert_unit(
        &unit("ns", "short", "q", 1)
            .running_at_most(1_000)
            .created_at(2),
    )
    .unwrap();
    assert!(released(&c.run_cycle()).is_empty());
    assert!(reason_text(&c, "ns/short").starts_with("waiting behind ns/hero"));
}
