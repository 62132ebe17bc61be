//! The plugin registry: plugin names to constructors that take the plugin's
//! YAML arguments. The built-ins are registered by [`Registry::with_builtins`];
//! an embedding program may register its own before building the core.

use std::collections::BTreeMap;
use std::fmt;

use super::plugin::{ExtensionPoint, Plugin};
use super::plugins::{default_queue, elastic_quota, priority, resource_quota};

/// Builds a plugin from its `args` (absent when the configuration gives
/// none); an `Err` says what is wrong with the arguments.
pub type PluginFactory =
    Box<dyn Fn(Option<&serde_yaml::Value>) -> Result<Box<dyn Plugin>, String> + Send + Sync>;

struct Entry {
    points: Vec<ExtensionPoint>,
    factory: PluginFactory,
}

/// Known plugins by name.
#[derive(Default)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("plugins", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    /// No plugins.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in plugins: `Priority`, `ElasticQuota`, `DefaultQueue`, `ResourceQuota`.
    pub fn with_builtins() -> Self {
        let mut r = Self::empty();
        r.register(
            priority::NAME,
            &[ExtensionPoint::MultiQueueSort, ExtensionPoint::QueueSort],
            Box::new(|args| priority::PriorityPlugin::from_args(args).map(boxed)),
        );
        r.register(
            elastic_quota::NAME,
            &[
                ExtensionPoint::QueueUnitMapping,
                ExtensionPoint::Filter,
                ExtensionPoint::Reserve,
            ],
            Box::new(|args| elastic_quota::ElasticQuotaPlugin::from_args(args).map(boxed)),
        );
        r.register(
            default_queue::NAME,
            &[ExtensionPoint::QueueUnitMapping],
            Box::new(|args| default_queue::DefaultQueuePlugin::from_args(args).map(boxed)),
        );
        r.register(
            resource_quota::NAME,
            &[ExtensionPoint::Filter, ExtensionPoint::Reserve],
            Box::new(|args| resource_quota::ResourceQuotaPlugin::from_args(args).map(boxed)),
        );
        r
    }

    /// Registers (or replaces) plugin `name`, which implements `points`.
    pub fn register(&mut self, name: &str, points: &[ExtensionPoint], factory: PluginFactory) {
        self.entries.insert(
            name.to_string(),
            Entry {
                points: points.to_vec(),
                factory,
            },
        );
    }

    /// Builds plugin `name` from `args`; `None` if no such plugin is registered.
    pub fn build(
        &self,
        name: &str,
        args: Option<&serde_yaml::Value>,
    ) -> Option<Result<Box<dyn Plugin>, String>> {
        self.entries.get(name).map(|e| (e.factory)(args))
    }

    /// Names of the registered plugins, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Names of the registered plugins that implement `point`.
    pub fn providers(&self, point: ExtensionPoint) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(_, e)| e.points.contains(&point))
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

fn boxed<P: Plugin + 'static>(p: P) -> Box<dyn Plugin> {
    Box::new(p)
}
