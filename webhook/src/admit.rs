//! The admission decision, as pure functions of the request, the cluster view
//! and the policy (architecture §6, docs/security.md). What needs a read of the API
//! — a QueueUnit's phase, an owner's existence — comes back as a verdict that
//! names what to check; [`crate::service`] performs the reads.

use koord_queue_api::jobs::{self, JobAdapter, pod_defaults};
use koord_queue_api::keys;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use crate::mapping;
use crate::ownership;
use crate::policy::Policy;
use crate::verdict::{GroupMember, RequestObjects, Verdict, object_json};
use crate::view::ClusterView;

/// Decides on `request`, whose objects are in `objects`.
pub fn decide(
    request: &AdmissionRequest<DynamicObject>,
    objects: &RequestObjects,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Verdict {
    if let Some(sub) = request.sub_resource.as_deref() {
        return crate::update::decide_subresource(request, sub, objects, policy);
    }
    let kind = &request.kind;
    let Some(adapter) = jobs::for_kind(&kind.group, &kind.kind) else {
        return Verdict::Deny(format!(
            "{}/{} {} is not a job kind Koord-Queue handles; remove it from the webhook configuration",
            kind.group, kind.version, kind.kind
        ));
    };
    if !policy.reviews(adapter, &[objects.object.as_ref(), objects.old.as_ref()]) {
        return Verdict::Allow;
    }
    match request.operation {
        Operation::Create => decide_create(request, objects, adapter, view, policy),
        Operation::Update => crate::update::decide_update(request, objects, adapter, policy),
        // Deletes and connects are not ours to judge.
        Operation::Delete | Operation::Connect => Verdict::Allow,
    }
}

fn decide_create(
    request: &AdmissionRequest<DynamicObject>,
    objects: &RequestObjects,
    adapter: &'static dyn JobAdapter,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Verdict {
    let job = match object_json(objects.object.as_ref(), "object") {
        Ok(job) => job,
        Err(message) => return Verdict::Deny(message),
    };
    let Some(namespace) = request.namespace.clone().filter(|n| !n.is_empty()) else {
        return Verdict::Deny("a job must be namespaced".into());
    };
    let name = match job_name(job, &request.uid) {
        Ok(name) => name,
        Err(message) => return Verdict::Deny(message),
    };
    // Without reviewing every pod, the hooks send pods only from
    // namespaces that queue them.
    let namespace_queues_pods = !policy.review_pods || view.namespace_queues_pods(&namespace);
    let queued = if !policy.queues(adapter, job, namespace_queues_pods) {
        unqueued_pod(&namespace, &name, view)
    } else {
        hold_and_queue(request, job, adapter, &namespace, &name, view, policy)
    };
    match ownership::claim(adapter, job, &namespace, &name) {
        Ok(None) => queued,
        // A child of a managed job passes only if the claim is proven, and
        // names no class its namespace may not use (its pods would preempt
        // by it in kube-scheduler).
        Ok(Some(claim)) => match priority_allowed(adapter, job, &namespace, None, view, policy) {
            Err(message) => Verdict::Deny(format!(
                "{} {namespace}/{name} cannot be created: {message}",
                adapter.kind().kind
            )),
            Ok(()) => Verdict::CheckChild {
                claim: Box::new(claim),
                fallback: Box::new(queued),
            },
        },
        Err(message) => Verdict::Deny(format!(
            "{} {namespace}/{name} cannot be queued: {message}",
            adapter.kind().kind
        )),
    }
}

/// The verdict on a pod of namespace `namespace` that queues no pods and
/// that is no proven child of a queued job: it would run outside the queue.
/// Refused, unless the administrator labelled the namespace
/// `koord-queue/unqueued-pods=allow`.
fn unqueued_pod(namespace: &str, name: &str, view: &dyn ClusterView) -> Verdict {
    if view.namespace_allows_unqueued_pods(namespace) {
        return Verdict::Allow;
    }
    Verdict::Deny(format!(
        "Pod {namespace}/{name} would run outside the queue: namespace {namespace} queues jobs, \
         and a pod there runs only as a queued job's child (a Deployment's or a bare pod does \
         not). Run it as a Job; or the administrator labels the namespace {}=true to queue its \
         pods, or {}=allow to let them run unqueued",
        keys::QUEUE_PODS_NAMESPACE_LABEL,
        keys::UNQUEUED_PODS_NAMESPACE_LABEL
    ))
}

/// The verdict that holds `job` and queues it as a job of its own.
fn hold_and_queue(
    request: &AdmissionRequest<DynamicObject>,
    job: &Value,
    adapter: &'static dyn JobAdapter,
    namespace: &str,
    name: &str,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Verdict {
    let what = format!("{} {namespace}/{name}", adapter.kind().kind);
    let labels = jobs::unit::string_map(job, "labels");
    let route = match mapping::route(&labels, namespace, view, policy) {
        Ok(route) => route,
        Err(message) => return Verdict::Deny(format!("{what} cannot be queued: {message}")),
    };
    let (priority_class_name, priority) = match priority(adapter, job, view) {
        Ok(p) => p,
        Err(message) => return Verdict::Deny(format!("{what} cannot be queued: {message}")),
    };
    if let Err(message) = priority_allowed(
        adapter,
        job,
        namespace,
        route.quota.as_deref(),
        view,
        policy,
    ) {
        return Verdict::Deny(format!("{what} cannot be queued: {message}"));
    }

    // The members of a pod group name the group's one unit.
    let mut member = None;
    let mut group_index = None;
    let membership = adapter
        .grouping()
        .and_then(|grouping| grouping.membership(job));
    let unit_name = match membership {
        Some(Ok(m)) => {
            group_index = m.index_label().map(|(key, value)| (key, value.to_string()));
            let requests = match adapter.pod_sets(job) {
                Ok(sets) => sets
                    .into_iter()
                    .next()
                    .map(|s| s.per_pod)
                    .unwrap_or_default(),
                Err(e) => return Verdict::Deny(format!("{what} cannot be queued: {e}")),
            };
            let name = m.unit_name();
            member = Some(Box::new(GroupMember {
                group: m.group,
                role: m.role,
                size: m.size,
                requests,
            }));
            name
        }
        Some(Err(e)) => {
            return Verdict::Deny(format!("{what} cannot be queued: {e}"));
        }
        None => unit_name(name, &request.uid),
    };
    let mut held = job.clone();
    if job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        jobs::set_path(&mut held, &["metadata", "name"], Value::String(name.into()));
    }
    if let Some(reason) = adapter.cannot_hold(job) {
        return Verdict::Deny(format!("{what} cannot be queued: {reason}"));
    }
    adapter.hold(&mut held);
    if let Some((key, index)) = group_index {
        // The label LWS's own pod webhook would add to a leader (read from
        // its name when this webhook is called first): the group's members
        // are listed by it.
        jobs::set_path(
            &mut held,
            &["metadata", "labels", key],
            Value::String(index),
        );
    }
    if adapter.labels_queued() {
        jobs::set_path(
            &mut held,
            &["metadata", "labels", keys::QUEUED_LABEL],
            Value::String("true".into()),
        );
    }
    jobs::set_annotation(&mut held, keys::QUEUE_UNIT_ANNOTATION, &unit_name);
    jobs::set_annotation(&mut held, keys::QUEUE_ANNOTATION, &route.queue);
    if let Some(quota) = &route.quota {
        // A job routed by a default queue is charged as if it named the quota.
        jobs::set_path(
            &mut held,
            &["metadata", "labels", keys::QUOTA_NAME_LABEL],
            Value::String(quota.clone()),
        );
    }
    // What the API server will add to its pods is part of its size, and is
    // written into its templates: its pods then ask what its unit holds.
    // An attached size input (a TrainJob's runtime) is completed for the
    // size only: it is no part of the job.
    let defaults = view.pod_defaults(namespace);
    let mut input = held
        .as_object_mut()
        .and_then(|o| o.remove(jobs::SIZE_INPUT_KEY));
    if let Err(reason) = pod_defaults::complete(&mut held, &defaults) {
        return Verdict::Deny(format!("{what} cannot be queued: {reason}"));
    }
    let mut sized = held.clone();
    if let Some(input) = input.take() {
        let mut completed = input.clone();
        if let Err(reason) = pod_defaults::complete(&mut completed, &defaults) {
            return Verdict::Deny(format!("{what} cannot be queued: {reason}"));
        }
        jobs::attach_size_input(&mut held, input);
        jobs::attach_size_input(&mut sized, completed);
    }
    let patch = json_patch::diff(job, &held);
    let placement = jobs::UnitPlacement {
        namespace: namespace.to_string(),
        job_name: name.to_string(),
        unit_name,
        queue: route.queue,
        priority_class_name,
        priority,
    };
    match jobs::queue_unit(adapter, &sized, placement) {
        Ok(unit) => Verdict::Hold {
            patch,
            unit: Box::new(unit),
            adapter,
            job: name.to_string(),
            member,
        },
        Err(message) => Verdict::Deny(format!("{what} cannot be queued: {message}")),
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

/// The job's PriorityClass and its value; the global default when the job
/// names none; 0 without either.
pub(crate) fn priority(
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

/// Whether `job` may name the PriorityClass it names, in `namespace` and
/// charged to `quota`: priority is the administrator's. The cluster's own
/// classes (`system-…`) only where the policy allows them; where a
/// namespace's or a quota's `koord-queue/priority-classes` annotation lists
/// classes, only those. A job naming none gets the global default, which the
/// administrator chose.
pub(crate) fn priority_allowed(
    adapter: &dyn JobAdapter,
    job: &Value,
    namespace: &str,
    quota: Option<&str>,
    view: &dyn ClusterView,
    policy: &Policy,
) -> Result<(), String> {
    let Some(class) = adapter.priority_class_name(job) else {
        return Ok(());
    };
    if class.starts_with("system-") && !policy.allow_system_priority_classes {
        return Err(format!(
            "PriorityClass {class} is the cluster's own (system-…): a queued job may not use it, \
             its pods would preempt other tenants' work. Use a class of your namespace's"
        ));
    }
    let annotation = keys::PRIORITY_CLASSES_ANNOTATION;
    if let Some(allowed) = view.namespace_priority_classes(namespace)
        && !allowed.contains(&class)
    {
        return Err(format!(
            "namespace {namespace} allows the PriorityClasses [{}] (its annotation {annotation}), \
             not {class}",
            allowed.join(", ")
        ));
    }
    if let Some(quota) = quota
        && let Some(allowed) = view.quota(quota).and_then(|q| q.priority_classes)
        && !allowed.contains(&class)
    {
        return Err(format!(
            "ElasticQuota {quota} allows the PriorityClasses [{}] (its annotation {annotation}), \
             not {class}",
            allowed.join(", ")
        ));
    }
    Ok(())
}
