//! Reclaim of borrowed quota (architecture §4.4, rule 3): the worked example step
//! by step, victim order and eligibility, the controller's calls (freed,
//! cancelled), reclaim switched off, the pause of borrowing, a 3-level tree.

use koord_queue_model::QueuePolicy;

use super::{cpu, leaf, quota_core, reason_text, released, unit};
use crate::{Core, CycleOutput, QueueDef, QuotaDef, UnitDef, WaitReason};

/// Keys of the reclaimed units of a cycle, with the unit each is for.
fn reclaimed(out: &CycleOutput) -> Vec<(&str, &str)> {
    out.reclaims
        .iter()
        .map(|r| (&*r.victim, &*r.for_unit))
        .collect()
}

/// The worked example's cluster: capacity 10, team-a min 4 max 10, team-b min 6 max 10.
fn worked_example() -> Core {
    let mut core = quota_core(10);
    leaf(
        &mut core,
        QuotaDef::new("team-a").min("cpu", 4_000).max("cpu", 10_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("team-b").min("cpu", 6_000).max("cpu", 10_000),
        QueuePolicy::Priority,
    );
    core
}

fn used(core: &Core, quota: &str) -> i64 {
    core.quota_figures(quota).unwrap().used.get("cpu") / 1000
}

#[test]
fn the_worked_example_step_by_step() {
    let mut core = worked_example();
    // A submits three 3-cpu jobs: all are released (A borrows 5 beyond its min).
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-a", 3).created_at(i as i64))
            .unwrap();
    }
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a1", "ns/a2", "ns/a3"]);
    assert!(out.reclaims.is_empty());
    assert_eq!(used(&core, "team-a"), 9);

    // B submits a 4-cpu job: guaranteed; 9 + 4 > 10, so A's most recently
    // released job is reclaimed.
    core.upsert_unit(&unit("ns", "b1", "team-b", 4).created_at(10))
        .unwrap();
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert_eq!(reclaimed(&out), [("ns/a3", "ns/b1")]);
    let r = &out.reclaims[0];
    assert_eq!(r.resources, cpu(3));
    assert_eq!(
        (r.quota.as_deref(), &*r.for_quota),
        (Some("team-a"), "team-b")
    );
    assert_eq!(
        r.message(),
        "reclaimed: quota team-a uses more than its min, and ns/b1 needs the resources within the guaranteed min of quota team-b"
    );
    assert!(core.is_being_reclaimed("ns/a3"));
    // Until the controller reports it freed, a3 still counts.
    assert_eq!(used(&core, "team-a"), 9);
    assert_eq!(
        reason_text(&core, "ns/b1"),
        "cluster capacity: cpu 9/10 used, needs 4 (within its guaranteed min; waiting for 1 reclaimed unit to free cpu)"
    );
    // Nothing more happens until then, and a3 is not reported again.
    let out = core.run_cycle();
    assert!(out.decisions.is_empty() && out.reclaims.is_empty());
    // The controller re-suspended a3's job (TimeoutBackoff): it removes it.
    assert!(core.remove_unit("ns/a3"));
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/b1"]);
    assert!(out.decisions[0].guaranteed);
    assert_eq!((used(&core, "team-a"), used(&core, "team-b")), (6, 4));

    // B submits a 2-cpu job: B reaches its min; A's next most recent job is
    // reclaimed (A at 3, below its min, borrowing nothing).
    core.upsert_unit(&unit("ns", "b2", "team-b", 2).created_at(11))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a2", "ns/b2")]);
    assert!(core.remove_unit("ns/a2"));
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/b2"]);
    assert_eq!(
        (
            used(&core, "team-a"),
            used(&core, "team-b"),
            core.cluster_used().get("cpu")
        ),
        (3, 6, 9_000)
    );

    // A submits a 1-cpu job: within A's min (3 + 1 <= 4), fits: released.
    core.upsert_unit(&unit("ns", "a4", "team-a", 1).created_at(12))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a4"]);
    assert!(out.decisions[0].guaranteed);
    assert!(out.reclaims.is_empty());

    // A submits another 3-cpu job: borrowing, no idle capacity: it waits and
    // nothing is reclaimed for it.
    core.upsert_unit(&unit("ns", "a5", "team-a", 3).created_at(13))
        .unwrap();
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert!(out.reclaims.is_empty());
    assert_eq!(
        reason_text(&core, "ns/a5"),
        "cluster capacity: cpu 10/10 used, needs 3"
    );
    assert!(core.reclaims_in_flight().next().is_none());
}

/// Capacity 10; `team-a` (min 4) holds the given (name, cpu, priority)
/// units, each released in a cycle of its own (in this order); `team-b`
/// (min 6) is empty.
fn a_holds(units: &[(&str, i64, i32)]) -> Core {
    let mut core = worked_example();
    for (i, (name, cpus, prio)) in units.iter().enumerate() {
        core.upsert_unit(
            &unit("ns", name, "team-a", *cpus)
                .with_priority(*prio)
                .created_at(i as i64),
        )
        .unwrap();
        assert_eq!(released(&core.run_cycle()), [format!("ns/{name}")]);
    }
    core
}

#[test]
fn victims_are_taken_lowest_priority_first_then_most_recent() {
    let mut core = a_holds(&[
        ("low-old", 2, 0),
        ("high-new", 2, 5),
        ("low-new", 2, 0),
        ("mid", 2, 1),
        ("low-newest-high", 2, 3),
    ]);
    // 10/10 used; team-a (min 4) borrows 6. b1 needs 4: two victims.
    core.upsert_unit(&unit("ns", "b1", "team-b", 4).created_at(10))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(
        reclaimed(&out),
        [("ns/low-new", "ns/b1"), ("ns/low-old", "ns/b1")]
    );
    assert_eq!(
        reason_text(&core, "ns/b1"),
        "cluster capacity: cpu 10/10 used, needs 4 (within its guaranteed min; waiting for 2 reclaimed units to free cpu)"
    );
    // One freed: still waiting, for 1.
    core.remove_unit("ns/low-new");
    let out = core.run_cycle();
    assert!(out.decisions.is_empty() && out.reclaims.is_empty());
    assert_eq!(
        reason_text(&core, "ns/b1"),
        "cluster capacity: cpu 8/10 used, needs 4 (within its guaranteed min; waiting for 1 reclaimed unit to free cpu)"
    );
    assert!(core.is_being_reclaimed("ns/low-old"));
    assert!(!core.is_being_reclaimed("ns/mid"));
    core.remove_unit("ns/low-old");
    assert_eq!(released(&core.run_cycle()), ["ns/b1"]);
}

#[test]
fn a_victim_is_taken_only_while_its_quota_is_above_its_min() {
    // team-a (min 4) holds 6 in three 2-cpu units of priority 0; team-c
    // (min 0) holds one 1-cpu unit of priority 5. Capacity 10, 7 used.
    let mut core = a_holds(&[("a1", 2, 0), ("a2", 2, 0), ("a3", 2, 0)]);
    // team-c has no min but a max: it governs cpu, all it holds is borrowed.
    leaf(
        &mut core,
        QuotaDef::new("team-c").max("cpu", 10_000),
        QueuePolicy::Priority,
    );
    core.upsert_unit(&unit("ns", "c1", "team-c", 1).with_priority(5))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/c1"]);
    // b1 needs 6 within team-b's min: 3 missing. a3 first (team-a 6 > 4);
    // then team-a is at its min (4): a1 and a2 are not taken although they
    // come before c1 in victim order; c1 is (team-c 1 > 0).
    core.upsert_unit(&unit("ns", "b1", "team-b", 6)).unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a3", "ns/b1"), ("ns/c1", "ns/b1")]);
    core.remove_unit("ns/a3");
    core.remove_unit("ns/c1");
    assert_eq!(released(&core.run_cycle()), ["ns/b1"]);
    assert_eq!(used(&core, "team-a"), 4);
}

#[test]
fn a_borrowing_unit_never_triggers_reclaim() {
    let mut core = a_holds(&[("a1", 3, 0), ("a2", 3, 0), ("a3", 3, 0)]);
    core.upsert_unit(&unit("ns", "b1", "team-b", 4)).unwrap();
    assert_eq!(reclaimed(&core.run_cycle()), [("ns/a3", "ns/b1")]);
    core.remove_unit("ns/a3");
    assert_eq!(released(&core.run_cycle()), ["ns/b1"]);
    // team-b at 4: 3 more would take it beyond its min (6).
    core.upsert_unit(&unit("ns", "b2", "team-b", 3).created_at(1))
        .unwrap();
    let out = core.run_cycle();
    assert!(out.reclaims.is_empty() && out.decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/b2"),
        "cluster capacity: cpu 10/10 used, needs 3"
    );
}

#[test]
fn nothing_is_reclaimed_when_it_would_not_make_the_unit_fit() {
    // p (min 10, but max 6) ─┬─ x (min 5)
    //                        └─ y (min 5)
    let mut core = quota_core(100);
    core.upsert_quota(
        &QuotaDef::new("p")
            .parent_node()
            .min("cpu", 10_000)
            .max("cpu", 6_000),
    )
    .unwrap();
    for q in ["x", "y"] {
        leaf(
            &mut core,
            QuotaDef::new(q).under("p").min("cpu", 5_000),
            QueuePolicy::Priority,
        );
    }
    for (i, name) in ["y1", "y2"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "y", 3).created_at(i as i64))
            .unwrap();
        core.run_cycle();
    }
    // y borrows 1 of p's 6; x1 (5, guaranteed in x) misses 5 under p's max:
    // taking y2 would leave y at 3, below its min, before enough is free.
    core.upsert_unit(&unit("ns", "x1", "x", 5)).unwrap();
    let out = core.run_cycle();
    assert!(out.reclaims.is_empty(), "{:?}", out.reclaims);
    assert_eq!(
        reason_text(&core, "ns/x1"),
        "quota p: cpu 6/6 used, needs 5 (within its guaranteed min; other quotas borrow cpu 1 beyond their min)"
    );
    // A smaller guaranteed unit that y's borrowing blocks gets it back.
    core.upsert_unit(&unit("ns", "x2", "x", 1).with_priority(1))
        .unwrap();
    assert_eq!(reclaimed(&core.run_cycle()), [("ns/y2", "ns/x2")]);
}

#[test]
fn a_victim_is_never_picked_twice_and_reclaims_in_flight_are_counted() {
    let mut core = a_holds(&[("a1", 3, 0), ("a2", 3, 0), ("a3", 3, 0), ("a4", 1, 0)]);
    // 10/10. b1 needs 2: a4 (1) is not enough, a3 (3) is taken too. b2
    // needs 1: a4 and a3 free enough for both; nothing more is taken for b2.
    core.upsert_unit(&unit("ns", "b1", "team-b", 2).created_at(1))
        .unwrap();
    core.upsert_unit(&unit("ns", "b2", "team-b", 1).created_at(2))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a4", "ns/b1"), ("ns/a3", "ns/b1")]);
    assert_eq!(
        reason_text(&core, "ns/b2"),
        "cluster capacity: cpu 10/10 used, needs 1 (within its guaranteed min; waiting for units already being reclaimed to free cpu)"
    );
    // b3 needs 3 more (b at 6): a2 is taken for it, not a3 again.
    core.upsert_unit(&unit("ns", "b3", "team-b", 3).created_at(3))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a2", "ns/b3")]);
    let mut flying: Vec<(String, Option<String>)> = core
        .reclaims_in_flight()
        .map(|r| (r.victim.to_string(), r.for_unit.map(str::to_string)))
        .collect();
    flying.sort();
    assert_eq!(
        flying,
        [
            ("ns/a2".to_string(), Some("ns/b3".to_string())),
            ("ns/a3".to_string(), Some("ns/b1".to_string())),
            ("ns/a4".to_string(), Some("ns/b1".to_string()))
        ]
    );
    // Nothing is reported twice.
    assert!(core.run_cycle().reclaims.is_empty());
    for v in ["ns/a4", "ns/a3", "ns/a2"] {
        core.remove_unit(v);
    }
    assert_eq!(released(&core.run_cycle()), ["ns/b1", "ns/b2", "ns/b3"]);
    assert_eq!((used(&core, "team-a"), used(&core, "team-b")), (3, 6));
}

#[test]
fn a_cancelled_reclaim_puts_the_victim_back_and_the_unit_plans_again() {
    let mut core = a_holds(&[("a1", 3, 0), ("a2", 3, 0), ("a3", 3, 0)]);
    core.upsert_unit(&unit("ns", "b1", "team-b", 4)).unwrap();
    assert_eq!(reclaimed(&core.run_cycle()), [("ns/a3", "ns/b1")]);
    // The controller could not re-suspend a3.
    core.cancel_reclaim("ns/a3").unwrap();
    assert!(!core.is_being_reclaimed("ns/a3"));
    assert_eq!(
        core.cancel_reclaim("ns/a3").unwrap_err().to_string(),
        "queue unit ns/a3 is not being reclaimed"
    );
    assert_eq!(
        core.cancel_reclaim("ns/ghost").unwrap_err().to_string(),
        "unknown queue unit ns/ghost"
    );
    assert_eq!(used(&core, "team-a"), 9);
    // b1 tries again in the next cycle: a3 is still first in victim order.
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a3", "ns/b1")]);
    core.remove_unit("ns/a3");
    assert_eq!(released(&core.run_cycle()), ["ns/b1"]);
}

#[test]
fn reclaim_can_be_switched_off_per_queue() {
    let mut core = a_holds(&[("a1", 3, 0), ("a2", 3, 0), ("a3", 3, 0)]);
    core.upsert_queue(&QueueDef::new("team-b").with_reclaim(false));
    core.upsert_unit(&unit("ns", "b1", "team-b", 4)).unwrap();
    let out = core.run_cycle();
    assert!(out.reclaims.is_empty() && out.decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/b1"),
        "cluster capacity: cpu 9/10 used, needs 4 (within its guaranteed min; other quotas borrow cpu 5 beyond their min, but reclaim is off for queue team-b)"
    );
    // Borrowing is not paused for a unit that does not reclaim.
    core.upsert_quota(&QuotaDef::new("team-a").min("cpu", 4_000).max("cpu", 11_000))
        .unwrap();
    core.upsert_unit(&unit("ns", "a4", "team-a", 1).created_at(9))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/a4"]);
    // Switched on: it reclaims (a4, the most recent, and a3).
    core.upsert_queue(&QueueDef::new("team-b"));
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a4", "ns/b1"), ("ns/a3", "ns/b1")]);
}

#[test]
fn borrowing_is_paused_while_a_guaranteed_unit_waits_for_reclaim() {
    let mut core = quota_core(12);
    for (name, min) in [("team-a", 4), ("team-b", 6), ("team-c", 0), ("team-d", 2)] {
        leaf(
            &mut core,
            QuotaDef::new(name)
                .min("cpu", min * 1000)
                .max("cpu", 12_000),
            QueuePolicy::Priority,
        );
    }
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-a", 3).created_at(i as i64))
            .unwrap();
        core.run_cycle();
    }
    core.upsert_unit(&unit("ns", "c1", "team-c", 2)).unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/c1"]);
    // 11/12 used. b1 (5, guaranteed) misses 4: c1 (priority 0, most recent)
    // then a3.
    core.upsert_unit(&unit("ns", "b1", "team-b", 5).created_at(5))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/c1", "ns/b1"), ("ns/a3", "ns/b1")]);
    // 1 cpu is idle, but borrowers anywhere in the cluster must not take
    // it; a guaranteed unit may.
    core.upsert_unit(&unit("ns", "a4", "team-a", 1).created_at(6))
        .unwrap();
    core.upsert_unit(&unit("ns", "c2", "team-c", 1).created_at(6))
        .unwrap();
    core.upsert_unit(&unit("ns", "d1", "team-d", 1).created_at(6))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/d1"]);
    assert_eq!(
        reason_text(&core, "ns/a4"),
        "quota team-a: cpu 6/4 min used, needs 1: borrowing beyond the min is paused while guaranteed units wait for reclaimed cpu in the cluster"
    );
    assert_eq!(
        reason_text(&core, "ns/c2"),
        "quota team-c: cpu 0/0 min used, needs 1: borrowing beyond the min is paused while guaranteed units wait for reclaimed cpu in the cluster"
    );
    // The victims are suspended; c1 waits in line again (not removed).
    core.free("ns/c1").unwrap();
    core.remove_unit("ns/a3");
    let out = core.run_cycle();
    // b1 gets the reclaimed resources; nobody borrows them back.
    assert_eq!(released(&out), ["ns/b1"]);
    assert!(out.reclaims.is_empty());
    assert_eq!(core.cluster_used().get("cpu"), 12_000);
    // The pause is over: the borrowers wait for capacity like anyone.
    assert_eq!(
        reason_text(&core, "ns/a4"),
        "cluster capacity: cpu 12/12 used, needs 1"
    );
    assert_eq!(
        reason_text(&core, "ns/c1"),
        "cluster capacity: cpu 12/12 used, needs 2"
    );
    // ...and take idle capacity again as soon as there is some.
    core.remove_unit("ns/d1");
    assert_eq!(released(&core.run_cycle()), ["ns/a4"]);
}

#[test]
fn the_pause_ends_when_the_waiting_unit_goes_away() {
    let mut core = a_holds(&[("a1", 3, 0), ("a2", 3, 0), ("a3", 3, 0)]);
    core.upsert_quota(&QuotaDef::new("team-a").min("cpu", 4_000).max("cpu", 20_000))
        .unwrap();
    core.upsert_unit(&unit("ns", "b1", "team-b", 4)).unwrap();
    assert_eq!(reclaimed(&core.run_cycle()), [("ns/a3", "ns/b1")]);
    core.upsert_unit(&unit("ns", "a4", "team-a", 1).created_at(9))
        .unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert!(matches!(
        core.reason("ns/a4"),
        Some(WaitReason::BorrowingPaused { .. })
    ));
    // b1 is deleted: a3 is still being reclaimed (for nobody), a4 borrows
    // the idle cpu at once.
    core.remove_unit("ns/b1");
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a4"]);
    let flying: Vec<_> = core.reclaims_in_flight().collect();
    assert_eq!(flying.len(), 1);
    assert_eq!((flying[0].victim, flying[0].for_unit), ("ns/a3", None));
    core.remove_unit("ns/a3");
    assert!(core.reclaims_in_flight().next().is_none());
    assert_eq!(used(&core, "team-a"), 7);
}

#[test]
fn units_released_in_the_same_cycle_are_taken_back_instead_of_reclaimed() {
    let mut core = worked_example();
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-a", 3).created_at(i as i64))
            .unwrap();
    }
    core.upsert_unit(&unit("ns", "b1", "team-b", 4).created_at(9))
        .unwrap();
    // team-a is served first and takes 9; b1 (guaranteed) then takes a3's
    // place before anything is written: no reclaim, no decision for a3.
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a1", "ns/a2", "ns/b1"]);
    assert!(out.reclaims.is_empty());
    assert_eq!(
        reason_text(&core, "ns/a3"),
        "cluster capacity: cpu 10/10 used, needs 3"
    );
    assert!(out.waiting.iter().any(|(k, _)| &**k == "ns/a3"));
    let counts = core.queue_counts("team-a").unwrap();
    assert_eq!((counts.pending, counts.admitted), (1, 2));
    assert_eq!(
        core.queue_waiting("team-a")
            .map(|w| w.key)
            .collect::<Vec<_>>(),
        ["ns/a3"]
    );
    assert_eq!((used(&core, "team-a"), used(&core, "team-b")), (6, 4));
    // The next cycle has nothing to do.
    let out = core.run_cycle();
    assert!(out.decisions.is_empty() && out.reclaims.is_empty());
}

#[test]
fn after_a_restart_the_release_times_give_the_order() {
    let mut core = worked_example();
    // Reported in another order than they were released.
    for (name, ms) in [("a1", 3_000), ("a2", 1_000), ("a3", 2_000)] {
        core.upsert_unit(&unit("ns", name, "team-a", 3)).unwrap();
        core.hold_at(&format!("ns/{name}"), &cpu(3), Some(ms))
            .unwrap();
    }
    core.upsert_unit(&unit("ns", "b1", "team-b", 4)).unwrap();
    assert_eq!(reclaimed(&core.run_cycle()), [("ns/a1", "ns/b1")]);
    core.remove_unit("ns/a1");
    assert_eq!(released(&core.run_cycle()), ["ns/b1"]);
    // Released by the core: more recent than anything reported.
    core.upsert_quota(&QuotaDef::new("team-a").min("cpu", 4_000).max("cpu", 20_000))
        .unwrap();
    core.remove_unit("ns/b1");
    core.upsert_unit(&unit("ns", "a4", "team-a", 1)).unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/a4"]);
    // A replaced holding keeps its release time unless a new one is given.
    core.hold("ns/a3", &cpu(3)).unwrap();
    core.upsert_unit(&unit("ns", "b2", "team-b", 6)).unwrap();
    assert_eq!(
        reclaimed(&core.run_cycle()),
        [("ns/a4", "ns/b2"), ("ns/a3", "ns/b2")]
    );
}

#[test]
fn units_of_no_quota_are_reclaimed_for_the_capacity() {
    let mut core = worked_example();
    core.upsert_queue(&QueueDef::new("default"));
    let free_rider = UnitDef::new("ns", "free-rider")
        .with_queue("default")
        .requesting("cpu", 5_000);
    core.upsert_unit(&free_rider).unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/free-rider"]);
    core.upsert_unit(&unit("ns", "b1", "team-b", 6)).unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/free-rider", "ns/b1")]);
    assert_eq!(out.reclaims[0].quota, None);
    assert_eq!(
        out.reclaims[0].message(),
        "reclaimed: it is charged to no quota, so nothing of it is guaranteed, and ns/b1 needs the resources within the guaranteed min of quota team-b"
    );
    // A unit of no quota borrows: it is paused meanwhile.
    let another = UnitDef::new("ns", "rider-2")
        .with_queue("default")
        .requesting("cpu", 1_000);
    core.upsert_unit(&another).unwrap();
    core.run_cycle();
    assert_eq!(
        reason_text(&core, "ns/rider-2"),
        "no quota (nothing guaranteed), needs cpu 1: borrowing is paused while guaranteed units wait for reclaimed cpu in the cluster"
    );
}

/// org (max 20) ─┬─ dept1 (min 10) ─┬─ a (min 6)
///               │                  └─ b (min 4)
///               └─ dept2 (min 10) ─┬─ c (min 5)
///                                  └─ d (min 5)
/// other (top level, no min). Capacity 100: only org's max binds.
fn three_levels() -> Core {
    let mut core = quota_core(100);
    core.upsert_quota(
        &QuotaDef::new("org")
            .parent_node()
            .min("cpu", 20_000)
            .max("cpu", 20_000),
    )
    .unwrap();
    for dept in ["dept1", "dept2"] {
        core.upsert_quota(
            &QuotaDef::new(dept)
                .under("org")
                .parent_node()
                .min("cpu", 10_000),
        )
        .unwrap();
    }
    for (name, dept, min) in [
        ("a", "dept1", 6),
        ("b", "dept1", 4),
        ("c", "dept2", 5),
        ("d", "dept2", 5),
    ] {
        leaf(
            &mut core,
            QuotaDef::new(name).under(dept).min("cpu", min * 1000),
            QueuePolicy::Priority,
        );
    }
    leaf(&mut core, QuotaDef::new("other"), QueuePolicy::Priority);
    core
}

#[test]
fn in_a_three_level_tree_every_quota_between_victim_and_limit_must_be_above_its_min() {
    let mut core = three_levels();
    // b holds 6 (4 + 2; 2 beyond its min); c holds 8 and d 2: dept2 holds
    // 10, its min, although c alone is 3 beyond its own. org holds 16.
    let held = [
        ("b1", "b", 4, 1),
        ("b2", "b", 2, 1),
        ("c1", "c", 4, 0),
        ("c2", "c", 4, 0),
        ("d1", "d", 2, 0),
    ];
    for (i, (name, q, cpus, prio)) in held.iter().enumerate() {
        core.upsert_unit(
            &unit("ns", name, q, *cpus)
                .with_priority(*prio)
                .created_at(i as i64),
        )
        .unwrap();
        assert_eq!(released(&core.run_cycle()), [format!("ns/{name}")]);
    }
    // a1 (6, guaranteed in a) misses 2 under org. c's units come first in
    // victim order (priority 0), but dept2 is not above its min: b2 is
    // taken, from b (above its min) under dept1 (a's own department).
    core.upsert_unit(&unit("ns", "a1", "a", 6).created_at(10))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/b2", "ns/a1")]);
    assert_eq!(
        reason_text(&core, "ns/a1"),
        "quota org: cpu 16/20 used, needs 6 (within its guaranteed min; waiting for 1 reclaimed unit to free cpu)"
    );
    // Borrowing under org is paused; outside org it is not.
    core.upsert_unit(&unit("ns", "c3", "c", 1).created_at(11))
        .unwrap();
    core.upsert_unit(&unit("ns", "o1", "other", 50).created_at(11))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/o1"]);
    assert_eq!(
        reason_text(&core, "ns/c3"),
        "quota c: cpu 8/5 min used, needs 1: borrowing beyond the min is paused while guaranteed units under quota org wait for reclaimed cpu"
    );
    core.remove_unit("ns/b2");
    assert_eq!(released(&core.run_cycle()), ["ns/a1"]);
    // d3 (3, guaranteed in d: 2 + 3 <= 5) misses 3 under org, which is
    // full. Within dept2, c borrows d's share: c is taken from (only c
    // needs to be above its min, the department is shared), not b (at its
    // min) nor a.
    core.upsert_unit(&unit("ns", "d3", "d", 3).created_at(12))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/c2", "ns/d3")]);
    // With c2 gone c is back within its min: the paused c3 (1) is
    // guaranteed now and waits for the same freed room, which fits both.
    assert!(matches!(
        core.reason("ns/c3"),
        Some(WaitReason::Reclaiming { victims: 0, .. })
    ));
    core.remove_unit("ns/c2");
    assert_eq!(released(&core.run_cycle()), ["ns/c3", "ns/d3"]);
    let figures = |q: &str| core.quota_figures(q).unwrap().used.get("cpu") / 1000;
    assert_eq!(
        (
            figures("a"),
            figures("b"),
            figures("c"),
            figures("d"),
            figures("org")
        ),
        (6, 4, 5, 5, 20)
    );
}

#[test]
fn a_unit_that_becomes_guaranteed_after_a_small_release_reclaims() {
    let mut core = quota_core(10);
    leaf(
        &mut core,
        QuotaDef::new("team-a").min("cpu", 4_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("team-b").min("cpu", 6_000),
        QueuePolicy::Priority,
    );
    core.upsert_unit(&unit("ns", "a1", "team-a", 2)).unwrap();
    core.run_cycle();
    for (i, name) in ["b1", "b2"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-b", 4).created_at(i as i64))
            .unwrap();
        core.run_cycle();
    }
    // 10/10; team-b borrows 2. a2 (3) borrows (2 + 3 > 4): it just waits.
    core.upsert_unit(&unit("ns", "a2", "team-a", 3).created_at(5))
        .unwrap();
    let out = core.run_cycle();
    assert!(out.reclaims.is_empty() && out.decisions.is_empty());
    // a1 ends: 2 free, a2 needs 3 — but it is guaranteed now (0 + 3 <= 4)
    // and team-b borrows: b2 is reclaimed for it.
    core.remove_unit("ns/a1");
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/b2", "ns/a2")]);
}

#[test]
fn a_quota_at_its_min_protects_its_subtree_even_below_a_borrowing_parent() {
    // Capacity 20.
    // big (min 10) ─┬─ m1 (min 6) ─┬─ x (min 2): holds 4
    //               │              └─ y (min 4): holds 2     (m1 at its min)
    //               └─ m2 (min 4) ─── z (min 4): holds 6     (m2 above)
    // team (min 10): holds 6.
    let mut core = quota_core(20);
    core.upsert_quota(&QuotaDef::new("big").parent_node().min("cpu", 10_000))
        .unwrap();
    for (m, min) in [("m1", 6), ("m2", 4)] {
        core.upsert_quota(
            &QuotaDef::new(m)
                .under("big")
                .parent_node()
                .min("cpu", min * 1000),
        )
        .unwrap();
    }
    for (q, parent, min) in [
        ("x", Some("m1"), 2),
        ("y", Some("m1"), 4),
        ("z", Some("m2"), 4),
    ] {
        let mut def = QuotaDef::new(q).min("cpu", min * 1000);
        def.parent = parent.map(str::to_string);
        leaf(&mut core, def, QueuePolicy::Priority);
    }
    leaf(
        &mut core,
        QuotaDef::new("team").min("cpu", 10_000),
        QueuePolicy::Priority,
    );
    assert!(core.min_warnings().is_empty());
    // x2 is released last: the most recent of all.
    for (name, q, cpus) in [
        ("t1", "team", 6),
        ("x1", "x", 2),
        ("y1", "y", 2),
        ("z1", "z", 3),
        ("z2", "z", 3),
        ("x2", "x", 2),
    ] {
        core.upsert_unit(&unit("ns", name, q, cpus)).unwrap();
        assert_eq!(released(&core.run_cycle()), [format!("ns/{name}")]);
    }
    // t2 (4, guaranteed in team) misses 2 of the capacity. x is above its
    // min and so is big, but m1 is not: x2 stays; z2 (m2 above its min) goes.
    core.upsert_unit(&unit("ns", "t2", "team", 4)).unwrap();
    assert_eq!(reclaimed(&core.run_cycle()), [("ns/z2", "ns/t2")]);
}

/// The calls the controller makes, in its order: a released unit is seen
/// again by the watch (upserted with the same definition) before its job
/// runs (`mark_started`); a guaranteed unit of a sibling that asks for a
/// resource the capacity does not list then takes back the most recently
/// released borrower under their parent, and runs once it is freed.
#[test]
fn under_a_parent_the_controllers_calls_reclaim_the_latest_borrower() {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args:\n    rootCapacity: auto\n",
    )
    .unwrap();
    core.set_capacity(&super::cpu_capacity(96));
    let parent = QuotaDef::new("wex").parent_node().min("cpu", 10_000);
    core.upsert_quota(&parent.max("cpu", 10_000)).unwrap();
    for (name, min) in [("wex-a", 4_000), ("wex-b", 6_000)] {
        let def = QuotaDef::new(name).under("wex").min("cpu", min);
        core.upsert_quota(&def.max("cpu", 10_000)).unwrap();
        core.upsert_queue(&QueueDef::new(name));
    }
    for (i, name) in ["a1", "a2", "a3"].into_iter().enumerate() {
        let def = UnitDef::new("ns", name)
            .with_quota("wex-a")
            .with_queue("wex-a")
            .created_at(i as i64)
            .requesting("cpu", 3_000);
        core.upsert_unit(&def).unwrap();
        assert_eq!(released(&core.run_cycle()), [format!("ns/{name}")]);
        core.upsert_unit(&def).unwrap();
        core.mark_started(&format!("ns/{name}")).unwrap();
    }
    assert_eq!(used(&core, "wex-a"), 9, "a borrows 5 of b's 6");
    core.upsert_unit(
        &UnitDef::new("ns", "b1")
            .with_quota("wex-b")
            .with_queue("wex-b")
            .created_at(10)
            .requesting("cpu", 4_000)
            .requesting("memory", 64 << 20),
    )
    .unwrap();
    let out = core.run_cycle();
    assert_eq!(reclaimed(&out), [("ns/a3", "ns/b1")]);
    assert!(released(&out).is_empty());
    assert!(
        matches!(core.reason("ns/b1"), Some(WaitReason::Reclaiming { .. })),
        "{}",
        reason_text(&core, "ns/b1")
    );
    core.free("ns/a3").unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/b1"]);
    assert_eq!((used(&core, "wex-a"), used(&core, "wex-b")), (6, 4));
}
