//! The resource request of one pod, computed as Kubernetes computes it for
//! scheduling and quota (`k8s.io/component-helpers/resource.PodRequests`):
//!
//! 1. the sum of the regular containers' requests;
//! 2. init containers in order: a restartable one (a sidecar,
//!    `restartPolicy: Always`) keeps running, so it is added to the sum and to a
//!    running sidecar total; each init container's peak is its own request plus
//!    the sidecars started before it (a sidecar's peak is the sidecar total);
//! 3. the pod needs the elementwise maximum of the sum and every init peak;
//! 4. pod-level requests (`spec.resources`, CPU, memory and huge pages only)
//!    replace the container total for the resources they name;
//! 5. plus `spec.overhead`.
//!
//! A container that sets a limit but no request for a resource counts the
//! limit: the API server defaults requests from limits when it creates the pod.

use serde_json::Value;

use super::AdapterError;
use super::json::{field, invalid, opt_array, opt_object, opt_str, type_name};
use crate::resources::{Resources, parse_quantity};

/// Resource request of one pod of a `PodTemplateSpec` (`{metadata, spec}`).
/// A template without `spec` has no containers and requests nothing.
pub fn pod_template_requests(template: &Value) -> Result<Resources, AdapterError> {
    template_requests_at(template, "template")
}

/// Resource request of one pod of a `PodSpec` (`{containers, initContainers, …}`).
pub fn pod_spec_requests(spec: &Value) -> Result<Resources, AdapterError> {
    spec_requests_at(spec, "spec")
}

/// [`pod_template_requests`] with `path` naming the template in error messages.
pub(crate) fn template_requests_at(
    template: &Value,
    path: &str,
) -> Result<Resources, AdapterError> {
    let Some(map) = opt_object(Some(template), path)? else {
        return Ok(Resources::new());
    };
    match map.get("spec") {
        None | Some(Value::Null) => Ok(Resources::new()),
        Some(spec) => spec_requests_at(spec, &format!("{path}.spec")),
    }
}

/// [`pod_spec_requests`] with `path` naming the spec in error messages.
pub(crate) fn spec_requests_at(spec: &Value, path: &str) -> Result<Resources, AdapterError> {
    let Some(spec) = opt_object(Some(spec), path)? else {
        return Ok(Resources::new());
    };

    let mut total = Resources::new();
    let containers_path = format!("{path}.containers");
    for (i, c) in opt_array(spec.get("containers"), &containers_path)?
        .iter()
        .enumerate()
    {
        total.add(&container_requests(c, &format!("{containers_path}[{i}]"))?);
    }

    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    let init_path = format!("{path}.initContainers");
    for (i, c) in opt_array(spec.get("initContainers"), &init_path)?
        .iter()
        .enumerate()
    {
        let c_path = format!("{init_path}[{i}]");
        let requests = container_requests(c, &c_path)?;
        let restart_policy = opt_str(
            field(c, "restartPolicy"),
            &format!("{c_path}.restartPolicy"),
        )?;
        if restart_policy == Some("Always") {
            // A sidecar runs beside everything that starts after it.
            total.add(&requests);
            sidecars.add(&requests);
            init_peak.max_with(&sidecars);
        } else {
            let mut peak = requests;
            peak.add(&sidecars);
            init_peak.max_with(&peak);
        }
    }
    total.max_with(&init_peak);

    apply_pod_level(
        &mut total,
        spec.get("resources"),
        &format!("{path}.resources"),
    )?;

    let overhead_path = format!("{path}.overhead");
    total.add(&resource_list(spec.get("overhead"), &overhead_path)?);
    Ok(total)
}

/// Pod-level resources (KEP 2837): a pod-level request replaces the aggregated
/// container request for the resources Kubernetes supports at pod level. A
/// pod-level limit without a request stands in for the request when no
/// container requests that resource, as the API server defaults it then.
fn apply_pod_level(
    total: &mut Resources,
    resources: Option<&Value>,
    path: &str,
) -> Result<(), AdapterError> {
    let Some(resources) = opt_object(resources, path)? else {
        return Ok(());
    };
    let requests = resource_list(resources.get("requests"), &format!("{path}.requests"))?;
    let limits = resource_list(resources.get("limits"), &format!("{path}.limits"))?;
    for (name, amount) in requests.iter() {
        if is_pod_level_resource(name) {
            total.set(name, amount);
        }
    }
    for (name, amount) in limits.iter() {
        if is_pod_level_resource(name) && !requests.contains(name) && total.get(name) == 0 {
            total.set(name, amount);
        }
    }
    Ok(())
}

/// Resources Kubernetes accepts in `spec.resources` (pod-level resources).
fn is_pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// Effective requests of one container: its requests, and its limits for the
/// resources it requests nothing of.
fn container_requests(container: &Value, path: &str) -> Result<Resources, AdapterError> {
    let Some(container) = opt_object(Some(container), path)? else {
        return Err(invalid(path, "expected a container object, found null"));
    };
    let res_path = format!("{path}.resources");
    let Some(resources) = opt_object(container.get("resources"), &res_path)? else {
        return Ok(Resources::new());
    };
    let mut requests = resource_list(resources.get("requests"), &format!("{res_path}.requests"))?;
    let limits = resource_list(resources.get("limits"), &format!("{res_path}.limits"))?;
    for (name, amount) in limits.iter() {
        if !requests.contains(name) {
            requests.set(name, amount);
        }
    }
    Ok(requests)
}

/// Parses a ResourceList JSON object (`{"cpu": "500m", "memory": "1Gi"}`).
/// Quantities may be strings or JSON numbers (`cpu: 2` in YAML); negative
/// amounts are refused.
pub(crate) fn resource_list(value: Option<&Value>, path: &str) -> Result<Resources, AdapterError> {
    let mut out = Resources::new();
    let Some(map) = opt_object(value, path)? else {
        return Ok(out);
    };
    for (name, quantity) in map {
        let q_path = format!("{path}.{name}");
        let text = match quantity {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(invalid(
                    &q_path,
                    format!("expected a quantity, found {}", type_name(other)),
                ));
            }
        };
        let amount = parse_quantity(name, &text).map_err(|e| invalid(&q_path, e.to_string()))?;
        if amount < 0 {
            return Err(invalid(&q_path, format!("quantity {text:?} is negative")));
        }
        out.set(name.clone(), amount);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    fn c(requests: Value) -> Value {
        json!({"name": "c", "image": "busybox", "resources": {"requests": requests}})
    }

    fn sidecar(requests: Value) -> Value {
        json!({"name": "s", "restartPolicy": "Always", "resources": {"requests": requests}})
    }

    fn pod(spec: Value) -> Resources {
        pod_template_requests(&json!({"metadata": {}, "spec": spec})).unwrap()
    }

    #[test]
    fn sums_regular_containers() {
        let r = pod(json!({"containers": [
            c(json!({"cpu": "500m", "memory": "1Gi"})),
            c(json!({"cpu": 1, "memory": "512Mi", "nvidia.com/gpu": "2"})),
        ]}));
        assert_eq!(r.get("cpu"), 1500);
        assert_eq!(r.get("memory"), GI + 512 * MI);
        assert_eq!(r.get("nvidia.com/gpu"), 2);
    }

    #[test]
    fn limits_stand_in_for_missing_requests() {
        let r = pod(json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": 1}}},
            {"name": "b", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "4", "memory": "1Gi"}}},
        ]}));
        // b requests 100m CPU (its limit does not count) and no memory (limit counts).
        assert_eq!(r.get("cpu"), 2100);
        assert_eq!(r.get("memory"), 3 * GI);
        assert_eq!(r.get("nvidia.com/gpu"), 1);
    }

    #[test]
    fn classic_init_containers_take_the_maximum() {
        // The example of the Kubernetes scheduler's documentation.
        let r = pod(json!({
            "initContainers": [c(json!({"cpu": "2", "memory": "1G"})), c(json!({"cpu": "2", "memory": "3G"}))],
            "containers": [c(json!({"cpu": "2", "memory": "1G"})), c(json!({"cpu": "1", "memory": "1G"}))],
        }));
        assert_eq!(r.get("cpu"), 3000);
        assert_eq!(r.get("memory"), 3_000_000_000);
    }

    #[test]
    fn sidecars_accumulate_in_order() {
        // sidecar A 100m, init B 800m, sidecar C 200m, init D 600m, app 700m:
        // peaks 100, 900, 300, 900; running 700 + 100 + 200 = 1000.
        let r = pod(json!({
            "initContainers": [
                sidecar(json!({"cpu": "100m"})),
                c(json!({"cpu": "800m"})),
                sidecar(json!({"cpu": "200m"})),
                c(json!({"cpu": "600m"})),
            ],
            "containers": [c(json!({"cpu": "700m"}))],
        }));
        assert_eq!(r.get("cpu"), 1000);

        // A large init container after a sidecar dominates: 2000 + 100.
        let r = pod(json!({
            "initContainers": [sidecar(json!({"cpu": "100m", "memory": "64Mi"})), c(json!({"cpu": "2"}))],
            "containers": [c(json!({"cpu": "500m", "memory": "128Mi"}))],
        }));
        assert_eq!(r.get("cpu"), 2100);
        assert_eq!(r.get("memory"), 192 * MI);

        // An init container before the sidecar does not see it: max(2000, 600).
        let r = pod(json!({
            "initContainers": [c(json!({"cpu": "2"})), sidecar(json!({"cpu": "100m"}))],
            "containers": [c(json!({"cpu": "500m"}))],
        }));
        assert_eq!(r.get("cpu"), 2000);
    }

    #[test]
    fn overhead_is_added() {
        let r = pod(json!({
            "containers": [c(json!({"cpu": "1", "memory": "1Gi"}))],
            "overhead": {"cpu": "250m", "memory": "120Mi"},
        }));
        assert_eq!(r.get("cpu"), 1250);
        assert_eq!(r.get("memory"), GI + 120 * MI);
    }

    #[test]
    fn pod_level_requests_replace_supported_resources() {
        let r = pod(json!({
            "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi", "nvidia.com/gpu": 1}},
            "containers": [
                c(json!({"cpu": "1", "nvidia.com/gpu": "1"})),
                {"name": "x", "image": "x"},
            ],
            "overhead": {"cpu": "100m"},
        }));
        assert_eq!(r.get("cpu"), 4100);
        // No container requests memory: the pod-level limit stands in.
        assert_eq!(r.get("memory"), 8 * GI);
        // Extended resources stay at container level.
        assert_eq!(r.get("nvidia.com/gpu"), 1);
    }

    #[test]
    fn accepts_pod_specs_and_empty_templates() {
        let r = pod_spec_requests(&json!({"containers": [c(json!({"cpu": "1"}))]})).unwrap();
        assert_eq!(r.get("cpu"), 1000);
        assert!(pod_template_requests(&json!({})).unwrap().is_zero());
        assert!(pod(json!({"containers": [{"name": "a"}]})).is_zero());
    }

    #[test]
    fn refuses_malformed_templates() {
        let cases = [
            (json!("nope"), "template"),
            (json!({"spec": []}), "template.spec"),
            (
                json!({"spec": {"containers": {}}}),
                "template.spec.containers",
            ),
            (
                json!({"spec": {"containers": [7]}}),
                "template.spec.containers[0]",
            ),
            (
                json!({"spec": {"containers": [{"resources": "x"}]}}),
                "template.spec.containers[0].resources",
            ),
            (
                json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}),
                "template.spec.containers[0].resources.requests.cpu",
            ),
            (
                json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "-1"}}}]}}),
                "template.spec.containers[0].resources.requests.cpu",
            ),
            (
                json!({"spec": {"initContainers": [{"resources": {"limits": {"memory": true}}}]}}),
                "template.spec.initContainers[0].resources.limits.memory",
            ),
            (
                json!({"spec": {"initContainers": [{"restartPolicy": 1}]}}),
                "template.spec.initContainers[0].restartPolicy",
            ),
            (
                json!({"spec": {"overhead": {"cpu": "x"}}}),
                "template.spec.overhead.cpu",
            ),
        ];
        for (template, want) in cases {
            match pod_template_requests(&template) {
                Err(AdapterError::Invalid { path, .. }) => assert_eq!(path, want, "{template}"),
                other => panic!("{template}: {other:?}"),
            }
        }
    }
}
