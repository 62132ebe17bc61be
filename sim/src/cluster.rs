//! The cluster a simulation runs against, read from its own objects:
//! ElasticQuotas, Queues, the scheduler's configuration (a `plugins:`
//! document or the chart's ConfigMap), Nodes and PriorityClasses — as
//! `kubectl get elasticquotas,queues -A -o yaml` prints them (a `kind: List`)
//! or as multi-document YAML. They are translated into the core's model by
//! the scheduler's own functions (`QuotaRecord::to_def`, `QueueRecord::to_def`,
//! `queue_for_quota`, `root_capacity`).

use std::collections::{BTreeMap, HashMap};

use koord_queue_api::{ElasticQuota, Queue, keys};
use koord_queue_core::{
    CapacitySource, Core, QueueDef, QuotaDef, Registry, RootCapacity, SchedulerConfig,
};
use koord_queue_scheduler::DEFAULT_CONFIG;
use koord_queue_scheduler::controller::records::{
    NodeRecord, QueueRecord, QuotaRecord, queue_for_quota, root_capacity,
};
use serde::Deserialize;
use serde_yaml::Value;

/// Objects that do not make a cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Not YAML, or an object of a known kind that does not read as one.
    #[error("objects: {0}")]
    Objects(String),
    /// The scheduler's configuration is refused (as the scheduler would).
    #[error("{0}")]
    Config(#[from] koord_queue_core::ConfigError),
    /// Nothing tells the capacity.
    #[error(
        "the root capacity is automatic (rootCapacity: auto) but the objects hold neither the root \
         quota {root} nor Nodes: add one, set rootCapacity in the configuration, or pass --capacity"
    )]
    NoCapacity {
        /// The root quota's name.
        root: &'static str,
    },
}

/// The cluster's objects as the core is told of them.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// The scheduler's plugin configuration (the scheduler's default when
    /// the objects hold none).
    pub config: SchedulerConfig,
    /// The quota tree (the quota of each name, as the scheduler picks it).
    pub quotas: Vec<QuotaDef>,
    /// The queues: each Queue given, and the one the scheduler keeps for
    /// every quota that has none.
    pub queues: Vec<QueueDef>,
    /// The capacity an automatic root capacity takes (the root quota's max,
    /// else the Ready nodes'), if the objects tell it.
    pub auto_capacity: Option<RootCapacity>,
    /// PriorityClass values by name.
    pub priority_classes: HashMap<String, i32>,
    /// What was read and ignored, for the report.
    pub notes: Vec<String>,
}

/// The objects found, by kind.
#[derive(Default)]
struct Found {
    quotas: Vec<ElasticQuota>,
    queues: Vec<Queue>,
    nodes: Vec<NodeRecord>,
    configs: Vec<SchedulerConfig>,
    priority_classes: HashMap<String, i32>,
    notes: Vec<String>,
}

impl Cluster {
    /// Reads the objects of `texts` (each a YAML stream).
    pub fn from_yaml<S: AsRef<str>>(texts: &[S]) -> Result<Self, ClusterError> {
        let mut found = Found::default();
        for text in texts {
            for doc in serde_yaml::Deserializer::from_str(text.as_ref()) {
                let value =
                    Value::deserialize(doc).map_err(|e| ClusterError::Objects(e.to_string()))?;
                found.add(value)?;
            }
        }
        found.into_cluster()
    }

    /// The same cluster with its capacity fixed (`--capacity`): the
    /// configuration's `rootCapacity` and the objects' are set aside.
    pub fn with_capacity(mut self, capacity: RootCapacity) -> Self {
        self.auto_capacity = Some(capacity.clone());
        for plugin in &mut self.config.plugins {
            if plugin.name == "ElasticQuota" {
                plugin.args = None;
            }
        }
        self
    }

    /// A core built from the configuration, with the quotas, queues and
    /// capacity set — what a scheduler holds after its caches synced.
    pub fn core(&self) -> Result<Core, ClusterError> {
        let mut core = Core::new(&self.config, &Registry::with_builtins())?;
        // The simulator reads releases only, not each cycle's changed reasons.
        core.report_reasons(false);
        for quota in &self.quotas {
            // Refused names were filtered when reading.
            let _ = core.upsert_quota(quota);
        }
        for queue in &self.queues {
            core.upsert_queue(queue);
        }
        if core.capacity_source() == Some(&CapacitySource::Auto) {
            let capacity = self.auto_capacity.clone().ok_or(ClusterError::NoCapacity {
                root: keys::ROOT_QUOTA_NAME,
            })?;
            core.set_capacity(&capacity);
        }
        Ok(core)
    }
}

impl Found {
    fn add(&mut self, value: Value) -> Result<(), ClusterError> {
        if value.is_null() {
            return Ok(());
        }
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let bad = |what: &str, e: serde_yaml::Error| ClusterError::Objects(format!("{what}: {e}"));
        match kind {
            "List" | "ElasticQuotaList" | "QueueList" | "NodeList" | "PriorityClassList" => {
                let items = value
                    .get("items")
                    .and_then(Value::as_sequence)
                    .cloned()
                    .unwrap_or_default();
                for item in items {
                    self.add(item)?;
                }
            }
            "ElasticQuota" => self
                .quotas
                .push(serde_yaml::from_value(value).map_err(|e| bad("an ElasticQuota", e))?),
            "Queue" => self
                .queues
                .push(serde_yaml::from_value(value).map_err(|e| bad("a Queue", e))?),
            "Node" => {
                let node = serde_yaml::from_value(value).map_err(|e| bad("a Node", e))?;
                self.nodes.push(NodeRecord::from_node(&node));
            }
            "PriorityClass" => {
                let name = value.get("metadata").and_then(|m| m.get("name"));
                let v = value.get("value").and_then(Value::as_i64);
                if let (Some(name), Some(v)) = (name.and_then(Value::as_str), v) {
                    self.priority_classes
                        .insert(name.to_string(), i32::try_from(v).unwrap_or(0));
                }
            }
            "ConfigMap" => self.add_config_map(&value)?,
            "" if value.get("plugins").is_some() => self.configs.push(
                serde_yaml::from_value(value)
                    .map_err(|e| bad("the scheduler's configuration", e))?,
            ),
            other => self
                .notes
                .push(format!("ignored an object of kind {other:?}")),
        }
        Ok(())
    }

    /// The chart's ConfigMap: a data entry that is a plugin configuration.
    fn add_config_map(&mut self, value: &Value) -> Result<(), ClusterError> {
        let data = value.get("data").and_then(Value::as_mapping);
        for text in data.into_iter().flatten().filter_map(|(_, v)| v.as_str()) {
            let Ok(parsed) = serde_yaml::from_str::<Value>(text) else {
                continue;
            };
            if parsed.get("plugins").is_some() {
                self.configs.push(SchedulerConfig::from_yaml(text)?);
            }
        }
        Ok(())
    }

    fn into_cluster(mut self) -> Result<Cluster, ClusterError> {
        let config = match self.configs.len() {
            0 => SchedulerConfig::from_yaml(DEFAULT_CONFIG)?,
            1 => self.configs.remove(0),
            n => {
                return Err(ClusterError::Objects(format!(
                    "{n} scheduler configurations among the objects; give one"
                )));
            }
        };
        // The quota of each name, as the scheduler picks it (the oldest).
        let (winners, shadowed) =
            koord_queue_api::elastic_quota::winners(&self.quotas, |q| &q.metadata);
        for (namespace, name) in shadowed {
            self.notes.push(format!(
                "ElasticQuota {namespace}/{name} is ignored: an older quota holds its name"
            ));
        }
        let records: BTreeMap<String, QuotaRecord> = winners
            .into_iter()
            .map(|(name, q)| (name, QuotaRecord::from_quota(q)))
            .collect();
        let mut quotas = Vec::new();
        for rec in records.values() {
            if let Some(invalid) = &rec.invalid {
                self.notes
                    .push(format!("ElasticQuota {} is ignored: {invalid}", rec.name));
            }
            quotas.extend(rec.to_def());
        }
        let mut queues: BTreeMap<String, QueueDef> = self
            .queues
            .iter()
            .map(|q| {
                let rec = QueueRecord::from_queue(q);
                (rec.name.clone(), rec.to_def())
            })
            .collect();
        for rec in records.values() {
            if rec.name == keys::ROOT_QUOTA_NAME || queues.contains_key(&rec.name) {
                continue;
            }
            let queue = queue_for_quota(rec, keys::SYSTEM_NAMESPACE);
            queues.insert(rec.name.clone(), QueueRecord::from_queue(&queue).to_def());
        }
        let root = records.get(keys::ROOT_QUOTA_NAME);
        let auto_capacity =
            (root.is_some() || !self.nodes.is_empty()).then(|| root_capacity(root, &self.nodes));
        Ok(Cluster {
            config,
            quotas,
            queues: queues.into_values().collect(),
            auto_capacity,
            priority_classes: self.priority_classes,
            notes: self.notes,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use koord_queue_core::RootCapacity;

    use super::{Cluster, ClusterError};

    const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.sigs.k8s.io/v1alpha1
  kind: ElasticQuota
  metadata: { name: a, namespace: team-a, labels: { koord-queue/queue-policy: Block } }
  spec: { min: { cpu: "4" }, max: { cpu: "8" } }
- apiVersion: scheduling.sigs.k8s.io/v1alpha1
  kind: ElasticQuota
  metadata: { name: koordinator-root-quota, namespace: kube-system }
  spec: { max: { cpu: "10" } }
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: Queue
  metadata: { name: other, namespace: koord-queue }
  spec: { queuePolicy: Priority, priority: 3 }
- apiVersion: v1
  kind: Secret
  metadata: { name: s }
"#;

    #[test]
    fn a_list_makes_quotas_their_queues_and_the_capacity() {
        let cluster = Cluster::from_yaml(&[LIST]).unwrap();
        assert_eq!(cluster.quotas.len(), 1);
        let names: Vec<_> = cluster.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["a", "other"]);
        assert_eq!(
            cluster.queues[0].policy,
            koord_queue_api::QueuePolicy::Block
        );
        assert_eq!(cluster.queues[1].priority, 3);
        let RootCapacity::Limited(cap) = cluster.auto_capacity.clone().unwrap() else {
            panic!("limited")
        };
        assert_eq!(cap.get("cpu"), 10_000);
        assert_eq!(cluster.notes.len(), 1);
        assert!(cluster.core().is_ok());
    }

    #[test]
    fn a_config_map_configures_and_an_automatic_capacity_needs_a_source() {
        let config = r#"
apiVersion: v1
kind: ConfigMap
metadata: { name: koord-queue-scheduler-config }
data:
  config.yaml: |
    plugins:
    - name: Priority
    - name: ElasticQuota
      args: { rootCapacity: auto }
"#;
        let cluster = Cluster::from_yaml(&[config]).unwrap();
        assert!(matches!(
            cluster.core(),
            Err(ClusterError::NoCapacity { .. })
        ));
        let fixed = "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: \"4\" } }\n";
        assert!(Cluster::from_yaml(&[fixed]).unwrap().core().is_ok());
        let bad = "plugins:\n- name: Nope\n";
        assert!(Cluster::from_yaml(&[bad]).unwrap().core().is_err());
    }
}
