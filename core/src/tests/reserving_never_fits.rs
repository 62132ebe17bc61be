//! A reserving head that can never fit (architecture §4.3, `reserve/`): it
//! asks for more than its quota's max, an ancestor's max or the capacity
//! holds even with nothing else running. It does not reserve and holds no
//! one back — in its queue nor, across, in its siblings' — and its reason
//! says which limit, by how much, and that it waits until that limit is
//! raised. Nothing is sticky: raised, it reserves like any other head;
//! lowered under a head that reserves, the head lets go.
//!
//! Each test runs the same steps for the three limits (the table `CASES`).

use koord_queue_model::{QueuePolicy, Reserve};

use super::{cpu_capacity, quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef, WaitReason};

/// The limit that stops the head for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Limit {
    /// Its own quota's max (`a`).
    OwnMax,
    /// Its parent's max (`p`), shared with the sibling `b`.
    ParentMax,
    /// The cluster's capacity.
    Capacity,
}

/// One row: the limit, and how the head's reason names it.
struct Case {
    limit: Limit,
    /// The start of the head's reason (with 8 of 10 cpu used there).
    says: &'static str,
    /// How it ends: by how much it is too large and what must change.
    tail: &'static str,
    /// The head's reason once it reserves (10 cpu of 14 used there).
    reserving: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        limit: Limit::OwnMax,
        says: "quota a: cpu 8/10 used, needs 12",
        tail: "(2 more than the max of quota a even with nothing else running: it can never fit until that max is raised)",
        reserving: "reserving: quota a: cpu 9/14 used, needs 12",
    },
    Case {
        limit: Limit::ParentMax,
        says: "quota p: cpu 8/10 used, needs 12",
        tail: "(2 more than the max of quota p even with nothing else running: it can never fit until that max is raised)",
        reserving: "reserving: quota p: cpu 10/14 used, needs 12",
    },
    Case {
        limit: Limit::Capacity,
        says: "cluster capacity: cpu 8/10 used, needs 12",
        tail: "(2 more than the cluster's capacity even with nothing else running: it can never fit until the capacity grows)",
        reserving: "reserving: cluster capacity: cpu 10/14 used, needs 12",
    },
];

/// Parent `p` over leaves `a` and `b`, whose queues reserve at once from
/// priority 100. The case's limit is 10 cpu (or `at` cpu), the others
/// roomy: `a`'s max, `p`'s max or the capacity.
fn tree(limit: Limit, at: i64) -> Core {
    let cap = if limit == Limit::Capacity { at } else { 1000 };
    let mut c = quota_core(cap);
    set_limit(&mut c, limit, at);
    for q in ["a", "b"] {
        c.upsert_queue(
            &QueueDef::new(q)
                .with_policy(QueuePolicy::Priority)
                .with_reserve(Reserve {
                    after_ms: None,
                    above_priority: Some(100),
                }),
        );
    }
    let b = QuotaDef::new("b").under("p").max("cpu", 100_000);
    c.upsert_quota(&b).unwrap();
    c.set_now(100_000);
    c
}

/// Sets the case's limit to `cores` (the others stay roomy).
fn set_limit(c: &mut Core, limit: Limit, cores: i64) {
    let (p, a) = match limit {
        Limit::OwnMax => (100, cores),
        Limit::ParentMax => (cores, 100),
        Limit::Capacity => (100, 100),
    };
    c.upsert_quota(&QuotaDef::new("p").parent_node().max("cpu", p * 1000))
        .unwrap();
    c.upsert_quota(&QuotaDef::new("a").under("p").max("cpu", a * 1000))
        .unwrap();
    if limit == Limit::Capacity {
        c.set_capacity(&cpu_capacity(cores));
    }
}

fn sorted(mut keys: Vec<&str>) -> Vec<&str> {
    keys.sort_unstable();
    keys
}

/// 8 cpu run in `a`; `a`'s head asks for 12 under a limit of `at` (10:
/// more than the limit). Behind it a small unit of its queue and one of the
/// sibling queue `b`.
fn huge_waits(case: &Case, at: i64) -> Core {
    let mut c = tree(case.limit, at);
    c.upsert_unit(&unit("ns", "running", "a", 8).created_at(0))
        .unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/running"]);
    c.upsert_unit(
        &unit("ns", "huge", "a", 12)
            .with_priority(100)
            .created_at(10_000),
    )
    .unwrap();
    c.upsert_unit(&unit("ns", "small-a", "a", 1).created_at(20_000))
        .unwrap();
    c.upsert_unit(&unit("ns", "small-b", "b", 1).created_at(21_000))
        .unwrap();
    c
}

#[test]
fn a_head_that_can_never_fit_does_not_reserve_and_holds_no_one_back() {
    for case in &CASES {
        let mut c = huge_waits(case, 10);
        // Both small units fit (9 of 10 in a; 10 of 10 under p and the
        // capacity): neither waits behind a head that can never start.
        let out = c.run_cycle();
        assert_eq!(
            sorted(released(&out)),
            ["ns/small-a", "ns/small-b"],
            "{:?}: huge: {}",
            case.limit,
            reason_text(&c, "ns/huge")
        );
        // Its reason is the limit's (QuotaExceeded / ClusterCapacity in the
        // visibility API), saying it can never fit until it is raised.
        let reason = c.reason("ns/huge").unwrap();
        match case.limit {
            Limit::Capacity => assert!(matches!(reason, WaitReason::Capacity { .. }), "{reason:?}"),
            _ => assert!(matches!(reason, WaitReason::QuotaMax { .. }), "{reason:?}"),
        }
        assert_eq!(
            reason.to_string(),
            format!("{} {}", case.says, case.tail),
            "{:?}",
            case.limit
        );
        assert_eq!(reason.shortfall().map(|s| s.beyond_limit()), Some(2_000));
        // Later cycles, and later units, are not held back either.
        c.upsert_unit(&unit("ns", "small-a2", "a", 1).created_at(30_000))
            .unwrap();
        c.remove_unit("ns/small-b");
        assert_eq!(
            released(&c.run_cycle()),
            ["ns/small-a2"],
            "{:?}",
            case.limit
        );
        assert!(
            reason_text(&c, "ns/huge").ends_with(case.tail),
            "{:?}: {}",
            case.limit,
            reason_text(&c, "ns/huge")
        );
        // The controller is not asked for a cycle for a reservation either.
        assert_eq!(c.next_reservation_due(), None);
    }
}

#[test]
fn once_the_limit_is_raised_it_reserves_again() {
    for case in &CASES {
        let mut c = huge_waits(case, 10);
        assert_eq!(sorted(released(&c.run_cycle())).len(), 2);
        // Raised to 14: it fits alone, not now (9 or 10 used + 12): it
        // reserves at once (priority 100), though nothing else changed in
        // its queue.
        set_limit(&mut c, case.limit, 14);
        assert!(c.run_cycle().decisions.is_empty(), "{:?}", case.limit);
        let reason = reason_text(&c, "ns/huge");
        assert!(
            reason.starts_with(case.reserving),
            "{:?}: {reason}",
            case.limit
        );
        // And holds back what competes: its own queue's units, and under
        // an ancestor's max or the capacity its siblings' as well.
        c.upsert_unit(&unit("ns", "small-a2", "a", 1).created_at(30_000))
            .unwrap();
        c.upsert_unit(&unit("ns", "small-b2", "b", 1).created_at(31_000))
            .unwrap();
        let out = c.run_cycle();
        let across = case.limit != Limit::OwnMax;
        let expected: &[&str] = if across { &[] } else { &["ns/small-b2"] };
        assert_eq!(released(&out), expected, "{:?}", case.limit);
        assert!(
            reason_text(&c, "ns/small-a2")
                .starts_with("waiting behind ns/huge, which reserves cpu"),
            "{:?}: {}",
            case.limit,
            reason_text(&c, "ns/small-a2")
        );
        if across {
            assert!(
                reason_text(&c, "ns/small-b2").starts_with("waiting behind ns/huge of queue a"),
                "{:?}: {}",
                case.limit,
                reason_text(&c, "ns/small-b2")
            );
        }
        // Once its room frees it goes first.
        for key in ["ns/running", "ns/small-a", "ns/small-b"] {
            c.remove_unit(key);
        }
        let out = c.run_cycle();
        assert_eq!(released(&out).first(), Some(&"ns/huge"), "{:?}", case.limit);
    }
}

#[test]
fn a_limit_lowered_under_a_reserving_head_lets_those_it_held_back_go() {
    for case in &CASES {
        let mut c = huge_waits(case, 14);
        let out = c.run_cycle();
        let across = case.limit != Limit::OwnMax;
        let expected: &[&str] = if across { &[] } else { &["ns/small-b"] };
        assert_eq!(released(&out), expected, "{:?}", case.limit);
        assert!(reason_text(&c, "ns/huge").starts_with("reserving: "));
        // Lowered to 10: it can never fit now. The reservation goes at the
        // next cycle, and what it held back with it.
        set_limit(&mut c, case.limit, 10);
        let out = c.run_cycle();
        let expected: &[&str] = if across {
            &["ns/small-a", "ns/small-b"]
        } else {
            &["ns/small-a"]
        };
        assert_eq!(sorted(released(&out)), expected, "{:?}", case.limit);
        let reason = reason_text(&c, "ns/huge");
        assert!(
            reason.starts_with(case.says.split(':').next().unwrap()) && reason.ends_with(case.tail),
            "{:?}: {reason}",
            case.limit
        );
    }
}

#[test]
fn a_head_that_can_never_fit_lets_the_next_unit_reserve() {
    // Own max 10, 8 used: huge (12) can never fit; large (4) behind it
    // waits for room and reserves; small behind both waits behind large.
    let mut c = tree(Limit::OwnMax, 10);
    c.upsert_unit(&unit("ns", "running", "a", 8).created_at(0))
        .unwrap();
    c.run_cycle();
    c.upsert_unit(
        &unit("ns", "huge", "a", 12)
            .with_priority(100)
            .created_at(10_000),
    )
    .unwrap();
    c.upsert_unit(
        &unit("ns", "large", "a", 4)
            .with_priority(100)
            .created_at(11_000),
    )
    .unwrap();
    c.upsert_unit(&unit("ns", "small", "a", 1).created_at(12_000))
        .unwrap();
    assert!(c.run_cycle().decisions.is_empty());
    assert!(reason_text(&c, "ns/large").starts_with("reserving: quota a: cpu 8/10 used, needs 4"));
    assert!(reason_text(&c, "ns/small").starts_with("waiting behind ns/large"));
    assert!(reason_text(&c, "ns/huge").contains("it can never fit"));
    c.remove_unit("ns/running");
    assert_eq!(released(&c.run_cycle()), ["ns/large", "ns/small"]);
}

#[test]
fn a_limit_lowered_before_the_head_reserves_keeps_it_from_reserving() {
    for case in &CASES {
        let mut c = tree(case.limit, 14);
        // `a` reserves 60 s after a unit's creation (priority 0 here).
        c.upsert_queue(
            &QueueDef::new("a")
                .with_policy(QueuePolicy::Priority)
                .with_reserve(Reserve {
                    after_ms: Some(60_000),
                    above_priority: None,
                }),
        );
        c.upsert_unit(&unit("ns", "running", "a", 8).created_at(0))
            .unwrap();
        assert_eq!(released(&c.run_cycle()), ["ns/running"]);
        c.upsert_unit(&unit("ns", "huge", "a", 12).created_at(100_000))
            .unwrap();
        assert!(c.run_cycle().decisions.is_empty());
        assert_eq!(c.next_reservation_due(), Some(160_000), "{:?}", case.limit);
        // Lowered to 10 before its time comes: it will not reserve, and
        // its reason is no longer the one of a unit that only waits for
        // room.
        set_limit(&mut c, case.limit, 10);
        c.set_now(120_000);
        assert!(c.run_cycle().decisions.is_empty());
        let reason = reason_text(&c, "ns/huge");
        assert!(reason.ends_with(case.tail), "{:?}: {reason}", case.limit);
        assert_eq!(c.next_reservation_due(), None, "{:?}", case.limit);
        // Its time comes: what is behind it passes.
        c.set_now(170_000);
        c.upsert_unit(&unit("ns", "small", "a", 1).created_at(165_000))
            .unwrap();
        assert_eq!(released(&c.run_cycle()), ["ns/small"], "{:?}", case.limit);
        assert!(reason_text(&c, "ns/huge").ends_with(case.tail));
    }
}
