//! What the controller keeps of each unit besides its record: whether and
//! how the core holds it ([`Membership`]), the write in flight, what was
//! published, and what this process knows of its release.

use std::time::Instant;

use koord_queue_api::ResourceListExt as _;
use koord_queue_api::Resources;
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, QueueUnitPhase};

use super::pods::PodGroup;
use crate::controller::records::UnitRecord;
use crate::controller::writes::Claim;
use crate::core::UnitDef;

/// Where a unit stands in the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Membership {
    Absent,
    Waiting,
    Holding,
}

#[derive(Debug)]
pub(super) struct UnitState {
    pub(super) rec: UnitRecord,
    pub(super) member: Membership,
    /// Fingerprint of the definition last given to the core (to skip no-op
    /// upserts without keeping a second copy of every unit's fields).
    pub(super) given: Option<u64>,
    /// A lifecycle write (adopt, release, phase, backoff, hold, delete) was
    /// submitted and its result has not come back: the unit's next step is
    /// not decided until it does. This is the controller's one record of a
    /// write in flight; the writer's backlog only keeps a unit's writes in
    /// order while it sends them (`writes/backlog.rs`).
    pub(super) awaiting: bool,
    /// That write can still be withdrawn (see [`Claim`]).
    pub(super) claim: Option<Claim>,
    /// A position/reason write is in flight.
    pub(super) publishing: bool,
    /// Ignore watch events older than our last write.
    pub(super) expect_rv: Option<u64>,
    /// Released by this process (not found released at start).
    pub(super) released_here: bool,
    /// The job was seen running (unheld) since its release.
    pub(super) release_ack: bool,
    /// The last release of the unit by this process has an unknown outcome
    /// (`Outcome::Unknown`) and no watch event of the unit came since: it is
    /// sent again, whole, while its job is held.
    pub(super) unconfirmed: bool,
    pub(super) last_published: Option<Instant>,
    pub(super) last_waiting_event: Option<Instant>,
    /// Its pod group's (gated, released) members when more of them were
    /// last released (see `decide::members_to_release`).
    pub(super) members_released_at: Option<(usize, usize)>,
    /// Its job's pod group, as last seen (a RayJob's cluster): its pods
    /// still run on the unit's quota after the job is deleted. Boxed: few
    /// jobs have one, and inline it took 64 of every unit's bytes.
    pub(super) pod_group: Option<Box<PodGroup>>,
}

impl UnitState {
    pub(super) fn new(rec: UnitRecord) -> Self {
        Self {
            rec,
            member: Membership::Absent,
            given: None,
            awaiting: false,
            claim: None,
            publishing: false,
            expect_rv: None,
            released_here: false,
            release_ack: false,
            unconfirmed: false,
            last_published: None,
            last_waiting_event: None,
            members_released_at: None,
            pod_group: None,
        }
    }

    /// Withdraws the pending write, if it is withdrawable and no slot took
    /// it yet: the unit is then free for another write.
    pub(super) fn withdraw(&mut self) -> bool {
        if self.awaiting && self.claim.take().is_some_and(|c| c.take()) {
            self.awaiting = false;
            return true;
        }
        false
    }

    /// This process is lifting the job's suspension: until the job is seen
    /// released, a held job means the release has not reached it yet, not
    /// that it was suspended again.
    pub(super) fn releasing(&mut self) {
        self.released_here = true;
        self.release_ack = false;
    }

    /// Whether a held job of this unit, which holds quota as released, was
    /// suspended again by someone: it was seen released since, or it was
    /// found released at start (this process never released it).
    pub(super) fn held_job_was_suspended_again(&self) -> bool {
        self.release_ack || !self.released_here
    }

    /// Records a successful release write (see [`Write::Release`]).
    pub(super) fn release_written(
        &mut self,
        phase: QueueUnitPhase,
        admissions: Option<&[Admission]>,
        attempts: Option<i64>,
        checks: Option<Vec<AdmissionCheckState>>,
        now_ms: i64,
    ) {
        let from_reserved = admissions.is_none();
        self.rec.phase = Some(phase);
        if let Some(admissions) = admissions {
            self.rec.held = admissions
                .iter()
                .filter_map(|a| Resources::from_list(&a.resources).ok())
                .fold(Resources::new(), |mut t, r| {
                    t.add(&r);
                    t
                });
        }
        if let Some(attempts) = attempts {
            self.rec.attempts = attempts;
        }
        if let Some(checks) = checks {
            self.rec.checks = checks;
        }
        if !from_reserved || phase != QueueUnitPhase::Reserved {
            // Timers of strict dequeue and of the running timeout
            // start at the release.
            self.rec.allocated_ms = Some(now_ms);
        }
        self.unconfirmed = false;
        // The release write clears it (`writes::apply::release_status`).
        self.rec.estimated_start_ms = None;
        if phase.is_released() {
            // Also when the quota was reserved by an earlier process (a
            // restart while its checks ran): its job, held until now, must
            // not be taken for suspended again.
            self.releasing();
        }
        self.rec.stale_position = false;
    }

    /// Fingerprint of what [`UnitState::def`] would return.
    pub(super) fn def_fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let r = &self.rec;
        // Not RandomState: a fingerprint is only compared within this process.
        let mut h = std::hash::DefaultHasher::new();
        (&r.namespace, r.name(), &r.queue, r.priority, r.created_ms).hash(&mut h);
        (&r.request, &r.quota, &r.labels).hash(&mut h);
        h.finish()
    }

    pub(super) fn def(&self) -> UnitDef {
        let r = &self.rec;
        UnitDef {
            namespace: r.namespace.to_string(),
            name: r.name().to_string(),
            queue: r.queue.to_string(),
            priority: r.priority,
            created_ms: r.created_ms,
            request: r.request.clone(),
            quota: r.quota.as_deref().map(str::to_string),
            labels: r.labels.to_map(),
            max_run_ms: r.max_run_ms,
        }
    }
}
