//! The core as the controller drives it at start-up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use koord_queue_api::Resources;
use koord_queue_scheduler::core::{Core, RootCapacity};

#[test]
fn startup_sequence_terminates() {
    let mut core = Core::from_yaml(koord_queue_scheduler::DEFAULT_CONFIG).unwrap();
    let mut cap = Resources::new();
    cap.set("cpu", 96_000);
    core.set_capacity(&RootCapacity::Limited(cap));
    core.mark_all_dirty();
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
    assert_eq!(core.queues().count(), 0);
    eprintln!("ok so far");
    let out = core.run_cycle();
    assert!(out.decisions.is_empty());
}
