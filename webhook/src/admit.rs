//! The admission decision, as pure functions of the request, the cluster view
//! and the policy (design §6). The effects — creating the QueueUnit, reading
//! it back on UPDATE — are performed by [`crate::service`].

use std::collections::BTreeMap;

use koord_queue_api::jobs::{self, JobAdapter};
use koord_queue_api::keys;
use koord_queue_api::queue_unit::QueueUnit;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use crate::policy::Policy;
use crate::view::ClusterView;

/// Most quota names listed in a refusal.
const MAX_LISTED_QUOTAS: usize = 20;

/// What to do with a request.
#[derive(Debug)]
pub enum Verdict {
    /// Let it through unchanged.
    Allow,
    /// Hold the job (`patch`) and queue it (`unit`, created unless dry-run).
    Hold {
        /// JSON Patch relative to the submitted object.
        patch: json_patch::Patch,
        /// The job's QueueUnit.
        unit: Box<QueueUnit>,
    },
    /// The UPDATE lifts the hold of a queued job: allowed only if the unit
    /// named here has been released (looked up by the caller).
    CheckRelease {
        /// Namespace of the job and its unit.
        namespace: String,
        /// Name of the job.
        job: String,
        /// Name of the job's QueueUnit.
        unit: String,
    },
    /// Refuse, with the message the user sees.
    Deny(String),
}

/// The objects of a request as raw JSON. They are taken out of the review
/// before it is parsed, so a job is read once and never round-trips through
/// a typed object.
#[derive(Debug, Default)]
pub struct RequestObjects {
    /// `request.object`.
    pub object: Option<Value>,
    /// `request.oldObject`.
    pub old: Option<Value>,
}

/// Decides on `request`, whose objects are in `objects`.
pub fn decide(
    request: &AdmissionRequest<DynamicObject>,
    objects: &RequestObjects,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Verdict {
    let kind = &request.kind;
    let Some(adapter) = jobs::for_kind(&kind.group, &kind.kind) else {
        return Verdict::Deny(format!(
            "{}/{} {} is not a job kind Koord-Queue handles; remove it from the webhook configuration",
            kind.group, kind.version, kind.kind
        ));
    };
    if !policy.is_enabled(adapter.kind().extension) {
        return Verdict::Allow;
    }
    match request.operation {
        Operation::Create => decide_create(request, objects, adapter, view, policy),
        Operation::Update => decide_update(request, objects, adapter, policy),
        // Deletes and connects are not ours to judge.
        Operation::Delete | Operation::Connect => Verdict::Allow,
    }
}

fn object_json<'a>(object: Option<&'a Value>, which: &str) -> Result<&'a Value, String> {
    match object {
        Some(v) if v.is_object() => Ok(v),
        Some(Value::Null) | None => Err(format!("the request carries no {which}")),
        Some(_) => Err(format!("the {which} is not a JSON object")),
    }
}

fn decide_create(
    request: &AdmissionRequest<DynamicObject>,
    objects: &RequestObjects,
    adapter: &dyn JobAdapter,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Verdict {
    let job = match object_json(objects.object.as_ref(), "object") {
        Ok(job) => job,
        Err(message) => return Verdict::Deny(message),
    };
    if jobs::owned_by_managed_job(job) {
        // Its owner is queued already (e.g. a RayJob's RayCluster).
        return Verdict::Allow;
    }
    let Some(namespace) = request.namespace.clone().filter(|n| !n.is_empty()) else {
        return Verdict::Deny("a job must be namespaced".into());
    };
    let name = match job_name(job, &request.uid) {
        Ok(name) => name,
        Err(message) => return Verdict::Deny(message),
    };
    let kind = adapter.kind();
    let what = format!("{} {namespace}/{name}", kind.kind);

    let labels = jobs::unit::string_map(job, "labels");
    let queue = match choose_queue(&labels, &namespace, view, policy) {
        Ok(queue) => queue,
        Err(message) => return Verdict::Deny(format!("{what} cannot be queued: {message}")),
    };
    let (priority_class_name, priority) = match priority(adapter, job, view) {
        Ok(p) => p,
        Err(message) => return Verdict::Deny(format!("{what} cannot be queued: {message}")),
    };

    let unit_name = unit_name(&name, &request.uid);
    let mut held = job.clone();
    if job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        jobs::set_path(
            &mut held,
            &["metadata", "name"],
            Value::String(name.clone()),
        );
    }
    adapter.hold(&mut held);
    jobs::set_annotation(&mut held, keys::QUEUE_UNIT_ANNOTATION, &unit_name);
    jobs::set_annotation(&mut held, keys::QUEUE_ANNOTATION, &queue);
    let patch = json_patch::diff(job, &held);
    let placement = jobs::UnitPlacement {
        namespace,
        job_name: name,
        unit_name,
        queue,
        priority_class_name,
        priority,
    };
    match jobs::queue_unit(adapter, job, placement) {
        Ok(unit) => Verdict::Hold {
            patch,
            unit: Box::new(unit),
        },
        Err(message) => Verdict::Deny(format!("{what} cannot be queued: {message}")),
    }
}

fn decide_update(
    request: &AdmissionRequest<DynamicObject>,
    objects: &RequestObjects,
    adapter: &dyn JobAdapter,
    policy: &Policy,
) -> Verdict {
    let (old, new) = match (
        object_json(objects.old.as_ref(), "old object"),
        object_json(objects.object.as_ref(), "object"),
    ) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(m), _) | (_, Err(m)) => return Verdict::Deny(m),
    };
    if policy.is_scheduler(request) {
        return Verdict::Allow;
    }
    let old_unit = jobs::annotation(old, keys::QUEUE_UNIT_ANNOTATION);
    let new_unit = jobs::annotation(new, keys::QUEUE_UNIT_ANNOTATION);
    if old_unit.is_some() && old_unit != new_unit {
        return Verdict::Deny(format!(
            "the {} annotation is managed by Koord-Queue and cannot be changed",
            keys::QUEUE_UNIT_ANNOTATION
        ));
    }
    let lifts_hold = adapter.is_held(old) && !adapter.is_held(new);
    match (lifts_hold, old_unit) {
        (true, Some(unit)) => Verdict::CheckRelease {
            namespace: request.namespace.clone().unwrap_or_default(),
            job: request.name.clone(),
            unit: unit.to_string(),
        },
        // Not queued by Koord-Queue (created before the namespace opted in).
        _ => Verdict::Allow,
    }
}

/// The job's name; for a `generateName`-only object, a name the webhook
/// assigns now (so the QueueUnit can name its job), derived from the request
/// uid so that a retried call assigns the same name.
fn job_name(job: &Value, uid: &str) -> Result<String, String> {
    if let Some(name) = job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Ok(name.to_string());
    }
    let prefix = job
        .pointer("/metadata/generateName")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or("the job has neither metadata.name nor metadata.generateName")?;
    // Same rule as the API server: keep the name within 63 characters.
    let suffix = uid_fragment(uid, 5);
    let keep = prefix.len().min(63 - suffix.len());
    let prefix = prefix.get(..keep).unwrap_or(prefix);
    Ok(format!("{prefix}{suffix}"))
}

/// Name of a job's QueueUnit: the job name plus a fragment of the admission
/// uid. A job deleted and re-created under the same name gets a fresh unit,
/// and a retried admission call maps to the same unit.
pub fn unit_name(job: &str, uid: &str) -> String {
    let suffix = uid_fragment(uid, 8);
    let keep = job.len().min(253 - 1 - suffix.len());
    let job = job.get(..keep).unwrap_or(job).trim_end_matches(['-', '.']);
    format!("{job}-{suffix}")
}

/// `len` lowercase alphanumerics from the uid (hex digits of a UUID), padded
/// from a hash when the uid is short.
fn uid_fragment(uid: &str, len: usize) -> String {
    let mut out: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .take(len)
        .collect();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uid.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    while out.len() < len {
        let digit = (hash % 36) as u32;
        hash /= 36;
        out.push(char::from_digit(digit, 36).unwrap_or('0'));
    }
    out
}

/// Queue mapping (design §4.1): the job's quota label, else the namespace's
/// default queue, else the configured default; otherwise a refusal that
/// says what to set.
fn choose_queue(
    labels: &BTreeMap<String, String>,
    namespace: &str,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Result<String, String> {
    if let Some(quota) = labels.get(keys::QUOTA_NAME_LABEL).filter(|q| !q.is_empty()) {
        return match view.quota(quota) {
            Some(info) if info.is_parent => Err(format!(
                "ElasticQuota {quota:?} (label {}) is a parent quota; jobs must name a leaf quota: {}",
                keys::QUOTA_NAME_LABEL,
                list_quotas(view)
            )),
            Some(_) => Ok(quota.clone()),
            None => Err(format!(
                "ElasticQuota {quota:?} (label {}) does not exist; existing quotas: {}",
                keys::QUOTA_NAME_LABEL,
                list_quotas(view)
            )),
        };
    }
    if let Some(queue) = view
        .namespace_default_queue(namespace)
        .filter(|q| !q.is_empty())
    {
        return Ok(queue);
    }
    if let Some(queue) = policy.default_queue.clone() {
        return Ok(queue);
    }
    Err(format!(
        "it names no quota: set the label {}=<quota> on the job (existing quotas: {}) or the annotation {} on namespace {namespace}",
        keys::QUOTA_NAME_LABEL,
        list_quotas(view),
        keys::DEFAULT_QUEUE_ANNOTATION
    ))
}

fn list_quotas(view: &dyn ClusterView) -> String {
    let quotas = view.leaf_quotas();
    if quotas.is_empty() {
        return "none".into();
    }
    let mut text = quotas
        .iter()
        .take(MAX_LISTED_QUOTAS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if quotas.len() > MAX_LISTED_QUOTAS {
        text.push_str(&format!(" and {} more", quotas.len() - MAX_LISTED_QUOTAS));
    }
    text
}

/// The job's PriorityClass and its value; the global default when the job
/// names none; 0 without either.
fn priority(
    adapter: &dyn JobAdapter,
    job: &Value,
    view: &dyn ClusterView,
) -> Result<(Option<String>, i32), String> {
    match adapter.priority_class_name(job) {
        Some(name) => view
            .priority_class_value(&name)
            .map(|value| (Some(name.clone()), value))
            .ok_or_else(|| format!("PriorityClass {name:?} does not exist")),
        None => Ok(view
            .global_default_priority()
            .map(|(name, value)| (Some(name), value))
            .unwrap_or((None, 0))),
    }
}
