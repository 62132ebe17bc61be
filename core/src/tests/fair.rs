//! Weighted fair sharing (architecture §4.4): under a parent that turns it
//! on, the waiting sibling with the lowest weighted dominant share of what
//! lies above the mins goes first, so the pool splits by weight.

use std::collections::BTreeMap;

use koord_queue_model::QueuePolicy;

use super::{leaf, quota_core, released, unit};
use crate::{Core, CycleOutput, QuotaDef};

/// Parent `p` (max `max` cpu, min their mins, fair sharing `fair`) over
/// `a`, `b`, `c` with weights 1, 1, 2 and min `min` cpu each; each child has `waiting` units of
/// `size` cpu.
fn three_siblings(fair: bool, max: i64, min: i64, waiting: usize, size: i64) -> Core {
    let mut core = quota_core(1000);
    let mut parent = QuotaDef::new("p")
        .parent_node()
        .min("cpu", 3 * min * 1000)
        .max("cpu", max * 1000);
    parent.fair_sharing = fair;
    core.upsert_quota(&parent).unwrap();
    for (name, weight) in [("a", 1000), ("b", 1000), ("c", 2000)] {
        let def = QuotaDef::new(name)
            .under("p")
            .min("cpu", min * 1000)
            .weight(weight);
        leaf(&mut core, def, QueuePolicy::Priority);
        for i in 0..waiting {
            let created = i64::try_from(i).unwrap() * 10;
            core.upsert_unit(&unit(name, &format!("u{i}"), name, size).created_at(created))
                .unwrap();
        }
    }
    core
}

/// Cores released per quota (its units live in the namespace of its name).
fn per_quota(out: &CycleOutput) -> BTreeMap<String, i64> {
    let mut cores = BTreeMap::new();
    for d in &out.decisions {
        let quota = d.unit.split('/').next().unwrap_or_default().to_string();
        *cores.entry(quota).or_default() += d.resources.get("cpu") / 1000;
    }
    cores
}

fn split(a: i64, b: i64, c: i64) -> BTreeMap<String, i64> {
    [("a", a), ("b", b), ("c", c)]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[test]
fn the_pool_splits_by_weight() {
    let mut core = three_siblings(true, 40, 0, 30, 1);
    assert_eq!(per_quota(&core.run_cycle()), split(10, 10, 20));
}

#[test]
fn without_fair_sharing_the_first_queue_takes_the_pool() {
    // Today's behaviour, still reachable: no annotation on the parent.
    let mut core = three_siblings(false, 40, 0, 30, 1);
    assert_eq!(per_quota(&core.run_cycle()), split(30, 10, 0));
}

#[test]
fn mins_are_kept_and_only_what_lies_above_them_is_shared() {
    // Mins 4 + 4 + 4; the pool above them is 28: 7, 7, 14.
    let mut core = three_siblings(true, 40, 4, 30, 1);
    assert_eq!(per_quota(&core.run_cycle()), split(11, 11, 18));
}

#[test]
fn a_sibling_whose_units_do_not_fit_leaves_the_room_to_the_others() {
    // c's units (3 cpu) need more than what is left once a and b took
    // their turns: the remaining room is not kept idle for c.
    let mut core = quota_core(1000);
    core.upsert_quota(&QuotaDef::new("p").fair().max("cpu", 10_000))
        .unwrap();
    for name in ["a", "b", "c"] {
        leaf(
            &mut core,
            QuotaDef::new(name).under("p"),
            QueuePolicy::Priority,
        );
    }
    for i in 0..10 {
        for name in ["a", "b"] {
            core.upsert_unit(&unit(name, &format!("u{i}"), name, 1).created_at(i))
                .unwrap();
        }
    }
    core.upsert_unit(&unit("c", "big", "c", 3).created_at(0))
        .unwrap();
    core.upsert_unit(&unit("c", "huge", "c", 30).created_at(1))
        .unwrap();
    let out = core.run_cycle();
    let cores = per_quota(&out);
    assert_eq!(cores.values().sum::<i64>(), 10, "{cores:?}");
    assert_eq!(cores.get("c"), Some(&3), "{:?}", released(&out));
}

#[test]
fn freed_capacity_goes_to_the_sibling_furthest_below_its_share() {
    let mut core = three_siblings(true, 40, 0, 30, 1);
    assert_eq!(per_quota(&core.run_cycle()), split(10, 10, 20));
    // Two of a's units end: a is now the lowest and gets both back, not c
    // (whose queue comes last) nor b.
    core.remove_unit("a/u0");
    core.remove_unit("a/u1");
    assert_eq!(per_quota(&core.run_cycle()), split(2, 0, 0));
    // Four of c's end: c (18 of weight 2 = 9) is below a and b (10).
    for i in 0..4 {
        core.remove_unit(&format!("c/u{i}"));
    }
    assert_eq!(per_quota(&core.run_cycle()), split(0, 0, 4));
}

#[test]
fn shares_converge_under_constant_demand_whatever_ends() {
    // Units end in an order that favours nobody (the oldest running of a
    // rotating quota); demand stays above the pool. After many turns the
    // split is still by weight, within one unit.
    let mut core = three_siblings(true, 40, 0, 400, 1);
    let mut running: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut held: BTreeMap<String, i64> = ["a", "b", "c"].map(|q| (q.to_string(), 0)).into();
    for turn in 0..=300usize {
        let ending = ["a", "b", "c"][turn % 3];
        if let Some(list) = running.get_mut(ending)
            && !list.is_empty()
        {
            let key = list.remove(0);
            core.remove_unit(&key);
            *held.get_mut(ending).unwrap() -= 1;
        }
        for d in core.run_cycle().decisions {
            let quota = d.unit.split('/').next().unwrap_or_default().to_string();
            *held.get_mut(&quota).unwrap() += 1;
            running.entry(quota).or_default().push(d.unit.to_string());
        }
    }
    let total: i64 = held.values().sum();
    assert!(total >= 39, "{held:?}");
    for (quota, want) in [("a", 10), ("b", 10), ("c", 20)] {
        let got = held[quota];
        assert!(
            (got - want).abs() <= 1,
            "{quota}: {got} (want {want}): {held:?}"
        );
    }
}

#[test]
fn a_child_above_its_share_gives_back_newest_first_but_never_below_the_taker() {
    // a took the whole pool (4 × 1 cpu) while b had nothing; then b queues
    // three. b's first two take a's two newest back (a 4 → 2, b → 2); the
    // third would leave a (50 %) below b (75 %): it waits.
    let mut core = quota_core(1000);
    core.upsert_quota(&QuotaDef::new("p").fair().max("cpu", 4000))
        .unwrap();
    for name in ["a", "b"] {
        leaf(
            &mut core,
            QuotaDef::new(name).under("p"),
            QueuePolicy::Priority,
        );
    }
    for i in 0..4 {
        core.set_now(1_000 * (i + 1));
        core.upsert_unit(&unit("a", &format!("u{i}"), "a", 1).created_at(i))
            .unwrap();
        assert_eq!(released(&core.run_cycle()), [format!("a/u{i}").as_str()]);
    }
    // A minute later (past the default minimum run time of the victims).
    core.set_now(120_000);
    for i in 0..3 {
        core.upsert_unit(&unit("b", &format!("u{i}"), "b", 1).created_at(100 + i))
            .unwrap();
    }
    let out = core.run_cycle();
    let victims: Vec<&str> = out.reclaims.iter().map(|r| &*r.victim).collect();
    assert_eq!(victims, ["a/u3", "a/u2"], "{:?}", released(&out));
    let message = out.reclaims[0].message();
    assert!(
        message.starts_with("reclaimed for fair sharing: quota a holds 100.0% of the shared pool per unit of weight, more than quota b would with b/u0 (25.0%)"),
        "{message}"
    );
    assert!(out.decisions.is_empty(), "{:?}", released(&out));
    // The controller holds the victims' jobs again and frees them.
    for v in ["a/u3", "a/u2"] {
        core.remove_unit(v);
    }
    let out = core.run_cycle();
    assert_eq!(per_quota(&out), [("b".to_string(), 2)].into());
    assert!(out.reclaims.is_empty());
    // Nothing more later: b (2) is not below a (2).
    core.set_now(240_000);
    let out = core.run_cycle();
    assert!(out.reclaims.is_empty() && out.decisions.is_empty());
}

#[test]
fn no_fair_reclaim_without_fair_sharing_or_with_reclaim_off() {
    for (fair, reclaim) in [(false, true), (true, false)] {
        let mut core = quota_core(1000);
        let mut parent = QuotaDef::new("p").parent_node().max("cpu", 2000);
        parent.fair_sharing = fair;
        core.upsert_quota(&parent).unwrap();
        for name in ["a", "b"] {
            core.upsert_queue(&crate::QueueDef::new(name).with_reclaim(reclaim));
            core.upsert_quota(&QuotaDef::new(name).under("p")).unwrap();
        }
        core.upsert_unit(&unit("a", "u0", "a", 2)).unwrap();
        assert_eq!(released(&core.run_cycle()), ["a/u0"]);
        core.set_now(120_000);
        core.upsert_unit(&unit("b", "u0", "b", 1)).unwrap();
        let out = core.run_cycle();
        assert!(out.reclaims.is_empty(), "fair {fair} reclaim {reclaim}");
    }
}
