//! Adoption: a unit waits only once its own job names it back and owns it
//! (`decide::effective_phase`, `decide::desired_membership`).

use koord_queue_api::Resources;
use koord_queue_api::jobs::JobState;
use koord_queue_api::queue_unit::QueueUnitPhase;

use super::found_reserved;
use crate::controller::records::{JobRecord, key};
use crate::controller::state::Membership;
use crate::controller::state::decide::{desired_membership, effective_phase};

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
