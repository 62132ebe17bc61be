//! `ResourceQuota`: does not release a unit whose resources would take its
//! namespace beyond a ResourceQuota's hard limits, counting what the
//! ResourceQuota reports as used plus what the core reserved for released
//! units whose pods do not exist yet (and so are not in `used`).

use serde_yaml::Value;

use super::no_args;
use crate::amounts::ResVec;
use crate::plugin::{Filter, Plugin, Reserve, UnitRef};
use crate::reason::{Blocker, Shortfall, WaitReason};
use crate::state::ClusterState;

/// Registered name.
pub const NAME: &str = "ResourceQuota";

/// The `ResourceQuota` plugin.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResourceQuotaPlugin;

impl ResourceQuotaPlugin {
    /// Builds the plugin; it takes no arguments.
    pub fn from_args(args: Option<&Value>) -> Result<Self, String> {
        no_args(args).map(|()| Self)
    }
}

impl Plugin for ResourceQuotaPlugin {
    fn name(&self) -> &str {
        NAME
    }
    fn as_filter(&self) -> Option<&dyn Filter> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn Reserve> {
        Some(self)
    }
}

impl Filter for ResourceQuotaPlugin {
    fn filter(&self, unit: &UnitRef<'_>, state: &ClusterState) -> Result<(), WaitReason> {
        let ns = state.namespaces();
        for (k, r) in unit.request.iter() {
            let headroom = ns.headroom(unit.namespace, k);
            if r > headroom {
                let reserved = ns.reserved(unit.namespace, k);
                return Err(WaitReason::NamespaceQuota {
                    shortfall: Shortfall {
                        blocker: Blocker::Namespace(unit.namespace, k),
                        scope: ns.name(unit.namespace).clone(),
                        resource: state.resource_name(k).clone(),
                        used: ns.used(unit.namespace, k).saturating_add(reserved),
                        requested: r,
                        limit: ns.hard(unit.namespace, k),
                    },
                    reserved,
                });
            }
        }
        Ok(())
    }
}

impl Reserve for ResourceQuotaPlugin {
    fn reserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        if !unit.started {
            state.namespaces_mut().add_reserved(unit.namespace, amount);
        }
    }

    fn unreserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        if !unit.started {
            state.namespaces_mut().sub_reserved(unit.namespace, amount);
        }
    }

    fn started(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        // The pods exist now, so the ResourceQuota's `used` counts them.
        state.namespaces_mut().sub_reserved(unit.namespace, amount);
    }
}
