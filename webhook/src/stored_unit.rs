//! The QueueUnit of a job as the API server stores it. Built from the stored
//! object only, so a forged review cannot put its content into a unit: the
//! queue is the one the webhook's own patch recorded, the pod sets and
//! labels are the stored job's, and the unit is owned by the job's uid.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use koord_queue_api::QueueUnit;
use koord_queue_api::jobs::{self, JobAdapter, json};
use koord_queue_api::keys;
use serde_json::Value;

use crate::view::ClusterView;

/// The unit `unit_name` of `stored`, a job of `adapter` read from the API.
pub fn build(
    adapter: &dyn JobAdapter,
    stored: &Value,
    unit_name: &str,
    view: &dyn ClusterView,
) -> Result<QueueUnit, String> {
    let meta = |key: &str| json::get_path(stored, &["metadata", key]).and_then(Value::as_str);
    let (Some(namespace), Some(name), Some(uid)) = (meta("namespace"), meta("name"), meta("uid"))
    else {
        return Err("the stored job has no namespace, name or uid".into());
    };
    let queue = jobs::annotation(stored, keys::QUEUE_ANNOTATION)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| {
            format!(
                "the stored job has no {} annotation",
                keys::QUEUE_ANNOTATION
            )
        })?;
    // A class deleted since admission counts 0, as the scheduler's repair does.
    let (priority_class_name, priority) = crate::admit::priority(adapter, stored, view)
        .unwrap_or_else(|_| (adapter.priority_class_name(stored), 0));
    // Its templates were completed at admission; what its size is read
    // from besides them (a TrainJob's runtime) is completed the same way.
    let mut sized = stored.clone();
    jobs::pod_defaults::complete(&mut sized, &view.pod_defaults(namespace))?;
    let mut unit = jobs::queue_unit(
        adapter,
        &sized,
        jobs::UnitPlacement {
            namespace: namespace.to_string(),
            job_name: name.to_string(),
            unit_name: unit_name.to_string(),
            queue: queue.to_string(),
            priority_class_name,
            priority,
        },
    )?;
    // The quota it will hold outlives its job's pods (the scheduler takes
    // the finalizer off once they are gone): on from the start, a release
    // costs no write for it.
    unit.metadata.finalizers = Some(vec![keys::QUOTA_FINALIZER.to_string()]);
    if unit.spec.consumer_ref.kind.as_deref() == Some(jobs::pod_group::GROUP_KIND) {
        // A pod group's unit has no owner (a member's deletion must not
        // take it): it names the group's uid, as adoption would.
        let group = unit.spec.consumer_ref.name.clone().unwrap_or_default();
        unit.spec.consumer_ref.uid = Some(jobs::pod_group::group_uid(namespace, &group));
        return Ok(unit);
    }
    let kind = adapter.kind();
    // The reference the scheduler's adoption writes: garbage collection
    // deletes the unit with its job, and the scheduler sees it adopted.
    unit.metadata.owner_references = Some(vec![OwnerReference {
        api_version: kind.api_version(),
        kind: kind.kind.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }]);
    unit.spec.consumer_ref.uid = Some(uid.to_string());
    Ok(unit)
}
