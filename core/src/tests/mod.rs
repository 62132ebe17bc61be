//! Tests of the whole core, through its public calls.

mod config;
mod fair;
mod incremental;
mod ordering;
mod plugins;
mod preemption;
mod preemption_siblings;
mod property;
mod property_reserve;
mod property_siblings;
mod quota;
mod reclaim;
mod reserving;
mod reserving_across;
mod reserving_never_fits;
mod sent_back;

use koord_queue_model::{QueuePolicy, Resources};

use super::{Core, CycleOutput, QueueDef, QuotaDef, RootCapacity, UnitDef};

/// `Priority` + `ElasticQuota` with a fixed capacity of `cpu` cores.
pub(super) fn quota_core(cpu: i64) -> Core {
    Core::from_yaml(&format!(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: {{ rootCapacity: {{ cpu: \"{cpu}\" }} }}\n"
    ))
    .unwrap()
}

/// A unit `ns/name` charged to `quota`, asking for `cpu` cores.
pub(super) fn unit(ns: &str, name: &str, quota: &str, cpu: i64) -> UnitDef {
    UnitDef::new(ns, name)
        .with_quota(quota)
        .requesting("cpu", cpu * 1000)
}

/// Adds a leaf quota with a queue of the same name and the given policy.
pub(super) fn leaf(core: &mut Core, def: QuotaDef, policy: QueuePolicy) {
    core.upsert_queue(&QueueDef::new(def.name.clone()).with_policy(policy));
    core.upsert_quota(&def).unwrap();
}

/// Keys of the released units, in decision order.
pub(super) fn released(out: &CycleOutput) -> Vec<&str> {
    out.decisions.iter().map(|d| &*d.unit).collect()
}

/// The reason text of a waiting unit.
pub(super) fn reason_text(core: &Core, key: &str) -> String {
    core.reason(key)
        .map(ToString::to_string)
        .unwrap_or_else(|| format!("{key}: no reason"))
}

/// `cpu` cores.
pub(super) fn cpu(cores: i64) -> Resources {
    [("cpu".to_string(), cores * 1000)].into_iter().collect()
}

/// A limited capacity of `cpu` cores.
pub(super) fn cpu_capacity(cores: i64) -> RootCapacity {
    RootCapacity::Limited(cpu(cores))
}
