//! The visibility API's answers (`state/pending.rs`), read from the whole
//! controller: a namespace's waiting units and a Queue's backlog in serving
//! order with their places and reasons, a unit sent back after those in
//! line, paging, a missing Queue, and the quotas' usage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use koord_queue_api::jobs::watched::WatchedJob;
use koord_queue_api::{QueueUnit, keys};
use koord_queue_visibility::{Answer, Ask, Page, PendingUnit, Query, QuotaUsage, Reply, WaitType};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::Scenario;
use crate::controller::records::{JobRecord, UnitRecord};
use crate::controller::sources::{Change, Input};

/// Unit `name` (2 cpu, quota `q`) of held job `name`, created `second`
/// seconds into 2026, with `status`.
pub(super) fn queued(s: &mut Scenario, name: &str, second: u32, status: Value) {
    queued_asking(s, name, second, status, json!({ "cpu": "2" }));
}

/// [`queued`] asking for `resource`.
fn queued_asking(s: &mut Scenario, name: &str, second: u32, status: Value, resource: Value) {
    s.rv += 1;
    let created = format!("2026-01-01T00:00:{second:02}Z");
    let unit: QueueUnit = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "QueueUnit",
        "metadata": { "name": name, "namespace": "ns", "resourceVersion": s.rv.to_string(),
                      "creationTimestamp": created,
                      "labels": { keys::QUOTA_NAME_LABEL: "q" },
                      "ownerReferences": [{ "apiVersion": "batch/v1", "kind": "Job",
                                            "name": name, "uid": format!("uid-{name}") }] },
        "spec": { "consumerRef": { "apiVersion": "batch/v1", "kind": "Job", "name": name, "namespace": "ns" },
                  "queue": "q", "resource": resource, "priority": 0 },
        "status": status,
    }))
    .unwrap();
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                      "creationTimestamp": created,
                      "annotations": { keys::QUEUE_UNIT_ANNOTATION: name } },
        "spec": { "suspend": true },
    });
    let adapter = koord_queue_api::jobs::for_kind("batch", "Job").unwrap();
    let record = JobRecord::from_object(adapter, WatchedJob::from_value(&job).unwrap()).unwrap();
    // The job first, as the webhook creates it before its unit.
    s.input(Input::Job("Job", Change::Applied(Box::new(record))));
    s.input(Input::Unit(Change::Applied(Box::new(
        UnitRecord::from_unit(unit),
    ))));
}

pub(super) fn ask(s: &mut Scenario, ask: Ask, page: Page) -> Answer {
    ask_knowing(s, ask, page, None).answer
}

/// Asks `ask` as one that holds its answer at generation `known`.
fn ask_knowing(s: &mut Scenario, ask: Ask, page: Page, known: Option<u64>) -> Reply {
    let (reply, answer) = oneshot::channel();
    s.controller.answer(Query {
        ask,
        page,
        known,
        reply,
    });
    answer.blocking_recv().unwrap()
}

fn units(answer: Answer) -> (Vec<PendingUnit>, usize) {
    match answer {
        Answer::Units { items, remaining } => (items, remaining),
        other => panic!("not units: {other:?}"),
    }
}

fn names(items: &[PendingUnit]) -> Vec<&str> {
    items.iter().map(|u| u.metadata.name.as_str()).collect()
}

/// Quota `q` (4 cpu) with four 2-cpu units: two released by the cycle, two
/// in line; a fifth sent back until 02:00, an hour after the scenario's start.
fn four_and_one_sent_back() -> Scenario {
    let mut s = Scenario::new(json!({}));
    for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        queued(&mut s, name, i as u32, json!({ "phase": "Enqueued" }));
    }
    queued(
        &mut s,
        "e",
        9,
        json!({ "phase": "TimeoutBackoff", "message": "preempted by ns/x",
                "requeueState": { "count": 1, "requeueAt": "2026-01-01T02:00:00Z" } }),
    );
    s.cycle();
    assert_eq!(
        super::summary(&s.take()),
        ["Release Dequeued", "Release Dequeued"]
    );
    s
}

#[test]
fn a_namespace_lists_its_units_in_line_by_place_then_those_sent_back() {
    let mut s = four_and_one_sent_back();
    let (items, remaining) = units(ask(
        &mut s,
        Ask::Namespace(Some("ns".into())),
        Page::default(),
    ));
    assert_eq!(names(&items), ["c", "d", "e"]);
    assert_eq!(remaining, 0);
    assert_eq!(
        items.iter().map(|u| u.position).collect::<Vec<_>>(),
        [Some(1), Some(2), None]
    );
    let c = &items[0];
    assert_eq!(c.queue, "q");
    assert_eq!(c.reason.kind, WaitType::QuotaExceeded);
    assert_eq!(c.reason.quota.as_deref(), Some("q"));
    assert_eq!(c.reason.resource.as_deref(), Some("cpu"));
    assert_eq!(c.reason.short_by.as_deref(), Some("2"));
    assert_eq!(c.requests["cpu"], "2");
    assert_eq!(c.job.as_ref().unwrap().kind, "Job");
    let e = &items[2];
    assert_eq!(e.reason.kind, WaitType::Backoff);
    assert_eq!(e.reason.until.as_deref(), Some("2026-01-01T02:00:00Z"));
    assert_eq!(e.reason.message, "preempted by ns/x");
    // Another namespace has nothing.
    let (none, _) = units(ask(
        &mut s,
        Ask::Namespace(Some("other".into())),
        Page::default(),
    ));
    assert!(none.is_empty());
}

#[test]
fn a_queue_backlog_pages_and_a_missing_queue_says_so() {
    let mut s = four_and_one_sent_back();
    let page = Page {
        offset: 1,
        limit: Some(1),
    };
    let (items, remaining) = units(ask(&mut s, Ask::Queue("q".into()), page));
    assert_eq!(names(&items), ["d"]);
    assert_eq!(items[0].position, Some(2));
    assert_eq!(remaining, 1, "the unit sent back follows");
    assert_eq!(
        ask(&mut s, Ask::Queue("nope".into()), Page::default()),
        Answer::NoSuchQueue
    );
}

#[test]
fn the_pages_of_a_listing_follow_what_changed_between_them() {
    let mut s = four_and_one_sent_back();
    let first = |offset| Page {
        offset,
        limit: Some(2),
    };
    let (items, remaining) = units(ask(&mut s, Ask::Queue("q".into()), first(0)));
    assert_eq!(names(&items), ["c", "d"]);
    assert_eq!(remaining, 1);
    // Nothing changed: the next page continues the same order.
    let (items, remaining) = units(ask(&mut s, Ask::Queue("q".into()), first(2)));
    assert_eq!(names(&items), ["e"]);
    assert_eq!(remaining, 0);
    // A unit arrives between two pages: the order kept for the pages is
    // not reused; the next page shows it in line, before the one sent back.
    queued(&mut s, "f", 5, json!({ "phase": "Enqueued" }));
    let (items, remaining) = units(ask(&mut s, Ask::Queue("q".into()), first(2)));
    assert_eq!(names(&items), ["f", "e"]);
    assert_eq!(items[0].position, Some(3));
    assert_eq!(remaining, 0);
    // Another question is not answered from the kept order either.
    let (items, _) = units(ask(&mut s, Ask::Namespace(Some("other".into())), first(0)));
    assert!(items.is_empty());
}

#[test]
fn the_quotas_of_a_namespace_show_what_they_hold_and_what_waits() {
    let mut s = four_and_one_sent_back();
    let Answer::Quotas(quotas) = ask(&mut s, Ask::Quotas(Some("ns".into())), Page::default())
    else {
        panic!("not quotas");
    };
    let q: &QuotaUsage = quotas.iter().find(|q| q.metadata.name == "q").unwrap();
    assert_eq!(q.used["cpu"], "4");
    assert_eq!(q.max["cpu"], "4");
    assert_eq!(q.borrowed["cpu"], "4", "no min: all it uses is borrowed");
    assert_eq!(q.pending, 2);
    assert_eq!(q.admitted, 2);
    assert!(q.parent.is_none());
}

#[test]
fn a_quota_borrows_only_what_it_governs() {
    // Quota `q` names cpu only (max 4, no min); a unit also asks memory.
    let mut s = Scenario::new(json!({}));
    queued_asking(
        &mut s,
        "m",
        0,
        json!({ "phase": "Enqueued" }),
        json!({ "cpu": "2", "memory": "64Mi" }),
    );
    s.cycle();
    assert_eq!(super::summary(&s.take()), ["Release Dequeued"]);
    let Answer::Quotas(quotas) = ask(&mut s, Ask::Quotas(Some("ns".into())), Page::default())
    else {
        panic!("not quotas");
    };
    let q = quotas.iter().find(|q| q.metadata.name == "q").unwrap();
    assert_eq!(q.used["memory"], "64Mi", "what it holds is shown");
    assert_eq!(q.borrowed["cpu"], "2");
    assert!(
        !q.borrowed.contains_key("memory"),
        "memory is not governed by q: not borrowed ({:?})",
        q.borrowed
    );
}

#[test]
fn an_answer_held_at_the_generation_that_stands_is_unchanged_until_the_state_moves() {
    let mut s = four_and_one_sent_back();
    let backlog = || Ask::Queue("q".into());
    let first = ask_knowing(&mut s, backlog(), Page::default(), None);
    let generation = first.generation.expect("a backlog is kept");
    assert!(matches!(first.answer, Answer::Units { .. }));
    let again = ask_knowing(&mut s, backlog(), Page::default(), Some(generation));
    assert_eq!(again.answer, Answer::Unchanged);
    assert_eq!(again.generation, Some(generation));
    // A quota's usage too; an older generation gets the answer itself.
    let quotas = ask_knowing(&mut s, Ask::Quotas(None), Page::default(), Some(generation));
    assert_eq!(quotas.answer, Answer::Unchanged);
    let older = ask_knowing(&mut s, backlog(), Page::default(), Some(generation - 1));
    assert_eq!(older.answer, first.answer);
    // A history gains samples with time: never kept.
    let history = ask_knowing(
        &mut s,
        Ask::History(None),
        Page::default(),
        Some(generation),
    );
    assert!(matches!(history.answer, Answer::History(_)));
    assert_eq!(history.generation, None);
    // An input (a sixth unit) moves the state: the backlog is worked out
    // again and holds it.
    queued(&mut s, "f", 10, json!({ "phase": "Enqueued" }));
    let moved = ask_knowing(&mut s, backlog(), Page::default(), Some(generation));
    assert!(moved.generation > Some(generation));
    let (items, _) = units(moved.answer);
    assert!(names(&items).contains(&"f"), "{:?}", names(&items));
}
