//! The whole controller driven without an API server: inputs go in as the
//! watches would send them, the writes it asks for are recorded, their
//! results are fed back. One table test per lifecycle transition of
//! docs/concepts.md and per outcome of the admission-check contract
//! (docs/admission-checks.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{ElasticQuota, Queue, QueueUnit, keys};
use koord_queue_runtime::{Leadership, Readiness};
use serde_json::{Value, json};

use crate::controller::clock::Now;
use crate::controller::metrics::Metrics;
use crate::controller::records::{JobRecord, Key, QueueRecord, QuotaRecord, UnitRecord};
use crate::controller::sources::{Change, Input};
use crate::controller::state::{CACHES_SYNCED, Controller, FIRST_CYCLE, Settings};
use crate::controller::writes::{Claim, Outcome, Write, WriteSink, Written};
use crate::core::Core;
use std::time::{Duration, Instant};

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

/// When a scenario starts: an hour after the objects it makes were created
/// (`2026-01-01T00:00:00Z`, or a minute later), so that they are past every
/// grace period and young-job window, as they are for a scheduler that
/// comes upon them.
const START: &str = "2026-01-01T01:00:00Z";

/// A controller (leading, every source synced) with quota `q` (max 4 cpu)
/// and its queue; `queue_spec` is merged into the Queue's spec. Its clock
/// stands still at [`START`] unless moved on by [`Scenario::advance`].
struct Scenario {
    controller: Controller,
    writes: Recorder,
    rv: u64,
    now: Now,
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
            jitter_salt: 7,
            estimates: None,
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
        let start: k8s_openapi::jiff::Timestamp = START.parse().unwrap();
        let mut s = Self {
            controller,
            writes,
            rv: 1,
            now: Now {
                at: Instant::now(),
                wall_ms: start.as_millisecond(),
            },
        };
        s.controller.set_now(s.now);
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
        self.controller.set_now(self.now);
        self.controller.on_input(input);
    }

    /// Moves the scenario's clock on by `by`.
    fn advance(&mut self, by: Duration) {
        self.now = self.now.advanced(by);
        self.controller.set_now(self.now);
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

    /// A housekeeping tick (timers: backoffs, timeouts, grace periods).
    fn tick(&mut self) {
        self.controller.set_now(self.now);
        self.controller.housekeeping();
    }

    fn cycle(&mut self) {
        self.controller.set_now(self.now);
        self.controller.cycle();
    }

    /// The writes asked for since the last call, each answered Done.
    fn take(&mut self) -> Vec<Write> {
        let writes: Vec<Write> = std::mem::take(&mut *self.writes.0.lock().unwrap());
        for write in &writes {
            self.rv += 1;
            self.controller.set_now(self.now);
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

/// A backoff's end: 30 s after [`START`].
const REQUEUE_AT: &str = "2026-01-01T01:00:30Z";

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
                    "requeueState": { "count": 1, "requeueAt": REQUEUE_AT } }),
                    true,
                );
                s.advance(Duration::from_secs(31));
                s.tick();
            },
            vec!["Phase Enqueued"],
        ),
        (
            "a unit still in its backoff waits",
            |s| {
                s.job(true, json!({}));
                s.unit(
                    json!({ "phase": "TimeoutBackoff",
                    "requeueState": { "count": 1, "requeueAt": REQUEUE_AT } }),
                    true,
                );
                s.advance(Duration::from_secs(29));
                s.tick();
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

mod faults;
mod given;
mod history;
mod pending;
mod preemption;
mod queue_status;
mod quota_held;
mod repair;
mod shared_keys;
