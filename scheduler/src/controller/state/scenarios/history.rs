//! The history the visibility API serves (`state/history.rs`), from the
//! whole controller: a sample a minute with each quota's usage, each
//! queue's backlog and what it released and how long those had waited; the
//! answer ends with the state now; a tenant's answer holds its quotas only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_visibility::{Answer, Ask, Page};
use serde_json::json;

use super::Scenario;
use super::pending::{ask, queued};

fn history(s: &mut Scenario, namespace: Option<&str>) -> koord_queue_visibility::history::History {
    match ask(
        s,
        Ask::History(namespace.map(str::to_string)),
        Page::default(),
    ) {
        Answer::History(h) => h,
        other => panic!("not a history: {other:?}"),
    }
}

#[test]
fn a_minute_s_sample_holds_usage_backlog_releases_and_waits() {
    let mut s = Scenario::new(json!({}));
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        queued(&mut s, name, i as u32, json!({ "phase": "Enqueued" }));
    }
    s.cycle();
    s.take(); // a and b released (2 cpu each of 4), c waits
    let before = history(&mut s, None).items.len();
    s.advance(Duration::from_secs(30));
    s.tick();
    assert_eq!(
        history(&mut s, None).items.len(),
        before,
        "no sample within the minute"
    );
    s.advance(Duration::from_secs(31));
    s.tick();
    let h = history(&mut s, None);
    assert_eq!(h.interval_seconds, 60);
    assert_eq!(
        h.items.len(),
        before + 1,
        "a sample after the minute, and the state now"
    );
    let sample = &h.items[h.items.len() - 2];
    let q = sample.quotas.iter().find(|q| q.name == "q").unwrap();
    assert_eq!(q.used.get("cpu"), Some(&4000));
    assert_eq!(q.max.get("cpu"), Some(&4000));
    let queue = sample.queues.iter().find(|q| q.name == "q").unwrap();
    assert_eq!((queue.pending, queue.admitted, queue.released), (1, 2, 2));
    let waits = queue.release_seconds.as_ref().unwrap();
    assert!(waits.p50 > 0.0 && waits.p99 >= waits.p50, "{waits:?}");
    // The state now: nothing released since that sample.
    let now = h.items.last().unwrap();
    let queue = now.queues.iter().find(|q| q.name == "q").unwrap();
    assert_eq!((queue.pending, queue.released), (1, 0));
    assert!(queue.release_seconds.is_none());

    // A tenant's: the quotas serving its namespace (and their queues) only.
    let mine = history(&mut s, Some("ns"));
    assert!(
        mine.items
            .iter()
            .all(|i| i.quotas.iter().all(|q| q.name == "q"))
    );
    assert!(
        mine.items
            .last()
            .unwrap()
            .queues
            .iter()
            .any(|q| q.name == "q")
    );
    let theirs = history(&mut s, Some("other"));
    assert!(
        theirs
            .items
            .iter()
            .all(|i| i.quotas.is_empty() && i.queues.is_empty())
    );
}
