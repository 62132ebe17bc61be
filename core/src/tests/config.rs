//! Configuration parsing and validation errors.

use crate::plugin::{ExtensionPoint, Plugin, QueueSort, SortKey};
use crate::{ConfigError, Core, Registry, SchedulerConfig, UnitDef};

fn error(yaml: &str) -> String {
    Core::from_yaml(yaml).unwrap_err().to_string()
}

#[test]
fn a_valid_configuration_keeps_the_plugin_order() {
    let core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: \"600\" } }\n- name: ResourceQuota\n- name: DefaultQueue\n  args: { queue: batch }\n",
    )
    .unwrap();
    assert_eq!(
        core.plugin_names(),
        ["Priority", "ElasticQuota", "ResourceQuota", "DefaultQueue"]
    );
    let default = Core::new(&SchedulerConfig::default(), &Registry::with_builtins()).unwrap();
    assert_eq!(default.plugin_names(), ["Priority", "ElasticQuota"]);
}

#[test]
fn unknown_plugin() {
    assert_eq!(
        error("plugins:\n- name: Priority\n- name: ElasticQuotas\n"),
        "scheduler configuration: plugins[1]: unknown plugin \"ElasticQuotas\"; known plugins: DefaultQueue, ElasticQuota, Priority, ResourceQuota"
    );
}

#[test]
fn duplicate_plugin() {
    assert_eq!(
        error("plugins:\n- name: Priority\n- name: ResourceQuota\n- name: Priority\n"),
        "scheduler configuration: plugins[2]: plugin \"Priority\" is already listed at plugins[0]"
    );
}

#[test]
fn bad_arguments() {
    assert_eq!(
        error(
            "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: six } }\n"
        ),
        "scheduler configuration: plugins[1] (ElasticQuota): invalid args: rootCapacity.cpu: invalid quantity \"six\" for cpu: not a number"
    );
    assert_eq!(
        error("plugins:\n- name: Priority\n  args: { reverse: true }\n"),
        "scheduler configuration: plugins[0] (Priority): invalid args: this plugin takes no arguments, got a map"
    );
    assert_eq!(
        error("plugins:\n- name: Priority\n- name: DefaultQueue\n  args: { queue: 3 }\n"),
        "scheduler configuration: plugins[1] (DefaultQueue): invalid args: queue must be a non-empty string, got the number 3"
    );
    assert_eq!(
        error("plugins:\n- name: Priority\n- name: ResourceQuota\n  args: [1]\n"),
        "scheduler configuration: plugins[1] (ResourceQuota): invalid args: this plugin takes no arguments, got a list"
    );
}

#[test]
fn missing_extension_point() {
    assert_eq!(
        error("plugins:\n- name: ElasticQuota\n"),
        "scheduler configuration: no enabled plugin provides MultiQueueSort; enable one of: Priority"
    );
    assert_eq!(
        error("plugins: []\n"),
        "scheduler configuration: no enabled plugin provides MultiQueueSort; enable one of: Priority"
    );
}

#[test]
fn syntax_and_shape_errors() {
    let e = error("plugins:\n- nme: Priority\n");
    assert!(
        e.starts_with("scheduler configuration: plugins[0]: unknown field `nme`"),
        "{e}"
    );
    let e = error("plugin:\n- name: Priority\n");
    assert!(e.contains("unknown field `plugin`"), "{e}");
    let e = error("plugins: [");
    assert!(e.starts_with("scheduler configuration: "), "{e}");
    assert!(matches!(
        SchedulerConfig::from_yaml("plugins: 3"),
        Err(ConfigError::Syntax(_))
    ));
}

/// A second QueueSort provider for the conflict check.
#[derive(Debug)]
struct Fifo;

impl Plugin for Fifo {
    fn name(&self) -> &str {
        "Fifo"
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSort> {
        Some(self)
    }
}

impl QueueSort for Fifo {
    fn unit_order(&self, unit: &UnitDef) -> SortKey {
        SortKey([unit.created_ms, 0, 0])
    }
}

fn registry_with_fifo() -> Registry {
    let mut registry = Registry::with_builtins();
    registry.register(
        "Fifo",
        &[ExtensionPoint::QueueSort],
        Box::new(|_| Ok(Box::new(Fifo))),
    );
    registry
}

#[test]
fn two_plugins_for_a_single_extension_point() {
    let config = SchedulerConfig::from_yaml("plugins:\n- name: Priority\n- name: Fifo\n").unwrap();
    assert_eq!(
        Core::new(&config, &registry_with_fifo())
            .unwrap_err()
            .to_string(),
        "scheduler configuration: QueueSort is provided by both Priority and Fifo; enable only one of them"
    );
}

#[test]
fn a_registered_plugin_can_be_used() {
    let config = SchedulerConfig::from_yaml(
        "plugins:\n- name: Priority\n- name: Fifo\n- name: DefaultQueue\n",
    )
    .unwrap();
    // Priority also provides QueueSort, so it conflicts; without its sort the
    // configuration lacks MultiQueueSort. A registry can replace Priority:
    let mut registry = registry_with_fifo();
    assert!(Core::new(&config, &registry).is_err());
    registry.register(
        "Priority",
        &[ExtensionPoint::MultiQueueSort],
        Box::new(|_| Ok(Box::new(QueuesOnly))),
    );
    let mut core = Core::new(&config, &registry).unwrap();
    core.upsert_queue(&crate::QueueDef::new("default"));
    core.upsert_unit(&UnitDef::new("ns", "young").with_priority(9).created_at(2))
        .unwrap();
    core.upsert_unit(&UnitDef::new("ns", "old").created_at(1))
        .unwrap();
    let order: Vec<&str> = core.queue_waiting("default").map(|w| w.key).collect();
    assert_eq!(order, ["ns/old", "ns/young"]);
    assert!(
        registry
            .providers(ExtensionPoint::QueueSort)
            .contains(&"Fifo")
    );
}

/// Orders queues only.
#[derive(Debug)]
struct QueuesOnly;

impl Plugin for QueuesOnly {
    fn name(&self) -> &str {
        "Priority"
    }
    fn as_multi_queue_sort(&self) -> Option<&dyn crate::MultiQueueSort> {
        Some(self)
    }
}

impl crate::MultiQueueSort for QueuesOnly {
    fn queue_order(&self, _queue: &crate::QueueDef) -> SortKey {
        SortKey::default()
    }
}
