//! The cycle only looks at what may have changed, and still finds
//! everything that fits.

use koord_queue_model::QueuePolicy;

use super::{cpu_capacity, leaf, quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef};

/// `queues` leaf quotas (max 10 cpu each) with `per_queue` waiting 4-cpu
/// units, capacity 40: after the first cycle every queue holds 8 cpu... until
/// the capacity is reached.
fn loaded(queues: usize, per_queue: usize) -> Core {
    let mut core = quota_core(40);
    for q in 0..queues {
        let name = format!("q{q:02}");
        leaf(
            &mut core,
            QuotaDef::new(&name).max("cpu", 10_000),
            QueuePolicy::Priority,
        );
        for i in 0..per_queue {
            core.upsert_unit(&unit("ns", &format!("{name}-{i:03}"), &name, 4).created_at(i as i64))
                .unwrap();
        }
    }
    core
}

#[test]
fn first_cycle_looks_at_everything_then_nothing() {
    let mut core = loaded(10, 20);
    let out = core.run_cycle();
    assert_eq!(out.stats.queues_visited, 10);
    assert_eq!(out.stats.units_visited, 200);
    assert_eq!(out.decisions.len(), 10);
    assert_eq!(out.waiting.len(), 190);
    let idle = core.run_cycle();
    assert_eq!(idle.stats.queues_visited, 0);
    assert_eq!(idle.stats.units_visited, 0);
    assert!(idle.waiting.is_empty());
}

#[test]
fn adding_one_unit_looks_at_that_unit_only() {
    let mut core = loaded(10, 20);
    core.run_cycle();
    core.upsert_unit(&unit("ns", "extra", "q03", 1)).unwrap();
    let out = core.run_cycle();
    assert_eq!(out.stats.queues_visited, 1);
    assert_eq!(out.stats.units_visited, 1);
    // q00..q04 hold 8 cpu each = 40: the cluster is full.
    assert!(out.decisions.is_empty());
    assert_eq!(out.waiting.len(), 1);
    assert_eq!(&*out.waiting[0].0, "ns/extra");
    assert_eq!(
        reason_text(&core, "ns/extra"),
        "cluster capacity: cpu 40/40 used, needs 1"
    );
}

#[test]
fn finishing_a_unit_releases_the_next_without_rescanning_everything() {
    let mut core = loaded(10, 20);
    let first = core.run_cycle();
    let done = first.decisions[0].unit.to_string();
    assert!(core.remove_unit(&done));
    let out = core.run_cycle();
    // 4 cpu freed: exactly one 4-cpu unit is released.
    assert_eq!(out.decisions.len(), 1);
    // Only q00 (whose own max and the capacity got room) is looked at; of
    // its 18 waiting units the filters run for the first only: the others'
    // limit (q00's max) has 2 cpu of room again after it, less than they need.
    // The capacity-stopped queues are not visited: the room is gone.
    assert_eq!(out.stats.queues_visited, 1, "{:?}", out.stats);
    assert_eq!(out.stats.units_visited, 18, "{:?}", out.stats);
    assert_eq!(out.stats.filter_runs, 1, "{:?}", out.stats);
    assert_eq!(core.cluster_used().get("cpu"), 40_000);
}

#[test]
fn queues_stopped_by_an_unrelated_limit_are_not_visited() {
    let mut core = quota_core(1000);
    leaf(
        &mut core,
        QuotaDef::new("a").max("cpu", 4_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("b").max("cpu", 4_000),
        QueuePolicy::Priority,
    );
    for q in ["a", "b"] {
        for i in 0..3 {
            core.upsert_unit(&unit("ns", &format!("{q}{i}"), q, 4).created_at(i))
                .unwrap();
        }
    }
    assert_eq!(released(&core.run_cycle()), ["ns/a0", "ns/b0"]);
    core.remove_unit("ns/a0");
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a1"]);
    assert_eq!(out.stats.queues_visited, 1);
}

#[test]
fn a_limit_with_too_little_room_does_not_wake_its_queues() {
    let mut core = quota_core(10);
    leaf(&mut core, QuotaDef::new("big"), QueuePolicy::Priority);
    leaf(&mut core, QuotaDef::new("small"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "s1", "small", 1)).unwrap();
    core.upsert_unit(&unit("ns", "fill", "big", 9).created_at(1))
        .unwrap();
    core.upsert_unit(&unit("ns", "b2", "big", 5).created_at(2))
        .unwrap();
    core.run_cycle();
    // 1 cpu freed; b2 needs 5: its queue is not even looked at.
    core.remove_unit("ns/s1");
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert_eq!(out.stats.queues_visited, 0);
    // Another 9 freed: now it fits.
    core.remove_unit("ns/fill");
    assert_eq!(released(&core.run_cycle()), ["ns/b2"]);
}

#[test]
fn room_taken_earlier_in_the_cycle_is_not_offered_twice() {
    let mut core = quota_core(8);
    core.upsert_queue(&QueueDef::new("first").with_priority(1));
    core.upsert_quota(&QuotaDef::new("first")).unwrap();
    leaf(&mut core, QuotaDef::new("second"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "hold", "second", 8)).unwrap();
    core.run_cycle();
    core.upsert_unit(&unit("ns", "f", "first", 4)).unwrap();
    core.upsert_unit(&unit("ns", "s", "second", 4)).unwrap();
    core.run_cycle();
    core.remove_unit("ns/hold");
    let out = core.run_cycle();
    // Both queues are woken by the 8 freed cpu; both fit (4 + 4).
    assert_eq!(released(&out), ["ns/f", "ns/s"]);
    core.upsert_unit(&unit("ns", "f2", "first", 8)).unwrap();
    core.upsert_unit(&unit("ns", "s2", "second", 8)).unwrap();
    core.run_cycle();
    core.remove_unit("ns/f");
    core.remove_unit("ns/s");
    let out = core.run_cycle();
    // 8 free: first's f2 takes it; second's s2 must not be released as well.
    assert_eq!(released(&out), ["ns/f2"]);
    assert_eq!(core.cluster_used().get("cpu"), 8_000);
}

#[test]
fn positions_and_counts_follow_releases() {
    let mut core = loaded(1, 5);
    let positions = |core: &Core| -> Vec<(usize, String)> {
        core.queue_waiting("q00")
            .map(|w| (w.position, w.key.to_string()))
            .collect()
    };
    assert_eq!(positions(&core)[0], (1, "ns/q00-000".to_string()));
    core.run_cycle();
    assert_eq!(
        positions(&core),
        [
            (1, "ns/q00-002".to_string()),
            (2, "ns/q00-003".to_string()),
            (3, "ns/q00-004".to_string())
        ]
    );
    let counts = core.queue_counts("q00").unwrap();
    assert_eq!((counts.pending, counts.admitted), (3, 2));
    assert!(core.queue_waiting("nope").next().is_none());
    assert!(core.queue_counts("nope").is_none());
    let w = core.queue_waiting("q00").next().unwrap();
    assert_eq!(
        w.reason.unwrap().to_string(),
        "quota q00: cpu 8/10 used, needs 4"
    );
}

#[test]
fn freeing_puts_a_unit_back_in_line() {
    let mut core = quota_core(4);
    leaf(&mut core, QuotaDef::new("team"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "a", "team", 4).created_at(1))
        .unwrap();
    core.upsert_unit(&unit("ns", "b", "team", 4).created_at(2))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/a"]);
    // a's job was suspended by someone: it waits again, first in line.
    core.free("ns/a").unwrap();
    assert_eq!(core.queue_waiting("team").next().unwrap().key, "ns/a");
    assert_eq!(released(&core.run_cycle()), ["ns/a"]);
}

#[test]
fn a_removed_queue_parks_its_units_and_its_return_serves_them() {
    let mut core = quota_core(100);
    leaf(&mut core, QuotaDef::new("team"), QueuePolicy::Priority);
    core.set_capacity(&cpu_capacity(100));
    core.upsert_unit(&unit("ns", "a", "team", 200)).unwrap();
    core.run_cycle();
    assert!(core.remove_queue("team"));
    assert_eq!(reason_text(&core, "ns/a"), "queue team does not exist");
    let out = core.run_cycle();
    assert_eq!(out.waiting.len(), 1);
    core.set_capacity(&cpu_capacity(200));
    assert!(core.run_cycle().decisions.is_empty());
    core.upsert_queue(&QueueDef::new("team"));
    assert_eq!(released(&core.run_cycle()), ["ns/a"]);
}

/// The controller's start: the capacity is known before any queue, and
/// every queue is marked dirty once the caches are synced. Cycles over
/// nothing decide nothing, visit nothing, and end.
#[test]
fn cycles_before_any_queue_exists_decide_nothing() {
    let mut core = quota_core(96);
    core.mark_all_dirty();
    for _ in 0..2 {
        let out = core.run_cycle();
        assert!(out.decisions.is_empty() && out.reclaims.is_empty() && out.waiting.is_empty());
        assert_eq!(out.stats, crate::CycleStats::default());
    }
    assert_eq!(core.queues().count(), 0);
}

#[test]
fn reasons_kept_but_not_listed_when_reports_are_off() {
    let mut core = loaded(10, 20);
    let mut listing = loaded(10, 20);
    core.report_reasons(false);
    let out = core.run_cycle();
    let listed = listing.run_cycle();
    // The same decisions and work; only the list is left out.
    assert_eq!(out.decisions, listed.decisions);
    assert_eq!(out.stats, listed.stats);
    assert!(out.waiting.is_empty());
    assert_eq!(listed.waiting.len(), 190);
    for (key, reason) in &listed.waiting {
        assert_eq!(core.reason(key), Some(reason), "{key}");
    }
    // A reason changed between cycles (the unit is changed and waits
    // elsewhere) is not listed either, and the core has the new one.
    core.upsert_unit(&unit("ns", "q09-019", "q09", 8)).unwrap();
    let out = core.run_cycle();
    assert!(out.waiting.is_empty());
    assert_eq!(
        reason_text(&core, "ns/q09-019"),
        "cluster capacity: cpu 40/40 used, needs 8"
    );
    // Turned on again, the next change is listed.
    core.report_reasons(true);
    core.upsert_unit(&unit("ns", "extra", "q03", 1)).unwrap();
    let out = core.run_cycle();
    assert_eq!(out.waiting.len(), 1);
    assert_eq!(&*out.waiting[0].0, "ns/extra");
}
