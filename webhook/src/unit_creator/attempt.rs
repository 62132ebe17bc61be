//! One attempt at a unit: read the job back, check that it names the
//! unit, build the unit from the stored job, create it.

use std::sync::atomic::Ordering;

use koord_queue_api::jobs;
use koord_queue_api::keys;

use super::{Pending, Shared};
use crate::api_access::Created;

/// What one attempt came to.
pub(super) enum Attempt {
    Done,
    /// The job is not (yet) in the API.
    NoJob,
    /// The job exists and names another unit: a forged or stale review.
    NotNamed,
    Failed(CreateError),
}

/// Why a create failed.
#[derive(Debug)]
pub(super) struct CreateError {
    /// What the user (or the log) is told.
    pub(super) message: String,
    /// Whether trying again can help.
    pub(super) retryable: bool,
}

impl Shared {
    /// Reads the job back and, when it names the unit, creates the unit
    /// built from it: one try, whose outcome says whether to try again.
    pub(super) async fn attempt(&self, pending: &Pending) -> Attempt {
        let name = format!("{}/{}", pending.namespace, pending.unit);
        let api_error = |e: kube::Error, what: &str| CreateError {
            retryable: retryable(&e),
            message: format!(
                "cannot queue job {}/{}: {what}: {e}",
                pending.namespace, pending.job
            ),
        };
        if let Some(group) = &pending.group {
            // A later member: nothing to create if the group's unit exists
            // (one read instead of reading the pod, its LeaderWorkerSet and
            // a create refused as a conflict). Nothing is built from the
            // review either way.
            match self.api.get_unit(&pending.namespace, &pending.unit).await {
                Ok(Some(existing))
                    if existing.spec.consumer_ref.kind.as_deref()
                        == Some(jobs::pod_group::GROUP_KIND)
                        && existing.spec.consumer_ref.name.as_ref() == Some(group) =>
                {
                    return Attempt::Done;
                }
                Ok(_) => {}
                Err(e) => {
                    self.count_error("api");
                    return Attempt::Failed(api_error(e, "reading the group's unit failed"));
                }
            }
        }
        let mut stored = match self
            .api
            .get_job(pending.adapter.kind(), &pending.namespace, &pending.job)
            .await
        {
            Ok(Some(stored)) => stored,
            Ok(None) => return Attempt::NoJob,
            Err(e) => {
                self.count_error("api");
                return Attempt::Failed(api_error(e, "reading the job failed"));
            }
        };
        if jobs::annotation(&stored, keys::QUEUE_UNIT_ANNOTATION) != Some(pending.unit.as_str()) {
            return Attempt::NotNamed;
        }
        // Sized like at admission: with its runtime (a TrainJob).
        match crate::size_inputs::attach(
            self.api.as_ref(),
            pending.adapter,
            &pending.namespace,
            &mut stored,
        )
        .await
        {
            Ok(()) => {}
            Err(missing) => {
                let retryable = matches!(missing, crate::size_inputs::Missing::Unreadable(_));
                return Attempt::Failed(CreateError {
                    retryable,
                    message: format!(
                        "cannot queue job {}/{}: {}",
                        pending.namespace,
                        pending.job,
                        missing.message()
                    ),
                });
            }
        }
        let unit = match crate::stored_unit::build(
            pending.adapter,
            &stored,
            &pending.unit,
            self.view.as_ref(),
        ) {
            Ok(unit) => unit,
            Err(message) => {
                return Attempt::Failed(CreateError {
                    retryable: false,
                    message: format!(
                        "cannot queue job {}/{}: {message}",
                        pending.namespace, pending.job
                    ),
                });
            }
        };
        match self.api.create_unit(&unit).await {
            Ok(Created::New) => {
                self.healthy.store(true, Ordering::Release);
                Attempt::Done
            }
            // A retried admission call, or our own earlier attempt.
            Ok(Created::Existing(existing))
                if existing.spec.consumer_ref.name == unit.spec.consumer_ref.name
                    && existing.spec.consumer_ref.kind == unit.spec.consumer_ref.kind =>
            {
                Attempt::Done
            }
            Ok(Created::Existing(_)) => {
                self.count_error("conflict");
                Attempt::Failed(CreateError {
                    message: format!(
                        "cannot queue the job: QueueUnit {name} exists and belongs to another job"
                    ),
                    retryable: false,
                })
            }
            Err(e) => {
                self.count_error("api");
                Attempt::Failed(api_error(e, &format!("creating QueueUnit {name} failed")))
            }
        }
    }
}

/// Whether an API error may go away by itself: throttling, server errors,
/// timeouts and transport failures do; a refusal of the object does not.
fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}
