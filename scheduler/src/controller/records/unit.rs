//! What the controller keeps of a QueueUnit.

use job::JobKey;
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_api::{QueueUnit, Resources, jobs, keys};
use kube::ResourceExt as _;

use super::{Key, Labels, Name, Uid, intern, intern_uid, job, key, name_in, rv_number};

/// The finalizer the scheduler puts on a unit when it releases it, and
/// takes off once the unit is deleted and no pod it paid for is alive.
///
/// Why a finalizer: the quota a unit holds must outlive the unit's object
/// while its pods run (a job deleted with background or foreground
/// propagation has its unit deleted by the garbage collector while the
/// pods run out their grace period). Kept in memory only, that hold was
/// lost with a restart of the scheduler; kept on the object, the restarted
/// scheduler finds the deleting unit, its phase and admissions, and holds
/// its quota until the pods are gone. A status field would not do: a unit
/// without a finalizer is gone as soon as it is deleted. Kueue keeps its
/// Workloads the same way (`kueue.x-k8s.io/resource-in-use`).
///
/// The webhook creates units with it (`keys::QUOTA_FINALIZER`), so that a
/// release costs no write for it; a unit made otherwise (re-created by the
/// scheduler, or from before) gets it with its release.
pub use koord_queue_api::keys::QUOTA_FINALIZER;

/// The grace period of a pod whose template does not set one (the API
/// server's default of `terminationGracePeriodSeconds`).
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// The longest a job holds quota once released, in ms (a unit's
/// `max_run_ms`): its deadline (`spec.maxRunSeconds`) plus the longest
/// termination grace period of its pods — at its deadline the pods are
/// deleted and run on for up to their grace period. `None` for an unbounded
/// job. Public so that the simulator bounds a trace's jobs the same way.
pub fn max_run_ms(max_run_seconds: Option<i64>, grace_seconds: i64) -> Option<i64> {
    max_run_seconds
        .filter(|s| *s > 0)
        .map(|s| s.saturating_add(grace_seconds.max(0)))
        .map(|s| s.saturating_mul(1000))
}

/// What the controller knows of a QueueUnit.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitRecord {
    /// Namespace.
    pub namespace: Name,
    /// `namespace/name`: the controller's map of units is keyed by this
    /// same copy, and the name is read from it ([`UnitRecord::name`]).
    key: Key,
    /// resourceVersion of the observed object.
    pub resource_version: Option<u64>,
    /// Creation time, ms since the epoch.
    pub created_ms: i64,
    /// Queue named in the spec.
    pub queue: Name,
    /// The quota label, if any.
    pub quota: Option<Name>,
    /// Priority.
    pub priority: i32,
    /// The longest its job holds quota once released, in ms:
    /// `spec.maxRunSeconds` (the job's deadline) plus the longest
    /// termination grace period of its pod sets — at its deadline the job's
    /// pods are deleted, and they run on for up to their grace period.
    pub max_run_ms: Option<i64>,
    /// Total resources.
    pub request: Resources,
    /// Labels (admission checks select units by them).
    pub labels: Labels,
    /// Kind of the job.
    pub job_kind: Name,
    /// Key of the job (`Kind/namespace/name`), made once: passes over every
    /// unit look it up. The same copy as the key of the job's record
    /// where the controller has both (see [`UnitRecord::share_job_key`]).
    job: JobKey,
    /// Uid of the job once adopted (owner reference).
    pub owner_uid: Option<Uid>,
    /// `spec.consumerRef.uid`: the job the unit's quota was paid for.
    /// Unlike the owner reference it survives an orphaning delete of the job
    /// (the garbage collector removes the reference, not the spec), and
    /// tenants cannot write units: pods still running on the unit's quota
    /// are found by it, also after a restart.
    pub consumer_uid: Option<Uid>,
    /// Whether it carries [`QUOTA_FINALIZER`].
    pub guarded: bool,
    /// Where in `metadata.finalizers` the watch showed [`QUOTA_FINALIZER`]
    /// (removed there without a read, `writes/finalizer.rs`).
    pub finalizer_at: Option<u16>,
    /// Observed phase.
    pub phase: Option<QueueUnitPhase>,
    /// Sum of `status.admissions[].resources`: what the unit holds.
    pub held: Resources,
    /// `status.message`, a shared copy: the message of a waiting unit says
    /// why it waits (`quota q: ...`), which most units of a queue share
    /// (~10 MB at 100,000 waiting units as a string each).
    pub message: Option<Name>,
    /// Whether it has a `status.position`: no longer written, a stale one
    /// is cleared.
    pub stale_position: bool,
    /// Why it waits, as its QuotaReserved condition last said (a wait type
    /// of the visibility API): its status is written again only when that
    /// changes, not whenever its place or the figures move.
    pub wait_reason: Option<Name>,
    /// `status.attempts`.
    pub attempts: i64,
    /// `status.admissionChecks`.
    pub checks: Vec<koord_queue_api::queue_unit::AdmissionCheckState>,
    /// `status.requeueState.count`.
    pub requeue_count: i32,
    /// `status.requeueState.requeueAt`, ms since the epoch.
    pub requeue_at_ms: Option<i64>,
    /// `status.lastAllocateTime`, ms since the epoch.
    pub allocated_ms: Option<i64>,
    /// `status.estimatedStart`, ms since the epoch.
    pub estimated_start_ms: Option<i64>,
    /// Pod sets: name, count and resources of the whole set. A unit's only
    /// set keeps none: its admission carries what the unit holds whatever
    /// its template says (`release_write::admissions`), and most units
    /// have one (6.4 MB at 100,000 units, and a template read per event).
    pub pod_sets: Box<[(Name, i32, Resources)]>,
    /// Whether the unit is being deleted.
    pub deleting: bool,
    /// Whether `spec.resource` could not be read (the unit is then never released).
    pub invalid: Option<Box<str>>,
}

impl UnitRecord {
    /// The record of `unit`.
    pub fn from_unit(mut unit: QueueUnit) -> Self {
        // Taken, not copied: this runs on every unit event.
        let status = unit.status.take().unwrap_or_default();
        let spec = &unit.spec;
        let (request, invalid) = match Resources::from_list(&spec.resource) {
            Ok(r) => (r, None),
            Err(e) => (Resources::new(), Some(e.to_string().into_boxed_str())),
        };
        let mut held = Resources::new();
        for admission in &status.admissions {
            if let Ok(r) = Resources::from_list(&admission.resources) {
                held.add(&r);
            }
        }
        let job_uid = |r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
            r.kind == spec.consumer_ref.kind.clone().unwrap_or_default()
                && Some(&r.name) == spec.consumer_ref.name.as_ref()
        };
        let labels = unit.labels();
        let position = unit
            .metadata
            .finalizers
            .iter()
            .flatten()
            .position(|f| f == QUOTA_FINALIZER);
        let namespace = unit.metadata.namespace.as_deref().unwrap_or_default();
        let job_kind = spec.consumer_ref.kind.as_deref().unwrap_or_default();
        let job_name = spec.consumer_ref.name.as_deref().unwrap_or_default();
        let consumer_uid = spec
            .consumer_ref
            .uid
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(intern_uid);
        Self {
            job: JobKey::new(job_kind, namespace, job_name),
            key: key(namespace, &unit.name_any()),
            namespace: intern(namespace),
            resource_version: rv_number(unit.metadata.resource_version.as_deref()),
            created_ms: unit
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0),
            queue: intern(&spec.queue),
            quota: labels
                .get(keys::QUOTA_NAME_LABEL)
                .filter(|q| !q.is_empty())
                .map(|q| intern(q)),
            priority: spec.effective_priority(),
            max_run_ms: max_run_ms(spec.max_run_seconds, longest_grace_seconds(&spec.pod_set)),
            request,
            labels: Labels::from_map(labels),
            job_kind: intern(job_kind),
            // A pod group's unit has no owner: adoption names the group's
            // uid in its consumerRef.
            owner_uid: if job_kind == jobs::pod_group::GROUP_KIND {
                consumer_uid.clone()
            } else {
                unit.owner_references()
                    .iter()
                    .find(|r| job_uid(r))
                    .map(|r| intern_uid(&r.uid))
            },
            consumer_uid,
            guarded: position.is_some(),
            finalizer_at: position.and_then(|i| u16::try_from(i).ok()),
            phase: status.phase,
            held,
            message: status.message.as_deref().map(intern),
            stale_position: status.position.is_some(),
            wait_reason: QueueUnitPhase::waiting_reason(&status.conditions).map(intern),
            attempts: status.attempts.unwrap_or(0),
            checks: status.admission_checks.clone(),
            requeue_count: status.requeue_state.as_ref().map_or(0, |r| r.count),
            requeue_at_ms: status
                .requeue_state
                .as_ref()
                .and_then(|r| r.requeue_at.as_ref())
                .map(|t| t.0.as_millisecond()),
            estimated_start_ms: status
                .estimated_start
                .as_ref()
                .map(|t| t.0.as_millisecond()),
            allocated_ms: status
                .last_allocate_time
                .as_ref()
                .map(|t| t.0.as_millisecond()),
            pod_sets: spec
                .pod_set
                .iter()
                .map(|ps| {
                    let whole_set = if spec.pod_set.len() == 1 {
                        Resources::new()
                    } else {
                        serde_json::to_value(&ps.template)
                            .ok()
                            .and_then(|t| jobs::pod_template_requests(&t).ok())
                            .unwrap_or_default()
                            .scaled(i64::from(ps.count))
                    };
                    (intern(&ps.name), ps.count, whole_set)
                })
                .collect(),
            deleting: unit.metadata.deletion_timestamp.is_some(),
            invalid,
        }
    }

    /// Key of the unit.
    pub fn key(&self) -> Key {
        self.key.clone()
    }

    /// Name of the unit.
    pub fn name(&self) -> &str {
        name_in(&self.key)
    }

    /// Renames the unit (tests make many units from one record).
    #[cfg(test)]
    pub(crate) fn set_name(&mut self, name: &str) {
        self.key = key(&self.namespace, name);
    }

    /// Uses `shared`, the same key held elsewhere (the controller's map of
    /// units), instead of this record's copy: 100,000 units otherwise keep
    /// two copies of each key.
    pub fn share_key(&mut self, shared: &Key) {
        if *shared == self.key {
            self.key = shared.clone();
        }
    }

    /// Key of the unit's job (kind-qualified).
    pub fn job_key(&self) -> JobKey {
        self.job.clone()
    }

    /// Key of the unit's job, to look it up without a copy.
    pub fn job(&self) -> &JobKey {
        &self.job
    }

    /// Uses `shared`, the key of the job's record, instead of this
    /// record's copy when they are equal (see [`UnitRecord::share_key`]).
    pub fn share_job_key(&mut self, shared: &JobKey) {
        if *shared == self.job {
            self.job = shared.clone();
        }
    }

    /// The uids whose pods run on the unit's quota: its consumer's and its
    /// owner's (the same job, but the owner reference is gone after an
    /// orphaning delete, and units created before the consumer uid was
    /// written may lack it).
    pub fn job_uids(&self) -> impl Iterator<Item = &Uid> {
        let owner = self
            .owner_uid
            .as_ref()
            .filter(|o| Some(*o) != self.consumer_uid.as_ref());
        self.consumer_uid.iter().chain(owner)
    }

    /// Whether the observed status says the unit holds quota.
    pub fn holds_quota(&self) -> bool {
        self.phase.is_some_and(QueueUnitPhase::holds_quota)
    }
}

/// The longest termination grace period of `pod_sets`' pods, in seconds
/// (the API server's default where a template does not set one).
fn longest_grace_seconds(pod_sets: &[koord_queue_api::queue_unit::PodSet]) -> i64 {
    pod_sets
        .iter()
        .map(|ps| {
            ps.template
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_GRACE_SECONDS)
                .max(0)
        })
        .max()
        .unwrap_or(DEFAULT_GRACE_SECONDS)
}
