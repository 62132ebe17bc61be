//! The `DefaultQueue` and `ResourceQuota` plugins.

use super::{cpu, reason_text, released};
use crate::{Core, QueueDef, UnitDef};

#[test]
fn default_queue_takes_every_unit() {
    let mut core = Core::from_yaml("plugins:\n- name: Priority\n- name: DefaultQueue\n").unwrap();
    core.upsert_unit(
        &UnitDef::new("ns", "a")
            .with_queue("elsewhere")
            .requesting("cpu", 1),
    )
    .unwrap();
    // No Queue named `default` exists yet.
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert_eq!(out.waiting.len(), 1);
    assert_eq!(out.waiting[0].1.to_string(), "queue default does not exist");
    core.upsert_queue(&QueueDef::new("default"));
    assert_eq!(released(&core.run_cycle()), ["ns/a"]);
    assert_eq!(core.queue_counts("default").unwrap().admitted, 1);
}

#[test]
fn default_queue_name_is_configurable_and_follows_elastic_quota() {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: unlimited }\n- name: DefaultQueue\n  args: { queue: batch }\n",
    )
    .unwrap();
    core.upsert_queue(&QueueDef::new("batch"));
    core.upsert_queue(&QueueDef::new("team"));
    core.upsert_quota(&crate::QuotaDef::new("team")).unwrap();
    core.upsert_unit(&UnitDef::new("ns", "plain")).unwrap();
    core.upsert_unit(&UnitDef::new("ns", "quota'd").with_quota("team"))
        .unwrap();
    let mut out: Vec<(String, String)> = core
        .run_cycle()
        .decisions
        .iter()
        .map(|d| (d.unit.to_string(), d.queue.to_string()))
        .collect();
    out.sort();
    assert_eq!(
        out,
        [
            ("ns/plain".to_string(), "batch".to_string()),
            ("ns/quota'd".to_string(), "team".to_string())
        ]
    );
}

#[test]
fn without_mapping_the_units_own_queue_is_used() {
    let mut core = Core::from_yaml("plugins:\n- name: Priority\n").unwrap();
    core.upsert_queue(&QueueDef::new("mine"));
    core.upsert_unit(&UnitDef::new("ns", "a").with_queue("mine"))
        .unwrap();
    core.upsert_unit(&UnitDef::new("ns", "lost")).unwrap();
    assert_eq!(released(&core.run_cycle()), ["ns/a"]);
    assert_eq!(
        reason_text(&core, "ns/lost"),
        "no queue: the unit names none and no plugin maps it to one"
    );
}

fn resource_quota_core() -> Core {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: DefaultQueue\n- name: ResourceQuota\n",
    )
    .unwrap();
    core.upsert_queue(&QueueDef::new("default"));
    core
}

fn rq(
    hard_cpu: i64,
    used_cpu: i64,
) -> (koord_queue_model::Resources, koord_queue_model::Resources) {
    let hard = [
        ("requests.cpu".to_string(), hard_cpu * 1000),
        ("limits.cpu".to_string(), 1),
    ]
    .into_iter()
    .collect();
    let used = [("requests.cpu".to_string(), used_cpu * 1000)]
        .into_iter()
        .collect();
    (hard, used)
}

#[test]
fn resource_quota_counts_used_and_reserved() {
    let mut core = resource_quota_core();
    let (hard, used) = rq(10, 4);
    core.set_namespace_quota("team", &hard, &used);
    let job = |name: &str, cores: i64, t: i64| {
        UnitDef::new("team", name)
            .requesting("cpu", cores * 1000)
            .created_at(t)
    };
    core.upsert_unit(&job("first", 5, 1)).unwrap();
    core.upsert_unit(&job("second", 2, 2)).unwrap();
    assert_eq!(released(&core.run_cycle()), ["team/first"]);
    assert_eq!(
        reason_text(&core, "team/second"),
        "ResourceQuota of namespace team: cpu 9/10 used, needs 2 (5 reserved for released jobs not running yet)"
    );
    // Other namespaces are not limited by it.
    core.upsert_unit(&UnitDef::new("other", "big").requesting("cpu", 50_000))
        .unwrap();
    assert_eq!(released(&core.run_cycle()), ["other/big"]);
    // first's pods exist: its 5 cpu move from reserved into used.
    core.mark_started("team/first").unwrap();
    let (hard, used) = rq(10, 9);
    core.set_namespace_quota("team", &hard, &used);
    assert!(core.run_cycle().decisions.is_empty());
    // first finishes: used drops back, second fits.
    core.remove_unit("team/first");
    let (hard, used) = rq(10, 4);
    core.set_namespace_quota("team", &hard, &used);
    assert_eq!(released(&core.run_cycle()), ["team/second"]);
    // Without a ResourceQuota nothing is limited.
    core.remove_namespace_quota("team");
    core.upsert_unit(&job("huge", 500, 3)).unwrap();
    assert_eq!(released(&core.run_cycle()), ["team/huge"]);
    assert!(core.mark_started("team/nobody").is_err());
    let _ = cpu(0);
}

#[test]
fn resource_quota_reservation_is_returned_on_unreserve() {
    let mut core = resource_quota_core();
    let (hard, used) = rq(4, 0);
    core.set_namespace_quota("team", &hard, &used);
    core.upsert_unit(
        &UnitDef::new("team", "a")
            .requesting("cpu", 4_000)
            .created_at(1),
    )
    .unwrap();
    assert_eq!(released(&core.run_cycle()), ["team/a"]);
    core.unreserve("team/a").unwrap();
    // Were the reservation kept, a would not fit again.
    assert_eq!(released(&core.run_cycle()), ["team/a"]);
}
