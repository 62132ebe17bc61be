//! What the controller keeps of a unit (`UnitState`) as its release is
//! written: a held job after a release is not taken for suspended again.

use koord_queue_api::queue_unit::QueueUnitPhase;

use super::found_reserved;

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
fn a_units_state_fits_the_allocators_512_byte_class() {
    // One box per unit, 100,000 units cached: the allocator's next class
    // above 512 bytes is 640, 12.8 MB more at that scale (issue 43). A
    // field added here should take room from another, or go in a box of
    // its own if few units have it (as `pod_group` does).
    let size = size_of::<super::UnitState>();
    assert!(size <= 512, "UnitState is {size} bytes");
}
