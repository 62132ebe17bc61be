//! Re-creating the QueueUnit of a held job whose unit never appeared.
//!
//! The webhook creates a held job's unit right after answering (architecture §6);
//! if it is killed before its backlog is created, the job is held, names its
//! unit in `koord-queue/queue-unit`, and nobody would queue it. The scheduler
//! builds the unit as the webhook would have — the queue from the job's
//! `koord-queue/queue` annotation (chosen at admission), else its quota
//! label; the priority from its PriorityClass — with the same builder.
//! A unit that existed and was deleted is not re-created (architecture §3 rule 3):
//! the state only asks for units it never saw, of young jobs.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_queue_api::{QueueUnit, jobs, keys};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::Value;

use super::job_ref::JobRef;

/// Why a unit was not re-created although the job is still there.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// An API call failed (retried by the caller).
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The job cannot be queued as it is.
    #[error("{0}")]
    Job(String),
}

/// Creates unit `unit_name` for `job` if the job still exists with that uid,
/// is held and names the unit. `Ok(false)` when there was nothing to do.
pub async fn recreate(
    client: &kube::Client,
    job: &JobRef,
    unit_name: &str,
) -> Result<bool, RepairError> {
    let Some(object) = job.api::<DynamicObject>(client).get_opt(&job.name).await? else {
        return Ok(false);
    };
    let mut value = serde_json::to_value(&object).map_err(|e| RepairError::Job(e.to_string()))?;
    let same_job = job.uid.is_empty() || object.metadata.uid.as_deref() == Some(&job.uid);
    if !same_job
        || !job.adapter.is_held(&value)
        || jobs::annotation(&value, keys::QUEUE_UNIT_ANNOTATION) != Some(unit_name)
    {
        return Ok(false);
    }
    let queue = jobs::annotation(&value, keys::QUEUE_ANNOTATION)
        .or_else(|| {
            value
                .pointer("/metadata/labels")
                .and_then(|l| l.get(keys::QUOTA_NAME_LABEL))
                .and_then(Value::as_str)
        })
        .filter(|q| !q.is_empty())
        .ok_or_else(|| {
            RepairError::Job(format!(
                "the job names neither the {} annotation nor the {} label",
                keys::QUEUE_ANNOTATION,
                keys::QUOTA_NAME_LABEL
            ))
        })?
        .to_string();
    attach_size_input(client, job, &mut value).await?;
    let (priority_class_name, priority) =
        priority(client, job.adapter.priority_class_name(&value)).await?;
    let unit = jobs::queue_unit(
        job.adapter,
        &value,
        jobs::UnitPlacement {
            namespace: job.namespace.clone(),
            job_name: job.name.clone(),
            unit_name: unit_name.to_string(),
            queue,
            priority_class_name,
            priority,
        },
    )
    .map_err(RepairError::Job)?;
    let api: Api<QueueUnit> = Api::namespaced(client.clone(), &job.namespace);
    match api.create(&PostParams::default(), &unit).await {
        Ok(_) => Ok(true),
        // Created meanwhile (by the webhook's late create).
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The PriorityClass named (or the global default) and its value, as the
/// webhook resolves it; a class that no longer exists counts 0.
async fn priority(
    client: &kube::Client,
    name: Option<String>,
) -> Result<(Option<String>, i32), kube::Error> {
    let api: Api<PriorityClass> = Api::all(client.clone());
    match name {
        Some(name) => {
            let value = api.get_opt(&name).await?.map(|pc| pc.value).unwrap_or(0);
            Ok((Some(name), value))
        }
        None => Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|pc| pc.global_default == Some(true))
            .map(|pc| (pc.metadata.name, pc.value))
            .map_or((None, 0), |(name, value)| (name, value))),
    }
}

/// Attaches what the job's size is computed from (a TrainJob's runtime), as
/// the webhook did at admission.
async fn attach_size_input(
    client: &kube::Client,
    job: &JobRef,
    value: &mut Value,
) -> Result<(), RepairError> {
    let Some(input) = job.adapter.size_input(value) else {
        return Ok(());
    };
    let input = input.map_err(|e| RepairError::Job(e.to_string()))?;
    let kind = input.kind;
    let gvk = kube::api::GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, kind.plural);
    let api: Api<DynamicObject> = if input.namespaced {
        Api::namespaced_with(client.clone(), &job.namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let Some(object) = api.get_opt(&input.name).await? else {
        return Err(RepairError::Job(format!(
            "its runtime {} {} does not exist",
            kind.kind, input.name
        )));
    };
    let object = serde_json::to_value(object).map_err(|e| RepairError::Job(e.to_string()))?;
    jobs::attach_size_input(value, object);
    Ok(())
}
