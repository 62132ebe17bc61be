//! The visibility pass (`state/visibility.rs`): what it writes, and when it
//! runs again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use koord_queue_api::queue_unit::QueueUnitPhase;

use super::found_reserved;
use crate::controller::records::Key;
use crate::controller::state::UnitState;
use crate::controller::state::visibility::{
    Publish, PublishCause, ReasonScan, VisibilityGate, scan_reasons,
};
use crate::core::{Core, QueueDef, QuotaDef, UnitDef};

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
        st.rec.set_name(&name);
        st.rec.phase = Some(QueueUnitPhase::Enqueued);
        units.insert(st.rec.key(), Box::new(st));
    }
    let out = core.run_cycle();
    for d in &out.decisions {
        units.remove(&d.unit);
    }
    assert_eq!(units.len(), 8, "two released, eight waiting");
    (core, units)
}

/// A pass without estimates.
fn scan(
    core: &Core,
    units: &HashMap<Key, Box<UnitState>>,
    now: Instant,
    interval: Duration,
    budget: usize,
) -> ReasonScan {
    scan_reasons(core, units, now, interval, budget, &|_| None, T0)
}

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

/// The writes land (as their watch events would record).
fn land(units: &mut HashMap<Key, Box<UnitState>>, writes: Vec<Publish>) {
    for w in writes {
        let st = units.get_mut(&w.unit).expect("a waiting unit");
        st.rec.wait_reason = Some(w.wait_type.into());
        st.rec.message = Some(w.message.into());
        st.rec.estimated_start_ms = w.estimated_start;
    }
}

/// The causes of `writes` in order, a run of one cause once.
fn causes(writes: &[Publish]) -> Vec<PublishCause> {
    let mut causes: Vec<PublishCause> = writes.iter().map(|w| w.cause).collect();
    causes.dedup();
    causes
}

#[test]
fn an_estimate_is_written_to_the_status_on_a_large_step_only() {
    let (core, mut units) = waiting_units();
    let interval = Duration::from_secs(2);
    let now = Instant::now();
    // Judged, and an estimate for u3 ten minutes ahead, u4 two minutes
    // ahead, before the first write: both ride with the wait type.
    let estimates = |key: &str| match key {
        "ns/u3" => Some(T0 + 10 * MIN),
        "ns/u4" => Some(T0 + 2 * MIN),
        _ => None,
    };
    let first = scan_reasons(&core, &units, now, interval, 200, &estimates, T0);
    assert_eq!(first.writes.len(), 8);
    land(&mut units, first.writes);
    assert_eq!(units["ns/u3"].rec.estimated_start_ms, Some(T0 + 10 * MIN));
    let t = now + interval;
    // Small moves (a minute, a minute and a half) are not written.
    let moved = |key: &str| match key {
        "ns/u3" => Some(T0 + 11 * MIN),
        "ns/u4" => Some(T0 + 3 * MIN + 30_000),
        _ => None,
    };
    let quiet = scan_reasons(&core, &units, t, interval, 200, &moved, T0);
    assert!(quiet.writes.is_empty(), "{:?}", quiet.writes);
    // u3 moves by 20 minutes, u5 gets a first estimate an hour ahead: two
    // writes, the wait type unchanged.
    let stepped = |key: &str| match key {
        "ns/u3" => Some(T0 + 30 * MIN),
        "ns/u4" => Some(T0 + 2 * MIN),
        "ns/u5" => Some(T0 + 60 * MIN),
        _ => None,
    };
    let written = scan_reasons(&core, &units, t, interval, 200, &stepped, T0);
    assert_eq!(causes(&written.writes), [PublishCause::Estimate]);
    let mut keys: Vec<(&str, Option<i64>)> = written
        .writes
        .iter()
        .map(|w| (&*w.unit, w.estimated_start))
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            ("ns/u3", Some(T0 + 30 * MIN)),
            ("ns/u5", Some(T0 + 60 * MIN))
        ]
    );
}

#[test]
fn a_visibility_pass_writes_a_changed_wait_type_and_nothing_when_only_places_move() {
    let (mut core, mut units) = waiting_units();
    let interval = Duration::from_secs(2);
    let now = Instant::now();
    let first = scan(&core, &units, now, interval, 200);
    assert!(first.complete);
    assert_eq!(first.writes.len(), 8);
    assert_eq!(causes(&first.writes), [PublishCause::WaitType]);
    let Publish {
        unit: k,
        wait_type: reason,
        message,
        estimated_start: estimate,
        ..
    } = &first.writes[0];
    assert_eq!(*estimate, None);
    assert_eq!(&**k, "ns/u2");
    assert_eq!(*reason, "QuotaExceeded");
    assert!(message.starts_with("quota q: cpu"), "{message}");
    assert!(!message.contains("position"), "{message}");
    // The writes land (as their watch events would record).
    land(&mut units, first.writes);
    let again = scan(&core, &units, now + interval, interval, 200);
    assert!(again.complete && again.writes.is_empty());

    // Units ahead leave: every place moves, no reason changes, nothing
    // is written.
    for name in ["u0", "u1"] {
        core.remove_unit(&format!("ns/{name}"));
    }
    core.remove_unit("ns/u2");
    units.remove("ns/u2");
    let out = core.run_cycle();
    for d in &out.decisions {
        units.remove(&d.unit);
    }
    let moved = scan(&core, &units, now + interval * 2, interval, 200);
    assert!(moved.writes.is_empty(), "{:?}", moved.writes);

    // A position written by an older version is cleared once.
    let stale = units.values_mut().next().expect("a waiting unit");
    stale.rec.stale_position = true;
    let cleared = scan(&core, &units, now + interval * 3, interval, 200);
    assert_eq!(cleared.writes.len(), 1);
    assert_eq!(causes(&cleared.writes), [PublishCause::Position]);

    // Nothing changed since a complete pass: the next pass does not
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
    let cut = scan(&core, &units, now, interval, 3);
    assert_eq!(cut.writes.len(), 3);
    assert!(!cut.complete);
    // A unit published within the status interval is deferred.
    for st in units.values_mut() {
        st.last_published = Some(now);
    }
    let deferred = scan(&core, &units, now, interval, 200);
    assert!(deferred.writes.is_empty());
    assert!(!deferred.complete);
    let mut gate = VisibilityGate::default();
    gate.passed(deferred.complete);
    assert!(gate.due(), "an incomplete pass leaves the gate open");
    // Once the interval is over the deferred units are written.
    let later = scan(&core, &units, now + interval, interval, 200);
    assert!(later.complete);
    assert_eq!(later.writes.len(), 8);
}
