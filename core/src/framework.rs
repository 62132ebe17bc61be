//! The configured plugins, grouped by extension point in configuration order,
//! and the calls the cycle makes through them.

use std::collections::HashMap;

use super::amounts::ResVec;
use super::config::{ConfigError, SchedulerConfig};
use super::model::{CapacitySource, QueueDef, UnitDef};
use super::plugin::{ExtensionPoint, Plugin, SortKey, UnitRef};
use super::reason::WaitReason;
use super::registry::Registry;
use super::state::ClusterState;

/// The enabled plugins.
#[derive(Debug)]
pub struct Framework {
    plugins: Vec<Box<dyn Plugin>>,
    multi_queue_sort: usize,
    queue_sort: usize,
    mappings: Vec<usize>,
    filters: Vec<usize>,
    reserves: Vec<usize>,
}

impl Framework {
    /// Builds the plugins `config` lists from `registry`, checking that the
    /// configuration is complete and unambiguous.
    pub fn build(config: &SchedulerConfig, registry: &Registry) -> Result<Self, ConfigError> {
        let mut plugins: Vec<Box<dyn Plugin>> = Vec::with_capacity(config.plugins.len());
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (index, entry) in config.plugins.iter().enumerate() {
            if let Some(first) = seen.insert(entry.name.as_str(), index) {
                return Err(ConfigError::DuplicatePlugin {
                    index,
                    name: entry.name.clone(),
                    first,
                });
            }
            let built = registry
                .build(&entry.name, entry.args.as_ref())
                .ok_or_else(|| ConfigError::UnknownPlugin {
                    index,
                    name: entry.name.clone(),
                    known: registry.names().collect::<Vec<_>>().join(", "),
                })?;
            let plugin = built.map_err(|reason| ConfigError::InvalidArgs {
                index,
                name: entry.name.clone(),
                reason,
            })?;
            plugins.push(plugin);
        }
        let providers = |point: ExtensionPoint| -> Vec<usize> {
            plugins
                .iter()
                .enumerate()
                .filter(|(_, p)| ExtensionPoint::of(p.as_ref()).contains(&point))
                .map(|(i, _)| i)
                .collect()
        };
        let single = |point: ExtensionPoint| -> Result<usize, ConfigError> {
            match providers(point).as_slice() {
                [] => Err(ConfigError::MissingExtensionPoint {
                    point,
                    candidates: registry.providers(point).join(", "),
                }),
                [one] => Ok(*one),
                [first, second, ..] => Err(ConfigError::ConflictingPlugins {
                    point,
                    first: plugins[*first].name().to_string(),
                    second: plugins[*second].name().to_string(),
                }),
            }
        };
        let multi_queue_sort = single(ExtensionPoint::MultiQueueSort)?;
        let queue_sort = single(ExtensionPoint::QueueSort)?;
        let mappings = providers(ExtensionPoint::QueueUnitMapping);
        let filters = providers(ExtensionPoint::Filter);
        let reserves = providers(ExtensionPoint::Reserve);
        Ok(Self {
            plugins,
            multi_queue_sort,
            queue_sort,
            mappings,
            filters,
            reserves,
        })
    }

    /// Lets every plugin set up its part of the state.
    pub fn init(&self, state: &mut ClusterState) {
        for p in &self.plugins {
            p.init(state);
        }
    }

    /// Names of the enabled plugins, in order.
    pub fn plugin_names(&self) -> Vec<&str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Whether plugin `name` is enabled.
    pub fn has_plugin(&self, name: &str) -> bool {
        self.plugins.iter().any(|p| p.name() == name)
    }

    /// Order key of a queue.
    pub fn queue_order(&self, queue: &QueueDef) -> SortKey {
        self.plugins[self.multi_queue_sort]
            .as_multi_queue_sort()
            .map_or_else(SortKey::default, |s| s.queue_order(queue))
    }

    /// Order key of a unit.
    pub fn unit_order(&self, unit: &UnitDef) -> SortKey {
        self.plugins[self.queue_sort]
            .as_queue_sort()
            .map_or_else(SortKey::default, |s| s.unit_order(unit))
    }

    /// The unit's queue: the first mapping plugin's choice, else the queue
    /// named in its spec.
    pub fn map_unit<'a>(&'a self, unit: &'a UnitDef) -> Option<&'a str> {
        self.mappings
            .iter()
            .filter_map(|i| self.plugins[*i].as_queue_unit_mapping())
            .find_map(|m| m.map_unit(unit))
            .or_else(|| Some(unit.queue.as_str()).filter(|q| !q.is_empty()))
    }

    /// Runs the filters in order; the first rejection wins.
    pub fn filter(&self, unit: &UnitRef<'_>, state: &ClusterState) -> Result<(), WaitReason> {
        for i in &self.filters {
            if let Some(f) = self.plugins[*i].as_filter() {
                f.filter(unit, state)?;
            }
        }
        Ok(())
    }

    /// Runs the filters other than those that check quota limits
    /// ([`Plugin::filters_quota_limits`]): whether a unit stopped by a quota
    /// limit would fit once reclaim makes room there.
    pub fn filter_beyond_quota_limits(
        &self,
        unit: &UnitRef<'_>,
        state: &ClusterState,
    ) -> Result<(), WaitReason> {
        for i in &self.filters {
            let plugin = &self.plugins[*i];
            if plugin.filters_quota_limits() {
                continue;
            }
            if let Some(f) = plugin.as_filter() {
                f.filter(unit, state)?;
            }
        }
        Ok(())
    }

    /// Where the root capacity comes from: the first plugin that checks it
    /// ([`Plugin::capacity_source`]); `None` when none does.
    pub fn capacity_source(&self) -> Option<&CapacitySource> {
        self.plugins.iter().find_map(|p| p.capacity_source())
    }

    /// Accounts `amount` as held by the unit.
    pub fn reserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        for i in &self.reserves {
            if let Some(r) = self.plugins[*i].as_reserve() {
                r.reserve(unit, amount, state);
            }
        }
    }

    /// Takes back `amount` held by the unit.
    pub fn unreserve(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        for i in self.reserves.iter().rev() {
            if let Some(r) = self.plugins[*i].as_reserve() {
                r.unreserve(unit, amount, state);
            }
        }
    }

    /// Tells the reserve plugins that the unit's pods exist.
    pub fn started(&self, unit: &UnitRef<'_>, amount: &ResVec, state: &mut ClusterState) {
        for i in &self.reserves {
            if let Some(r) = self.plugins[*i].as_reserve() {
                r.started(unit, amount, state);
            }
        }
    }
}
