//! What a unit's lifecycle calls for next (architecture §3), decided from
//! what was observed — its record, its job, its queue, its pods and the
//! clock — with no I/O: [`next_step`] returns the write to submit and what
//! that write does to the unit's quota; the controller
//! ([`super::lifecycle`]) carries it out.

use std::time::Duration;

use koord_queue_api::jobs::JobState;
use koord_queue_api::queue_unit::{CheckState, QueueUnitPhase};

use super::backoff::{QUEUE_DRAINED, backoff, sched_failed_reason};
use super::release_write::{release_again, release_phase};
use super::view::{UnitView, strict_timeout};
use super::{Membership, job_ref, millis, queue_of};
use crate::controller::records::{Grouping, JobRecord, UnitRecord};
use crate::controller::writes::Write;

/// What a submitted lifecycle write does to the unit's quota at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OnSubmit {
    /// Nothing until the write's result is known. A write that ends the
    /// unit's claim while pods it paid for are alive keeps the quota too:
    /// [`desired_membership`] holds it until they are gone.
    Keep,
    /// Freed the moment the write is submitted: the job is finished, or is
    /// being held again, and none of its pods is alive. Should the write
    /// fail, the unit is reconciled (and held) again.
    Free,
}

/// A lifecycle write and its effect on quota.
#[derive(Debug)]
pub(super) struct Intent {
    pub write: Write,
    pub on_submit: OnSubmit,
}

impl Intent {
    pub(super) fn keep(write: Write) -> Self {
        Self {
            write,
            on_submit: OnSubmit::Keep,
        }
    }

    fn free(write: Write) -> Self {
        Self {
            write,
            on_submit: OnSubmit::Free,
        }
    }
}

/// The outcome of [`next_step`].
#[derive(Debug, Default)]
pub(super) struct Step {
    pub intent: Option<Intent>,
    /// The job was released outside Koord-Queue and is held again: say so
    /// on the job.
    pub held_again: bool,
    /// The answer depends on the clock (a backoff or a timeout runs): look
    /// again on the next tick.
    pub timed: bool,
    /// An adopted unit left waiting: its phase Enqueued is written after the
    /// next cycle unless that cycle releases it.
    pub enqueue_after_cycle: bool,
}

/// The lifecycle write unit `v` needs now, if any.
pub(super) fn next_step(v: &UnitView<'_>) -> Step {
    let (k, rec, job) = (v.key, v.rec, v.job);
    let mut step = Step::default();
    if rec.deleting {
        step.intent = deleting_outcome(v);
        return step;
    }
    let phase = effective_phase(rec, job);
    step.intent = match (phase, job) {
        (None, Some(job)) if !job.deleting => Some(Intent::keep(Write::Adopt {
            unit: k.clone(),
            job: job_ref(job),
        })),
        // The job is gone and pods it ran on the unit's quota still run (it
        // was deleted with propagation Orphan, which leaves the unit too):
        // the unit, kept, holds the quota until they are gone — also across
        // a restart, as its consumer uid finds them.
        (Some(_), None) if v.pods_alive => None,
        // Adopted units whose job is gone: delete (the garbage collector
        // would too; doing it now frees the quota at once).
        (Some(_), None) => Some(Intent::keep(Write::DeleteUnit { unit: k.clone() })),
        (Some(QueueUnitPhase::Enqueued), Some(job)) if !job.held && !finished(job.state) => {
            // Released by someone else (e.g. while the webhook was down):
            // hold it again, it holds no quota.
            step.held_again = true;
            Some(Intent::keep(Write::HoldJob {
                unit: k.clone(),
                job: job_ref(job),
            }))
        }
        // Sent back, and yet its job runs (its hold failed after the unit
        // was written, or someone lifted it): hold it again now, not when
        // the backoff ends — its quota may serve another unit meanwhile.
        (Some(QueueUnitPhase::TimeoutBackoff), Some(job)) if !job.held && !finished(job.state) => {
            step.held_again = true;
            Some(Intent::keep(Write::HoldJob {
                unit: k.clone(),
                job: job_ref(job),
            }))
        }
        // Its job finished while the unit did not hold quota (sent back as
        // it completed): the unit ends with it, instead of waiting again.
        (
            Some(
                QueueUnitPhase::TimeoutBackoff
                | QueueUnitPhase::Enqueued
                | QueueUnitPhase::SchedFailed,
            ),
            Some(job),
        ) if finished(job.state) => {
            let (phase, text) = match job.state {
                JobState::Succeeded => (QueueUnitPhase::Succeed, "job succeeded"),
                _ => (QueueUnitPhase::Failed, "job failed"),
            };
            Some(Intent::free(Write::Phase {
                unit: k.clone(),
                phase,
                admissions: Some(Vec::new()),
                message: text.into(),
            }))
        }
        // A pod group's unit ended (the group finished, or failed whole),
        // and the group has members again that wait, gated: a restarted
        // LeaderWorkerSet group, a group name used again. The unit goes;
        // its members' group is given a new one (`repair.rs`) and queues.
        (Some(QueueUnitPhase::Succeed | QueueUnitPhase::Failed), Some(job))
            if job.is_group() && job.held && !finished(job.state) =>
        {
            Some(Intent::free(Write::DeleteUnit { unit: k.clone() }))
        }
        (Some(QueueUnitPhase::TimeoutBackoff), Some(_)) => {
            step.timed = true;
            // A unit whose room a reclaim or a preemption took comes back
            // as soon as that room is free: its backoff is against thrash,
            // and an idle quota is none (issue 44).
            let over = rec.requeue_at_ms.is_none_or(|t| t <= v.now_ms);
            (over || v.room_free).then(|| {
                let message = if over {
                    format!("backoff over; waiting in queue {}", queue_of(rec))
                } else {
                    format!(
                        "the room it was sent back for is free again; waiting in queue {}",
                        queue_of(rec)
                    )
                };
                Intent::free(Write::Phase {
                    unit: k.clone(),
                    phase: QueueUnitPhase::Enqueued,
                    admissions: Some(Vec::new()),
                    message,
                })
            })
        }
        // A send-back after a strict-dequeue failure takes three writes
        // (SchedFailed, hold the job, TimeoutBackoff). A crash or a failed
        // write between them leaves the unit in SchedFailed, which nothing
        // else moves on from, its job possibly still released while it
        // holds no quota: finish the send-back (holding is idempotent).
        (Some(QueueUnitPhase::SchedFailed), Some(job)) => Some(Intent::free(backoff(
            v,
            Some(job),
            None,
            "SchedulingTimeout",
            sched_failed_reason(rec.message.as_deref()),
        ))),
        (Some(phase), Some(job)) if phase.holds_quota() => {
            holding_outcome(v, job, phase, &mut step.timed)
        }
        _ => None,
    };
    // A finished unit whose pods are gone holds nothing its finalizer
    // protects: it comes off now, not when the unit is deleted, so that the
    // unit (and its namespace) can be deleted with no scheduler running —
    // after an uninstall, say.
    if step.intent.is_none()
        && rec.guarded
        && !v.pods_alive
        && matches!(
            phase,
            Some(QueueUnitPhase::Succeed | QueueUnitPhase::Failed)
        )
    {
        step.intent = Some(Intent::free(Write::RemoveFinalizer {
            unit: k.clone(),
            at: rec.finalizer_at,
        }));
    }
    step.enqueue_after_cycle = step.intent.is_none()
        && rec.phase.is_none()
        && phase == Some(QueueUnitPhase::Enqueued)
        && job.is_some_and(|j| j.held && !j.deleting);
    // Whatever the write says (sent back, backoff over, finished), quota
    // that pods still use is not freed with it: the unit keeps holding
    // until they are gone (`desired_membership`), or a preemptor, a
    // reclaimer or the job's own next release would run beside them.
    if v.pods_alive
        && let Some(intent) = step.intent.as_mut()
    {
        intent.on_submit = OnSubmit::Keep;
    }
    step
}

/// A unit being deleted (by the garbage collector after its job, or by
/// someone): it keeps its quota while a pod it paid for is alive — its
/// `records::QUOTA_FINALIZER` keeps the object, and so the hold, also across a
/// restart — then the finalizer comes off and frees it. A live job whose
/// unit is deleted is held again first (architecture §3 rule 3): its pods
/// would not be gone otherwise.
fn deleting_outcome(v: &UnitView<'_>) -> Option<Intent> {
    if let Some(job) = v.job
        && !job.held
        && !job.deleting
        && !finished(job.state)
    {
        return Some(Intent::keep(Write::HoldJob {
            unit: v.key.clone(),
            job: job_ref(job),
        }));
    }
    (v.rec.guarded && !v.pods_alive).then(|| {
        Intent::free(Write::RemoveFinalizer {
            unit: v.key.clone(),
            at: v.rec.finalizer_at,
        })
    })
}

/// The next step of a unit that holds quota: finished, waiting for its
/// checks, suspended again by someone, waiting to be bound (strict), or
/// running (or past its running timeout). `timed` is set when the answer
/// depends on the clock.
fn holding_outcome(
    v: &UnitView<'_>,
    job: &JobRecord,
    phase: QueueUnitPhase,
    timed: &mut bool,
) -> Option<Intent> {
    let (k, rec) = (v.key, v.rec);
    if finished(job.state) {
        if v.pods_alive {
            // Its quota is freed with its last pod (see `pods.rs`).
            return None;
        }
        let (phase, text) = match job.state {
            JobState::Succeeded => (QueueUnitPhase::Succeed, "job succeeded"),
            _ => (QueueUnitPhase::Failed, "job failed"),
        };
        return Some(Intent::free(Write::Phase {
            unit: k.clone(),
            phase,
            admissions: Some(Vec::new()),
            message: text.into(),
        }));
    }
    if v.unconfirmed && job.held {
        return Some(Intent::keep(release_again(v, job, phase)));
    }
    if v.queue.is_some_and(|q| q.stop.drains()) && !v.unconfirmed {
        return Some(drained(v, job, phase));
    }
    if phase == QueueUnitPhase::Reserved {
        return checks_outcome(v, job);
    }
    if let Some(more) = members_to_release(v, job) {
        return Some(more);
    }
    if job.held {
        // Pods alive mean the release reached the job: it is held again.
        if v.found_released
            && !v.pods_alive
            && matches!(phase, QueueUnitPhase::Dequeued | QueueUnitPhase::SchedReady)
        {
            // Released by a leader that lost the Lease between the unit's
            // status and its job (its job patch is fenced): the release is
            // finished, not done again — it keeps its attempt and its quota.
            return Some(Intent::keep(Write::Release {
                unit: k.clone(),
                job: job_ref(job),
                admissions: None,
                attempts: None,
                phase,
                checks: None,
                guard: !rec.guarded,
                message: format!(
                    "released from queue {} (the release was finished after a leader change)",
                    queue_of(rec)
                ),
            }));
        }
        // Suspended again (by its owner, say): its pods are being deleted
        // and run out their grace period. The unit waits in the queue again
        // only once they are gone: released again sooner, the job's new
        // pods would run beside them.
        if v.pods_alive {
            return None;
        }
        return v.suspended_again.then(|| {
            Intent::free(Write::Phase {
                unit: k.clone(),
                phase: QueueUnitPhase::Enqueued,
                admissions: Some(Vec::new()),
                message: format!(
                    "the job was suspended again; waiting in queue {}",
                    queue_of(rec)
                ),
            })
        });
    }
    let since_ms = v.now_ms - rec.allocated_ms.unwrap_or(v.now_ms);
    match phase {
        QueueUnitPhase::SchedReady => {
            *timed = true;
            strict_outcome(v, job, since_ms)
        }
        QueueUnitPhase::Dequeued | QueueUnitPhase::SchedSucceed
            if job.state == JobState::Running =>
        {
            Some(Intent::keep(Write::Phase {
                unit: k.clone(),
                phase: QueueUnitPhase::Running,
                admissions: None,
                message: "running".into(),
            }))
        }
        QueueUnitPhase::Dequeued | QueueUnitPhase::SchedSucceed => {
            let limit = v.queue.and_then(|q| q.running_timeout);
            *timed = limit.is_some();
            limit.filter(|t| since_ms > millis(*t)).map(|t| {
                Intent::free(backoff(
                    v,
                    Some(job),
                    None,
                    "RunningTimeout",
                    format!(
                        "the job did not start running within {}s of its release; suspended again",
                        t.as_secs()
                    ),
                ))
            })
        }
        _ => None,
    }
}

/// A unit holding quota in a drained Queue (`spec.stopPolicy:
/// HoldAndDrain`): sent back as a running timeout is — its job held again
/// (a Reserved unit's was never released), its quota freed once its pods
/// are gone — to wait in the stopped queue after its backoff.
fn drained(v: &UnitView<'_>, job: &JobRecord, phase: QueueUnitPhase) -> Intent {
    let job = (phase != QueueUnitPhase::Reserved).then_some(job);
    Intent::free(backoff(
        v,
        job,
        None,
        QUEUE_DRAINED,
        format!(
            "queue {} was stopped and drained (HoldAndDrain); suspended again, quota released",
            queue_of(v.rec)
        ),
    ))
}

/// A Reserved unit: release once every check is Ready; back off when one
/// says Retry or Rejected; otherwise keep waiting (quota held).
fn checks_outcome(v: &UnitView<'_>, job: &JobRecord) -> Option<Intent> {
    let rec = v.rec;
    if let Some(failed) = rec
        .checks
        .iter()
        .find(|c| matches!(c.state, CheckState::Retry | CheckState::Rejected))
    {
        let message = format!(
            "admission check {} said {:?}{}; quota released, retrying after backoff",
            failed.name,
            failed.state,
            failed
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
        return Some(Intent::free(backoff(
            v,
            None,
            None,
            "AdmissionCheck",
            message,
        )));
    }
    let all_ready =
        !rec.checks.is_empty() && rec.checks.iter().all(|c| c.state == CheckState::Ready);
    all_ready.then(|| {
        Intent::keep(Write::Release {
            unit: v.key.clone(),
            job: job_ref(job),
            admissions: None,
            attempts: None,
            phase: release_phase(v.queue, v.strict_default),
            checks: None,
            guard: !rec.guarded,
            message: format!(
                "admission checks passed; released from queue {}",
                queue_of(rec)
            ),
        })
    })
}

/// A SchedReady unit (strict dequeue): SchedSucceed once every pod is
/// bound; SchedFailed and back off when pods stay unbound past the timeout.
fn strict_outcome(v: &UnitView<'_>, job: &JobRecord, since_ms: i64) -> Option<Intent> {
    let rec = v.rec;
    let expected: i64 = rec.pod_sets.iter().map(|(_, c, _)| i64::from(*c)).sum();
    let scheduled = v
        .pods
        .map_or(0, |p| p.values().filter(|p| p.scheduled).count());
    if i64::try_from(scheduled).unwrap_or(i64::MAX) >= expected.max(1) {
        return Some(Intent::keep(Write::Phase {
            unit: v.key.clone(),
            phase: QueueUnitPhase::SchedSucceed,
            admissions: None,
            message: format!("all {scheduled} pods bound"),
        }));
    }
    let timeout = strict_timeout(v.queue, v.strict_default).unwrap_or(Duration::from_secs(300));
    if since_ms <= millis(timeout) {
        return None;
    }
    let why = v
        .pods
        .and_then(|p| {
            p.values().find_map(|p| {
                p.unschedulable
                    .as_ref()
                    .map(|m| format!("pod {} unschedulable: {m}", p.name))
            })
        })
        .unwrap_or_else(|| format!("{scheduled} of {expected} pods bound"));
    Some(Intent::free(backoff(
        v,
        Some(job),
        Some(QueueUnitPhase::SchedFailed),
        "SchedulingTimeout",
        format!(
            "SchedFailed: {why} after {}s; suspended again, quota released",
            timeout.as_secs()
        ),
    )))
}

/// A released pod group with gated members it has room for: they are
/// released too (the last pods of a gang created after the release, a
/// member's replacement), once per change of its members.
fn members_to_release(v: &UnitView<'_>, job: &JobRecord) -> Option<Intent> {
    let Some(Grouping::Group {
        size,
        gated,
        released,
        ..
    }) = job.grouping.as_deref()
    else {
        return None;
    };
    let size = usize::try_from(*size).unwrap_or(0);
    let room = *gated > 0 && *released < size && (*released > 0 || *gated >= size);
    (room && v.members_released_at != Some((*gated, *released))).then(|| {
        Intent::keep(Write::ReleaseMembers {
            unit: v.key.clone(),
            job: job_ref(job),
        })
    })
}

/// Whether a job can start as a whole: a pod group once all its members
/// exist (until then it reserves no quota — a gang that never completes
/// must not hold any); every other job at once.
pub(super) fn gang_complete(job: &JobRecord) -> bool {
    match job.grouping.as_deref() {
        Some(Grouping::Group { size, gated, .. }) => {
            usize::try_from(*size).is_ok_and(|size| *gated >= size)
        }
        _ => true,
    }
}

pub(super) fn finished(state: JobState) -> bool {
    matches!(state, JobState::Succeeded | JobState::Failed)
}

/// Where unit `rec` belongs in the core given its job and whether a pod of
/// the job still runs.
pub(super) fn desired_membership(
    rec: &UnitRecord,
    job: Option<&JobRecord>,
    pods_alive: bool,
) -> Membership {
    if rec.invalid.is_some() {
        return Membership::Absent;
    }
    // Pods it paid for are alive: whatever its phase says (sent back,
    // suspended again, finished, its job deleted, itself deleting), the
    // unit holds its quota until they are gone.
    if pods_alive {
        return Membership::Holding;
    }
    if rec.deleting {
        return Membership::Absent;
    }
    match effective_phase(rec, job) {
        Some(QueueUnitPhase::Enqueued) => match job {
            Some(j) if j.held && !j.deleting && gang_complete(j) => Membership::Waiting,
            _ => Membership::Absent,
        },
        // Sent back while its job still runs: its pods use what the unit
        // held until the job is held again.
        Some(QueueUnitPhase::TimeoutBackoff) => match job {
            Some(j) if !j.held && !finished(j.state) && !j.deleting => Membership::Holding,
            _ => Membership::Absent,
        },
        // A finished job whose pods are done: its quota is free even before
        // the unit's Succeed/Failed phase is written.
        Some(p) if p.holds_quota() => match job {
            Some(j) if finished(j.state) && !pods_alive => Membership::Absent,
            _ => Membership::Holding,
        },
        _ => Membership::Absent,
    }
}

/// The unit's phase, where an adopted unit whose phase is not written yet
/// counts as Enqueued (its phase is written after the next cycle, unless
/// that cycle released it).
pub(super) fn effective_phase(rec: &UnitRecord, job: Option<&JobRecord>) -> Option<QueueUnitPhase> {
    rec.phase.or_else(|| {
        job.filter(|j| rec.owner_uid.as_deref() == Some(&*j.uid))
            .map(|_| QueueUnitPhase::Enqueued)
    })
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
