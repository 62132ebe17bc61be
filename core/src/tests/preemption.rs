//! Priority preemption inside a quota (architecture §4.4, rule 4): who may be
//! taken, the smallest set, never in vain, and the rules against thrashing.

use koord_queue_model::{Preemption, PreemptionPolicy, QueuePolicy};

use super::{quota_core, reason_text, released, unit};
use crate::{Core, CycleOutput, QueueDef, QuotaDef, ReclaimKind};

/// A quota `q` (max `max` cpu, min 0) whose queue preempts by `policy`.
fn core(max: i64, preemption: Preemption) -> Core {
    let mut core = quota_core(1000);
    core.upsert_queue(
        &QueueDef::new("q")
            .with_policy(QueuePolicy::Priority)
            .with_preemption(preemption),
    );
    core.upsert_quota(&QuotaDef::new("q").max("cpu", max * 1000))
        .unwrap();
    core.set_now(1_000_000);
    core
}

fn lower(min_run_ms: i64) -> Preemption {
    Preemption {
        policy: PreemptionPolicy::LowerPriority,
        min_run_ms,
        max_per_minute: None,
        ..Default::default()
    }
}

fn victims(out: &CycleOutput) -> Vec<&str> {
    out.reclaims.iter().map(|r| &*r.victim).collect()
}

/// Runs `units` (name, cpu, priority) into `core`, one cycle each, in
/// creation order; they all fit.
fn run(core: &mut Core, units: &[(&str, i64, i32)]) {
    for (i, (name, cpu, priority)) in units.iter().enumerate() {
        core.upsert_unit(
            &unit("ns", name, "q", *cpu)
                .with_priority(*priority)
                .created_at(i as i64),
        )
        .unwrap();
        let out = core.run_cycle();
        assert_eq!(released(&out), [format!("ns/{name}")], "{name} runs");
    }
}

#[test]
fn the_smallest_set_of_lower_priority_units_lowest_and_newest_first() {
    let mut core = core(10, lower(0));
    // 2 + 3 + 3 + 2 = 10 cpu: the quota is full.
    run(
        &mut core,
        &[
            ("old-low", 2, 10),
            ("mid", 3, 50),
            ("new-low", 3, 10),
            ("low2", 2, 10),
        ],
    );
    core.upsert_unit(&unit("ns", "hero", "q", 5).with_priority(100).created_at(10))
        .unwrap();
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    // Lowest priority first, most recently released first: low2 (2), new-low
    // (3) make 5; old-low is not needed, mid (higher) is never looked at.
    assert_eq!(victims(&out), ["ns/low2", "ns/new-low"]);
    let r = &out.reclaims[0];
    assert_eq!(
        r.kind,
        ReclaimKind::Preempted {
            priority: 10,
            by_priority: 100
        }
    );
    assert!(
        r.message().contains("preempted by ns/hero (priority 100"),
        "{}",
        r.message()
    );
    assert!(
        reason_text(&core, "ns/hero").contains("preempting 2 lower-priority units of its quota"),
        "{}",
        reason_text(&core, "ns/hero")
    );
    // The victims freed (the controller sent them back): hero runs.
    core.remove_unit("ns/low2");
    core.remove_unit("ns/new-low");
    let out = core.run_cycle();
    assert_eq!(released(&out), ["ns/hero"]);
}

#[test]
fn a_set_is_made_minimal_by_giving_back_what_is_not_needed() {
    let mut core = core(10, lower(0));
    // Newest first: small (1) then big (6) are taken; with big the hero
    // fits without small, so small is given back.
    run(
        &mut core,
        &[("keep", 3, 50), ("big", 6, 10), ("small", 1, 10)],
    );
    core.upsert_unit(&unit("ns", "hero", "q", 6).with_priority(100).created_at(10))
        .unwrap();
    let out = core.run_cycle();
    assert_eq!(victims(&out), ["ns/big"]);
}

#[test]
fn never_in_vain_never_upward_and_not_when_the_queue_does_not_preempt() {
    // Only 2 cpu of lower priority: not enough for 5, nobody is preempted.
    let mut c = core(10, lower(0));
    run(&mut c, &[("high", 8, 200), ("low", 2, 10)]);
    c.upsert_unit(&unit("ns", "hero", "q", 5).with_priority(100).created_at(10))
        .unwrap();
    let out = c.run_cycle();
    assert!(out.reclaims.is_empty() && out.decisions.is_empty());
    assert!(reason_text(&c, "ns/hero").starts_with("quota q: cpu 10/10 used"));

    // Equal priority is not lower.
    let mut c = core(4, lower(0));
    run(&mut c, &[("a", 4, 100)]);
    c.upsert_unit(&unit("ns", "b", "q", 4).with_priority(100).created_at(10))
        .unwrap();
    assert!(c.run_cycle().reclaims.is_empty());

    // The default: no preemption.
    let mut c = core(4, Preemption::default());
    run(&mut c, &[("a", 4, 1)]);
    c.upsert_unit(&unit("ns", "b", "q", 4).with_priority(100).created_at(10))
        .unwrap();
    assert!(c.run_cycle().reclaims.is_empty());
}

#[test]
fn lower_or_newer_equal_priority_takes_newer_units_of_equal_priority() {
    let policy = Preemption {
        policy: PreemptionPolicy::LowerOrNewerEqualPriority,
        ..lower(0)
    };
    let mut c = core(4, policy);
    // "newer" is created after the waiting unit, "older" before it.
    c.upsert_unit(&unit("ns", "older", "q", 2).with_priority(5).created_at(1))
        .unwrap();
    c.upsert_unit(&unit("ns", "newer", "q", 2).with_priority(5).created_at(9))
        .unwrap();
    assert_eq!(c.run_cycle().decisions.len(), 2);
    c.upsert_unit(&unit("ns", "waiting", "q", 2).with_priority(5).created_at(5))
        .unwrap();
    let out = c.run_cycle();
    assert_eq!(victims(&out), ["ns/newer"]);
}

#[test]
fn a_victim_runs_its_minimum_time_first_and_the_unit_is_looked_at_again_then() {
    let mut c = core(4, lower(60_000));
    c.upsert_unit(&unit("ns", "low", "q", 4).with_priority(1).created_at(1))
        .unwrap();
    c.hold_at("ns/low", &super::cpu(4), Some(990_000)).unwrap();
    c.upsert_unit(&unit("ns", "hero", "q", 4).with_priority(100).created_at(2))
        .unwrap();
    // low has run 10 s of its 60: not yet.
    assert!(c.run_cycle().reclaims.is_empty());
    assert_eq!(c.next_preemption_due(), Some(1_050_000));
    c.set_now(1_050_000);
    let out = c.run_cycle();
    assert_eq!(victims(&out), ["ns/low"]);
    assert_eq!(c.next_preemption_due(), None);
}

#[test]
fn a_displaced_unit_does_not_take_back_from_the_unit_that_displaced_it() {
    let mut c = core(4, lower(0));
    run(&mut c, &[("low", 4, 1)]);
    c.upsert_unit(&unit("ns", "hero", "q", 4).with_priority(100).created_at(5))
        .unwrap();
    assert_eq!(victims(&c.run_cycle()), ["ns/low"]);
    c.free("ns/low").unwrap();
    assert_eq!(released(&c.run_cycle()), ["ns/hero"]);
    // low comes back with a raised priority (say its PriorityClass changed):
    // it may not preempt hero, who displaced it.
    c.upsert_unit(&unit("ns", "low", "q", 4).with_priority(1000).created_at(0))
        .unwrap();
    let out = c.run_cycle();
    assert!(out.reclaims.is_empty(), "{:?}", victims(&out));
}

#[test]
fn a_quota_preempts_at_most_its_cap_a_minute() {
    let cap = Preemption {
        max_per_minute: Some(1),
        ..lower(0)
    };
    let mut c = core(4, cap);
    run(&mut c, &[("a", 2, 1), ("b", 2, 1)]);
    c.upsert_unit(&unit("ns", "h1", "q", 2).with_priority(100).created_at(10))
        .unwrap();
    assert_eq!(victims(&c.run_cycle()).len(), 1);
    c.upsert_unit(&unit("ns", "h2", "q", 2).with_priority(100).created_at(11))
        .unwrap();
    assert!(c.run_cycle().reclaims.is_empty(), "over the cap");
    c.set_now(1_000_000 + 61_000);
    c.upsert_unit(&unit("ns", "h2", "q", 2).with_priority(101).created_at(11))
        .unwrap();
    assert_eq!(victims(&c.run_cycle()).len(), 1, "a minute later");
}
