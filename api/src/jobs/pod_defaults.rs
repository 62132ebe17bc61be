//! What the API server adds to a pod when it creates it, applied to a job's
//! pod templates at admission so that the job's size is what its pods will
//! request (docs/security.md "A job's size is what its pods will run").
//!
//! Admission plugins that run before any webhook complete a *pod*: the
//! LimitRanger gives each container the namespace's default requests and
//! limits, the RuntimeClass plugin sets the pod's overhead. A job's pod
//! *templates* get neither: a job whose containers ask nothing would be sized
//! 0 and run pods that ask the defaults. [`complete`] does to every pod
//! template of a job what those plugins will do to its pods; filling only
//! what is missing, it changes nothing the plugins would not.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// What the API server adds to the pods of one namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodDefaults {
    /// Default requests of a container, from the namespace's LimitRanges'
    /// `Container` items (`defaultRequest`; a later LimitRange's wins, as
    /// the LimitRanger reads them in list order).
    pub requests: Map<String, Value>,
    /// Default limits of a container (`default`).
    pub limits: Map<String, Value>,
    /// The cluster's RuntimeClasses by name: their `overhead.podFixed`, if
    /// they have one.
    pub runtime_classes: BTreeMap<String, Option<Value>>,
}

/// Completes every pod template of `object` (every object under a key
/// `template` whose `spec` has a `containers` list, at any depth, outside
/// the root's metadata and status) as the API server will complete its
/// pods. Overrides that are no templates (a TrainJob's
/// `podTemplateOverrides[].spec`) are left alone: defaults there would
/// override the runtime's own requests. Returns `Err` when a template names
/// a RuntimeClass that does not exist: the API server refuses such pods.
pub fn complete(object: &mut Value, defaults: &PodDefaults) -> Result<(), String> {
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    for (key, value) in map.iter_mut() {
        if key != "metadata" && key != "status" {
            walk(value, defaults)?;
        }
    }
    Ok(())
}

fn walk(value: &mut Value, defaults: &PodDefaults) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            if let Some(spec) = map
                .get_mut("template")
                .and_then(|t| t.get_mut("spec"))
                .filter(|s| s.get("containers").is_some_and(Value::is_array))
            {
                complete_spec(spec, defaults)?;
            }
            for child in map.values_mut() {
                walk(child, defaults)?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter_mut().try_for_each(|v| walk(v, defaults)),
        _ => Ok(()),
    }
}

/// One pod spec: its containers' defaults, and its RuntimeClass's overhead.
fn complete_spec(spec: &mut Value, defaults: &PodDefaults) -> Result<(), String> {
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers.iter_mut().filter(|c| c.is_object()) {
                complete_container(container, defaults);
            }
        }
    }
    let Some(class) = spec
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Ok(());
    };
    let Some(overhead) = defaults.runtime_classes.get(&class) else {
        return Err(format!(
            "its pods name RuntimeClass {class:?}, which does not exist: the API server would \
             refuse them"
        ));
    };
    if let (Some(overhead), Some(spec)) = (overhead, spec.as_object_mut())
        && spec.get("overhead").is_none_or(Value::is_null)
    {
        spec.insert("overhead".into(), overhead.clone());
    }
    Ok(())
}

/// The LimitRanger's defaults for one container: a default limit where it
/// sets none; a default request where it sets neither a request nor a limit
/// (a pod's own limit is its request: the API server defaults it so before
/// the LimitRanger runs).
fn complete_container(container: &mut Value, defaults: &PodDefaults) {
    let set = |field: &str| -> Vec<String> {
        container
            .pointer(&format!("/resources/{field}"))
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (own_requests, own_limits) = (set("requests"), set("limits"));
    let requests: Vec<(&String, &Value)> = defaults
        .requests
        .iter()
        .filter(|(name, _)| !own_requests.contains(name) && !own_limits.contains(name))
        .collect();
    let limits: Vec<(&String, &Value)> = defaults
        .limits
        .iter()
        .filter(|(name, _)| !own_limits.contains(name))
        .collect();
    for (field, additions) in [("requests", requests), ("limits", limits)] {
        for (name, amount) in additions {
            crate::jobs::set_path(container, &["resources", field, name], amount.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults() -> PodDefaults {
        let mut d = PodDefaults::default();
        d.requests.insert("cpu".into(), json!("1"));
        d.requests.insert("memory".into(), json!("256Mi"));
        d.limits.insert("cpu".into(), json!("2"));
        d.runtime_classes.insert(
            "kata".into(),
            Some(json!({ "cpu": "250m", "memory": "120Mi" })),
        );
        d.runtime_classes.insert("runc".into(), None);
        d
    }

    #[test]
    fn a_container_asking_nothing_gets_the_defaults() {
        let mut job = json!({ "spec": { "template": { "spec": {
            "containers": [{ "name": "main" }],
            "initContainers": [{ "name": "init", "resources": {} }] } } } });
        complete(&mut job, &defaults()).unwrap();
        let want =
            json!({ "requests": { "cpu": "1", "memory": "256Mi" }, "limits": { "cpu": "2" } });
        assert_eq!(
            job["spec"]["template"]["spec"]["containers"][0]["resources"],
            want
        );
        assert_eq!(
            job["spec"]["template"]["spec"]["initContainers"][0]["resources"],
            want
        );
    }

    #[test]
    fn what_a_container_sets_is_kept_and_a_limit_stands_for_its_request() {
        let mut job = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "main", "resources": { "limits": { "cpu": "3" }, "requests": { "memory": "1Gi" } } }
        ] } } } });
        complete(&mut job, &defaults()).unwrap();
        assert_eq!(
            job["spec"]["template"]["spec"]["containers"][0]["resources"],
            json!({ "limits": { "cpu": "3" }, "requests": { "memory": "1Gi" } })
        );
    }

    #[test]
    fn every_template_at_any_depth_and_only_templates() {
        // A JobSet's templates two levels down; a TrainJob's overrides are
        // no templates.
        let mut job = json!({
            "metadata": { "template": { "spec": { "containers": [{ "name": "x" }] } } },
            "spec": {
                "replicatedJobs": [{ "template": { "spec": { "template": { "spec": {
                    "containers": [{ "name": "w" }] } } } } }],
                "podTemplateOverrides": [{ "spec": { "containers": [{ "name": "node" }] } }] } });
        complete(&mut job, &defaults()).unwrap();
        let worker = &job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
        assert_eq!(worker["containers"][0]["resources"]["requests"]["cpu"], "1");
        assert_eq!(
            job["spec"]["podTemplateOverrides"][0]["spec"]["containers"][0],
            json!({ "name": "node" })
        );
        assert_eq!(
            job["metadata"]["template"]["spec"]["containers"][0],
            json!({ "name": "x" })
        );
    }

    #[test]
    fn a_runtime_class_adds_its_overhead_and_a_missing_one_is_refused() {
        let mut job = json!({ "spec": { "template": { "spec": {
            "runtimeClassName": "kata", "containers": [] } } } });
        complete(&mut job, &defaults()).unwrap();
        assert_eq!(
            job["spec"]["template"]["spec"]["overhead"],
            json!({ "cpu": "250m", "memory": "120Mi" })
        );
        let mut plain = json!({ "spec": { "template": { "spec": {
            "runtimeClassName": "runc", "containers": [] } } } });
        complete(&mut plain, &defaults()).unwrap();
        assert!(plain["spec"]["template"]["spec"].get("overhead").is_none());
        let mut missing = json!({ "spec": { "template": { "spec": {
            "runtimeClassName": "gvisor", "containers": [] } } } });
        let err = complete(&mut missing, &defaults()).unwrap_err();
        assert!(
            err.contains("RuntimeClass \"gvisor\", which does not exist"),
            "{err}"
        );
    }

    #[test]
    fn without_defaults_nothing_changes() {
        let job =
            json!({ "spec": { "template": { "spec": { "containers": [{ "name": "m" }] } } } });
        let mut same = job.clone();
        complete(&mut same, &PodDefaults::default()).unwrap();
        assert_eq!(same, job);
    }
}
