//! Serving order: units inside a queue, queues in a cycle, and the two
//! queue policies.

use koord_queue_model::QueuePolicy;

use super::{leaf, quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef, UnitDef};

fn default_queue_core() -> Core {
    Core::from_yaml("plugins:\n- name: Priority\n- name: DefaultQueue\n").unwrap()
}

#[test]
fn units_are_served_by_priority_then_creation_then_name() {
    let mut core = default_queue_core();
    core.upsert_queue(&QueueDef::new("default"));
    let units = [
        UnitDef::new("ns", "late-low")
            .with_priority(1)
            .created_at(50),
        UnitDef::new("ns", "b-same").with_priority(5).created_at(10),
        UnitDef::new("ns", "a-same").with_priority(5).created_at(10),
        UnitDef::new("ns", "old-mid").with_priority(5).created_at(1),
        UnitDef::new("ns", "high").with_priority(9).created_at(99),
        UnitDef::new("am", "z-same").with_priority(5).created_at(10),
    ];
    for u in &units {
        core.upsert_unit(u).unwrap();
    }
    let positions: Vec<(usize, String)> = core
        .queue_waiting("default")
        .map(|w| (w.position, w.key.to_string()))
        .collect();
    let expected = [
        "ns/high",
        "ns/old-mid",
        "am/z-same",
        "ns/a-same",
        "ns/b-same",
        "ns/late-low",
    ];
    assert_eq!(
        positions,
        expected
            .iter()
            .enumerate()
            .map(|(i, k)| (i + 1, k.to_string()))
            .collect::<Vec<_>>()
    );
    // With nothing to filter, the whole queue is released in that order in one cycle.
    let out = core.run_cycle();
    assert_eq!(released(&out), expected);
    assert_eq!(core.queue_counts("default").unwrap().admitted, 6);
}

#[test]
fn changing_a_units_priority_moves_it() {
    let mut core = default_queue_core();
    core.upsert_unit(&UnitDef::new("ns", "a").with_priority(1))
        .unwrap();
    core.upsert_unit(&UnitDef::new("ns", "b").with_priority(2))
        .unwrap();
    core.upsert_unit(&UnitDef::new("ns", "a").with_priority(3))
        .unwrap();
    let order: Vec<&str> = core.queue_waiting("default").map(|w| w.key).collect();
    assert_eq!(order, ["ns/a", "ns/b"]);
    assert_eq!(core.queue_counts("default").unwrap().pending, 2);
}

/// team max 10 cpu: a (6, prio 10), b (6, prio 5), c (2, prio 1).
fn policy_case(policy: QueuePolicy) -> Core {
    let mut core = quota_core(100);
    leaf(&mut core, QuotaDef::new("team").max("cpu", 10_000), policy);
    core.upsert_unit(&unit("ns", "a", "team", 6).with_priority(10))
        .unwrap();
    core.upsert_unit(&unit("ns", "b", "team", 6).with_priority(5))
        .unwrap();
    core.upsert_unit(&unit("ns", "c", "team", 2).with_priority(1))
        .unwrap();
    core
}

#[test]
fn priority_policy_skips_a_unit_that_does_not_fit() {
    let mut core = policy_case(QueuePolicy::Priority);
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a", "ns/c"]);
    // The figures are those b was judged with (before c was released).
    assert_eq!(
        reason_text(&core, "ns/b"),
        "quota team: cpu 6/10 used, needs 6"
    );
}

#[test]
fn block_policy_stops_at_the_first_unit_that_does_not_fit() {
    let mut core = policy_case(QueuePolicy::Block);
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a"]);
    assert_eq!(
        reason_text(&core, "ns/b"),
        "quota team: cpu 6/10 used, needs 6"
    );
    assert_eq!(
        reason_text(&core, "ns/c"),
        "waiting behind ns/b (Block policy)"
    );
    // A new small unit behind the blocked one does not overtake it either.
    core.upsert_unit(&unit("ns", "d", "team", 1)).unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/d"),
        "waiting behind ns/b (Block policy)"
    );
    // Once a is done, b goes first, then c fits too (6 + 2 <= 10), then d (9).
    assert!(core.remove_unit("ns/a"));
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/b", "ns/c", "ns/d"]);
}

#[test]
fn block_policy_with_a_new_unit_ahead_of_the_blocked_one() {
    let mut core = policy_case(QueuePolicy::Block);
    core.run_cycle();
    // Higher priority than b and small enough: it is now first in line and fits.
    core.upsert_unit(&unit("ns", "urgent", "team", 3).with_priority(7))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/urgent"]);
    // b is still stopped by the same limit, so its reason (and the status
    // the controller wrote from it) stays as it was.
    assert_eq!(
        reason_text(&core, "ns/b"),
        "quota team: cpu 6/10 used, needs 6"
    );
    assert_eq!(
        reason_text(&core, "ns/c"),
        "waiting behind ns/b (Block policy)"
    );
}

#[test]
fn switching_a_queue_from_block_to_priority_releases_what_fits() {
    let mut core = policy_case(QueuePolicy::Block);
    core.run_cycle();
    core.upsert_queue(&QueueDef::new("team").with_policy(QueuePolicy::Priority));
    assert_eq!(released(&core.run_cycle()), ["ns/c"]);
}

#[test]
fn queues_are_served_by_priority_then_name() {
    let mut core = quota_core(4);
    for (name, prio) in [("b-low", 0), ("a-low", 0), ("high", 10)] {
        core.upsert_queue(&QueueDef::new(name).with_priority(prio));
        core.upsert_quota(&QuotaDef::new(name)).unwrap();
    }
    let names: Vec<&str> = core.queues().map(|q| q.name).collect();
    assert_eq!(names, ["high", "a-low", "b-low"]);
    // Each queue has a 4-cpu unit; the capacity fits one: the high queue's.
    // The units are created in the opposite order to show it is the queue
    // order that counts.
    for (i, q) in ["high", "a-low", "b-low"].iter().rev().enumerate() {
        core.upsert_unit(&unit("ns", q, q, 4).created_at(i as i64))
            .unwrap();
    }
    assert_eq!(released(&core.run_cycle()), ["ns/high"]);
    assert!(core.remove_unit("ns/high"));
    assert_eq!(released(&core.run_cycle()), ["ns/a-low"]);
    assert_eq!(
        reason_text(&core, "ns/b-low"),
        "cluster capacity: cpu 4/4 used, needs 4"
    );
}

#[test]
fn a_stopped_queue_releases_nothing_and_says_so_until_resumed() {
    let mut core = quota_core(100);
    leaf(
        &mut core,
        QuotaDef::new("team").max("cpu", 10_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("other").max("cpu", 10_000),
        QueuePolicy::Priority,
    );
    core.upsert_queue(&QueueDef::new("team").with_stopped(true));
    core.upsert_unit(&unit("ns", "a", "team", 1)).unwrap();
    core.upsert_unit(&unit("ns", "b", "other", 1)).unwrap();
    // Only the serving queue's unit goes; the stopped one's waits though it fits.
    assert_eq!(released(&core.run_cycle()), ["ns/b"]);
    let stopped = "queue team is stopped: it releases nothing until it is resumed";
    assert_eq!(reason_text(&core, "ns/a"), stopped);
    // A unit joining the stopped queue waits too, with the same reason.
    core.upsert_unit(&unit("ns", "c", "team", 1)).unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(reason_text(&core, "ns/c"), stopped);
    // Resumed: everything that fits goes, in order.
    core.upsert_queue(&QueueDef::new("team"));
    assert_eq!(released(&core.run_cycle()), ["ns/a", "ns/c"]);
}
