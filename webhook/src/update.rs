//! Updates of queued jobs and of managed jobs' children (docs/security.md):
//! anyone but the scheduler may change a queued job only in ways that keep
//! it within what its unit holds and keep its hold.
//!
//! - The hold is lifted only while the unit holds quota, whichever marker a
//!   request touches ([`guard::loosens_hold`]); a finished job stays finished.
//! - The size never grows ([`guard::update_growth`]), held or released:
//!   shrinking is allowed (the unit keeps holding what it reserved).
//! - What admission decided stays: the unit annotation, the queue annotation,
//!   the quota label; and a child keeps its controller reference.
//! - A queued job's run bound (`activeDeadlineSeconds`) is never raised or
//!   removed: a unit backfilled behind a reserving head passed on it.
//! - `/scale` may not add replicas to a queued job or a child.

use koord_queue_api::jobs::{self, JobAdapter, JobState, guard, pod_group};
use koord_queue_api::keys;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use crate::ownership;
use crate::policy::Policy;
use crate::verdict::{RequestObjects, Verdict, object_json};

/// An UPDATE of a job of an enabled kind.
pub(crate) fn decide_update(
    request: &AdmissionRequest<DynamicObject>,
    objects: &RequestObjects,
    adapter: &'static dyn JobAdapter,
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
    let namespace = request.namespace.clone().unwrap_or_default();
    let what = format!("{} {namespace}/{}", adapter.kind().kind, request.name);
    let unit = jobs::annotation(old, keys::QUEUE_UNIT_ANNOTATION);
    let owner = ownership::managed_controller(old);
    // A child the garbage collector orphaned still ran on its unit: it
    // stays judged as a child (no growth, no lifted hold).
    let charged =
        jobs::json::get_path(old, &["metadata", "labels", keys::CHARGED_TO_LABEL]).is_some();
    if unit.is_none() && owner.is_none() && !charged {
        // Not queued by Koord-Queue (created before the namespace opted in).
        return Verdict::Allow;
    }
    // The garbage collector orphans a deleted owner's children by removing
    // their controller reference: allowed once the owner is going with the
    // `orphan` finalizer, or gone (read by the caller).
    let orphaning = unit.is_none()
        && ownership::managed_controller(new).is_none()
        && owner.is_some()
        && changed_admission(old, new, false).is_some_and(|r| r == CONTROLLER_CHANGED)
        && changed_admission(&without_owners(old), &without_owners(new), false).is_none();
    if !orphaning && let Some(refusal) = changed_admission(old, new, unit.is_some()) {
        return Verdict::Deny(format!("{what}: {refusal}"));
    }
    match guard::update_growth(adapter, old, new) {
        Err(e) => return Verdict::Deny(format!("{what} cannot be read: {e}")),
        Ok(Some(growth)) => return Verdict::Deny(size_fixed(&what, adapter, old, &growth)),
        Ok(None) => {}
    }
    if unit.is_some()
        && let Some(was) = adapter.max_run_seconds(old)
        && adapter.max_run_seconds(new).is_none_or(|now| now > was)
    {
        return Verdict::Deny(format!(
            "{what}: its run bound (activeDeadlineSeconds {was}) cannot be raised or removed: \
             the queue may have let it pass a reserving job on that bound. Lowering it is allowed"
        ));
    }
    if finished(adapter.state(old)) && !finished(adapter.state(new)) {
        return Verdict::Deny(format!(
            "{what} has finished and stays finished: running it again needs a new job (and a new QueueUnit)"
        ));
    }
    if !guard::loosens_hold(adapter, old, new) {
        return match (orphaning, owner) {
            (true, Some(owner)) => Verdict::CheckOrphaning {
                owner: Box::new(owner),
                namespace,
                child: what,
            },
            _ => Verdict::Allow,
        };
    }
    if unit.is_some() && pod_group::membership(old).is_some() {
        // Its unit may hold quota while the member may not run: the gang
        // is not complete, or the member is beyond the group's size.
        return Verdict::Deny(format!(
            "{what} stays held: it is queued as a member of a pod group, whose members only \
             Koord-Queue releases (the group whole, within the size it was queued with)"
        ));
    }
    match (unit, owner) {
        (Some(unit), _) => Verdict::CheckRelease {
            namespace,
            job: request.name.clone(),
            unit: unit.to_string(),
        },
        (None, Some(_)) => match ownership::claim(adapter, new, &namespace, &request.name) {
            Ok(Some(claim)) => Verdict::CheckChild {
                claim: Box::new(claim),
                fallback: Box::new(Verdict::Deny(format!(
                    "{what} stays held: only its owner's controller may start it, once its owner holds quota"
                ))),
            },
            Ok(None) => Verdict::Deny(format!("{what} stays held")),
            Err(e) => Verdict::Deny(format!("{what} cannot be read: {e}")),
        },
        (None, None) => Verdict::Deny(format!(
            "{what} stays held: it was a queued job's child, and no longer has an owner whose \
             unit could hold quota for it"
        )),
    }
}

/// The refusal of a changed controller reference (see [`changed_admission`]).
const CONTROLLER_CHANGED: &str = "the controller reference of a managed job's child cannot be \
     changed or removed: the child runs on its owner's quota";

/// `object` without its ownerReferences, to compare what else an update
/// changes.
fn without_owners(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("ownerReferences");
    }
    object
}

fn finished(state: JobState) -> bool {
    matches!(state, JobState::Succeeded | JobState::Failed)
}

/// What an update changes of the decisions made at admission, if anything.
fn changed_admission(old: &Value, new: &Value, queued: bool) -> Option<String> {
    let label = |job: &Value| {
        jobs::json::get_path(job, &["metadata", "labels", keys::QUOTA_NAME_LABEL])
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if queued {
        for key in [keys::QUEUE_UNIT_ANNOTATION, keys::QUEUE_ANNOTATION] {
            if jobs::annotation(old, key) != jobs::annotation(new, key) {
                return Some(format!(
                    "the annotation {key} is managed by Koord-Queue (set at admission) and cannot be changed"
                ));
            }
        }
        if label(old) != label(new) {
            return Some(format!(
                "the label {} of a queued job cannot be changed: it names the quota its unit is charged to",
                keys::QUOTA_NAME_LABEL
            ));
        }
        // A pod group's member stays in the group it was queued in, at
        // the size it was queued with: these name its unit and bound what
        // the unit releases.
        let group_label = |job: &Value, key: &str| {
            jobs::json::get_path(job, &["metadata", "labels", key]).cloned()
        };
        for key in pod_group::MEMBERSHIP_LABELS {
            if group_label(old, key) != group_label(new, key) {
                return Some(format!(
                    "the label {key} of a queued pod cannot be changed: it names the pod group \
                     whose unit the pod runs on"
                ));
            }
        }
        for key in pod_group::SIZE_ANNOTATIONS {
            if jobs::annotation(old, key) != jobs::annotation(new, key) {
                return Some(format!(
                    "the annotation {key} of a queued pod cannot be changed: the group's size is \
                     fixed when it is queued"
                ));
            }
        }
        let queued_label = |job: &Value| {
            jobs::json::get_path(job, &["metadata", "labels", keys::QUEUED_LABEL]).cloned()
        };
        if queued_label(old) != queued_label(new) {
            return Some(format!(
                "the label {} is managed by Koord-Queue (set at admission) and cannot be changed: \
                 the scheduler follows the object by it",
                keys::QUEUED_LABEL
            ));
        }
        // Any other key of ours (but a Workflow's stated size, which the
        // size rule judges): none is the tenant's to add or change.
        let others = |job: &Value| {
            let mut ours = crate::children::own_keys_of(job);
            ours.retain(|(k, _)| k != keys::MIN_RESOURCES_ANNOTATION);
            ours
        };
        if others(old) != others(new) {
            return Some(format!(
                "the {}* labels and annotations of a queued job are Koord-Queue's and cannot be \
                 added, changed or removed",
                keys::KEY_PREFIX
            ));
        }
    }
    let controller = |job: &Value| {
        ownership::managed_controller(job).map(|o| (o.adapter.kind().kind, o.name, o.uid))
    };
    if !queued && controller(old) != controller(new) {
        return Some(CONTROLLER_CHANGED.into());
    }
    if !queued && crate::children::own_keys_of(old) != crate::children::own_keys_of(new) {
        return Some(format!(
            "the {}* labels and annotations of a managed job's child are Koord-Queue's: they \
             say which unit pays for it, and cannot be added, changed or removed",
            keys::KEY_PREFIX
        ));
    }
    None
}

/// The refusal of a growing update.
fn size_fixed(what: &str, adapter: &dyn JobAdapter, old: &Value, growth: &str) -> String {
    let total = adapter
        .pod_sets(old)
        .map(|sets| jobs::total_resources(&sets).to_string())
        .unwrap_or_else(|_| "its size".into());
    let quota = jobs::json::get_path(old, &["metadata", "labels", keys::QUOTA_NAME_LABEL])
        .and_then(Value::as_str)
        .or_else(|| jobs::annotation(old, keys::QUEUE_ANNOTATION));
    let held_in = match (jobs::annotation(old, keys::QUEUE_UNIT_ANNOTATION), quota) {
        (Some(unit), Some(quota)) => format!("QueueUnit {unit} holds {total} of quota {quota}"),
        (Some(unit), None) => format!("QueueUnit {unit} holds {total}"),
        (None, _) => format!("it runs on its owner's quota within {total}"),
    };
    format!(
        "{what} cannot grow ({growth}): its {held_in}. The size of a queued job is fixed; \
         delete it and create it again to resize"
    )
}

/// A request on a subresource of a job kind. Only `/scale` and a Pod's
/// `/resize` change what a job runs; status and others are not ours to judge.
pub(crate) fn decide_subresource(
    request: &AdmissionRequest<DynamicObject>,
    sub: &str,
    objects: &RequestObjects,
    policy: &Policy,
) -> Verdict {
    if sub == "resize" && request.operation == Operation::Update {
        // A Pod's in-place resize: the whole Pod before and after, judged
        // as any update of it (a queued pod's size is fixed).
        let kind = &request.kind;
        return match jobs::for_kind(&kind.group, &kind.kind) {
            Some(adapter) if policy.reviews(adapter, &[objects.object.as_ref()]) => {
                decide_update(request, objects, adapter, policy)
            }
            _ => Verdict::Allow,
        };
    }
    if sub != "scale" || request.operation != Operation::Update || policy.is_scheduler(request) {
        return Verdict::Allow;
    }
    let resource = &request.resource;
    let Some(adapter) = jobs::for_resource(&resource.group, &resource.resource) else {
        return Verdict::Deny(format!(
            "{}/{} is not a job resource Koord-Queue handles; remove it from the webhook configuration",
            resource.group, resource.resource
        ));
    };
    if !policy.is_enabled(adapter.kind().extension) {
        return Verdict::Allow;
    }
    let replicas = |object: Option<&Value>, which| -> Result<i64, String> {
        let scale = object_json(object, which)?;
        Ok(jobs::json::get_path(scale, &["spec", "replicas"])
            .and_then(Value::as_i64)
            .unwrap_or(0))
    };
    match (
        replicas(objects.old.as_ref(), "old object"),
        replicas(objects.object.as_ref(), "object"),
    ) {
        (Ok(from), Ok(to)) if to <= from => Verdict::Allow,
        (Ok(from), Ok(to)) => Verdict::CheckScale {
            adapter,
            namespace: request.namespace.clone().unwrap_or_default(),
            name: request.name.clone(),
            replicas: (from, to),
        },
        (Err(m), _) | (_, Err(m)) => Verdict::Deny(m),
    }
}
