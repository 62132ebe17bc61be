//! A job as a watcher keeps it: its identity, annotations and the few fields
//! that tell whether it is held and how it is doing — nothing else.
//!
//! The scheduler watches every job of every enabled kind and reads, per job,
//! only what [`JobAdapter::is_held`](super::JobAdapter::is_held) and
//! [`JobAdapter::state`](super::JobAdapter::state) read. Decoding
//! each watch event whole (managed fields, pod templates, Argo's node tree)
//! into a `serde_json::Value` allocates a map entry per field, only to drop
//! them all; [`WatchedJob`] skips what it does not keep while it parses.

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::kept_meta::Kept;

/// An object key, borrowed from the input unless it holds escapes (serde's
/// own `Cow<str>` always copies).
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// The fields to keep below one level of an object.
#[derive(Debug, Default)]
struct FieldTree {
    /// Keep this value whole.
    whole: bool,
    /// Keys to descend into.
    children: Vec<(&'static str, FieldTree)>,
}

impl FieldTree {
    /// The union of `paths`.
    fn of<'p>(paths: impl IntoIterator<Item = &'p [&'static str]>) -> Self {
        let mut tree = Self::default();
        for path in paths {
            tree.insert(path);
        }
        tree
    }

    fn insert(&mut self, path: &[&'static str]) {
        match path.split_first() {
            None => self.whole = true,
            Some((key, rest)) => {
                let at = match self.children.iter().position(|(k, _)| k == key) {
                    Some(at) => at,
                    None => {
                        self.children.push((key, Self::default()));
                        self.children.len() - 1
                    }
                };
                if let Some((_, child)) = self.children.get_mut(at) {
                    child.insert(rest);
                }
            }
        }
    }

    fn child(&self, key: &str) -> Option<&Self> {
        self.children
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, child)| child)
    }
}

/// What every supported kind's adapter reads, below the object's root.
static STATE_FIELDS: LazyLock<FieldTree> = LazyLock::new(|| {
    FieldTree::of(
        super::all()
            .iter()
            .flat_map(|adapter| adapter.state_fields()),
    )
});

/// A job of any supported kind, reduced while it is decoded to its metadata
/// (without managed fields) and the
/// [`JobAdapter::state_fields`](super::JobAdapter::state_fields) of every
/// kind. Watched through `Api::<WatchedJob>::all_with(client, &resource)`.
#[derive(Clone, Debug, Default)]
pub struct WatchedJob {
    /// Everything but the managed fields.
    pub metadata: ObjectMeta,
    /// The kept fields (`spec`, `status`), with `metadata.annotations`
    /// added back by [`WatchedJob::into_view`].
    fields: Map<String, Value>,
}

impl WatchedJob {
    /// The job's metadata, and the job as the adapters read it: the kept
    /// fields and the annotations. Taken apart, not copied: this runs on
    /// every job event.
    pub fn into_view(self) -> (ObjectMeta, Value) {
        let Self {
            metadata,
            mut fields,
        } = self;
        fields.insert(
            "metadata".into(),
            serde_json::json!({ "annotations": metadata.annotations }),
        );
        (metadata, Value::Object(fields))
    }

    /// A job from a whole object (as tests and lists hold it).
    pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(value)
    }
}

impl<'de> Deserialize<'de> for WatchedJob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct JobVisitor;
        impl<'de> Visitor<'de> for JobVisitor {
            type Value = WatchedJob;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a job object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WatchedJob, A::Error> {
                let mut job = WatchedJob::default();
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    if key == "metadata" {
                        job.metadata = map.next_value::<Kept>()?.0;
                    } else {
                        keep_next(&mut map, &STATE_FIELDS, key, &mut job.fields)?;
                    }
                }
                Ok(job)
            }
        }
        deserializer.deserialize_map(JobVisitor)
    }
}

/// Decodes the value of `key` into `kept`, pruned to what `tree` keeps
/// below it, or skips it unparsed when `tree` keeps nothing there.
fn keep_next<'de, A: MapAccess<'de>>(
    map: &mut A,
    tree: &FieldTree,
    key: Cow<'de, str>,
    kept: &mut Map<String, Value>,
) -> Result<(), A::Error> {
    match tree.child(&key) {
        Some(child) => {
            let value = map.next_value_seed(Pruned(child))?;
            kept.insert(key.into_owned(), value);
        }
        None => {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(())
}

/// Decodes a value keeping only the fields of a [`FieldTree`].
struct Pruned<'t>(&'t FieldTree);

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if self.0.whole {
            Value::deserialize(deserializer)
        } else {
            deserializer.deserialize_any(self)
        }
    }
}

impl<'de> Visitor<'de> for Pruned<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            keep_next(&mut map, self.0, key, &mut kept)?;
        }
        Ok(Value::Object(kept))
    }
    // A value of another shape than the adapters expect is kept as it is:
    // they judge it (e.g. a `suspend` that is not a boolean does not hold).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

crate::dynamic_resource::dynamic_resource!(WatchedJob);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::{JobAdapter, JobState};

    /// Statuses of every kind, with the bulk a real object carries.
    fn statuses() -> Vec<Value> {
        vec![
            json!({}),
            json!({ "conditions": [{ "type": "Complete", "status": "True" }], "succeeded": 1 }),
            json!({ "conditions": [{ "type": "Failed", "status": "True" }] }),
            json!({ "ready": 1, "active": 2 }),
            json!({ "ready": 0, "active": 2 }),
            json!({ "active": 1 }),
            json!({ "conditions": [{ "type": "Running", "status": "True" }] }),
            json!({ "conditions": [{ "type": "Restarting", "status": "True" }] }),
            json!({ "conditions": [{ "type": "Succeeded", "status": "True" }] }),
            json!({ "jobDeploymentStatus": "Complete", "jobStatus": "FAILED" }),
            json!({ "jobDeploymentStatus": "Running" }),
            json!({ "jobStatus": "SUCCEEDED" }),
            json!({ "state": "ready" }),
            json!({ "applicationState": { "state": "COMPLETED", "errorMessage": "" }, "executorState": { "e1": "RUNNING" } }),
            json!({ "applicationState": { "state": "RUNNING" } }),
            json!({ "phase": "Running", "nodes": { "n1": { "phase": "Running" } } }),
            json!({ "phase": "Error" }),
        ]
    }

    fn object(adapter: &dyn JobAdapter, held: bool, status: &Value) -> Value {
        let mut job = json!({
            "apiVersion": adapter.kind().api_version(), "kind": adapter.kind().kind,
            "metadata": {
                "name": "j", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "annotations": { "koord-queue/queue-unit": "j-u1" },
                "managedFields": [{ "manager": "kubectl", "fieldsV1": { "f:spec": {} } }],
            },
            "spec": {
                "template": { "spec": { "containers": [{ "name": "c", "image": "i" }] } },
                "runPolicy": { "cleanPodPolicy": "None" },
            },
            "status": status,
        });
        if held {
            adapter.hold(&mut job);
        }
        job
    }

    #[test]
    fn every_adapter_judges_the_watched_job_as_the_whole_one() -> Result<(), serde_json::Error> {
        for adapter in crate::jobs::all() {
            for held in [true, false] {
                for status in statuses() {
                    let whole = object(*adapter, held, &status);
                    let (_, view) = WatchedJob::from_value(&whole)?.into_view();
                    let kind = adapter.kind().kind;
                    assert_eq!(
                        adapter.is_held(&view),
                        adapter.is_held(&whole),
                        "{kind} held {status}"
                    );
                    assert_eq!(
                        adapter.state(&view),
                        adapter.state(&whole),
                        "{kind} state {status}"
                    );
                }
            }
        }
        Ok(())
    }

    #[test]
    fn the_bulk_is_dropped_and_the_identity_kept() -> Result<(), serde_json::Error> {
        let adapter = crate::jobs::for_kind("batch", "Job")
            .ok_or_else(|| <serde_json::Error as de::Error>::custom("no Job adapter"))?;
        let whole = object(adapter, true, &json!({ "active": 1, "startTime": "t" }));
        let text = serde_json::to_string(&whole)?;
        let watched: WatchedJob = serde_json::from_str(&text)?;
        assert_eq!(watched.metadata.name.as_deref(), Some("j"));
        assert_eq!(watched.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(watched.metadata.resource_version.as_deref(), Some("7"));
        assert!(watched.metadata.managed_fields.is_none());
        let (_, view) = watched.into_view();
        // `runPolicy` is on the way to a Kubeflow field; its own fields go.
        assert_eq!(view["spec"], json!({ "suspend": true, "runPolicy": {} }));
        assert_eq!(view["status"], json!({ "active": 1 }));
        assert_eq!(adapter.state(&view), JobState::Running);
        Ok(())
    }

    #[test]
    fn a_field_of_an_unexpected_shape_is_kept_as_it_is() -> Result<(), serde_json::Error> {
        let watched: WatchedJob = serde_json::from_str(
            r#"{"metadata":{"name":"j"},"spec":{"suspend":"yes","runPolicy":[1]},"status":"odd"}"#,
        )?;
        let (_, view) = watched.into_view();
        assert_eq!(view["spec"]["suspend"], "yes");
        assert_eq!(view["spec"]["runPolicy"], json!([1]));
        assert_eq!(view["status"], "odd");
        Ok(())
    }

    #[test]
    fn only_the_union_of_the_paths_is_kept() -> Result<(), serde_json::Error> {
        let tree = FieldTree::of([&["a", "b"][..], &["a", "c"], &["d"]]);
        let whole = json!({ "a": { "b": 1, "c": { "x": 2 }, "e": 3 }, "d": [4], "f": 5 });
        let kept = Pruned(&tree).deserialize(&whole)?;
        assert_eq!(kept, json!({ "a": { "b": 1, "c": { "x": 2 } }, "d": [4] }));
        Ok(())
    }
}
