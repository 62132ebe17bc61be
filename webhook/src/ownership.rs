//! Proven ownership (docs/security.md "A child passes only as a child"): an
//! object whose controller is a managed job passes unqueued only when it is
//! that job's real child. Claimed by its `ownerReferences`, proven by reading
//! the owner: it exists with that uid, its kind creates such a child under
//! that name and within that budget ([`JobAdapter::child_budget`]), it is
//! queued by Koord-Queue (it names its QueueUnit, or is itself a proven
//! child of a queued job), and — when the child runs — that unit holds quota
//! now. Anything less and the object is queued as a job of its own (on
//! create) or the update is refused.

use koord_queue_api::jobs::guard::exceeds;
use koord_queue_api::jobs::{self, JobAdapter, json};
use koord_queue_api::{QueueUnit, Resources, keys};
use serde_json::Value;

use crate::api_access::ApiAccess;

/// Owners of owners followed at most (TrainJob → JobSet → Job is two).
const MAX_DEPTH: usize = 4;

/// The controller of an object, when it is of a managed kind.
#[derive(Clone, Debug)]
pub struct OwnerRef {
    /// The owner's adapter.
    pub adapter: &'static dyn JobAdapter,
    /// Its name (in the child's namespace).
    pub name: String,
    /// Its uid as the reference states it.
    pub uid: String,
}

/// The claim that an object is its controller's child.
#[derive(Clone, Debug)]
pub struct ChildClaim {
    /// Namespace of both.
    pub namespace: String,
    /// The child's kind.
    pub adapter: &'static dyn JobAdapter,
    /// The child's name.
    pub name: String,
    /// The claimed owner.
    pub owner: OwnerRef,
    /// What the child runs.
    pub size: Resources,
    /// Whether the child runs now (is not fully held): then the queued
    /// ancestor's unit must hold quota now.
    pub runs: bool,
}

/// The `controller: true` ownerReference of `job` when it points to a kind
/// Koord-Queue queues. Other references (not the controller, other kinds)
/// claim nothing.
pub fn managed_controller(job: &Value) -> Option<OwnerRef> {
    json::get_path(job, &["metadata", "ownerReferences"])?
        .as_array()?
        .iter()
        .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .find_map(|r| {
            let adapter =
                jobs::for_api_version(r.get("apiVersion")?.as_str()?, r.get("kind")?.as_str()?)?;
            Some(OwnerRef {
                adapter,
                name: r.get("name")?.as_str()?.to_string(),
                uid: r.get("uid")?.as_str()?.to_string(),
            })
        })
}

/// The claim `job` (of `adapter`, named `name`) makes, if its controller is a
/// managed kind. An unreadable size is an error: such an object cannot be
/// judged.
pub fn claim(
    adapter: &'static dyn JobAdapter,
    job: &Value,
    namespace: &str,
    name: &str,
) -> Result<Option<ChildClaim>, String> {
    let Some(owner) = managed_controller(job) else {
        return Ok(None);
    };
    let sets = adapter.pod_sets(job).map_err(|e| e.to_string())?;
    Ok(Some(ChildClaim {
        namespace: namespace.to_string(),
        adapter,
        name: name.to_string(),
        owner,
        size: jobs::total_resources(&sets),
        runs: !jobs::guard::fully_held(adapter, job),
    }))
}

/// What proving a claim established.
#[derive(Clone, Debug)]
pub struct Proof {
    /// The uid of the queued job whose unit pays for the child: the first
    /// queued ancestor ([`keys::CHARGED_TO_LABEL`]).
    pub charged_to: String,
    /// That unit, read when the child runs (it holds quota now): its pod
    /// sets bound the pods that run on it ([`crate::children`]).
    pub unit: Option<QueueUnit>,
}

/// Why a claim is not proven.
#[derive(Debug)]
pub enum NotProven {
    /// The claim is false: the reason, for the user.
    Refuted(String),
    /// The owner could not be read; the caller refuses and the client retries.
    Unverifiable(kube::Error),
}

/// The largest request of one pod among `sets`, per resource.
fn largest_pod(sets: &[jobs::PodSetInfo]) -> Resources {
    let mut largest = Resources::new();
    for set in sets.iter().filter(|s| s.count > 0) {
        largest.max_with(&set.per_pod);
    }
    largest
}

/// The QueueUnit `name` that owner `owner` (`what`, for messages) names,
/// which must queue that owner.
async fn read_unit(
    api: &dyn ApiAccess,
    namespace: &str,
    name: &str,
    owner: &str,
    what: &str,
) -> Result<QueueUnit, NotProven> {
    match api.get_unit(namespace, name).await {
        Err(e) => Err(NotProven::Unverifiable(e)),
        Ok(None) => Err(NotProven::Refuted(format!(
            "the QueueUnit {name} of {what} does not exist"
        ))),
        Ok(Some(u)) if u.spec.consumer_ref.name.as_deref() != Some(owner) => {
            Err(NotProven::Refuted(format!(
                "the QueueUnit {name} that {what} names queues another job ({})",
                u.spec.consumer_ref.name.as_deref().unwrap_or("none")
            )))
        }
        Ok(Some(u)) => Ok(u),
    }
}

/// A unit's pod sets as pod sets: how many pods of what size it holds.
fn unit_pod_sets(unit: &QueueUnit) -> Vec<jobs::PodSetInfo> {
    jobs::pod_group::set_limits(unit)
        .into_iter()
        .map(|set| jobs::PodSetInfo {
            name: set.role,
            count: set.count,
            // What is counted is the pod's size; the template stays the unit's.
            template: Value::Object(serde_json::Map::new()),
            per_pod: set.per_pod,
        })
        .collect()
}

/// Proves `claim` by reading its owner chain.
pub async fn prove(api: &dyn ApiAccess, claim: &ChildClaim) -> Result<Proof, NotProven> {
    let refuted = |reason: String| Err(NotProven::Refuted(reason));
    let mut claim = claim.clone();
    for _ in 0..MAX_DEPTH {
        let owner_kind = claim.owner.adapter.kind();
        let what = format!(
            "{} {}/{}",
            owner_kind.kind, claim.namespace, claim.owner.name
        );
        let mut owner = match api
            .get_job(owner_kind, &claim.namespace, &claim.owner.name)
            .await
        {
            Ok(Some(owner)) => owner,
            Ok(None) => return refuted(format!("its owner {what} does not exist")),
            Err(e) => return Err(NotProven::Unverifiable(e)),
        };
        // A queued owner sized from another object (a TrainJob from its
        // runtime) is bounded by its unit, fixed at admission: the runtime
        // may have been edited since. Other owners' sizes are their own
        // spec, which no update may grow.
        let mut unit_read: Option<QueueUnit> = None;
        if let Some(unit) = jobs::annotation(&owner, keys::QUEUE_UNIT_ANNOTATION)
            && claim.owner.adapter.size_input(&owner).is_some()
        {
            unit_read =
                Some(read_unit(api, &claim.namespace, unit, &claim.owner.name, &what).await?);
            crate::size_inputs::attach_none(&mut owner);
        } else {
            match crate::size_inputs::attach(api, claim.owner.adapter, &claim.namespace, &mut owner)
                .await
            {
                Ok(()) => {}
                Err(crate::size_inputs::Missing::Refused(reason)) => {
                    return refuted(format!("{what}: {reason}"));
                }
                Err(crate::size_inputs::Missing::Unreadable(reason)) => {
                    return Err(NotProven::Unverifiable(kube::Error::Service(reason.into())));
                }
            }
        }
        let uid = json::get_path(&owner, &["metadata", "uid"]).and_then(Value::as_str);
        if uid != Some(claim.owner.uid.as_str()) {
            return refuted(format!(
                "its owner reference names uid {} but {what} has uid {}",
                claim.owner.uid,
                uid.unwrap_or("none")
            ));
        }
        // A pod (a kind with the pod grouping capability) runs as itself:
        // it is bounded pod by pod.
        let is_pod = claim.adapter.grouping().is_some();
        if is_pod && claim.owner.adapter.grouping().is_some() {
            // A pod a pod makes (a Spark driver's executors): a queued Pod
            // makes none; an unqueued one is a child itself, and the pod is
            // judged against that pod's own owner, with its own size.
            if jobs::annotation(&owner, keys::QUEUE_UNIT_ANNOTATION).is_some() {
                return refuted(format!(
                    "{what} is queued on its own and runs no other pods"
                ));
            }
            let Some(next) = managed_controller(&owner) else {
                return refuted(format!("its owner {what} is not queued by Koord-Queue"));
            };
            claim = ChildClaim {
                name: claim.owner.name,
                owner: next,
                ..claim
            };
            continue;
        }
        let unit_sets = unit_read.as_ref().map(unit_pod_sets);
        let budget = if is_pod {
            // Controllers name their pods as they like: a pod of a managed
            // job is bounded by the largest pod the job's pod sets name.
            match (&unit_sets, claim.owner.adapter.pod_sets(&owner)) {
                (Some(sets), _) => Some(Ok(largest_pod(sets))),
                (None, Ok(sets)) => Some(Ok(largest_pod(&sets))),
                (None, Err(e)) => Some(Err(e)),
            }
        } else {
            // Whether its kind makes such a child is the owner's to say;
            // how much, its unit's when it is sized by its unit.
            claim
                .owner
                .adapter
                .child_budget(&owner, claim.adapter.kind(), &claim.name)
                .map(|budget| match &unit_sets {
                    Some(sets) => budget.map(|_| jobs::total_resources(sets)),
                    None => budget,
                })
        };
        let budget = match budget {
            None => {
                return refuted(format!(
                    "a {} does not create a {} named {}",
                    owner_kind.kind,
                    claim.adapter.kind().kind,
                    claim.name
                ));
            }
            Some(Err(e)) => return refuted(format!("{what} cannot be read: {e}")),
            Some(Ok(budget)) => budget,
        };
        let over = exceeds(&claim.size, &budget);
        if !over.is_empty() {
            return refuted(format!(
                "it needs {} but {what} counts {budget} for it",
                claim.size
            ));
        }
        if let Some(unit) = jobs::annotation(&owner, keys::QUEUE_UNIT_ANNOTATION) {
            let charged_to = claim.owner.uid.clone();
            if !claim.runs {
                return Ok(Proof {
                    charged_to,
                    unit: None,
                });
            }
            let u = match unit_read {
                Some(u) => u,
                None => read_unit(api, &claim.namespace, unit, &claim.owner.name, &what).await?,
            };
            let phase = u.status.as_ref().and_then(|s| s.phase);
            return if phase.is_some_and(|p| p.is_released()) {
                Ok(Proof {
                    charged_to,
                    unit: Some(u),
                })
            } else {
                refuted(format!(
                    "the QueueUnit {unit} of {what} does not hold quota (phase {})",
                    phase.map_or_else(|| "none".to_string(), |p| p.to_string())
                ))
            };
        }
        // The owner is a child itself: it must be proven the same way.
        let Some(next) = managed_controller(&owner) else {
            return refuted(format!("its owner {what} is not queued by Koord-Queue"));
        };
        let sets = claim
            .owner
            .adapter
            .pod_sets(&owner)
            .map_err(|e| NotProven::Refuted(format!("{what} cannot be read: {e}")))?;
        claim = ChildClaim {
            namespace: claim.namespace,
            adapter: claim.owner.adapter,
            name: claim.owner.name,
            owner: next,
            size: jobs::total_resources(&sets),
            runs: claim.runs,
        };
    }
    refuted(format!("its chain of owners is longer than {MAX_DEPTH}"))
}
