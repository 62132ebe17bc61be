//! A job's QueueUnit, built from the job the way the webhook builds it at
//! admission; the scheduler uses the same builder to re-create the unit of a
//! held job whose unit is missing (architecture §4.6).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};
use serde_json::Value;

use super::{JobAdapter, pod_group, total_resources};
use crate::queue_unit::{PodSet, QueueUnit, QueueUnitSpec};
use crate::resources::ResourceListExt as _;

/// What admission decided about a job besides its spec.
#[derive(Clone, Debug)]
pub struct UnitPlacement {
    /// Namespace of the job and its unit.
    pub namespace: String,
    /// Name of the job.
    pub job_name: String,
    /// Name of the unit.
    pub unit_name: String,
    /// The queue the unit waits in.
    pub queue: String,
    /// The job's PriorityClass, if any.
    pub priority_class_name: Option<String>,
    /// Its value.
    pub priority: i32,
}

/// The QueueUnit of `job`: pod sets and total resources from the adapter,
/// the job's labels copied. An error says what in the job cannot be read.
pub fn queue_unit(
    adapter: &dyn JobAdapter,
    job: &Value,
    placement: UnitPlacement,
) -> Result<QueueUnit, String> {
    let pod_sets = pod_group::unit_pod_sets(adapter, job).map_err(|e| e.to_string())?;
    let total = total_resources(&pod_sets).to_list();
    let pod_set = pod_sets
        .into_iter()
        .map(|set| {
            let template =
                serde_json::from_value::<PodTemplateSpec>(set.template).map_err(|e| {
                    format!("pod set {}: the pod template cannot be read: {e}", set.name)
                })?;
            Ok(PodSet {
                name: set.name,
                count: set.count,
                template,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let kind = adapter.kind();
    let UnitPlacement {
        namespace,
        mut job_name,
        unit_name,
        queue,
        priority_class_name,
        priority,
    } = placement;
    // A pod group's unit stands for the group, not for the member that
    // happened to be admitted first.
    let mut consumer_kind = kind.kind;
    let member = adapter
        .grouping()
        .and_then(|grouping| grouping.membership(job))
        .transpose()
        .map_err(|e| e.to_string())?;
    if let Some(member) = member {
        consumer_kind = pod_group::GROUP_KIND;
        job_name = member.group;
    }
    let mut unit = QueueUnit::new(
        &unit_name,
        QueueUnitSpec {
            consumer_ref: ObjectReference {
                api_version: Some(kind.api_version()),
                kind: Some(consumer_kind.to_string()),
                namespace: Some(namespace.clone()),
                name: Some(job_name),
                ..Default::default()
            },
            priority: Some(priority),
            priority_class_name,
            queue,
            resource: total.clone(),
            request: total,
            pod_set,
            max_run_seconds: adapter.max_run_seconds(job),
        },
    );
    unit.metadata.namespace = Some(namespace);
    unit.metadata.labels = Some(string_map(job, "labels"));
    Ok(unit)
}

/// A string map of the job's metadata (`labels`, `annotations`).
pub fn string_map(job: &Value, field: &str) -> BTreeMap<String, String> {
    job.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}
