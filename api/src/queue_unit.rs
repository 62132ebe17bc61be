//! `QueueUnit`: what one job needs and where it is in its lifecycle (architecture §3).
//! The webhook creates it next to the job; the scheduler owns its status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A ResourceList: resource name (`cpu`, `memory`, `nvidia.com/gpu`, …) to quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// What the job needs and where it waits (set at creation by the webhook).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "QueueUnit",
    doc = "QueueUnit is the queueing record of one job. The admission webhook creates it in the job's namespace when the job is created (the job is held at that moment); the scheduler adopts it once the job exists, keeps it in line, releases the job when quota allows and follows the job to completion. `kubectl get qu` shows where each job stands and why it waits.",
    namespaced,
    status = "QueueUnitStatus",
    shortname = "qu",
    shortname = "qus",
    category = "koord-queue",
    // `--field-selector spec.queue=<queue>`: a Queue's units listed by the
    // API server, not a whole cluster's filtered by the reader (the
    // dashboard's Queue page).
    selectable = ".spec.queue",
    // `--field-selector status.phase!=Enqueued,...`: the units that hold
    // quota, without the backlog (a Queue's page at 10,000 waiting units
    // read all of them, ~27 MB, to show the few it runs).
    selectable = ".status.phase",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".spec.queue"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"QuotaReserved\")].reason"}"#,
    printcolumn = r#"{"name":"JobType","type":"string","jsonPath":".spec.consumerRef.kind"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueueUnitSpec {
    /// The job this unit queues: apiVersion, kind, namespace and name (and its
    /// uid once the scheduler has adopted the unit).
    pub consumer_ref: ObjectReference,
    /// Priority of the job: the value of its PriorityClass (the global default
    /// class when the job names none). Higher goes first within a queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Name of the job's PriorityClass, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The queue (in `koord-queue`) the unit waits in; chosen at creation from the
    /// job's quota label, the namespace's default queue or the configured default.
    pub queue: String,
    /// Total resources of the job: what it holds of its quota while admitted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource: ResourceList,
    /// The total resources as computed when the unit was created.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub request: ResourceList,
    /// Homogeneous groups of pods of the job (one per replica type).
    #[serde(default, rename = "podSet", skip_serializing_if = "Vec::is_empty")]
    pub pod_set: Vec<PodSet>,
    /// The longest the job runs once released, in seconds, when its kind
    /// bounds it (a Job's `activeDeadlineSeconds`: its controller ends it
    /// then). A bounded unit may be backfilled behind a reserving head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_seconds: Option<i64>,
}

impl QueueUnitSpec {
    /// The effective priority (`spec.priority`, default 0).
    pub fn effective_priority(&self) -> i32 {
        self.priority.unwrap_or(0)
    }
}

/// A group of identical pods of the job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// Name of the group (e.g. `main`, `Worker`, `head`, `driver`).
    pub name: String,
    /// Number of pods in the group.
    pub count: i32,
    /// Template of the group's pods. Stored as given (not validated or pruned
    /// by the API server): it is the job's own template.
    #[serde(default)]
    #[schemars(schema_with = "crate::crd::preserve_unknown_object")]
    pub template: PodTemplateSpec,
}

/// Where a unit is in its lifecycle (architecture §3).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum QueueUnitPhase {
    /// Waiting in its queue (the scheduler has seen the job exist).
    Enqueued,
    /// Quota reserved; waiting for the queue's admission checks.
    Reserved,
    /// Released: the job's suspension was lifted.
    Dequeued,
    /// Strict mode: released, waiting for every pod to be bound.
    SchedReady,
    /// Strict mode: every pod was bound within the timeout.
    SchedSucceed,
    /// Strict mode: some pod stayed unschedulable past the timeout.
    SchedFailed,
    /// The job's pods run.
    Running,
    /// The job finished successfully.
    Succeed,
    /// The job failed.
    Failed,
    /// Re-suspended (check said Retry/Rejected, scheduling or start timed out, or
    /// reclaimed); back to `Enqueued` after an exponential backoff.
    TimeoutBackoff,
}

impl QueueUnitPhase {
    /// Every phase.
    pub const ALL: [Self; 10] = [
        Self::Enqueued,
        Self::Reserved,
        Self::Dequeued,
        Self::SchedReady,
        Self::SchedSucceed,
        Self::SchedFailed,
        Self::Running,
        Self::Succeed,
        Self::Failed,
        Self::TimeoutBackoff,
    ];

    /// Whether a unit in this phase holds quota (architecture §3, rule 2).
    pub fn holds_quota(self) -> bool {
        matches!(
            self,
            Self::Reserved | Self::Dequeued | Self::SchedReady | Self::SchedSucceed | Self::Running
        )
    }

    /// Whether the job has been released (its suspension lifted) in this phase.
    pub fn is_released(self) -> bool {
        matches!(
            self,
            Self::Dequeued | Self::SchedReady | Self::SchedSucceed | Self::Running
        )
    }

    /// Whether the unit is finished for good.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeed | Self::Failed)
    }

    /// The standard conditions of a unit in this phase (architecture §3, Kueue's
    /// names): QuotaReserved, Admitted, PodsReady, Finished and Evicted,
    /// `message` on those that are true, `evicted_reason` on Evicted when
    /// the phase evicts (TimeoutBackoff, SchedFailed), all dated `at`.
    pub fn standard_conditions(
        self,
        evicted_reason: Option<&str>,
        message: &str,
        at: &Time,
    ) -> Vec<Condition> {
        let condition = |type_: &str, on: bool, reason_on: &str, reason_off: &str| Condition {
            type_: type_.to_string(),
            status: if on { "True" } else { "False" }.to_string(),
            reason: if on { reason_on } else { reason_off }.to_string(),
            message: if on { message } else { "" }.to_string(),
            last_transition_time: at.clone(),
            observed_generation: None,
        };
        // Why a unit holds no quota: it waits, or it is done.
        let not_held = if self.is_finished() {
            "Finished"
        } else {
            "Pending"
        };
        let finished = match self {
            Self::Succeed => "Succeeded",
            _ => "Failed",
        };
        let pods_ready = matches!(self, Self::Running | Self::SchedSucceed);
        let evicted = matches!(self, Self::TimeoutBackoff | Self::SchedFailed);
        vec![
            condition(
                "QuotaReserved",
                self.holds_quota(),
                "QuotaReserved",
                not_held,
            ),
            condition("Admitted", self.is_released(), "Admitted", not_held),
            condition("PodsReady", pods_ready, "PodsReady", "PodsNotReady"),
            condition("Finished", self.is_finished(), finished, "NotFinished"),
            condition(
                "Evicted",
                evicted,
                evicted_reason.unwrap_or("Evicted"),
                "NotEvicted",
            ),
        ]
    }

    /// The standard conditions of a waiting (Enqueued) unit: QuotaReserved
    /// false with the reason it waits — one of the visibility API's wait
    /// types (`QuotaExceeded`, `BehindHead`, …) — and its sentence, so that
    /// `kubectl get` and tools reading conditions see why without the API.
    pub fn waiting_conditions(reason: &str, message: &str, at: &Time) -> Vec<Condition> {
        let mut conditions = Self::Enqueued.standard_conditions(None, "", at);
        if let Some(c) = conditions.iter_mut().find(|c| c.type_ == "QuotaReserved") {
            c.reason = reason.to_string();
            c.message = message.to_string();
        }
        conditions
    }

    /// The reason a waiting unit's QuotaReserved condition gives, if it
    /// gives one beyond `Pending` (see [`QueueUnitPhase::waiting_conditions`]).
    pub fn waiting_reason(conditions: &[Condition]) -> Option<&str> {
        conditions
            .iter()
            .find(|c| c.type_ == "QuotaReserved" && c.status == "False")
            .map(|c| c.reason.as_str())
            .filter(|r| !r.is_empty() && *r != "Pending" && *r != "Finished")
    }

    /// The phase as written in `status.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enqueued => "Enqueued",
            Self::Reserved => "Reserved",
            Self::Dequeued => "Dequeued",
            Self::SchedReady => "SchedReady",
            Self::SchedSucceed => "SchedSucceed",
            Self::SchedFailed => "SchedFailed",
            Self::Running => "Running",
            Self::Succeed => "Succeed",
            Self::Failed => "Failed",
            Self::TimeoutBackoff => "TimeoutBackoff",
        }
    }
}

impl std::fmt::Display for QueueUnitPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the scheduler observed and decided about the unit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueUnitStatus {
    /// Lifecycle phase; empty until the scheduler has adopted the unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<QueueUnitPhase>,
    /// The current human-readable reason: why the unit waits (which quota, which
    /// resource, how much is used of what) or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How many times the unit has been released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    /// Last time the status changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Last time quota was reserved for the unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_allocate_time: Option<Time>,
    /// Quota held, per pod set. Non-empty exactly while the unit holds quota.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admissions: Vec<Admission>,
    /// State of each admission check that applies to the unit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckState>,
    /// Pods of the job by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_state: Option<PodState>,
    /// Deprecated, no longer written (cleared): a unit's place moves with
    /// every release ahead of it, and writing it cost the API server more
    /// than any other status write. Read it from the visibility API
    /// (`pendingunits`), which answers from the scheduler's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// Standard conditions: QuotaReserved, Admitted, PodsReady, Finished, Evicted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Backoff bookkeeping of a unit that was sent back to wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_state: Option<RequeueState>,
    /// When the scheduler expects to release the waiting unit (a forward
    /// simulation of its state). Written only when the estimate moves by a
    /// large step — the visibility API (`pendingunits`) has the current one;
    /// cleared when the unit is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<Time>,
    /// Who wrote the status last, as `<holder identity>/<lease term>/<n>`:
    /// the scheduler's fencing token. The chart's ValidatingAdmissionPolicy
    /// lets a status write that changes it through only if it names the
    /// current holder and term of the scheduler's Lease, so the write of a
    /// scheduler that lost the Lease fails at the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<String>,
}

/// Quota held for one pod set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// Name of the pod set.
    pub name: String,
    /// Pods admitted.
    pub replicas: i32,
    /// Pods running.
    #[serde(default)]
    pub running: i32,
    /// Resources held for the whole pod set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceList,
}

/// State of an admission check, as set by the controller that runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CheckState {
    /// The check has not decided yet; the unit keeps its reservation.
    Pending,
    /// The check passed.
    Ready,
    /// The check failed for now: quota is freed and the unit retries after backoff.
    Retry,
    /// The check failed: quota is freed and the unit retries after backoff.
    Rejected,
}

/// One admission check's verdict for a unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckState {
    /// Name of the check (from the Queue's `spec.admissionChecks`).
    pub name: String,
    /// Pending, Ready, Retry or Rejected.
    pub state: CheckState,
    /// When the state last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Explanation from the check's controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Count of the job's pods by state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodState {
    /// Pods running.
    #[serde(default)]
    pub running: i32,
    /// Pods not yet running.
    #[serde(default)]
    pub pending: i32,
}

/// Backoff bookkeeping.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequeueState {
    /// How many times the unit has been sent back.
    #[serde(default)]
    pub count: i32,
    /// Not released before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_at: Option<Time>,
}

/// A QueueUnit as a watcher decodes it: whole but for its managed fields,
/// which are most of a unit's metadata and which no watcher reads
/// ([`crate::kept_meta`]). Watched through `Api::<WatchedUnit>::all(client)`.
#[derive(Clone, Debug)]
pub struct WatchedUnit(pub QueueUnit);

impl<'de> Deserialize<'de> for WatchedUnit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Unit {
            #[serde(default, deserialize_with = "crate::kept_meta::without_managed_fields")]
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            spec: QueueUnitSpec,
            #[serde(default)]
            status: Option<QueueUnitStatus>,
        }
        let Unit {
            metadata,
            spec,
            status,
        } = Unit::deserialize(d)?;
        Ok(Self(QueueUnit {
            metadata,
            spec,
            status,
        }))
    }
}

impl kube::Resource for WatchedUnit {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        QueueUnit::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        QueueUnit::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        QueueUnit::version(dt)
    }
    fn api_version(dt: &()) -> std::borrow::Cow<'_, str> {
        QueueUnit::api_version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        QueueUnit::plural(dt)
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_names_every_phase_once_in_declaration_order() {
        use QueueUnitPhase::*;
        // Exhaustive: a new phase does not compile here until it is placed.
        let place = |p: QueueUnitPhase| match p {
            Enqueued => 0,
            Reserved => 1,
            Dequeued => 2,
            SchedReady => 3,
            SchedSucceed => 4,
            SchedFailed => 5,
            Running => 6,
            Succeed => 7,
            Failed => 8,
            TimeoutBackoff => 9,
        };
        for (i, phase) in QueueUnitPhase::ALL.into_iter().enumerate() {
            assert_eq!(place(phase), i, "{phase:?}");
        }
    }

    #[test]
    fn the_standard_conditions_follow_the_phase() {
        let at = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let read = |phase: QueueUnitPhase, reason: Option<&str>| {
            phase
                .standard_conditions(reason, "m", &at)
                .into_iter()
                .map(|c| (c.type_, c.status, c.reason, c.message))
                .collect::<Vec<_>>()
        };
        let row = |t: &str, s: &str, r: &str, m: &str| {
            (t.to_string(), s.to_string(), r.to_string(), m.to_string())
        };
        assert_eq!(
            read(QueueUnitPhase::Dequeued, None),
            [
                row("QuotaReserved", "True", "QuotaReserved", "m"),
                row("Admitted", "True", "Admitted", "m"),
                row("PodsReady", "False", "PodsNotReady", ""),
                row("Finished", "False", "NotFinished", ""),
                row("Evicted", "False", "NotEvicted", ""),
            ]
        );
        assert_eq!(
            read(QueueUnitPhase::Succeed, None),
            [
                row("QuotaReserved", "False", "Finished", ""),
                row("Admitted", "False", "Finished", ""),
                row("PodsReady", "False", "PodsNotReady", ""),
                row("Finished", "True", "Succeeded", "m"),
                row("Evicted", "False", "NotEvicted", ""),
            ]
        );
        let backoff = read(QueueUnitPhase::TimeoutBackoff, Some("Reclaimed"));
        assert_eq!(backoff[0], row("QuotaReserved", "False", "Pending", ""));
        assert_eq!(backoff[4], row("Evicted", "True", "Reclaimed", "m"));
        assert_eq!(read(QueueUnitPhase::Failed, None)[3].2, "Failed");
        assert_eq!(read(QueueUnitPhase::Running, None)[2].1, "True");
    }

    #[test]
    fn a_watched_unit_is_the_unit_without_its_managed_fields() -> Result<(), serde_json::Error> {
        let unit = serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": "u", "namespace": "ns", "resourceVersion": "5",
                          "managedFields": [{ "manager": "m", "fieldsV1": { "f:spec": {} } }] },
            "spec": { "queue": "q", "consumerRef": { "kind": "Job", "name": "j" },
                      "podSet": [{ "name": "main", "count": 2, "template": { "spec": { "containers": [] } } }] },
            "status": { "phase": "Dequeued" },
        });
        let watched: WatchedUnit = serde_json::from_value(unit.clone())?;
        let mut whole: QueueUnit = serde_json::from_value(unit)?;
        assert!(whole.metadata.managed_fields.take().is_some());
        assert_eq!(watched.0.metadata, whole.metadata);
        assert_eq!(watched.0.spec, whole.spec);
        assert_eq!(watched.0.status, whole.status);
        Ok(())
    }
}
