//! Elastic quota semantics (architecture §4.4): max at every level, capacity,
//! borrowing, guarantees, min scaling, accounting and reasons.

use koord_queue_model::QueuePolicy;

use super::{cpu, cpu_capacity, leaf, quota_core, reason_text, released, unit};
use crate::{Core, QueueDef, QuotaDef, RootCapacity, UnitDef, UnitStatus, WaitReason};

/// org (max 20) ─┬─ dept1 (max 15) ─┬─ a (max 8)
///               │                  └─ b (no max)
///               └─ dept2 (no max) ─── c (no max)
/// capacity 100.
fn three_levels() -> Core {
    let mut core = quota_core(100);
    core.upsert_quota(&QuotaDef::new("org").parent_node().max("cpu", 20_000))
        .unwrap();
    core.upsert_quota(
        &QuotaDef::new("dept1")
            .under("org")
            .parent_node()
            .max("cpu", 15_000),
    )
    .unwrap();
    core.upsert_quota(&QuotaDef::new("dept2").under("org").parent_node())
        .unwrap();
    leaf(
        &mut core,
        QuotaDef::new("a").under("dept1").max("cpu", 8_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("b").under("dept1"),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("c").under("dept2"),
        QueuePolicy::Priority,
    );
    core
}

#[test]
fn max_is_enforced_at_every_level_alone() {
    let mut core = three_levels();
    core.upsert_unit(&unit("ns", "too-big-for-a", "a", 9))
        .unwrap();
    core.upsert_unit(&unit("ns", "too-big-for-dept1", "b", 16))
        .unwrap();
    core.upsert_unit(&unit("ns", "too-big-for-org", "c", 21))
        .unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/too-big-for-a"),
        "quota a: cpu 0/8 used, needs 9 (1 more than the max of quota a even with nothing else running: it can never fit until that max is raised)"
    );
    assert_eq!(
        reason_text(&core, "ns/too-big-for-dept1"),
        "quota dept1: cpu 0/15 used, needs 16 (1 more than the max of quota dept1 even with nothing else running: it can never fit until that max is raised)"
    );
    assert_eq!(
        reason_text(&core, "ns/too-big-for-org"),
        "quota org: cpu 0/20 used, needs 21 (1 more than the max of quota org even with nothing else running: it can never fit until that max is raised)"
    );
}

#[test]
fn max_is_enforced_at_every_level_with_accumulated_usage() {
    let mut core = three_levels();
    // Serve b and c before a.
    core.upsert_queue(&QueueDef::new("b").with_priority(5));
    core.upsert_queue(&QueueDef::new("c").with_priority(5));
    core.upsert_unit(&unit("ns", "b1", "b", 10)).unwrap();
    core.upsert_unit(&unit("ns", "c1", "c", 5).with_priority(9))
        .unwrap();
    core.upsert_unit(&unit("ns", "a1", "a", 6)).unwrap();
    core.upsert_unit(&unit("ns", "c2", "c", 6)).unwrap();
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/b1", "ns/c1"]);
    // a has room (6 <= 8) but dept1 does not (10 + 6 > 15).
    assert_eq!(
        reason_text(&core, "ns/a1"),
        "quota dept1: cpu 10/15 used, needs 6"
    );
    // dept2 has no max, org does (15 + 6 > 20).
    assert_eq!(
        reason_text(&core, "ns/c2"),
        "quota org: cpu 15/20 used, needs 6"
    );
    assert_eq!(core.quota_figures("org").unwrap().used, cpu(15));
    assert_eq!(core.quota_figures("dept1").unwrap().used, cpu(10));
    assert_eq!(core.quota_figures("c").unwrap().used, cpu(5));
    // Raising org's max lets c2 in; a1 is still stopped by dept1.
    core.upsert_quota(&QuotaDef::new("org").parent_node().max("cpu", 21_000))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/c2"]);
    assert_eq!(
        reason_text(&core, "ns/a1"),
        "quota dept1: cpu 10/15 used, needs 6"
    );
    // Raising dept1's max gets a1 past dept1, to be stopped by org (21 + 6 > 21).
    core.upsert_quota(
        &QuotaDef::new("dept1")
            .under("org")
            .parent_node()
            .max("cpu", 16_000),
    )
    .unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/a1"),
        "quota org: cpu 21/21 used, needs 6"
    );
}

#[test]
fn resources_not_named_in_max_or_capacity_are_unlimited() {
    let mut core = three_levels();
    let gpu_job = UnitDef::new("ns", "gpus")
        .with_quota("a")
        .requesting("nvidia.com/gpu", 1000);
    core.upsert_unit(&gpu_job).unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/gpus"]);
}

#[test]
fn root_capacity_is_enforced() {
    let mut core = quota_core(10);
    leaf(&mut core, QuotaDef::new("team"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "one", "team", 6).created_at(1))
        .unwrap();
    core.upsert_unit(&unit("ns", "two", "team", 6).created_at(2))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/one"]);
    assert_eq!(
        reason_text(&core, "ns/two"),
        "cluster capacity: cpu 6/10 used, needs 6"
    );
    // More capacity: it fits now.
    core.set_capacity(&cpu_capacity(12));
    assert_eq!(released(&core.run_cycle()), ["ns/two"]);
}

#[test]
fn nothing_is_released_before_an_automatic_capacity_is_known() {
    let mut core = Core::from_yaml("plugins:\n- name: Priority\n- name: ElasticQuota\n").unwrap();
    assert_eq!(core.capacity_source(), Some(&crate::CapacitySource::Auto));
    leaf(&mut core, QuotaDef::new("team"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "job", "team", 1)).unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/job"),
        "cluster capacity not known yet"
    );
    core.set_capacity(&RootCapacity::Unlimited);
    assert_eq!(released(&core.run_cycle()), ["ns/job"]);
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

#[test]
fn guaranteed_and_borrowing_units_are_told_apart() {
    let mut core = worked_example();
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-a", 3).created_at(i as i64))
            .unwrap();
    }
    let out = core.run_cycle();
    let flags: Vec<(&str, bool)> = out
        .decisions
        .iter()
        .map(|d| (&*d.unit, d.guaranteed))
        .collect();
    // 3 <= 4 is within the min; 6 and 9 borrow.
    assert_eq!(flags, [("ns/a1", true), ("ns/a2", false), ("ns/a3", false)]);
    assert!(out.decisions.iter().all(|d| d.queue.as_ref() == "team-a"));
    assert_eq!(out.decisions[0].resources, cpu(3));
}

#[test]
fn a_guaranteed_unit_without_reclaim_waits_and_says_that_others_borrow() {
    let mut core = worked_example();
    core.upsert_queue(&QueueDef::new("team-b").with_reclaim(false));
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-a", 3).created_at(i as i64))
            .unwrap();
    }
    core.run_cycle();
    core.upsert_unit(&unit("ns", "b1", "team-b", 4)).unwrap();
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert!(out.reclaims.is_empty());
    let reason = core.reason("ns/b1").unwrap();
    assert!(reason.is_due_to_borrowing(), "{reason:?}");
    let WaitReason::ReclaimOff {
        borrowed_by_others,
        shortfall,
        queue,
    } = reason
    else {
        panic!("not a reclaim-off reason: {reason:?}");
    };
    assert_eq!(*borrowed_by_others, 5_000);
    assert_eq!(shortfall.missing(), 3_000);
    assert_eq!(&**queue, "team-b");
    assert_eq!(
        reason.to_string(),
        "cluster capacity: cpu 9/10 used, needs 4 (within its guaranteed min; other quotas borrow cpu 5 beyond their min, but reclaim is off for queue team-b)"
    );
}

#[test]
fn borrowing_takes_only_idle_capacity() {
    let mut core = worked_example();
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(&unit("ns", name, "team-a", 3).created_at(i as i64))
            .unwrap();
    }
    core.run_cycle();
    // Let team-a's own max allow more, so that only the capacity limits it.
    core.upsert_quota(&QuotaDef::new("team-a").min("cpu", 4_000).max("cpu", 20_000))
        .unwrap();
    // team-a borrows 5 already; 1 more is idle: a 1-cpu borrower fits, a
    // 2-cpu one does not, and nothing is taken from anyone for it.
    core.upsert_unit(&unit("ns", "a4", "team-a", 2).created_at(4))
        .unwrap();
    core.upsert_unit(&unit("ns", "a5", "team-a", 1).created_at(5))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/a5"]);
    assert!(!out.decisions[0].guaranteed);
    let reason = core.reason("ns/a4").unwrap();
    assert!(!reason.is_due_to_borrowing());
    assert_eq!(
        reason.to_string(),
        "cluster capacity: cpu 9/10 used, needs 2"
    );
    assert_eq!(core.cluster_used(), cpu(10));
}

#[test]
fn many_units_are_released_in_one_cycle_without_over_commit() {
    let mut core = quota_core(100);
    for q in ["q1", "q2", "q3"] {
        leaf(
            &mut core,
            QuotaDef::new(q).max("cpu", 40_000),
            QueuePolicy::Priority,
        );
        for i in 0..30 {
            core.upsert_unit(&unit("ns", &format!("{q}-{i:02}"), q, 3).created_at(i))
                .unwrap();
        }
    }
    let out = core.run_cycle();
    // q1 and q2 each take 13 units (39 <= 40); q3 gets the remaining 22 cpu: 7 units.
    assert_eq!(out.decisions.len(), 13 + 13 + 7);
    let total: i64 = out.decisions.iter().map(|d| d.resources.get("cpu")).sum();
    assert_eq!(total, 99_000);
    assert_eq!(core.cluster_used(), cpu(99));
    assert_eq!(core.quota_figures("q3").unwrap().used, cpu(21));
    assert_eq!(core.queue_counts("q1").unwrap().pending, 17);
    assert_eq!(core.queue_counts("q1").unwrap().admitted, 13);
    // A second cycle has nothing more to release.
    assert!(core.run_cycle().decisions.is_empty());
}

#[test]
fn unreserve_rolls_a_decision_back_exactly_once() {
    let mut core = quota_core(10);
    leaf(&mut core, QuotaDef::new("team"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "job", "team", 6)).unwrap();
    core.upsert_unit(&unit("ns", "other", "team", 6).created_at(1))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/job"]);
    // The write failed: the unit waits again and its 6 cpu are free.
    core.unreserve("ns/job").unwrap();
    assert!(core.cluster_used().is_zero());
    assert!(matches!(
        core.unit_status("ns/job"),
        Some(UnitStatus::Waiting {
            queue: Some("team"),
            ..
        })
    ));
    assert_eq!(core.queue_counts("team").unwrap().admitted, 0);
    // Unreserving twice is refused rather than freeing twice.
    assert_eq!(
        core.unreserve("ns/job").unwrap_err().to_string(),
        "queue unit ns/job holds no quota"
    );
    assert!(core.cluster_used().is_zero());
    // The next cycle retries it (still first in line), and counts it once.
    assert_eq!(released(&core.run_cycle()), ["ns/job"]);
    assert_eq!(core.cluster_used(), cpu(6));
    assert_eq!(core.queue_counts("team").unwrap().admitted, 1);
}

#[test]
fn held_units_reported_by_the_controller_count() {
    let mut core = quota_core(10);
    leaf(&mut core, QuotaDef::new("team"), QueuePolicy::Priority);
    // After a restart: one unit already runs with 8 cpu.
    core.upsert_unit(&unit("ns", "running", "team", 8)).unwrap();
    core.hold("ns/running", &cpu(8)).unwrap();
    core.upsert_unit(&unit("ns", "new", "team", 4)).unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/new"),
        "cluster capacity: cpu 8/10 used, needs 4"
    );
    assert_eq!(core.queue_counts("team").unwrap().admitted, 1);
    // It finishes: the new one fits.
    core.remove_unit("ns/running");
    assert_eq!(released(&core.run_cycle()), ["ns/new"]);
    assert_eq!(
        core.hold("ns/ghost", &cpu(1)).unwrap_err().to_string(),
        "unknown queue unit ns/ghost"
    );
}

#[test]
fn children_mins_above_the_parent_are_scaled_down_with_a_warning() {
    let mut core = quota_core(100);
    core.upsert_quota(&QuotaDef::new("org").parent_node().min("cpu", 10_000))
        .unwrap();
    assert!(core.min_warnings().is_empty());
    leaf(
        &mut core,
        QuotaDef::new("a").under("org").min("cpu", 8_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("b").under("org").min("cpu", 4_000),
        QueuePolicy::Priority,
    );
    let warnings = core.min_warnings();
    assert_eq!(warnings.len(), 1);
    assert_eq!(&*warnings[0].quota, "org");
    assert_eq!(
        warnings[0].to_string(),
        "the child quotas of org guarantee cpu 12 in total, more than its min 10; their mins are scaled down proportionally (10/12)"
    );
    let a = core.quota_figures("a").unwrap();
    assert_eq!(a.min, cpu(8));
    assert_eq!(a.min_effective.get("cpu"), 6_666);
    assert_eq!(
        core.quota_figures("b").unwrap().min_effective.get("cpu"),
        3_333
    );
    // Guarantees use the scaled min: 7 cpu in a is borrowing.
    core.upsert_unit(
        &UnitDef::new("ns", "j")
            .with_quota("a")
            .requesting("cpu", 7_000),
    )
    .unwrap();
    assert!(!core.run_cycle().decisions[0].guaranteed);
    // Fixing the parent's min clears the warning.
    core.upsert_quota(&QuotaDef::new("org").parent_node().min("cpu", 12_000))
        .unwrap();
    assert!(core.min_warnings().is_empty());
    assert_eq!(core.quota_figures("a").unwrap().min_effective, cpu(8));
}

#[test]
fn top_level_mins_above_the_capacity_are_scaled_down() {
    let mut core = quota_core(10);
    leaf(
        &mut core,
        QuotaDef::new("a").min("cpu", 10_000),
        QueuePolicy::Priority,
    );
    leaf(
        &mut core,
        QuotaDef::new("b").min("cpu", 10_000),
        QueuePolicy::Priority,
    );
    assert_eq!(
        core.min_warnings()[0].to_string(),
        "the top-level quotas guarantee cpu 20 in total, more than the cluster capacity 10; their mins are scaled down proportionally (10/20)"
    );
    assert_eq!(core.quota_figures("b").unwrap().min_effective, cpu(5));
}

#[test]
fn quota_problems_are_explained() {
    let mut core = quota_core(10);
    core.upsert_queue(&QueueDef::new("x"));
    core.upsert_unit(&unit("ns", "no-quota", "x", 1)).unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(reason_text(&core, "ns/no-quota"), "quota x does not exist");

    core.upsert_quota(&QuotaDef::new("org").parent_node())
        .unwrap();
    core.upsert_queue(&QueueDef::new("org"));
    core.upsert_unit(&unit("ns", "on-parent", "org", 1))
        .unwrap();
    core.upsert_quota(&QuotaDef::new("orphan").under("gone"))
        .unwrap();
    core.upsert_queue(&QueueDef::new("orphan"));
    core.upsert_unit(&unit("ns", "orphaned", "orphan", 1))
        .unwrap();
    core.upsert_quota(&QuotaDef::new("loop1").under("loop2"))
        .unwrap();
    core.upsert_quota(&QuotaDef::new("loop2").under("loop1"))
        .unwrap();
    core.upsert_queue(&QueueDef::new("loop1"));
    core.upsert_unit(&unit("ns", "looped", "loop1", 1)).unwrap();
    assert!(core.run_cycle().decisions.is_empty());
    assert_eq!(
        reason_text(&core, "ns/on-parent"),
        "quota org is a parent quota; jobs must be charged to a leaf quota"
    );
    assert_eq!(
        reason_text(&core, "ns/orphaned"),
        "quota orphan: its parent quota gone does not exist"
    );
    assert_eq!(
        reason_text(&core, "ns/looped"),
        "quota loop1: its parent quotas form a cycle"
    );
    // The quota appears: its unit goes.
    core.upsert_quota(&QuotaDef::new("x")).unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/no-quota"]);
    assert!(
        core.upsert_quota(&QuotaDef::new("koordinator-root-quota"))
            .is_err()
    );
}

#[test]
fn reasons_print_memory_and_millicores_for_people() {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: 1500m, memory: 4Gi } }\n",
    )
    .unwrap();
    leaf(
        &mut core,
        QuotaDef::new("team").max("memory", 2 << 30),
        QueuePolicy::Priority,
    );
    core.upsert_unit(
        &UnitDef::new("ns", "mem")
            .with_quota("team")
            .requesting("memory", 3 << 30),
    )
    .unwrap();
    core.upsert_unit(
        &UnitDef::new("ns", "cpu")
            .with_quota("team")
            .requesting("cpu", 2_500),
    )
    .unwrap();
    core.run_cycle();
    assert_eq!(
        reason_text(&core, "ns/mem"),
        "quota team: memory 0/2Gi used, needs 3Gi (1Gi more than the max of quota team even with nothing else running: it can never fit until that max is raised)"
    );
    assert_eq!(
        reason_text(&core, "ns/cpu"),
        "cluster capacity: cpu 0/1500m used, needs 2500m (1 more than the cluster's capacity even with nothing else running: it can never fit until the capacity grows)"
    );
}

#[test]
fn a_running_unit_moved_to_another_quota_moves_its_usage() {
    let mut core = quota_core(100);
    leaf(&mut core, QuotaDef::new("a"), QueuePolicy::Priority);
    leaf(&mut core, QuotaDef::new("b"), QueuePolicy::Priority);
    core.upsert_unit(&unit("ns", "j", "a", 5)).unwrap();
    core.run_cycle();
    core.upsert_unit(&unit("ns", "j", "b", 5)).unwrap();
    assert!(core.quota_figures("a").unwrap().used.is_zero());
    assert_eq!(core.quota_figures("b").unwrap().used, cpu(5));
    assert_eq!(core.queue_counts("a").unwrap().admitted, 0);
    assert_eq!(core.queue_counts("b").unwrap().admitted, 1);
    assert_eq!(core.cluster_used(), cpu(5));
}
