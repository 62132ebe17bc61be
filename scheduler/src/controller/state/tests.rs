//! Tests of the controller's state machine that need no API server.
use super::backoff::{BACK_IN_QUEUE, backoff_delay, sched_failed_reason};
use super::decide::{desired_membership, effective_phase};
use super::lifecycle::selector_matches;
use super::visibility::{VisibilityGate, scan_positions};
use super::*;
use crate::controller::records::{Labels, key};
use crate::core::{QueueDef, QuotaDef};
use koord_queue_api::jobs::JobState;
use std::collections::BTreeMap;

#[test]
fn backoff_doubles_from_ten_seconds_up_to_fifteen_minutes_with_jitter() {
    let mid = 100; // jitter factor 1.0
    assert_eq!(backoff_delay(1, mid), Duration::from_secs(10));
    assert_eq!(backoff_delay(2, mid), Duration::from_secs(20));
    assert_eq!(backoff_delay(4, mid), Duration::from_secs(80));
    assert_eq!(backoff_delay(8, mid), Duration::from_secs(900));
    assert_eq!(backoff_delay(50, mid), Duration::from_secs(900));
    assert_eq!(backoff_delay(1, 0), Duration::from_secs(9));
    assert_eq!(backoff_delay(1, 199), Duration::from_millis(10_990));
}

/// A core with one queue `q` (quota `q`, 4 cpu of capacity) and ten
/// waiting 2-cpu units `ns/u0`..`ns/u9`, a cycle run (two released, the
/// rest waiting with a reason), and the controller's states of the
/// waiting units, Enqueued.
fn waiting_units() -> (Core, HashMap<Key, Box<UnitState>>) {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: \"4\" } }\n",
    )
    .expect("a valid configuration");
    core.upsert_queue(&QueueDef::new("q"));
    core.upsert_quota(&QuotaDef::new("q").max("cpu", 4000))
        .expect("a valid quota");
    let mut units = HashMap::new();
    for i in 0..10 {
        let name = format!("u{i}");
        let def = UnitDef::new("ns", &name)
            .with_quota("q")
            .requesting("cpu", 2000)
            .created_at(i);
        core.upsert_unit(&def).expect("a valid unit");
        let mut st = found_reserved();
        st.rec.name = name;
        st.rec.phase = Some(QueueUnitPhase::Enqueued);
        units.insert(key("ns", &st.rec.name), Box::new(st));
    }
    let out = core.run_cycle();
    for d in &out.decisions {
        units.remove(&d.unit);
    }
    assert_eq!(units.len(), 8, "two released, eight waiting");
    (core, units)
}

#[test]
fn a_visibility_pass_writes_what_changed_and_nothing_when_unchanged() {
    let (core, mut units) = waiting_units();
    let interval = Duration::from_secs(2);
    let now = Instant::now();
    let first = scan_positions(&core, &units, now, interval, 200);
    assert!(first.complete);
    assert_eq!((first.rendered, first.writes.len()), (8, 8));
    let (k, position, message) = &first.writes[0];
    assert_eq!(&**k, "ns/u2");
    assert_eq!(*position, Some(1));
    assert!(message.starts_with("position 1 in queue q: "), "{message}");
    // The writes land (as their watch events or results would record).
    for (k, position, message) in first.writes {
        let st = units.get_mut(&k).expect("a waiting unit");
        st.rec.position = position;
        st.rec.message = Some(message);
    }
    let again = scan_positions(&core, &units, now + interval, interval, 200);
    assert!(again.complete && again.writes.is_empty());

    // Nothing changed since that complete pass: the next pass does not
    // run at all, so it renders and writes nothing.
    let mut gate = VisibilityGate::default();
    assert!(gate.due(), "the first pass runs");
    gate.passed(again.complete);
    assert!(!gate.due());
    assert!(!gate.due(), "still nothing changed");
    // Any input, write result, cycle or leadership change reopens it.
    gate.changed();
    assert!(gate.due());
}

#[test]
fn a_deferred_or_cut_short_visibility_pass_is_run_again() {
    let (core, mut units) = waiting_units();
    let interval = Duration::from_secs(2);
    let now = Instant::now();
    // Over budget: the rest is for the next pass.
    let cut = scan_positions(&core, &units, now, interval, 3);
    assert_eq!(cut.writes.len(), 3);
    assert!(!cut.complete);
    // A unit published within the status interval is deferred.
    for st in units.values_mut() {
        st.last_published = Some(now);
    }
    let deferred = scan_positions(&core, &units, now, interval, 200);
    assert!(deferred.writes.is_empty());
    assert!(!deferred.complete);
    let mut gate = VisibilityGate::default();
    gate.passed(deferred.complete);
    assert!(gate.due(), "an incomplete pass leaves the gate open");
    // Once the interval is over the deferred units are written.
    let later = scan_positions(&core, &units, now + interval, interval, 200);
    assert!(later.complete);
    assert_eq!(later.writes.len(), 8);
}

/// A unit as a starting scheduler finds it: Reserved, checks pending.
fn found_reserved() -> UnitState {
    let unit: koord_queue_api::QueueUnit = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": "u", "namespace": "ns" },
        "spec": {
            "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": "j" },
            "queue": "q", "resource": { "cpu": "2" },
        },
        "status": {
            "phase": "Reserved",
            "admissions": [{ "name": "main", "replicas": 1, "resources": { "cpu": "2" } }],
            "admissionChecks": [{ "name": "provision", "state": "Pending" }],
        },
    }))
    .expect("a valid unit");
    UnitState::new(UnitRecord::from_unit(unit))
}

#[test]
fn a_job_released_after_a_restart_is_not_taken_for_suspended_again() {
    // Reserved by an earlier process; its checks pass after the restart
    // and this process releases it. Its job is still seen held until
    // the release reaches the watch: that is not a new suspension.
    let mut st = found_reserved();
    st.release_written(QueueUnitPhase::Dequeued, None, None, None, 0);
    assert_eq!(st.rec.phase, Some(QueueUnitPhase::Dequeued));
    assert_eq!(st.rec.held.get("cpu"), 2000, "keeps its reservation");
    assert!(!st.held_job_was_suspended_again());
    // Once the job was seen released, holding it again is a suspension.
    st.release_ack = true;
    assert!(st.held_job_was_suspended_again());
}

#[test]
fn a_unit_found_released_with_its_job_held_was_suspended_again() {
    let mut st = found_reserved();
    st.rec.phase = Some(QueueUnitPhase::Dequeued);
    assert!(st.held_job_was_suspended_again());
    // Reserving (checks start) is no release of the job.
    let mut st = found_reserved();
    st.release_written(QueueUnitPhase::Reserved, Some(&[]), Some(1), None, 0);
    assert!(!st.released_here);
}

#[test]
fn an_adopted_unit_waits_before_its_phase_is_written_and_only_for_its_own_job() {
    let mut st = found_reserved();
    st.rec.phase = None;
    st.rec.held = Resources::new();
    let job = |uid: &str, held: bool| JobRecord {
        adapter: koord_queue_api::jobs::all()[0],
        namespace: "ns".into(),
        name: "j".into(),
        uid: uid.into(),
        unit_name: "u".into(),
        unit: key("ns", "u"),
        held,
        state: JobState::Pending,
        deleting: false,
        created_ms: 0,
        pod_group: None,
        grouping: None,
    };
    // Not adopted yet: never schedulable.
    assert_eq!(effective_phase(&st.rec, Some(&job("uid-1", true))), None);
    assert_eq!(
        desired_membership(&st.rec, Some(&job("uid-1", true)), false),
        Membership::Absent
    );
    // Adopted (owner reference to this job): waits as Enqueued.
    st.rec.owner_uid = Some("uid-1".into());
    assert_eq!(
        effective_phase(&st.rec, Some(&job("uid-1", true))),
        Some(QueueUnitPhase::Enqueued)
    );
    assert_eq!(
        desired_membership(&st.rec, Some(&job("uid-1", true)), false),
        Membership::Waiting
    );
    // A job re-created under the same name is another job.
    assert_eq!(effective_phase(&st.rec, Some(&job("uid-2", true))), None);
    assert_eq!(effective_phase(&st.rec, None), None);
    // A released job does not wait (it is held again, see `lifecycle`).
    assert_eq!(
        desired_membership(&st.rec, Some(&job("uid-1", false)), false),
        Membership::Absent
    );
}

#[test]
fn an_interrupted_sched_failed_send_back_repeats_its_reason_once() {
    let written =
        "SchedFailed: pod p unschedulable: no node after 8s; suspended again, quota released";
    let left = format!("{written}{BACK_IN_QUEUE}q at 2026-01-01T00:00:00Z (attempt 1)");
    assert_eq!(sched_failed_reason(Some(&left)), written);
    assert_eq!(sched_failed_reason(Some(written)), written);
    for other in [None, Some("position 3 in queue q"), Some("")] {
        let reason = sched_failed_reason(other);
        assert!(reason.starts_with("SchedFailed: "), "{reason}");
        assert!(!reason.contains(BACK_IN_QUEUE), "{reason}");
    }
}

#[test]
fn label_selectors() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let map: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
    let labels = Labels::from_map(&map);
    assert!(selector_matches(None, &labels));
    let sel = |match_labels: Option<BTreeMap<String, String>>,
               exprs: Vec<(&str, &str, Vec<&str>)>| LabelSelector {
        match_labels,
        match_expressions: Some(
            exprs
                .into_iter()
                .map(|(k, op, vs)| LabelSelectorRequirement {
                    key: k.into(),
                    operator: op.into(),
                    values: Some(vs.into_iter().map(String::from).collect()),
                })
                .collect(),
        ),
    };
    assert!(selector_matches(
        Some(&sel(Some(map.clone()), vec![])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&sel(Some([("team".into(), "b".into())].into()), vec![])),
        &labels
    ));
    assert!(selector_matches(
        Some(&sel(None, vec![("team", "In", vec!["a", "c"])])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&sel(None, vec![("team", "NotIn", vec!["a"])])),
        &labels
    ));
    assert!(selector_matches(
        Some(&sel(None, vec![("gpu", "DoesNotExist", vec![])])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&sel(None, vec![("gpu", "Exists", vec![])])),
        &labels
    ));
}
