//! `ElasticQuota` (architecture §4.4): maps a unit to the queue named after its
//! quota, lets it through only when every quota on its path stays within its
//! max and the cluster within its capacity, and charges what released units
//! hold to their quota path.
//!
//! Borrowing (going beyond the leaf's min) is allowed from idle capacity
//! only, which is exactly what the max and capacity checks allow. A
//! guaranteed unit that does not fit waits; its reason carries what other
//! quotas borrow so that a reclaim step can act on it.

use koord_queue_model::Resources;
use koord_queue_model::parse_quantity;
use serde_yaml::Value;

use super::{args_map, describe};
use crate::amounts::{ResVec, UNLIMITED};
use crate::ids::{QuotaId, ResId};
use crate::model::{CapacitySource, RootCapacity, UnitDef};
use crate::plugin::{Filter, Plugin, QueueUnitMapping, Reserve, UnitRef};
use crate::quota_tree::PathProblem;
use crate::reason::{Blocker, Shortfall, WaitReason};
use crate::state::ClusterState;

/// Registered name.
pub const NAME: &str = "ElasticQuota";

/// The `ElasticQuota` plugin.
#[derive(Clone, Debug)]
pub struct ElasticQuotaPlugin {
    capacity: CapacitySource,
}

impl ElasticQuotaPlugin {
    /// Builds the plugin from `{ rootCapacity: auto | unlimited | {resource: quantity} }`
    /// (default `auto`).
    pub fn from_args(args: Option<&Value>) -> Result<Self, String> {
        let mut capacity = CapacitySource::Auto;
        for (key, value) in args_map(args, &["rootCapacity"])? {
            if key == "rootCapacity" {
                capacity = parse_capacity(value)?;
            }
        }
        Ok(Self { capacity })
    }

    /// A plugin with the given capacity source.
    pub fn new(capacity: CapacitySource) -> Self {
        Self { capacity }
    }

    /// Where the root capacity comes from.
    pub fn capacity_source(&self) -> &CapacitySource {
        &self.capacity
    }
}

fn parse_capacity(value: &Value) -> Result<CapacitySource, String> {
    match value {
        Value::String(s) if s.eq_ignore_ascii_case("auto") => Ok(CapacitySource::Auto),
        Value::String(s) if s.eq_ignore_ascii_case("unlimited") => Ok(CapacitySource::Unlimited),
        Value::Mapping(m) => {
            let mut out = Resources::new();
            for (k, v) in m {
                let Some(resource) = k.as_str() else {
                    return Err(format!(
                        "rootCapacity: resource names must be strings, got {}",
                        describe(k)
                    ));
                };
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(format!(
                            "rootCapacity.{resource}: expected a quantity such as \"600\" or \"2Ti\", got {}",
                            describe(other)
                        ));
                    }
                };
                let amount = parse_quantity(resource, &text)
                    .map_err(|e| format!("rootCapacity.{resource}: {e}"))?;
                if amount < 0 {
                    return Err(format!(
                        "rootCapacity.{resource}: must not be negative, got {text}"
                    ));
                }
                out.set(resource, amount);
            }
            Ok(CapacitySource::Fixed(out))
        }
        other => Err(format!(
            "rootCapacity must be \"auto\", \"unlimited\" or a map of resource to quantity, got {}",
            describe(other)
        )),
    }
}

impl Plugin for ElasticQuotaPlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn init(&self, state: &mut ClusterState) {
        let capacity = match &self.capacity {
            CapacitySource::Auto => return,
            CapacitySource::Unlimited => RootCapacity::Unlimited,
            CapacitySource::Fixed(r) => RootCapacity::Limited(r.clone()),
        };
        let ClusterState {
            resources, quotas, ..
        } = state;
        quotas.set_capacity(&capacity, resources);
    }

    fn as_queue_unit_mapping(&self) -> Option<&dyn QueueUnitMapping> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn Reserve> {
        Some(self)
    }
    fn capacity_source(&self) -> Option<&CapacitySource> {
        Some(&self.capacity)
    }
    fn filters_quota_limits(&self) -> bool {
        true
    }
}

impl QueueUnitMapping for ElasticQuotaPlugin {
    fn map_unit<'a>(&'a self, unit: &'a UnitDef) -> Option<&'a str> {
        unit.quota.as_deref().filter(|q| !q.is_empty())
    }
}

/// The unit's path in the tree, or why it cannot be charged there.
fn quota_path(quota: QuotaId, state: &ClusterState) -> Result<&[QuotaId], WaitReason> {
    let tree = state.quotas();
    let name = || tree.name(quota).clone();
    if !tree.is_defined(quota) {
        return Err(WaitReason::QuotaMissing { quota: name() });
    }
    if tree.is_parent(quota) {
        return Err(WaitReason::ParentQuota { quota: name() });
    }
    tree.path(quota).map_err(|problem| match problem {
        PathProblem::Undefined => WaitReason::QuotaMissing { quota: name() },
        PathProblem::MissingParent { child, parent } => WaitReason::QuotaParentMissing {
            quota: name(),
            child: tree.name(child).clone(),
            parent: tree.name(parent).clone(),
        },
        PathProblem::Cycle => WaitReason::QuotaCycle { quota: name() },
    })
}

impl Filter for ElasticQuotaPlugin {
    fn filter(&self, unit: &UnitRef<'_>, state: &ClusterState) -> Result<(), WaitReason> {
        let tree = state.quotas();
        let path = match unit.quota {
            Some(q) => quota_path(q, state)?,
            None => &[],
        };
        // A limit the unit exceeds even alone is said first, whatever else
        // is short now: it waits until that limit is raised (and never
        // reserves, `reserve/`).
        if let Some(b) = tree.never_fits_on(path, unit.request) {
            return Err(limit_reason(unit, path, state, b.at, b.resource, b.limit));
        }
        for &a in path {
            for (k, r) in unit.request.iter() {
                let max = tree.max(a, k);
                let used = tree.used(a, k);
                if max != UNLIMITED && used.saturating_add(r) > max {
                    return Err(limit_reason(unit, path, state, Some(a), k, max));
                }
            }
        }
        if unit.request.is_empty() {
            return Ok(());
        }
        for (k, r) in unit.request.iter() {
            let Some(cap) = tree.capacity_of(k) else {
                return Err(WaitReason::CapacityUnknown);
            };
            let used = tree.root_used(k);
            if cap != UNLIMITED && used.saturating_add(r) > cap {
                return Err(limit_reason(unit, path, state, None, k, cap));
            }
        }
        Ok(())
    }
}

/// The reason of a unit stopped for resource `k` by the max of quota `at`
/// (the capacity when `None`), whose figure is `limit`.
fn limit_reason(
    unit: &UnitRef<'_>,
    path: &[QuotaId],
    state: &ClusterState,
    at: Option<QuotaId>,
    k: ResId,
    limit: i64,
) -> WaitReason {
    let tree = state.quotas();
    let guaranteed = tree.is_guaranteed(unit.quota, unit.request);
    let shortfall = Shortfall {
        blocker: at.map_or(Blocker::Capacity(k), |a| Blocker::QuotaMax(a, k)),
        scope: at.map_or_else(|| "".into(), |a| tree.name(a).clone()),
        resource: state.resource_name(k).clone(),
        used: at.map_or_else(|| tree.root_used(k), |a| tree.used(a, k)),
        requested: unit.request.get(k),
        limit,
    };
    let borrowed_by_others = tree.borrowed_by_others(at, path, k);
    match at {
        Some(_) => WaitReason::QuotaMax {
            shortfall,
            guaranteed,
            borrowed_by_others,
        },
        None => WaitReason::Capacity {
            shortfall,
            guaranteed,
            borrowed_by_others,
        },
    }
}

impl Reserve for ElasticQuotaPlugin {
    fn reserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        state.quotas_mut().add_usage(unit.quota, amount);
    }

    fn unreserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        state.quotas_mut().sub_usage(unit.quota, amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<CapacitySource, String> {
        let v: Value = serde_yaml::from_str(yaml).unwrap();
        ElasticQuotaPlugin::from_args(Some(&v)).map(|p| p.capacity)
    }

    #[test]
    fn root_capacity_argument_forms() {
        assert_eq!(parse("rootCapacity: auto"), Ok(CapacitySource::Auto));
        assert_eq!(
            parse("rootCapacity: Unlimited"),
            Ok(CapacitySource::Unlimited)
        );
        let fixed = parse("rootCapacity: { cpu: \"600\", memory: 1Ki, pods: 10 }").unwrap();
        let CapacitySource::Fixed(r) = fixed else {
            panic!("not fixed: {fixed:?}");
        };
        assert_eq!(
            (r.get("cpu"), r.get("memory"), r.get("pods")),
            (600_000, 1024, 10)
        );
        assert_eq!(
            ElasticQuotaPlugin::from_args(None).unwrap().capacity,
            CapacitySource::Auto
        );
    }

    #[test]
    fn bad_root_capacity_is_explained() {
        assert_eq!(
            parse("rootCapacity: { cpu: lots }").unwrap_err(),
            "rootCapacity.cpu: invalid quantity \"lots\" for cpu: not a number"
        );
        assert_eq!(
            parse("rootCapacity: sometimes").unwrap_err(),
            "rootCapacity must be \"auto\", \"unlimited\" or a map of resource to quantity, got the string \"sometimes\""
        );
        assert_eq!(
            parse("rootCapcity: auto").unwrap_err(),
            "unknown argument \"rootCapcity\" (known: rootCapacity)"
        );
        assert_eq!(
            parse("rootCapacity: { cpu: \"-1\" }").unwrap_err(),
            "rootCapacity.cpu: must not be negative, got -1"
        );
        assert!(
            parse("rootCapacity: { cpu: [1] }")
                .unwrap_err()
                .contains("got a list")
        );
    }
}
