//! `Queue.status` is written when what it shows changes, compared with the
//! status the Queue's watch last showed — kept as a digest of its list of
//! waiting units (`PublishedQueueStatus`), not the list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use koord_queue_api::{Queue, QueueStatus, keys};
use serde_json::json;

use super::Scenario;
use crate::controller::records::QueueRecord;
use crate::controller::sources::{Change, Input};
use crate::controller::writes::Write;

/// The Queue status writes of a visibility pass a while from now.
fn pass(s: &mut Scenario) -> Vec<QueueStatus> {
    s.advance(Duration::from_secs(5));
    s.tick();
    s.take()
        .into_iter()
        .filter_map(|w| match w {
            Write::QueueStatus { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}

/// Queue `q` as its watch shows it, with `status`.
fn queue_seen(s: &mut Scenario, status: &QueueStatus) {
    let queue: Queue = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "Queue",
        "metadata": { "name": "q", "namespace": keys::SYSTEM_NAMESPACE },
        "spec": { "queuePolicy": "Priority", "stopPolicy": "Hold" },
        "status": status,
    }))
    .unwrap();
    s.input(Input::Queue(Change::Applied(Box::new(
        QueueRecord::from_queue(&queue),
    ))));
}

#[test]
fn a_queue_status_is_written_again_only_when_what_it_shows_changes() {
    // A stopped queue: its unit waits, first in line.
    let mut s = Scenario::new(json!({ "stopPolicy": "Hold" }));
    s.job(true, json!({}));
    s.unit(json!({ "phase": "Enqueued" }), true);
    s.cycle();
    let written = pass(&mut s);
    let [status] = written.as_slice() else {
        panic!("one Queue status written: {written:?}");
    };
    let active = &status.queue_item_details["active"];
    assert_eq!(
        (active.len(), active[0].name.as_str(), active[0].position),
        (1, "u", 1)
    );
    assert_eq!((status.pending, status.admitted), (Some(1), Some(0)));

    // The watch shows it: nothing to write.
    queue_seen(&mut s, status);
    assert_eq!(pass(&mut s), []);

    // Someone changed the list (a place): it is written again, as it was.
    let mut changed = status.clone();
    if let Some(items) = changed.queue_item_details.get_mut("active") {
        items[0].position = 2;
    }
    queue_seen(&mut s, &changed);
    assert_eq!(pass(&mut s), std::slice::from_ref(status));

    // A second list under another key is not ours: also written again.
    let mut extra = status.clone();
    extra
        .queue_item_details
        .insert("other".into(), extra.queue_item_details["active"].clone());
    queue_seen(&mut s, &extra);
    assert_eq!(pass(&mut s), std::slice::from_ref(status));
}
