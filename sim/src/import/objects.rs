//! Cluster objects an importer writes next to its trace (the shape's quota
//! tree, a starting point for an SWF log): ElasticQuotas and the scheduler's
//! configuration, as multi-document YAML that `run --objects` reads.

use koord_queue_api::{Resources, keys};
use serde_json::{Value, json};

/// An ElasticQuota to write.
#[derive(Clone, Debug, Default)]
pub struct QuotaSpec {
    /// Name.
    pub name: String,
    /// Parent quota, if not the root.
    pub parent: Option<String>,
    /// An inner node.
    pub is_parent: bool,
    /// Its children share fairly.
    pub fair_sharing: bool,
    /// Weight among fair-sharing siblings (`None`: the default, 1).
    pub weight: Option<String>,
    /// Min.
    pub min: Resources,
    /// Max (resources not named: unlimited).
    pub max: Resources,
    /// Namespaces it serves besides its own.
    pub namespaces: Vec<String>,
}

fn resource_list(r: &Resources) -> Value {
    Value::Object(
        r.to_quantities()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect(),
    )
}

impl QuotaSpec {
    /// The object.
    pub fn to_object(&self) -> Value {
        let mut labels = serde_json::Map::new();
        if let Some(p) = &self.parent {
            labels.insert(keys::QUOTA_PARENT_LABEL.into(), p.clone().into());
        }
        if self.is_parent {
            labels.insert(keys::QUOTA_IS_PARENT_LABEL.into(), "true".into());
        }
        let mut annotations = serde_json::Map::new();
        if self.fair_sharing {
            annotations.insert(keys::FAIR_SHARING_ANNOTATION.into(), "true".into());
        }
        if let Some(w) = &self.weight {
            annotations.insert(keys::FAIR_SHARE_WEIGHT_ANNOTATION.into(), w.clone().into());
        }
        if !self.namespaces.is_empty() {
            annotations.insert(
                keys::QUOTA_NAMESPACES_ANNOTATION.into(),
                serde_json::to_string(&self.namespaces)
                    .unwrap_or_default()
                    .into(),
            );
        }
        json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": { "name": self.name, "namespace": keys::SYSTEM_NAMESPACE,
                          "labels": labels, "annotations": annotations },
            "spec": { "min": resource_list(&self.min), "max": resource_list(&self.max) },
        })
    }
}

/// The scheduler's configuration with a fixed root capacity (`None`:
/// unlimited).
pub fn config(capacity: Option<&Resources>) -> Value {
    let root = capacity.map_or_else(|| Value::String("unlimited".into()), resource_list);
    json!({ "plugins": [
        { "name": "Priority" },
        { "name": "ElasticQuota", "args": { "rootCapacity": root } },
    ]})
}

/// `docs` as multi-document YAML.
pub fn to_yaml(docs: &[Value]) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(doc)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use koord_queue_api::Resources;

    use super::{QuotaSpec, config, to_yaml};
    use crate::cluster::Cluster;

    #[test]
    fn written_objects_read_back_as_a_cluster() {
        let mut cap = Resources::new();
        cap.set("cpu", 8000);
        let parent = QuotaSpec {
            name: "p".into(),
            is_parent: true,
            fair_sharing: true,
            max: cap.clone(),
            ..QuotaSpec::default()
        };
        let child = QuotaSpec {
            name: "c".into(),
            parent: Some("p".into()),
            weight: Some("2".into()),
            ..QuotaSpec::default()
        };
        let yaml = to_yaml(&[config(Some(&cap)), parent.to_object(), child.to_object()]).unwrap();
        let cluster = Cluster::from_yaml(&[yaml]).unwrap();
        assert_eq!(cluster.quotas.len(), 2);
        let c = cluster.quotas.iter().find(|q| q.name == "c").unwrap();
        assert_eq!((c.parent.as_deref(), c.weight_milli), (Some("p"), 2000));
        assert!(cluster.quotas.iter().any(|q| q.fair_sharing));
        assert!(cluster.core().is_ok());
    }
}
