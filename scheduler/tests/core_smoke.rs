//! The core as the controller drives it at start-up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use koord_queue_api::Resources;
use koord_queue_scheduler::core::{Core, RootCapacity};

#[test]
fn startup_sequence_terminates() {
    let mut core = Core::from_yaml(koord_queue_scheduler::DEFAULT_CONFIG).unwrap();
    let mut cap = Resources::new();
    cap.set("cpu", 96_000);
    core.set_capacity(&RootCapacity::Limited(cap));
    core.mark_all_dirty();
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert_eq!(core.queues().count(), 0);
    eprintln!("ok so far");
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
}

#[test]
fn reclaim_under_a_parent_quota() {
    use koord_queue_scheduler::core::{QuotaDef, UnitDef};
    let mut core = Core::from_yaml(koord_queue_scheduler::DEFAULT_CONFIG).unwrap();
    let mut cap = Resources::new();
    cap.set("cpu", 96_000);
    core.set_capacity(&RootCapacity::Limited(cap));
    core.upsert_quota(
        &QuotaDef::new("wex")
            .parent_node()
            .min("cpu", 10_000)
            .max("cpu", 10_000),
    )
    .unwrap();
    core.upsert_quota(
        &QuotaDef::new("wex-a")
            .under("wex")
            .min("cpu", 4_000)
            .max("cpu", 10_000),
    )
    .unwrap();
    core.upsert_quota(
        &QuotaDef::new("wex-b")
            .under("wex")
            .min("cpu", 6_000)
            .max("cpu", 10_000),
    )
    .unwrap();
    for q in ["wex-a", "wex-b"] {
        core.upsert_queue(&koord_queue_scheduler::core::QueueDef::new(q));
    }
    for (i, name) in ["a1", "a2", "a3"].iter().enumerate() {
        core.upsert_unit(
            &UnitDef::new("ns", *name)
                .with_quota("wex-a")
                .with_queue("wex-a")
                .created_at(i as i64)
                .requesting("cpu", 3_000),
        )
        .unwrap();
        let out = core.run_cycle();
        assert_eq!(out.decisions.len(), 1, "{name} released");
        // What the controller does next: the watch shows the unit again, then
        // its job runs.
        let key = format!("ns/{name}");
        core.upsert_unit(
            &UnitDef::new("ns", *name)
                .with_quota("wex-a")
                .with_queue("wex-a")
                .created_at(i as i64)
                .requesting("cpu", 3_000),
        )
        .unwrap();
        core.mark_started(&key).unwrap();
    }
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
    let victims: Vec<_> = out.reclaims.iter().map(|r| r.victim.to_string()).collect();
    assert_eq!(victims, ["ns/a3"], "waiting: {:?}", out.waiting);
}
