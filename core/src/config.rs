//! The scheduler's plugin configuration (YAML): the enabled plugins, in the
//! order they run, each with its own arguments.
//!
//! ```yaml
//! plugins:
//! - name: Priority
//! - name: ElasticQuota
//!   args: { rootCapacity: auto }   # or "unlimited", or { cpu: "600", memory: 2Ti }
//! - name: ResourceQuota
//! ```

use serde::Deserialize;

use super::plugin::ExtensionPoint;

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Enabled plugins, in order.
    pub plugins: Vec<PluginEntry>,
}

/// One enabled plugin.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// Registered name of the plugin.
    pub name: String,
    /// The plugin's arguments; their shape is the plugin's own.
    #[serde(default)]
    pub args: Option<serde_yaml::Value>,
}

impl PluginEntry {
    /// Plugin `name` without arguments.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            args: None,
        }
    }
}

/// The default configuration: `Priority`, then `ElasticQuota` with an
/// automatic root capacity.
impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            plugins: vec![
                PluginEntry::new("Priority"),
                PluginEntry::new("ElasticQuota"),
            ],
        }
    }
}

impl SchedulerConfig {
    /// Parses the YAML text of a configuration (its shape only; plugin names
    /// and arguments are checked when the core is built).
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))
    }
}

/// What is wrong with a configuration. The scheduler refuses to start with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML, or not of the expected shape.
    #[error("scheduler configuration: {0}")]
    Syntax(String),
    /// A plugin name that is not registered.
    #[error(
        "scheduler configuration: plugins[{index}]: unknown plugin {name:?}; known plugins: {known}"
    )]
    UnknownPlugin {
        /// Position in `plugins`.
        index: usize,
        /// The name given.
        name: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// The same plugin is listed twice.
    #[error(
        "scheduler configuration: plugins[{index}]: plugin {name:?} is already listed at plugins[{first}]"
    )]
    DuplicatePlugin {
        /// Position of the repetition.
        index: usize,
        /// The plugin.
        name: String,
        /// Position of the first listing.
        first: usize,
    },
    /// The plugin refused its arguments.
    #[error("scheduler configuration: plugins[{index}] ({name}): invalid args: {reason}")]
    InvalidArgs {
        /// Position in `plugins`.
        index: usize,
        /// The plugin.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// No enabled plugin implements a required extension point.
    #[error(
        "scheduler configuration: no enabled plugin provides {point}; enable one of: {candidates}"
    )]
    MissingExtensionPoint {
        /// The extension point.
        point: ExtensionPoint,
        /// Registered plugins that provide it, comma-separated.
        candidates: String,
    },
    /// Two enabled plugins implement an extension point only one may provide.
    #[error(
        "scheduler configuration: {point} is provided by both {first} and {second}; enable only one of them"
    )]
    ConflictingPlugins {
        /// The extension point.
        point: ExtensionPoint,
        /// The first plugin providing it.
        first: String,
        /// The second one.
        second: String,
    },
}
