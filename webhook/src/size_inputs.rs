//! What a job's size is computed from when it is not in the job: a
//! TrainJob's TrainingRuntime or ClusterTrainingRuntime, the
//! LeaderWorkerSet of an LWS group's pod, read at admission
//! (and wherever the job is sized again: its unit built from the stored
//! job, its children's budget, an update's growth) and attached to a copy
//! of the job that is only ever read for sizes ([`jobs::attach_size_input`]).

use koord_queue_api::jobs::{self, JobAdapter};
use serde_json::Value;

use crate::api_access::ApiAccess;

/// Why a job's size inputs could not be attached.
#[derive(Debug)]
pub(crate) enum Missing {
    /// The job names none, or one that does not exist: it cannot be queued.
    Refused(String),
    /// Reading it failed; the caller may retry.
    Unreadable(String),
}

impl Missing {
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::Refused(m) | Self::Unreadable(m) => m,
        }
    }
}

/// Attaches to `job` (of `adapter`'s kind, in `namespace`) the object its
/// size is computed from, if its kind has one.
pub(crate) async fn attach(
    api: &dyn ApiAccess,
    adapter: &dyn JobAdapter,
    namespace: &str,
    job: &mut Value,
) -> Result<(), Missing> {
    let Some(input) = adapter.size_input(job) else {
        return Ok(());
    };
    let input = input.map_err(|e| Missing::Refused(e.to_string()))?;
    let at = if input.namespaced { namespace } else { "" };
    let what = if input.namespaced {
        format!("{} {namespace}/{}", input.kind.kind, input.name)
    } else {
        format!("{} {}", input.kind.kind, input.name)
    };
    match api.get_job(input.kind, at, &input.name).await {
        Ok(Some(object)) => {
            jobs::attach_size_input(job, object);
            Ok(())
        }
        Ok(None) => Err(Missing::Refused(format!(
            "{what} does not exist ({}: what it is sized from); create it first",
            input.named_by
        ))),
        Err(e) => Err(Missing::Unreadable(format!(
            "cannot read {what}, which it is sized from: {e}"
        ))),
    }
}

/// An object whose size inputs are gone, as a size reader sees it: no pods.
/// An update of a job whose runtime was deleted since it was queued is
/// judged on the rest of its spec.
pub(crate) fn attach_none(job: &mut Value) {
    jobs::attach_size_input(
        job,
        serde_json::json!({ "spec": { "template": { "spec": { "replicatedJobs": [] } } } }),
    );
}
