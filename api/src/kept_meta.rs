//! Object metadata as a watcher keeps it: everything but `managedFields`.
//!
//! Managed fields are the largest part of a small object's metadata — one
//! entry per writer, each a tree of every field it set — and nothing that
//! Koord-Queue watches reads them. Decoded with the rest they cost a map
//! entry per field of every watch event; here they are skipped unparsed.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptMeta {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

/// An object's `metadata`, decoded without its managed fields.
#[derive(Debug)]
pub struct Kept(pub ObjectMeta);

impl<'de> Deserialize<'de> for Kept {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        without_managed_fields(d).map(Kept)
    }
}

/// Decodes an object's `metadata` without its managed fields (for
/// `#[serde(deserialize_with = "…")]`).
pub fn without_managed_fields<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = KeptMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        generate_name: m.generate_name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references,
        finalizers: m.finalizers,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        managed_fields: None,
        self_link: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Object {
        #[serde(deserialize_with = "without_managed_fields")]
        metadata: ObjectMeta,
    }

    #[test]
    fn everything_but_the_managed_fields_is_kept() -> Result<(), serde_json::Error> {
        let meta = serde_json::json!({
            "name": "n", "namespace": "ns", "uid": "u", "resourceVersion": "9", "generation": 2,
            "labels": { "l": "1" }, "annotations": { "a": "2" }, "finalizers": ["f"],
            "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju" }],
            "creationTimestamp": "2026-11-30T00:00:00Z", "deletionTimestamp": "2026-11-30T00:00:01Z",
            "deletionGracePeriodSeconds": 0, "generateName": "n-",
        });
        let mut with_fields = meta.clone();
        with_fields["managedFields"] =
            serde_json::json!([{ "manager": "m", "fieldsV1": { "f:x": {} } }]);
        let kept: Object = serde_json::from_value(serde_json::json!({ "metadata": with_fields }))?;
        let whole: ObjectMeta = serde_json::from_value(meta)?;
        assert_eq!(kept.metadata, whole);
        Ok(())
    }
}
