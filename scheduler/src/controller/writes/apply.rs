//! What each write sends to the API server.

use koord_queue_api::jobs::HoldWrite;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, QueueUnitPhase};
use koord_queue_api::{Queue, QueueStatus, WriteAck};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::writer::{FIELD_MANAGER, Fenced, Writer, now, outcome_of, outcome_unknown, split};
use super::{Outcome, Write};
use crate::controller::job_ref::JobRef;
use crate::controller::records::Key;

impl Writer {
    pub(super) async fn patch_unit_status(
        &self,
        unit: &Key,
        mut status: Value,
    ) -> Result<Option<u64>, kube::Error> {
        status["fencingToken"] = json!(self.fence()?);
        let (ns, name) = split(unit);
        let patched = self
            .unit_acks(ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await?;
        Ok(crate::controller::records::rv_number(
            patched.resource_version(),
        ))
    }

    /// Sends a hold write to `job`, conditional on `resource_version` when
    /// given (a 409 when the job changed since).
    pub(super) async fn write_job(
        &self,
        job: &JobRef,
        write: &HoldWrite,
        resource_version: Option<&str>,
    ) -> Result<(), kube::Error> {
        self.fence()?;
        let conditional = |patch: &Value| {
            let mut patch = patch.clone();
            if let Some(rv) = resource_version {
                patch["metadata"]["resourceVersion"] = json!(rv);
            }
            patch
        };
        let params = PatchParams::default();
        match write {
            HoldWrite::Merge(patch) => {
                job.api::<WriteAck>(&self.client)
                    .patch(&job.name, &params, &Patch::Merge(conditional(patch)))
                    .await?;
            }
            HoldWrite::Strategic(patch) => {
                job.api::<WriteAck>(&self.client)
                    .patch(&job.name, &params, &Patch::Strategic(conditional(patch)))
                    .await?;
            }
            HoldWrite::Delete => {
                let preconditions = kube::api::Preconditions {
                    resource_version: resource_version.map(str::to_string),
                    uid: Some(job.uid.clone()).filter(|u| !u.is_empty()),
                };
                let params = DeleteParams {
                    preconditions: Some(preconditions),
                    ..DeleteParams::background()
                };
                job.api::<kube::api::DynamicObject>(&self.client)
                    .delete(&job.name, &params)
                    .await?;
            }
        }
        Ok(())
    }

    pub(super) async fn perform(&self, write: &Write) -> Outcome {
        match self.try_perform(write).await {
            Ok(rv) => Outcome::Done(rv),
            Err(e) => outcome_of(e),
        }
    }

    /// Sends `write`: one function per write kind.
    pub(super) async fn try_perform(&self, write: &Write) -> Result<Option<u64>, kube::Error> {
        match write {
            Write::Adopt { unit, job } => self.adopt(unit, job).await,
            Write::Enqueue {
                unit,
                message,
                reason,
                ..
            } => {
                let mut status =
                    json!({ "phase": "Enqueued", "message": message, "lastUpdateTime": now() });
                if let Some(reason) = reason {
                    status["conditions"] =
                        json!(QueueUnitPhase::waiting_conditions(reason, message, &now()));
                }
                self.patch_unit_status(unit, status).await
            }
            Write::Release {
                unit,
                job,
                admissions,
                attempts,
                phase,
                checks,
                guard,
                message,
            } => {
                let status = release_status(
                    *phase,
                    message,
                    admissions.as_deref(),
                    *attempts,
                    checks.as_deref(),
                );
                // Idempotent (a merge patch of fixed values), so sent again
                // while its outcome is unknown.
                let rv = until_known(move || self.patch_unit_status(unit, status.clone())).await?;
                if *phase == QueueUnitPhase::Reserved {
                    return Ok(rv); // the job stays held until every check is Ready
                }
                // Before the job runs, so that the unit outlives its pods
                // (`records::QUOTA_FINALIZER`). Should it fail, the release
                // goes on: a unit deleted without it keeps its quota in the
                // controller's memory while its pods run (`state/pods.rs`),
                // and the next release of the unit tries again.
                if *guard && let Err(error) = until_known(move || self.guard_unit(unit)).await {
                    tracing::warn!(unit = %unit, %error, "the quota finalizer could not be put on the unit");
                }
                self.lift_hold(unit, job).await.map(|()| rv)
            }
            Write::Backoff {
                unit,
                job,
                via,
                reason,
                message,
                count,
                requeue_at,
            } => {
                if let Some(via) = via {
                    let status = phase_status(*via, Some(reason), message, None);
                    self.patch_unit_status(unit, status).await?;
                }
                // The unit first: from the moment it reads TimeoutBackoff the
                // webhook refuses a user's unsuspend of the job; holding the
                // job first left a window in which the unit still read
                // released. Should the hold fail, the job runs while its unit
                // holds nothing, which the lifecycle holds again at once.
                let rv = self.patch_unit_status(unit, json!({
                    "phase": "TimeoutBackoff", "message": message, "admissions": [], "admissionChecks": [],
                    "position": null, "lastUpdateTime": now(),
                    "requeueState": { "count": count, "requeueAt": requeue_at },
                    "conditions": QueueUnitPhase::TimeoutBackoff.standard_conditions(Some(reason), message, &now()),
                }))
                .await?;
                if let Some(job) = job {
                    self.hold_unless_finished(unit, job).await?;
                }
                Ok(rv)
            }
            Write::Phase {
                unit,
                phase,
                admissions,
                message,
            } => {
                let status = phase_status(*phase, None, message, admissions.as_deref());
                self.patch_unit_status(unit, status).await
            }
            Write::HoldJob { unit, job } => {
                self.hold_unless_finished(unit, job).await.map(|()| None)
            }
            Write::ReleaseMembers { unit, job } => match &job.group {
                Some(group) => self.release_group(unit, job, group).await.map(|()| None),
                None => Ok(None),
            },
            Write::RecreateUnit { unit, job } => self.recreate_unit(unit, job).await,
            Write::Visibility {
                unit,
                reason,
                message,
                estimated_start,
            } => {
                let conditions = QueueUnitPhase::waiting_conditions(reason, message, &now());
                let estimated_start = estimated_start
                    .and_then(|ms| k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok())
                    .map(Time);
                self.patch_unit_status(
                    unit,
                    json!({
                        "position": null, "message": message, "conditions": conditions,
                        "estimatedStart": estimated_start,
                    }),
                )
                .await
            }
            Write::RemoveFinalizer { unit, at } => self.remove_quota_finalizer(unit, *at).await,
            Write::DeleteUnit { unit } => {
                self.fence()?;
                let (ns, name) = split(unit);
                let deleted = self
                    .units(ns)
                    .delete(name, &DeleteParams::background())
                    .await;
                gone_is_fine(deleted.map(|_| ()))
            }
            Write::EnsureQueue {
                name,
                queue,
                exists,
            } => self.ensure_queue(name, queue, *exists).await,
            Write::DeleteQueue { name } => {
                let api: Api<Queue> = Api::namespaced(self.client.clone(), &self.queue_namespace());
                gone_is_fine(api.delete(name, &DeleteParams::default()).await.map(|_| ()))
            }
            Write::QueueStatus { name, status } => self.queue_status(name, status).await,
            Write::Event {
                regarding,
                warning,
                reason,
                note,
            } => self.create_event(regarding, *warning, reason, note).await,
        }
    }

    /// Adoption: the unit is owned by its job (garbage collection deletes it
    /// with the job) and names the job's uid.
    /// A pod group's unit has no owner (no object stands for the group; a
    /// member's deletion must not take it): it names the group's uid.
    async fn adopt(&self, unit: &Key, job: &JobRef) -> Result<Option<u64>, kube::Error> {
        self.fence()?;
        let (ns, name) = split(unit);
        let kind = job.adapter.kind();
        let owner = if let Some(group) = &job.group {
            json!({ "spec": { "consumerRef": { "uid": group.uid } } })
        } else {
            json!({
            "metadata": { "ownerReferences": [{
                "apiVersion": kind.api_version(), "kind": kind.kind,
                "name": job.name, "uid": job.uid,
                "controller": false, "blockOwnerDeletion": false,
            }]},
            "spec": { "consumerRef": { "uid": job.uid } },
            })
        };
        let patched = self
            .unit_acks(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&owner))
            .await?;
        Ok(crate::controller::records::rv_number(
            patched.resource_version(),
        ))
    }

    /// Lifts the job's hold after its unit's release was written, retried.
    /// If the API server refused the patch, the unit is put back to Enqueued
    /// — the one place a release is compensated in the API (the controller
    /// gives the reservation back to the core when the write fails). If
    /// whether the patch landed is unknown (the connection broke, a 5xx),
    /// nothing is reverted: the job may run, so its unit keeps its quota and
    /// the controller finishes the release (`Outcome::Unknown`). Reverting
    /// then would let the quota serve another unit while this job runs.
    async fn lift_hold(&self, unit: &Key, job: &JobRef) -> Result<(), kube::Error> {
        let release = &koord_queue_api::jobs::release_write(job.adapter);
        let sent = match &job.group {
            Some(group) => until_known(move || self.release_group(unit, job, group)).await,
            None => until_known(move || self.write_job(job, release, None)).await,
        };
        let error = match sent {
            Ok(()) => return Ok(()),
            // The Lease is lost: the new leader decides about this unit (it
            // reads the release from the API), nothing is reverted.
            Err(kube::Error::Service(e)) if e.is::<Fenced>() => {
                return Err(kube::Error::Service(e));
            }
            Err(e) if outcome_unknown(&e) => return Err(e),
            Err(e) => e,
        };
        let revert = self
            .patch_unit_status(
                unit,
                json!({
                    "phase": "Enqueued", "admissions": [], "admissionChecks": [],
                    "message": "release failed; waiting to be retried",
                    "conditions": QueueUnitPhase::Enqueued.standard_conditions(None, "", &now()),
                }),
            )
            .await;
        if let Err(e) = revert {
            tracing::warn!(%unit, error = %e, "cannot revert a failed release");
        }
        Err(error)
    }

    /// Holds a job again, unless it has finished since the decision (its
    /// quota is free anyway; suspending a finished job only makes its
    /// controller, or a stand-in for it, rewrite its status). The hold is
    /// conditional on the job as read (its `resourceVersion`): a job that
    /// completes between the read and the hold makes the API server refuse
    /// the hold (409), and the job is read again, so a finished job is never
    /// suspended. A job already gone (or created again under its name) needs
    /// no hold.
    async fn hold_unless_finished(&self, unit: &Key, job: &JobRef) -> Result<(), kube::Error> {
        if let Some(group) = &job.group {
            return self.hold_group(unit, job, group).await;
        }
        let hold = koord_queue_api::jobs::hold_write(job.adapter);
        let api = job.api::<kube::api::DynamicObject>(&self.client);
        let mut attempts = 0;
        loop {
            self.fence()?;
            let Some(current) = api.get_opt(&job.name).await? else {
                return Ok(());
            };
            if !job.uid.is_empty() && current.metadata.uid.as_deref() != Some(job.uid.as_str()) {
                // Deleted and created again under its name: not this job.
                return Ok(());
            }
            let value = serde_json::to_value(&current).unwrap_or(Value::Null);
            if matches!(
                job.adapter.state(&value),
                koord_queue_api::jobs::JobState::Succeeded
                    | koord_queue_api::jobs::JobState::Failed
            ) {
                tracing::debug!(job = %job.name, "not held again: it finished meanwhile");
                return Ok(());
            }
            if job.adapter.is_held(&value) {
                return Ok(());
            }
            if hold == HoldWrite::Delete {
                tracing::info!(job = %job.name, kind = job.adapter.kind().kind,
                    "deleted: its hold cannot be put back (a released Pod cannot be gated again)");
            }
            let sent = self
                .write_job(job, &hold, current.metadata.resource_version.as_deref())
                .await;
            attempts += 1;
            match sent {
                Err(kube::Error::Api(e)) if e.code == 409 && attempts < HOLD_ATTEMPTS => continue,
                other => return gone_is_fine(other).map(|_| ()),
            }
        }
    }

    async fn recreate_unit(&self, unit: &Key, job: &JobRef) -> Result<Option<u64>, kube::Error> {
        use crate::controller::unit_repair::{RepairError, recreate};
        let (_, name) = split(unit);
        match recreate(&self.client, job, name).await {
            Ok(created) => {
                if created {
                    tracing::info!(%unit, job = %job.name, "re-created the missing QueueUnit of a held job");
                }
                Ok(None)
            }
            Err(RepairError::Api(e)) => Err(e),
            Err(RepairError::Job(message)) => {
                tracing::warn!(%unit, job = %job.name, %message, "cannot re-create the missing QueueUnit");
                Ok(None)
            }
        }
    }

    /// Creates the Queue of a quota, or applies its spec when it exists.
    async fn ensure_queue(
        &self,
        name: &str,
        queue: &Queue,
        exists: bool,
    ) -> Result<Option<u64>, kube::Error> {
        let api: Api<Queue> = Api::namespaced(
            self.client.clone(),
            queue.metadata.namespace.as_deref().unwrap_or_default(),
        );
        if exists {
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(queue),
            )
            .await?;
            return Ok(None);
        }
        match api.create(&PostParams::default(), queue).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn queue_status(
        &self,
        name: &str,
        status: &QueueStatus,
    ) -> Result<Option<u64>, kube::Error> {
        let api: Api<Queue> = Api::namespaced(self.client.clone(), &self.queue_namespace());
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(queue_status_patch(status)),
        )
        .await?;
        Ok(None)
    }

    async fn create_event(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<Option<u64>, kube::Error> {
        let namespace = regarding.namespace.clone().unwrap_or_default();
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), &namespace);
        let event = KubeEvent {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(format!(
                    "{}-",
                    regarding.name.as_deref().unwrap_or("koord-queue")
                )),
                namespace: Some(namespace),
                ..Default::default()
            },
            action: Some(reason.to_string()),
            reason: Some(reason.to_string()),
            note: Some(note.chars().take(1000).collect()),
            type_: Some(if warning { "Warning" } else { "Normal" }.to_string()),
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            regarding: Some(regarding.clone()),
            reporting_controller: Some("koord-queue.x-k8s.io/scheduler".into()),
            reporting_instance: Some(self.identity.clone()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event).await?;
        Ok(None)
    }

    pub(super) fn queue_namespace(&self) -> String {
        self.namespace.clone()
    }
}

/// A delete or hold of an object that is gone already has nothing to do.
fn gone_is_fine(result: Result<(), kube::Error>) -> Result<Option<u64>, kube::Error> {
    match result {
        Ok(()) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// How often a conditional hold is tried against a job that keeps changing
/// (each refusal means the job was written meanwhile; it is read again).
const HOLD_ATTEMPTS: u32 = 5;

/// How long an idempotent write is sent again while its outcome is unknown
/// (a kube-apiserver restart here takes a few seconds); after that the
/// caller decides with the outcome unknown.
const UNKNOWN_RETRY: Duration = Duration::from_secs(20);

/// Runs `send` until its outcome is known — done, or refused by the API
/// server — or [`UNKNOWN_RETRY`] has passed, backing off from 100 ms to 2 s.
/// A 429 is retried too (not applied, but worth trying again); a fenced
/// step is not (the new leader decides).
async fn until_known<T, F>(mut send: impl FnMut() -> F) -> Result<T, kube::Error>
where
    F: Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + UNKNOWN_RETRY;
    let mut pause = Duration::from_millis(100);
    loop {
        match send().await {
            Ok(done) => return Ok(done),
            Err(e) => {
                let again = outcome_unknown(&e)
                    || matches!(&e, kube::Error::Api(status) if status.code == 429);
                if !again || Instant::now() + pause > deadline {
                    return Err(e);
                }
                tracing::debug!(error = %e, "write outcome unknown; sending it again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The status a release writes: the phase with its conditions, what the unit
/// holds, when it was allocated, its attempts and checks.
fn release_status(
    phase: QueueUnitPhase,
    message: &str,
    admissions: Option<&[Admission]>,
    attempts: Option<i64>,
    checks: Option<&[AdmissionCheckState]>,
) -> Value {
    let mut status = json!({
        "phase": phase, "message": message, "lastUpdateTime": now(), "position": null,
        "estimatedStart": null,
        "conditions": phase.standard_conditions(None, message, &now()),
    });
    if let Some(admissions) = admissions {
        status["admissions"] = json!(admissions);
    }
    if admissions.is_some() || phase != QueueUnitPhase::Reserved {
        status["lastAllocateTime"] = json!(now());
    }
    if let Some(attempts) = attempts {
        status["attempts"] = json!(attempts);
    }
    if let Some(checks) = checks {
        status["admissionChecks"] = json!(checks);
    }
    status
}

/// The merge patch that writes a Queue's `status`. An emptied list is
/// written as empty, not omitted (which a merge patch reads as "unchanged"):
/// the last waiting unit gone, the last condition removed (a resumed
/// Queue's `Stopped`, a `MinOvercommitted` resolved).
fn queue_status_patch(status: &QueueStatus) -> Value {
    let mut body = serde_json::to_value(status).unwrap_or(Value::Null);
    if body.get("queueItemDetails").is_none() {
        body["queueItemDetails"] = json!({ "active": [] });
    }
    if body.get("conditions").is_none() {
        body["conditions"] = json!([]);
    }
    json!({ "status": body })
}

/// The status of a phase change. The conditions follow the phase: a
/// finished unit reads Finished, not still QuotaReserved and Admitted; a
/// unit that neither holds quota nor waits has no position.
fn phase_status(
    phase: QueueUnitPhase,
    reason: Option<&str>,
    message: &str,
    admissions: Option<&[Admission]>,
) -> Value {
    let mut status = json!({
        "phase": phase, "message": message, "lastUpdateTime": now(),
        "conditions": phase.standard_conditions(reason, message, &now()),
    });
    if let Some(admissions) = admissions {
        status["admissions"] = json!(admissions);
    }
    if reason.is_none() && !phase.holds_quota() && phase != QueueUnitPhase::Enqueued {
        status["position"] = Value::Null;
    }
    status
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicU32, Ordering};

    use koord_queue_api::QueueStatus;
    use serde_json::json;

    use super::{queue_status_patch, until_known};
    use crate::controller::writes::writer::{Fenced, outcome_unknown};
    use std::sync::Mutex;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("test", "Test").with_code(code),
        ))
    }

    #[test]
    fn only_a_refusal_says_a_write_did_not_land() {
        for code in [400, 403, 404, 409, 422, 429] {
            assert!(!outcome_unknown(&api(code)), "{code}");
        }
        for code in [500, 503, 504] {
            assert!(outcome_unknown(&api(code)), "{code}");
        }
        assert!(!outcome_unknown(&kube::Error::Service(Box::new(Fenced))));
        assert!(outcome_unknown(&kube::Error::Service(
            "connection reset".into()
        )));
    }

    #[tokio::test]
    async fn an_unknown_outcome_is_sent_again_a_refusal_is_not() {
        let sent = AtomicU32::new(0);
        let answers = |fail: Vec<kube::Error>| {
            let fail = Mutex::new(fail);
            let sent = &sent;
            move || {
                sent.fetch_add(1, Ordering::Relaxed);
                let next = fail.lock().unwrap().pop();
                async move { next.map_or(Ok(()), Err) }
            }
        };
        assert!(until_known(answers(vec![api(504), api(500)])).await.is_ok());
        assert_eq!(sent.swap(0, Ordering::Relaxed), 3);
        let refused = until_known(answers(vec![api(422), api(503)])).await;
        assert!(matches!(refused, Err(kube::Error::Api(s)) if s.code == 422));
        assert_eq!(sent.swap(0, Ordering::Relaxed), 2);
        let fenced = until_known(answers(vec![kube::Error::Service(Box::new(Fenced))])).await;
        assert!(fenced.is_err());
        assert_eq!(sent.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_queue_status_patch_writes_emptied_lists_as_empty() {
        // A resumed Queue with nothing waiting: its Stopped condition and
        // its last entry must go, which omitting the fields would not do.
        let status = QueueStatus {
            pending: Some(0),
            admitted: Some(1),
            ..QueueStatus::default()
        };
        assert_eq!(
            queue_status_patch(&status),
            json!({ "status": {
                "queueItemDetails": { "active": [] },
                "pending": 0,
                "admitted": 1,
                "conditions": [],
            }})
        );
    }
}
