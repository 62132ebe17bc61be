//! Builders and checks shared by the adapters' unit tests.

use serde_json::{Value, json};

use super::json::{annotation, set_path};
use super::{AdapterError, JobAdapter};
use crate::keys::SUSPEND_ANNOTATION;

pub(crate) const GI: i64 = 1 << 30;
pub(crate) const MI: i64 = 1 << 20;

/// A container requesting `cpu` and `memory`.
pub(crate) fn container(cpu: &str, memory: &str) -> Value {
    json!({
        "name": "main",
        "image": "registry.example/train:1.0",
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
    })
}

/// A container requesting `cpu`, `memory` and `gpus` NVIDIA GPUs (as a limit only).
pub(crate) fn gpu_container(cpu: &str, memory: &str, gpus: i64) -> Value {
    json!({
        "name": "main",
        "image": "registry.example/train:1.0",
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"nvidia.com/gpu": gpus}},
    })
}

/// A PodTemplateSpec with `containers` and, unless empty, a priority class.
pub(crate) fn pod_template(priority_class: &str, containers: Vec<Value>) -> Value {
    let mut t = json!({
        "metadata": {"labels": {"app": "train"}},
        "spec": {"restartPolicy": "Never", "containers": containers},
    });
    if !priority_class.is_empty() {
        t["spec"]["priorityClassName"] = json!(priority_class);
    }
    t
}

/// Checks the hold/release contract on `job` (which must start released) and
/// returns the held and the released object for kind-specific checks:
/// hold ⇒ held, release ⇒ not held and no suspend annotation, both idempotent.
pub(crate) fn assert_hold_release(adapter: &dyn JobAdapter, job: &Value) -> (Value, Value) {
    assert!(!adapter.is_held(job), "sample must start released");

    let mut held = job.clone();
    adapter.hold(&mut held);
    assert!(adapter.is_held(&held), "held after hold: {held}");
    let mut twice = held.clone();
    adapter.hold(&mut twice);
    assert_eq!(twice, held, "hold is idempotent");

    let mut released = held.clone();
    adapter.release(&mut released);
    assert!(
        !adapter.is_held(&released),
        "released after release: {released}"
    );
    assert_eq!(annotation(&released, SUSPEND_ANNOTATION), None);
    let mut twice = released.clone();
    adapter.release(&mut twice);
    assert_eq!(twice, released, "release is idempotent");

    // Holding a released job again gives the same held object.
    let mut again = released.clone();
    adapter.hold(&mut again);
    assert_eq!(again, held, "re-hold after release");
    (held, released)
}

/// Sets each field of `patch` under `at` in a copy of `job` and checks that
/// reading the pod sets fails, naming `want_path`.
pub(crate) fn malformed(
    adapter: &dyn JobAdapter,
    job: &Value,
    at: &[&str],
    patch: Value,
    want_path: &str,
) {
    let mut job = job.clone();
    for (key, value) in patch.as_object().expect("patch is an object") {
        let mut path = at.to_vec();
        path.push(key);
        set_path(&mut job, &path, value.clone());
    }
    match adapter.pod_sets(&job) {
        Err(AdapterError::Invalid { path, reason }) => {
            assert_eq!(path, want_path, "{reason}");
            assert!(!reason.is_empty());
        }
        other => panic!("{at:?} {patch}: expected an error at {want_path}, got {other:?}"),
    }
}
