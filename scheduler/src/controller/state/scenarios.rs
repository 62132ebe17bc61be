//! The whole controller driven without an API server: inputs go in as the
//! watches would send them, the writes it asks for are recorded, their
//! results are fed back. One table test per lifecycle transition of
//! docs/concepts.md and per outcome of the admission-check contract
//! (docs/admission-checks.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{ElasticQuota, QueueUnit};
use koord_queue_runtime::{Leadership, Readiness};
use serde_json::{Value, json};

use super::*;
use crate::controller::metrics::Metrics;

/// Records the writes the controller asks for.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Write>>>);

impl WriteSink for Recorder {
    fn submit(&self, write: Write) {
        self.0.lock().unwrap().push(write);
    }
    fn submit_withdrawable(&self, write: Write) -> Claim {
        self.0.lock().unwrap().push(write);
        Claim::default()
    }
    fn settled(&self, _: &Key) {}
    fn latency_ms(&self) -> u64 {
        0
    }
}

/// A controller (leading, every source synced) with quota `q` (max 4 cpu)
/// and its queue; `queue_spec` is merged into the Queue's spec.
struct Scenario {
    controller: Controller,
    writes: Recorder,
    rv: u64,
}

impl Scenario {
    fn new(queue_spec: Value) -> Self {
        let core = Core::from_yaml(
            "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: \"100\" } }\n",
        )
        .unwrap();
        let writes = Recorder::default();
        let settings = Settings {
            namespace: keys::SYSTEM_NAMESPACE.into(),
            orphan_grace: Duration::from_secs(60),
            cycle_batch: Duration::from_millis(1),
            status_interval: Duration::from_secs(2),
            job_events: false,
            strict_default: None,
        };
        let controller = Controller::new(
            core,
            settings,
            Vec::new(),
            writes.clone(),
            Leadership::fixed(true),
            Metrics::register(&mut Default::default()),
            Readiness::new(&[CACHES_SYNCED, FIRST_CYCLE]),
        );
        let mut s = Self {
            controller,
            writes,
            rv: 1,
        };
        let quota: ElasticQuota = serde_json::from_value(json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": { "name": "q", "namespace": "ns" },
            "spec": { "max": { "cpu": "4" } },
        }))
        .unwrap();
        s.input(Input::Quota(Change::Applied(Box::new(
            QuotaRecord::from_quota(&quota),
        ))));
        let mut spec = json!({ "queuePolicy": "Priority" });
        json_merge(&mut spec, queue_spec);
        let queue: Queue = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
            "metadata": { "name": "q", "namespace": keys::SYSTEM_NAMESPACE },
            "spec": spec,
        }))
        .unwrap();
        s.input(Input::Queue(Change::Applied(Box::new(
            QueueRecord::from_queue(&queue),
        ))));
        s.take();
        s
    }

    fn input(&mut self, input: Input) {
        self.controller.on_input(input);
    }

    /// A unit `u` of job `j` (2 cpu, quota `q`) with `status`, adopted by
    /// job uid `uid-j` unless `adopted` is false.
    fn unit(&mut self, status: Value, adopted: bool) {
        self.rv += 1;
        let mut unit = json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
            "metadata": { "name": "u", "namespace": "ns", "resourceVersion": self.rv.to_string(),
                          "creationTimestamp": "2026-01-01T00:00:00Z",
                          "labels": { keys::QUOTA_NAME_LABEL: "q", "team": "a" } },
            "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "ns" },
                      "queue": "q", "resource": { "cpu": "2" }, "priority": 0 },
            "status": status,
        });
        if adopted {
            unit["metadata"]["ownerReferences"] = json!([{ "apiVersion": "batch/v1", "kind": "Job",
                "name": "j", "uid": "uid-j" }]);
        }
        let unit: QueueUnit = serde_json::from_value(unit).unwrap();
        self.input(Input::Unit(Change::Applied(Box::new(
            UnitRecord::from_unit(unit),
        ))));
    }

    /// Job `j` naming unit `u`: `held`, with `status`.
    fn job(&mut self, held: bool, status: Value) {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": "j", "namespace": "ns", "uid": "uid-j",
                          "creationTimestamp": "2026-01-01T00:00:00Z",
                          "annotations": { keys::QUEUE_UNIT_ANNOTATION: "u" } },
            "spec": { "suspend": held },
            "status": status,
        });
        let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
        let record =
            JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
        self.input(Input::Job("Job", Change::Applied(Box::new(record))));
    }

    fn cycle(&mut self) {
        self.controller.cycle();
    }

    /// The writes asked for since the last call, each answered Done.
    fn take(&mut self) -> Vec<Write> {
        let writes: Vec<Write> = std::mem::take(&mut *self.writes.0.lock().unwrap());
        for write in &writes {
            self.rv += 1;
            self.controller.on_written(Written {
                write: write.clone(),
                outcome: Outcome::Done(Some(self.rv)),
            });
        }
        writes
    }
}

fn json_merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The unit's writes in short: kind and phase.
fn summary(writes: &[Write]) -> Vec<String> {
    writes
        .iter()
        .filter(|w| w.unit().is_some())
        .map(|w| match w {
            Write::Release { phase, .. } => format!("Release {phase}"),
            Write::Phase { phase, .. } => format!("Phase {phase}"),
            Write::Backoff { reason, .. } => format!("Backoff {reason}"),
            other => other.operation().to_string(),
        })
        .filter(|s| s != "visibility")
        .collect()
}

fn check(name: &str, state: &str, message: &str) -> Value {
    json!({ "name": name, "state": state, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z" })
}

#[test]
fn lifecycle_transitions() {
    type Setup = fn(&mut Scenario);
    let table: Vec<(&str, Setup, Vec<&str>)> = vec![
        (
            "a new unit whose held job names it is adopted",
            |s| {
                s.job(true, json!({}));
                s.unit(json!({}), false);
            },
            vec!["adopt"],
        ),
        (
            "an Enqueued unit that fits is released (Dequeued)",
            |s| {
                s.job(true, json!({}));
                s.unit(json!({ "phase": "Enqueued" }), true);
            },
            vec!["Release Dequeued"],
        ),
        (
            "a released unit whose job runs is Running",
            |s| {
                s.job(false, json!({ "active": 1, "ready": 1 }));
                s.unit(
                    json!({ "phase": "Dequeued", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }] }),
                    true,
                );
            },
            vec!["Phase Running"],
        ),
        (
            "a running unit whose job succeeded is Succeed",
            |s| {
                s.job(
                    false,
                    json!({ "conditions": [{ "type": "Complete", "status": "True" }] }),
                );
                s.unit(
                    json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }] }),
                    true,
                );
            },
            vec!["Phase Succeed"],
        ),
        (
            "a running unit whose job failed is Failed",
            |s| {
                s.job(
                    false,
                    json!({ "conditions": [{ "type": "Failed", "status": "True" }] }),
                );
                s.unit(
                    json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }] }),
                    true,
                );
            },
            vec!["Phase Failed"],
        ),
        (
            "an Enqueued unit whose job was released by someone else holds it again",
            |s| {
                s.job(false, json!({}));
                s.unit(json!({ "phase": "Enqueued" }), true);
            },
            vec!["hold_job"],
        ),
        (
            "a unit whose job is gone is deleted (its quota freed at once)",
            |s| {
                s.unit(
                    json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }] }),
                    true,
                );
            },
            vec!["delete_unit"],
        ),
        (
            "a unit whose backoff is over waits again (Enqueued)",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "TimeoutBackoff",
                    "requeueState": { "count": 1, "requeueAt": "2026-01-01T00:00:00Z" } }),
                    true,
                );
            },
            vec!["Phase Enqueued"],
        ),
        (
            "a unit still in its backoff waits",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "TimeoutBackoff",
                    "requeueState": { "count": 1, "requeueAt": "2999-01-01T00:00:00Z" } }),
                    true,
                );
            },
            vec![],
        ),
        (
            "a unit left in SchedFailed finishes its send-back",
            |s| {
                s.job(false, json!({}));
                s.unit(
                    json!({ "phase": "SchedFailed", "message": "pods unschedulable" }),
                    true,
                );
            },
            vec!["Backoff SchedulingTimeout"],
        ),
        (
            "a unit that does not fit its quota waits",
            |s| {
                s.job(true, json!({}));
                s.unit(json!({ "phase": "Enqueued" }), true);
                let quota: ElasticQuota = serde_json::from_value(json!({
                    "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
                    "metadata": { "name": "q", "namespace": "ns" },
                    "spec": { "max": { "cpu": "1" } },
                }))
                .unwrap();
                s.input(Input::Quota(Change::Applied(Box::new(
                    QuotaRecord::from_quota(&quota),
                ))));
            },
            vec![],
        ),
    ];
    for (name, setup, want) in table {
        let mut s = Scenario::new(json!({}));
        setup(&mut s);
        s.cycle();
        let got = summary(&s.take());
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn a_unit_goes_from_adoption_to_its_end() {
    let mut s = Scenario::new(json!({}));
    s.unit(json!({}), false);
    s.job(true, json!({}));
    assert_eq!(summary(&s.take()), ["adopt"]);
    // The adoption is seen; the cycle releases it (Enqueued is moot then).
    s.unit(json!({}), true);
    s.cycle();
    assert_eq!(summary(&s.take()), ["Release Dequeued"]);
    s.unit(
        json!({ "phase": "Dequeued", "admissions": [{ "name": "main", "replicas": 1,
        "resources": { "cpu": "2" } }] }),
        true,
    );
    s.job(false, json!({ "active": 1, "ready": 1 }));
    assert_eq!(summary(&s.take()), ["Phase Running"]);
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
        "resources": { "cpu": "2" } }] }),
        true,
    );
    s.job(
        false,
        json!({ "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    assert_eq!(summary(&s.take()), ["Phase Succeed"]);
}

#[test]
fn the_admission_check_contract() {
    let checks = json!({ "admissionChecks": [{ "name": "capacity" }] });
    type Setup = fn(&mut Scenario);
    let table: Vec<(&str, Setup, Vec<&str>)> = vec![
        (
            "a unit of a queue with checks first reserves quota",
            |s| {
                s.job(true, json!({}));
                s.unit(json!({ "phase": "Enqueued" }), true);
            },
            vec!["Release Reserved"],
        ),
        (
            "every check Ready releases it",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "Reserved", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }],
                    "admissionChecks": [check("capacity", "Ready", "ok")] }),
                    true,
                );
            },
            vec!["Release Dequeued"],
        ),
        (
            "a check still Pending keeps it Reserved",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "Reserved", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }],
                    "admissionChecks": [check("capacity", "Pending", "")] }),
                    true,
                );
            },
            vec![],
        ),
        (
            "Retry sends it to backoff",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "Reserved", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }],
                    "admissionChecks": [check("capacity", "Retry", "no capacity yet")] }),
                    true,
                );
            },
            vec!["Backoff AdmissionCheck"],
        ),
        (
            "Rejected sends it to backoff",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "Reserved", "admissions": [{ "name": "main", "replicas": 1,
                    "resources": { "cpu": "2" } }],
                    "admissionChecks": [check("capacity", "Rejected", "never")] }),
                    true,
                );
            },
            vec!["Backoff AdmissionCheck"],
        ),
    ];
    for (name, setup, want) in table {
        let mut s = Scenario::new(checks.clone());
        setup(&mut s);
        s.cycle();
        let got = summary(&s.take());
        assert_eq!(got, want, "{name}");
    }
}

/// A relist that no longer finds a running unit and its job (deleted while
/// the watch was away) frees the quota they held, once; one that finds
/// them changes nothing.
#[test]
fn a_relist_drops_what_was_deleted_meanwhile_and_frees_its_quota_once() {
    use crate::controller::sources::Listed;
    let mut s = Scenario::new(json!({}));
    s.job(false, json!({ "active": 1, "ready": 1 }));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    s.take();
    let used = |s: &Scenario| s.controller.core.cluster_used().get("cpu");
    assert_eq!(used(&s), 2000, "the running unit holds 2 cpu");

    // A relist that finds both keeps both.
    let found: Listed = [("ns".to_string(), "u".to_string())].into();
    s.input(Input::Unit(Change::Relisted(found)));
    let found: Listed = [("ns".to_string(), "j".to_string())].into();
    s.input(Input::Job("Job", Change::Relisted(found)));
    assert_eq!(used(&s), 2000);
    assert!(
        s.take()
            .iter()
            .all(|w| w.unit().is_none() || matches!(w, Write::Visibility { .. }))
    );

    // Both deleted while the watch was away: the job's relist drops it (its
    // unit is then deleted as an orphan of a gone job) and the unit's
    // relist drops the unit; quota is freed and not freed twice.
    s.input(Input::Job("Job", Change::Relisted(Listed::new())));
    assert!(s.controller.jobs.is_empty());
    s.input(Input::Unit(Change::Relisted(Listed::new())));
    s.input(Input::Unit(Change::Relisted(Listed::new())));
    assert!(s.controller.units.is_empty());
    assert_eq!(used(&s), 0, "the deleted unit's quota is free");
    let metrics = |name: &str| {
        s.controller
            .metrics
            .relist_dropped
            .get_or_create(&crate::controller::metrics::SourceLabels {
                source: name.into(),
            })
            .get()
    };
    assert_eq!(metrics("queueunits"), 1);
    assert_eq!(metrics("Job"), 1);
}

/// A job kind whose API fails: its units are kept as their status says —
/// a running unit whose job cannot be seen still holds its quota and is not
/// deleted as the unit of a gone job — until the kind works again.
#[test]
fn a_unit_of_a_failing_kind_is_kept_as_it_is_until_the_kind_works() {
    let mut s = Scenario::new(json!({}));
    s.input(Input::Job(
        "Job",
        Change::Failing(Some("403 Forbidden".into())),
    ));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    s.controller.collect_orphans();
    assert_eq!(
        summary(&s.take()),
        Vec::<String>::new(),
        "nothing decided blind"
    );
    assert_eq!(s.controller.core.cluster_used().get("cpu"), 2000);
    assert!(
        s.controller
            .readiness
            .degraded()
            .iter()
            .any(|d| d.starts_with("Job: ")),
        "{:?}",
        s.controller.readiness.degraded()
    );
    // The kind works again and its job is not there: the unit of a gone job
    // is deleted.
    s.input(Input::Job("Job", Change::Synced));
    assert_eq!(summary(&s.take()), vec!["delete_unit"]);
    assert!(s.controller.readiness.degraded().is_empty());
}

fn pod(name: &str, alive: bool) -> Input {
    Input::Pod(Change::Applied(Box::new(PodRecord {
        namespace: "ns".into(),
        name: name.into(),
        owner_uid: "uid-j".into(),
        scheduled: true,
        unschedulable: None,
        alive,
        group: None,
    })))
}

/// Quota is freed when a job's pods are gone, not when the job says it is
/// done or its objects go: a pod that still runs (out its grace period, or
/// past a success the job reported first) keeps the unit's quota.
#[test]
fn quota_is_freed_with_the_last_running_pod() {
    let used = |s: &Scenario| s.controller.core.cluster_used().get("cpu");
    // A job that succeeded while one of its pods still runs.
    let mut s = Scenario::new(json!({}));
    s.input(pod("p1", true));
    s.job(
        false,
        json!({ "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    assert_eq!(
        summary(&s.take()),
        Vec::<String>::new(),
        "waits for its pod"
    );
    assert_eq!(used(&s), 2000);
    s.input(pod("p1", false));
    assert_eq!(summary(&s.take()), vec!["Phase Succeed"]);
    assert_eq!(used(&s), 0);

    // A running job whose unit is deleted (the job too) while its pod runs
    // out its grace period: the quota lingers until the pod is gone.
    let mut s = Scenario::new(json!({}));
    s.input(pod("p1", true));
    s.job(false, json!({ "active": 1 }));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    s.take();
    s.input(Input::Job("Job", Change::Deleted("ns".into(), "j".into())));
    s.input(Input::Unit(Change::Deleted("ns".into(), "u".into())));
    assert_eq!(used(&s), 2000, "the pod still runs");
    s.input(Input::Pod(Change::Deleted("ns".into(), "p1".into())));
    assert_eq!(used(&s), 0, "freed with the pod");
}

/// A job whose pods belong to another object (a RayJob's RayCluster, found
/// by its `ray.io/cluster` label) keeps its quota after it succeeds while
/// that cluster's pods run.
#[test]
fn a_succeeded_job_keeps_its_quota_while_its_pod_group_runs() {
    let used = |s: &Scenario| s.controller.core.cluster_used().get("cpu");
    let mut s = Scenario::new(json!({}));
    let head = |alive| {
        Input::Pod(Change::Applied(Box::new(PodRecord {
            namespace: "ns".into(),
            name: "c1-head".into(),
            owner_uid: "uid-cluster".into(),
            scheduled: true,
            unschedulable: None,
            alive,
            group: Some(("ray.io/cluster", "c1".into())),
        })))
    };
    s.input(head(true));
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "j", "namespace": "ns", "uid": "uid-j",
                      "creationTimestamp": "2026-01-01T00:00:00Z",
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: "u" } },
        "spec": { "suspend": false },
        "status": { "conditions": [{ "type": "Complete", "status": "True" }] },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let mut record =
        JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
    record.pod_group = Some(("ray.io/cluster", "c1".into()));
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }] }),
        true,
    );
    assert_eq!(summary(&s.take()), Vec::<String>::new());
    assert_eq!(used(&s), 2000, "the cluster still runs");
    s.input(head(false));
    assert_eq!(summary(&s.take()), vec!["Phase Succeed"]);
    assert_eq!(used(&s), 0);
}

/// A queue that preempts inside its quota: a high-priority unit that does
/// not fit sends the lower-priority running unit back with the reason
/// `Preempted`, which keeps its quota until its job is held; then the
/// preemptor is released.
#[test]
fn a_higher_priority_unit_preempts_inside_its_quota() {
    let mut s = Scenario::new(
        json!({ "preemption": { "withinQuota": "LowerPriority", "minRunSeconds": 0 } }),
    );
    // u (priority 0, 2 cpu of q's 4) runs; a second unit of 4 cpu and
    // priority 100 arrives.
    s.job(false, json!({ "active": 1, "ready": 1 }));
    s.unit(
        json!({ "phase": "Running", "admissions": [{ "name": "main", "replicas": 1,
            "resources": { "cpu": "2" } }], "lastAllocateTime": "2026-01-01T00:00:00Z" }),
        true,
    );
    s.take();
    let hero: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "hero", "namespace": "ns", "resourceVersion": "90",
                      "creationTimestamp": "2026-01-01T00:01:00Z",
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": "h", "uid": "uid-h" }] },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "h", "namespace": "ns" },
                  "queue": "q", "resource": { "cpu": "4" }, "priority": 100 },
        "status": { "phase": "Enqueued" },
    }))
    .unwrap();
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "h", "namespace": "ns", "uid": "uid-h",
                      "creationTimestamp": "2026-01-01T00:01:00Z",
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: "hero" } },
        "spec": { "suspend": true },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let record = JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(hero),
    ))));
    s.cycle();
    let writes = s.take();
    let backoff = writes.iter().find_map(|w| match w {
        Write::Backoff {
            unit,
            reason,
            message,
            ..
        } => Some((unit.to_string(), *reason, message.clone())),
        _ => None,
    });
    let (victim, reason, message) = backoff.expect("the low-priority unit is sent back");
    assert_eq!((victim.as_str(), reason), ("ns/u", PREEMPTED));
    assert!(
        message.contains("preempted by ns/hero (priority 100"),
        "{message}"
    );
    assert_eq!(
        s.controller
            .metrics
            .reclaims
            .get_or_create(&crate::controller::metrics::ReasonLabels { reason: PREEMPTED })
            .get(),
        1
    );
    // The victim's job is held (its watch event) and its unit gone to
    // backoff: the hero is released.
    s.job(true, json!({}));
    s.cycle();
    assert!(summary(&s.take()).contains(&"Release Dequeued".to_string()));
}

/// A unit `name` of job `job` (`cpu` cpu, quota `q`, priority 0), Enqueued,
/// with its job held.
fn waiting_unit(s: &mut Scenario, name: &str, job: &str, cpu: &str) {
    s.rv += 1;
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": name, "namespace": "ns", "resourceVersion": s.rv.to_string(),
                      "creationTimestamp": "2026-01-01T00:01:00Z",
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job", "name": job,
                                            "uid": format!("uid-{job}") }] },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": job, "namespace": "ns" },
                  "queue": "q", "resource": { "cpu": cpu }, "priority": 0 },
        "status": { "phase": "Enqueued" },
    }))
    .unwrap();
    let record = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": job, "namespace": "ns", "uid": format!("uid-{job}"),
                      "creationTimestamp": "2026-01-01T00:01:00Z",
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: name } },
        "spec": { "suspend": true },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let record = JobRecord::from_object(adapter, WatchedJob::from_value(&record).unwrap()).unwrap();
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(unit),
    ))));
}

/// A release whose answer was lost (the connection broke: it may have
/// landed, its job may run) keeps its quota — a unit that fits only in that
/// quota waits — and is sent again whole until the API server answers:
/// landed, it keeps the quota; refused, the quota is free again.
#[test]
fn a_release_with_an_unknown_outcome_keeps_its_quota_until_the_api_says() {
    fn lost(s: &mut Scenario) -> Vec<Write> {
        let writes: Vec<Write> = std::mem::take(&mut *s.writes.0.lock().unwrap());
        for write in &writes {
            s.controller.on_written(Written {
                write: write.clone(),
                outcome: Outcome::Unknown("connection reset".into()),
            });
        }
        writes
    }
    let released = |writes: &[Write], who: &str| {
        writes
            .iter()
            .any(|w| matches!(w, Write::Release { unit, .. } if &**unit == who))
    };
    for landed in [true, false] {
        let mut s = Scenario::new(json!({}));
        s.job(true, json!({}));
        s.unit(json!({ "phase": "Enqueued" }), true);
        s.take();
        s.cycle();
        assert_eq!(summary(&lost(&mut s)), ["Release Dequeued"], "{landed}");
        // Sent again at once, whole.
        let again: Vec<Write> = s.writes.0.lock().unwrap().clone();
        let Some(Write::Release {
            admissions: Some(admissions),
            attempts: Some(1),
            ..
        }) = again.first()
        else {
            panic!("not sent again whole: {again:?}");
        };
        assert_eq!(
            admissions[0].resources.get("cpu").map(|q| q.0.as_str()),
            Some("2")
        );
        // 3 cpu fits q's 4 only if u's 2 were free.
        waiting_unit(&mut s, "big", "b", "3");
        s.cycle();
        if landed {
            // The second attempt lands; its job runs; u keeps its quota.
            let writes = s.take();
            assert!(!released(&writes, "ns/big"), "{:?}", summary(&writes));
            s.job(false, json!({ "active": 1 }));
            s.cycle();
            let writes = s.take();
            assert!(!released(&writes, "ns/big"), "{:?}", summary(&writes));
        } else {
            let writes = lost(&mut s);
            assert!(!released(&writes, "ns/big"), "{:?}", summary(&writes));
            // The third attempt is refused (the job's hold could not be
            // lifted; the writer put the unit back to Enqueued): the quota
            // is free again, and the cycle releases (u is first in line).
            let writes: Vec<Write> = std::mem::take(&mut *s.writes.0.lock().unwrap());
            for write in writes {
                s.controller.on_written(Written {
                    write,
                    outcome: Outcome::Failed("422 Unprocessable Entity".into()),
                });
            }
            s.cycle();
            let writes = s.take();
            assert!(
                released(&writes, "ns/u") || released(&writes, "ns/big"),
                "{:?}",
                summary(&writes)
            );
        }
    }
}
