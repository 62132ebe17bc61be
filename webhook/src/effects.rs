//! What a verdict comes to once the reads it names are made: a proven
//! child counted against the unit it runs on, a pod group's member checked
//! against its group's unit, a held job's unit created after the answer, a
//! lifted hold allowed only while the unit holds quota, an orphaning or a
//! scale-up judged against the object read now.

use std::time::Instant;

use koord_queue_api::jobs::pod_group;
use koord_queue_api::{QueueUnit, ResourceListExt as _, keys};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde_json::Value;

use crate::children;
use crate::ownership::{self, ChildClaim, Proof};
use crate::service::Webhook;
use crate::verdict::{GroupMember, RequestObjects, Verdict};

impl Webhook {
    /// The answer to a proven child: a pod that runs must fit, with the
    /// pods running on its unit already, in the unit's pod sets; a created
    /// child carries the webhook's keys and no one else's.
    pub(crate) async fn admit_child(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        objects: &RequestObjects,
        claim: &ChildClaim,
        proof: &Proof,
    ) -> (AdmissionResponse, &'static str) {
        let allow = AdmissionResponse::from(request);
        // A pod child runs as itself: it is counted against the unit.
        let is_pod = claim.adapter.grouping().is_some();
        let lock = self.children.lock(&proof.charged_to);
        let counted = match (&proof.unit, is_pod) {
            (Some(unit), true) => Some((unit, lock.lock().await)),
            _ => None,
        };
        if let Some((unit, _serialized)) = &counted {
            let what = format!("Pod {}/{}", claim.namespace, claim.name);
            let pods = match self
                .api
                .list_pods(&claim.namespace, &children::selector(&proof.charged_to))
                .await
            {
                Ok(pods) => children::listed(&pods),
                Err(e) => {
                    return (
                        allow.deny(format!(
                            "cannot count the pods running on the unit of {what}'s owner: {e}; retry"
                        )),
                        "error",
                    );
                }
            };
            let now = Instant::now();
            let running = self
                .children
                .running(&proof.charged_to, &pods, &request.name, now);
            let fits = if children::sized_as_amount(unit) {
                let amount =
                    koord_queue_api::Resources::from_list(&unit.spec.resource).unwrap_or_default();
                children::fits_amount(&amount, &running, &claim.size)
            } else {
                children::fits_sets(&pod_group::set_limits(unit), &running, &claim.size)
            };
            if let Err(why) = fits {
                let unit_name = unit.metadata.name.as_deref().unwrap_or_default();
                return (
                    allow.deny(format!(
                        "{what} cannot run on the QueueUnit {unit_name} of its owner {} {}: {why}. \
                         A job's pods are counted against what its unit holds; a pod that ends \
                         (or is deleted and gone) makes room",
                        claim.owner.adapter.kind().kind,
                        claim.owner.name,
                    )),
                    "denied",
                );
            }
            if !request.dry_run {
                let admitted = children::Admitted {
                    admission: request.uid.clone(),
                    name: (request.operation == Operation::Update).then(|| request.name.clone()),
                    requests: claim.size.clone(),
                };
                self.children.admitted(&proof.charged_to, admitted, now);
            }
        }
        drop(counted);
        drop(lock);
        self.children.tidy(&proof.charged_to, Instant::now());
        let object = match (&request.operation, objects.object.as_ref()) {
            (Operation::Create, Some(object)) => object,
            _ => return (allow, "allowed"),
        };
        let mut child = object.clone();
        children::own_keys(
            &mut child,
            is_pod.then_some((proof.charged_to.as_str(), request.uid.as_str())),
        );
        let patch = json_patch::diff(object, &child);
        if patch.0.is_empty() {
            return (allow, "allowed");
        }
        match allow.with_patch(patch) {
            Ok(response) => (response, "allowed"),
            Err(e) => (
                AdmissionResponse::from(request).deny(format!("cannot encode the patch: {e}")),
                "error",
            ),
        }
    }

    /// Whether the pod group a member joins has its unit already (`Ok(true)`:
    /// nothing to create); `Err` when the member does not fit it — larger
    /// than the pod the group was sized with, or another size — or it
    /// cannot be read. A unit that ended is the group's past: the
    /// scheduler gives its next members a new one.
    async fn group_unit(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        unit: &QueueUnit,
        member: &GroupMember,
    ) -> Result<bool, String> {
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let name = unit.metadata.name.as_deref().unwrap_or_default();
        let what = format!("Pod {namespace}/{}", request.name);
        let stored = self.api.get_unit(namespace, name).await.map_err(|e| {
            format!("{what} cannot be queued now: reading its group's QueueUnit {name} failed: {e}; retry")
        })?;
        let Some(stored) = stored else {
            return Ok(false);
        };
        let ended = stored
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p.is_finished());
        if ended || stored.spec.consumer_ref.name.as_deref() != Some(member.group.as_str()) {
            return Ok(false);
        }
        pod_group::fits_unit(
            member.role,
            member.size,
            &member.requests,
            &pod_group::set_limits(&stored),
        )
        .map(|()| true)
        .map_err(|why| {
            format!(
                "{what} cannot join pod group {}: {why} (QueueUnit {name}). The size of a queued \
                 group is fixed; a new group needs a new name",
                member.group
            )
        })
    }

    /// The response to a verdict that needs no owner proof.
    pub(crate) async fn apply(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        verdict: Verdict,
    ) -> (AdmissionResponse, &'static str) {
        let allow = AdmissionResponse::from(request);
        match verdict {
            Verdict::Allow => (allow, "allowed"),
            Verdict::Deny(message) => (allow.deny(message), "denied"),
            Verdict::Hold {
                patch,
                unit,
                adapter,
                job,
                member,
            } => {
                let joins = match member {
                    Some(member) => match self.group_unit(request, &unit, &member).await {
                        Ok(joins) => joins,
                        Err(message) => return (allow.deny(message), "denied"),
                    },
                    None => false,
                };
                if !request.dry_run
                    && !joins
                    && let Err(message) = self.units.create(adapter, &unit, &job).await
                {
                    return (allow.deny(message), "denied");
                }
                match allow.with_patch(patch) {
                    Ok(response) => (response, "held"),
                    Err(e) => (
                        AdmissionResponse::from(request)
                            .deny(format!("cannot encode the patch: {e}")),
                        "error",
                    ),
                }
            }
            Verdict::CheckRelease {
                namespace,
                job,
                unit,
            } => match self.api.get_unit(&namespace, &unit).await {
                Ok(Some(u)) if !queues(&u, &job) => (
                    allow.deny(format!(
                        "job {namespace}/{job} stays held: the QueueUnit {unit} it names queues \
                         another job ({}); only the scheduler may lift its hold",
                        u.spec.consumer_ref.name.as_deref().unwrap_or("none")
                    )),
                    "denied",
                ),
                Ok(Some(u)) if holds_quota_now(&u) => (allow, "allowed"),
                Ok(Some(u)) if is_finished(&u) => (
                    allow.deny(format!(
                        "job {namespace}/{job} has finished (QueueUnit {unit} is {}): running it again \
                         needs a new job and a new QueueUnit",
                        u.status.as_ref().and_then(|s| s.phase).map(|p| p.to_string()).unwrap_or_default()
                    )),
                    "denied",
                ),
                Ok(Some(u)) => (allow.deny(waiting_message(&job, &u)), "denied"),
                Ok(None) => (
                    allow.deny(format!(
                        "job {namespace}/{job} stays held: its QueueUnit {unit} does not exist \
                         (not created yet, or deleted; a deleted unit is re-created for a held job)"
                    )),
                    "denied",
                ),
                Err(e) => (
                    allow.deny(format!("cannot read QueueUnit {namespace}/{unit}: {e}")),
                    "error",
                ),
            },
            Verdict::CheckOrphaning {
                owner,
                namespace,
                child,
            } => {
                let kind = owner.adapter.kind();
                match self.api.get_job(kind, &namespace, &owner.name).await {
                    Ok(Some(o)) if orphans(&o, &owner.uid) => (allow, "allowed"),
                    Ok(None) => (allow, "allowed"),
                    Ok(Some(_)) => (
                        allow.deny(format!(
                            "{child}: its controller reference cannot be removed while {} {namespace}/{} \
                             lives: the child runs on its owner's quota",
                            kind.kind, owner.name
                        )),
                        "denied",
                    ),
                    Err(e) => (
                        allow.deny(format!("cannot read {} {namespace}/{}: {e}", kind.kind, owner.name)),
                        "error",
                    ),
                }
            }
            Verdict::CheckScale {
                adapter,
                namespace,
                name,
                replicas: (from, to),
            } => {
                let kind = adapter.kind().kind;
                match self.api.get_job(adapter.kind(), &namespace, &name).await {
                    Ok(Some(job))
                        if koord_queue_api::jobs::annotation(&job, keys::QUEUE_UNIT_ANNOTATION).is_some()
                            || ownership::managed_controller(&job).is_some() =>
                    {
                        (
                            allow.deny(format!(
                                "{kind} {namespace}/{name} cannot be scaled from {from} to {to} replicas: \
                                 it is queued and the size of a queued job is fixed; delete it and create \
                                 it again to resize"
                            )),
                            "denied",
                        )
                    }
                    Ok(_) => (allow, "allowed"),
                    Err(e) => (
                        allow.deny(format!("cannot read {kind} {namespace}/{name}: {e}")),
                        "error",
                    ),
                }
            }
            // Handled by the caller; a nested claim is not produced.
            Verdict::CheckChild { .. } => (allow.deny("unexpected nested ownership check"), "error"),
        }
    }
}

/// Whether the unit holds quota for a released job now: only then may the
/// job's hold be lifted.
fn holds_quota_now(unit: &QueueUnit) -> bool {
    unit.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(|p| p.is_released())
}

/// Whether `owner` (read now) lets the garbage collector orphan its children
/// of owner uid `uid`: it is another object of that name (the one they named
/// is gone), or it is being deleted with the `orphan` finalizer.
fn orphans(owner: &Value, uid: &str) -> bool {
    let meta = |key: &str| owner.pointer(&format!("/metadata/{key}"));
    meta("uid").and_then(Value::as_str) != Some(uid)
        || (meta("deletionTimestamp").is_some_and(|t| !t.is_null())
            && meta("finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| f.iter().any(|f| f == "orphan")))
}

/// Whether `unit` is the unit of job `job` (a pod group's unit names the
/// group, whose members never lift their own hold).
fn queues(unit: &QueueUnit, job: &str) -> bool {
    let consumer = &unit.spec.consumer_ref;
    consumer.name.as_deref() == Some(job) || consumer.kind.as_deref() == Some(pod_group::GROUP_KIND)
}

fn is_finished(unit: &QueueUnit) -> bool {
    unit.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(|p| p.is_finished())
}

fn waiting_message(job: &str, unit: &QueueUnit) -> String {
    let status = unit.status.clone().unwrap_or_default();
    let position = status
        .position
        .map(|p| format!(" at position {p}"))
        .unwrap_or_default();
    let phase = status
        .phase
        .map(|p| p.to_string())
        .unwrap_or_else(|| "not yet adopted".into());
    let reason = status
        .message
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    format!(
        "job {job} is queued in queue {}{position} (phase {phase}){reason}; \
         Koord-Queue releases it when quota allows — only the scheduler may lift its hold",
        unit.spec.queue
    )
}
