//! A reservation that holds where the room is short (issue 44): a head
//! stopped by its parent's max (or the capacity) holds back the borrowing
//! units of its sibling queues, except backfill, guaranteed units and units
//! senior to it; the reason names the head; two heads never hold each other.

use koord_queue_model::{QueuePolicy, Reserve};

use super::{quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef};

/// Parent `p` (max `parent` cpu) over leaves `a`, `b`, `c` (each min
/// `min`, max `parent`), each queue `Priority` and reserving at once from
/// priority 100.
fn tree(parent: i64, min: i64) -> Core {
    let mut core = quota_core(1000);
    core.upsert_quota(
        &QuotaDef::new("p")
            .parent_node()
            .min("cpu", parent * 1000)
            .max("cpu", parent * 1000),
    )
    .unwrap();
    for q in ["a", "b", "c"] {
        core.upsert_queue(
            &QueueDef::new(q)
                .with_policy(QueuePolicy::Priority)
                .with_reserve(Reserve {
                    after_ms: None,
                    above_priority: Some(100),
                }),
        );
        core.upsert_quota(
            &QuotaDef::new(q)
                .under("p")
                .min("cpu", min * 1000)
                .max("cpu", parent * 1000),
        )
        .unwrap();
    }
    core.set_now(100_000);
    core
}

/// `b` runs 8 of the parent's 10 cpu; `a`'s large unit (4, priority 100)
/// does not fit under the parent and reserves.
fn large_waits() -> Core {
    let mut c = tree(10, 0);
    c.upsert_unit(&unit("ns", "running", "b", 8).created_at(0))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(
        &unit("ns", "large", "a", 4)
            .with_priority(100)
            .created_at(10_000),
    )
    .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    c
}

#[test]
fn a_siblings_small_unit_waits_behind_a_head_stopped_by_the_parent() {
    let mut c = large_waits();
    assert!(
        reason_text(&c, "ns/large").starts_with("reserving: quota p: cpu 8/10 used, needs 4"),
        "{}",
        reason_text(&c, "ns/large")
    );
    // c's small unit would fit (9 of 10) but would take what large waits for.
    c.upsert_unit(&unit("ns", "small", "c", 1).created_at(20_000))
        .unwrap();
    let out = c.run_cycle();
    assert!(out.decisions.is_empty(), "{:?}", released(&out));
    let reason = reason_text(&c, "ns/small");
    assert!(
        reason.starts_with("waiting behind ns/large of queue a, which reserves cpu under quota p"),
        "{reason}"
    );
    // The room is kept: once the running unit ends, large goes first,
    // then small.
    c.remove_unit("ns/running");
    assert_eq!(released(&c.run_cycle()), ["ns/large", "ns/small"]);
}

#[test]
fn a_unit_that_does_not_compete_passes() {
    let mut c = large_waits();
    c.upsert_unit(
        &crate::UnitDef::new("ns", "gpu-only")
            .with_quota("c")
            .requesting("nvidia.com/gpu", 1),
    )
    .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/gpu-only"]);
}

#[test]
fn a_unit_within_its_min_passes_the_guarantee_stands() {
    let mut c = tree(10, 0);
    give_c_a_min(&mut c, 2);
    c.upsert_unit(&unit("ns", "running", "b", 7).created_at(0))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(
        &unit("ns", "large", "a", 4)
            .with_priority(100)
            .created_at(10_000),
    )
    .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    // c's unit is within c's min of 2: a reservation never holds it back.
    c.upsert_unit(&unit("ns", "guaranteed", "c", 2).created_at(20_000))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/guaranteed"]);
}

#[test]
fn a_unit_senior_to_the_head_passes_and_two_heads_never_hold_each_other() {
    let mut c = large_waits();
    // Higher priority than the head: not held back (it would reserve
    // itself, and be served first).
    c.upsert_unit(
        &unit("ns", "urgent", "c", 1)
            .with_priority(200)
            .created_at(30_000),
    )
    .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/urgent"]);
    // A second large head in c, same priority, created later: it waits
    // behind a's head and does not reserve against it.
    c.upsert_unit(
        &unit("ns", "large-c", "c", 4)
            .with_priority(100)
            .created_at(40_000),
    )
    .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    assert!(
        reason_text(&c, "ns/large-c").starts_with("waiting behind ns/large of queue a"),
        "{}",
        reason_text(&c, "ns/large-c")
    );
    // Room for one: the senior head first; then the other reserves in turn.
    c.remove_unit("ns/running");
    assert_eq!(released(&c.run_cycle()), ["ns/large", "ns/large-c"]);
}

#[test]
fn a_bounded_unit_that_ends_before_the_head_can_start_is_backfilled() {
    let mut c = tree(10, 0);
    c.upsert_unit(
        &unit("ns", "running", "b", 8)
            .created_at(0)
            .running_at_most(60_000),
    )
    .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(
        &unit("ns", "large", "a", 4)
            .with_priority(100)
            .created_at(10_000),
    )
    .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    // The head can start by 160 s (running's release at 100 s + 60 s).
    c.upsert_unit(
        &unit("ns", "short", "c", 1)
            .created_at(20_000)
            .running_at_most(30_000),
    )
    .unwrap();
    c.upsert_unit(
        &unit("ns", "long", "c", 1)
            .created_at(21_000)
            .running_at_most(600_000),
    )
    .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/short"]);
    assert!(reason_text(&c, "ns/long").starts_with("waiting behind ns/large"));
}

#[test]
fn the_held_queue_is_served_when_the_head_leaves() {
    let mut c = large_waits();
    c.upsert_unit(&unit("ns", "small", "c", 1).created_at(20_000))
        .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    // The head is deleted: what it held back goes at once.
    c.remove_unit("ns/large");
    assert_eq!(released(&c.run_cycle()), ["ns/small"]);
}

#[test]
fn a_head_short_of_the_capacity_holds_every_queue() {
    // Two top-level quotas; the capacity (10) is what stops the head.
    let mut c = quota_core(10);
    for q in ["x", "y"] {
        c.upsert_queue(
            &QueueDef::new(q)
                .with_policy(QueuePolicy::Priority)
                .with_reserve(Reserve {
                    after_ms: None,
                    above_priority: Some(100),
                }),
        );
        c.upsert_quota(&QuotaDef::new(q).max("cpu", 100_000))
            .unwrap();
    }
    c.set_now(100_000);
    c.upsert_unit(&unit("ns", "running", "y", 8).created_at(0))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(
        &unit("ns", "large", "x", 4)
            .with_priority(100)
            .created_at(10_000),
    )
    .unwrap();
    c.upsert_unit(&unit("ns", "small", "y", 1).created_at(20_000))
        .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    let reason = reason_text(&c, "ns/small");
    assert!(
        reason.starts_with(
            "waiting behind ns/large of queue x, which reserves cpu of the cluster's capacity"
        ),
        "{reason}"
    );
}

/// Leaves `a`, `b` (min 3) and `c` (min 4) fill parent `p` (10): `a`'s
/// large head (4, priority 100; its run bounded or not) reserved and was
/// released, borrowing 1 beyond `a`'s min; `b` and `c` hold 3 each. Then
/// `c`'s guaranteed unit of 1 (within `c`'s min) finds the parent full,
/// and the head is the only unit that borrows: what the cycle reclaims.
fn guaranteed_unit_after_a_released_head(bounded: bool) -> Vec<String> {
    let mut c = tree(10, 3);
    give_c_a_min(&mut c, 4);
    c.upsert_unit(&unit("ns", "running", "b", 8).created_at(0))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    let large = unit("ns", "large", "a", 4)
        .with_priority(100)
        .created_at(10_000);
    let large = if bounded {
        large.running_at_most(5_000)
    } else {
        large
    };
    c.upsert_unit(&large).unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    assert!(reason_text(&c, "ns/large").starts_with("reserving:"));
    c.remove_unit("ns/running");
    assert_eq!(released(&c.run_cycle()), ["ns/large"]);
    assert_eq!(fill_b_and_c(&mut c), ["ns/b-held", "ns/c-held"]);
    guaranteed_victims(&mut c)
}

#[test]
fn a_released_head_with_a_run_bound_is_not_reclaimed_for_a_unit_of_lower_priority() {
    // Bounded: the head keeps its room; the guaranteed unit waits at most
    // the head's bound.
    assert!(guaranteed_unit_after_a_released_head(true).is_empty());
    // Unbounded: the min stays a guarantee, the head is taken back when
    // nothing else makes room.
    assert_eq!(guaranteed_unit_after_a_released_head(false), ["ns/large"]);
}

/// `a`'s unit (4, `priority`, its run bounded by `bound_ms` or not) released at once,
/// borrowing 1 beyond `a`'s min of 3; `b` and `c` (min 4) hold 3 each; then
/// `c`'s guaranteed unit of 1 (priority 0) finds the parent full: the
/// victims of the cycle.
fn guaranteed_unit_after_a_borrower(priority: i32, bound_ms: Option<i64>) -> Vec<String> {
    let mut c = tree(10, 3);
    give_c_a_min(&mut c, 4);
    let borrower = unit("ns", "borrower", "a", 4).with_priority(priority);
    let borrower = match bound_ms {
        Some(ms) => borrower.running_at_most(ms),
        None => borrower,
    };
    c.upsert_unit(&borrower).unwrap();
    let mut released = fill_b_and_c(&mut c);
    released.sort();
    assert_eq!(released, ["ns/b-held", "ns/borrower", "ns/c-held"]);
    guaranteed_victims(&mut c)
}

#[test]
fn a_bounded_unit_of_higher_priority_ending_soon_is_spared_for_a_guaranteed_one() {
    assert!(guaranteed_unit_after_a_borrower(100, Some(5_000)).is_empty());
    // Unbounded, bounded beyond what a min waits for, or not senior: the
    // min is a guarantee.
    for (priority, bound) in [(100, None), (100, Some(3_600_000)), (0, Some(5_000))] {
        assert_eq!(
            guaranteed_unit_after_a_borrower(priority, bound),
            ["ns/borrower"],
            "priority {priority}, bound {bound:?}"
        );
    }
}

/// Sets `c`'s min to `cpu` (its max stays the parent's 10).
fn give_c_a_min(c: &mut Core, cpu: i64) {
    c.upsert_quota(
        &QuotaDef::new("c")
            .under("p")
            .min("cpu", cpu * 1000)
            .max("cpu", 10_000),
    )
    .unwrap();
}

/// `b` and `c` each take 3 within their min: what the cycle released.
fn fill_b_and_c(c: &mut Core) -> Vec<String> {
    for (name, quota) in [("b-held", "b"), ("c-held", "c")] {
        c.upsert_unit(&unit("ns", name, quota, 3).created_at(20_000))
            .unwrap();
    }
    let out = c.run_cycle();
    released(&out).into_iter().map(str::to_string).collect()
}

/// `c`'s guaranteed unit of 1 (priority 0, within `c`'s min) arrives at a
/// full parent: it is not released, and the cycle's victims are returned.
fn guaranteed_victims(c: &mut Core) -> Vec<String> {
    c.upsert_unit(&unit("ns", "guaranteed", "c", 1).created_at(30_000))
        .unwrap();
    let out = c.run_cycle();
    assert!(out.decisions.is_empty(), "{:?}", released(&out));
    out.reclaims.iter().map(|r| r.victim.to_string()).collect()
}
