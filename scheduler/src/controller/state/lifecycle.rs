//! A unit's lifecycle (architecture §3) carried out: the core's view of the
//! unit follows its record and job, and the step [`next_step`] decides is
//! submitted.

use koord_queue_api::jobs::JobState;

use super::decide::{Intent, desired_membership, finished, gang_complete, next_step};
use super::failing::{kind_unseen, membership_of_unit_alone};
use super::pods::group_of;
use super::view::UnitView;
use super::{Controller, Membership, core_step, job_ref, queue_of};
use crate::controller::records::{Grouping, Key};
use crate::controller::writes::Write;
use crate::wait_view::wait_type;

impl Controller {
    /// Brings the core's view of unit `k` in line with the observed unit and
    /// job, then (as leader) issues the lifecycle write the pair calls for.
    pub(super) fn reconcile(&mut self, k: &Key) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        let job = super::unit_job(&self.jobs, &st.rec);
        // The job's pod group is remembered: should the job be deleted
        // first, the group's pods still run on the unit's quota.
        if let Some(group) = job.and_then(group_of)
            && st.pod_group.as_deref() != Some(&group)
        {
            st.pod_group = Some(Box::new(group));
        }
        let pods_alive = self.pods.unit_alive(&st.rec, st.pod_group.as_deref(), job);
        let job_finished = job.is_some_and(|j| finished(j.state));
        // A Running phase still waiting for a slot is moot once the job has
        // finished: withdrawn, the Succeed/Failed write takes its place.
        if st.awaiting && !(job_finished && st.withdraw()) {
            // Quota is freed the moment the job finishes and its pods are
            // gone, even while a write for its unit (say, its Running phase)
            // is in flight; the Succeed/Failed write follows once that one
            // is done.
            if st.member == Membership::Holding && job_finished && !pods_alive {
                self.set_membership(k, Membership::Absent);
            }
            return;
        }
        let st = &*st;
        tracing::trace!(unit = %k, phase = ?st.rec.phase, job = ?job.map(|j| (j.held, j.state)), "reconcile");
        if kind_unseen(&self.failing_kinds, &st.rec) {
            // Its job cannot be seen: kept as its status says, not decided.
            let desired = membership_of_unit_alone(&st.rec);
            self.set_membership(k, desired);
            return;
        }
        let desired = desired_membership(&st.rec, job, pods_alive);
        self.set_membership(k, desired);
        if self.synced() && self.leads() {
            self.lifecycle(k);
        }
    }

    pub(super) fn set_membership(&mut self, k: &Key, desired: Membership) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        let fingerprint = st.def_fingerprint();
        let mut changed = false;
        match (st.member, desired) {
            (Membership::Absent, Membership::Absent) => {}
            (_, Membership::Absent) => {
                self.core.remove_unit(k);
                st.given = None;
                changed = true;
            }
            (from, to) => {
                if st.given != Some(fingerprint) {
                    if let Err(error) = self.core.upsert_unit(&st.def()) {
                        tracing::warn!(unit = %k, %error, "unit not schedulable");
                        return;
                    }
                    st.given = Some(fingerprint);
                    changed = true;
                }
                match (from, to) {
                    (Membership::Holding, Membership::Waiting) => {
                        core_step("free", k, self.core.free(k));
                        changed = true;
                    }
                    (f, Membership::Holding) if f != Membership::Holding => {
                        let held = if st.rec.held.is_zero() {
                            st.rec.request.clone()
                        } else {
                            st.rec.held.clone()
                        };
                        // The release time orders reclaim (most recent first),
                        // also after a restart.
                        core_step(
                            "hold_at",
                            k,
                            self.core.hold_at(k, &held, st.rec.allocated_ms),
                        );
                        changed = true;
                    }
                    _ => {}
                }
            }
        }
        st.member = desired;
        if changed {
            self.visibility.changed();
            self.request_cycle();
        }
    }

    /// What unit `k`'s next step is decided from.
    pub(super) fn view<'a>(&'a self, k: &'a Key) -> Option<UnitView<'a>> {
        let st = self.units.get(k)?;
        let job = super::unit_job(&self.jobs, &st.rec);
        Some(UnitView {
            key: k,
            rec: &st.rec,
            job,
            queue: self.queues.get(queue_of(&st.rec)),
            pods: job.and_then(|j| self.pods.of_job(&j.uid)),
            pods_alive: self.unit_pods_alive(st, job),
            suspended_again: st.held_job_was_suspended_again(),
            found_released: !st.released_here && !st.release_ack,
            unconfirmed: st.unconfirmed,
            members_released_at: st.members_released_at,
            strict_default: self.settings.strict_default,
            now_ms: self.now.wall_ms,
            room_free: sent_back_for_room(&st.rec)
                && self
                    .core
                    .has_room_for(st.rec.quota.as_deref(), &st.rec.request),
            jitter_salt: self.settings.jitter_salt,
        })
    }

    /// Carries out the lifecycle step unit `k` needs now, if any (leader
    /// only): the step is decided by [`next_step`] from what was observed.
    pub(super) fn lifecycle(&mut self, k: &Key) {
        let Some(view) = self.view(k) else { return };
        // A deleting unit is decided too: its quota finalizer comes off
        // once its pods are gone (`decide::deleting_outcome`).
        if self.units.get(k).is_none_or(|st| st.awaiting) {
            return;
        }
        let step = next_step(&view);
        // What the rest needs of the job, so that the records can change.
        let job = view.job.map(|j| (j.held, j.state == JobState::Running));
        if step.held_again
            && let Some(job) = view.job
        {
            let note = if koord_queue_api::jobs::hold_write(job.adapter)
                == koord_queue_api::jobs::HoldWrite::Delete
            {
                // A pod's gate cannot be put back.
                format!(
                    "the {} was released outside Koord-Queue and cannot be held again: it is deleted \
                     (create it again to queue it in queue {})",
                    job.adapter.kind().kind,
                    queue_of(view.rec)
                )
            } else {
                format!(
                    "the job was released outside Koord-Queue; it is held again and waits in queue {}",
                    queue_of(view.rec)
                )
            };
            self.event(&job_ref(job), true, "HeldAgain", note);
        }
        if step.timed {
            self.timed.insert(k.clone());
        } else {
            self.timed.remove(k);
        }
        if step.enqueue_after_cycle {
            self.to_enqueue.insert(k.clone());
            // Written after the next cycle: one must come, also for a unit
            // the core does not hold (an incomplete pod group waits outside
            // it), which no change of the core's asks for.
            self.request_cycle();
        }
        // The release reached the job: from now on a held job means re-suspended.
        if let Some((false, running)) = job
            && let Some(st) = self.units.get_mut(k)
            && st.rec.holds_quota()
        {
            st.release_ack = true;
            if running && st.member == Membership::Holding {
                // Its pods exist now: the namespace's ResourceQuota counts them.
                core_step("mark_started", k, self.core.mark_started(k));
            }
        }
        if let Some(intent) = step.intent {
            tracing::debug!(unit = %k, operation = intent.write.operation(), "lifecycle write");
            self.submit_unit_write(k, intent);
        }
    }

    /// Phase Enqueued for the adopted units the last cycle did not release.
    pub(super) fn write_enqueued(&mut self) {
        for k in std::mem::take(&mut self.to_enqueue) {
            let Some(st) = self.units.get(&k) else {
                continue;
            };
            if st.awaiting || st.rec.phase.is_some() {
                continue;
            }
            let Some(job) = super::unit_job(&self.jobs, &st.rec) else {
                continue;
            };
            // An incomplete pod group waits outside the core (it reserves
            // nothing), Enqueued all the same.
            if st.member != Membership::Waiting && gang_complete(job) {
                continue;
            }
            // The cycle's reason rides with the phase: a unit's first reason
            // costs no write of its own.
            let judged = self.core.reason(&k);
            let message = match (job.grouping.as_deref(), judged) {
                (Some(Grouping::Group { size, .. }), _) if !gang_complete(job) => format!(
                    "waiting for all {size} pods of the group to exist (a pod group reserves no \
                     quota before), then in queue {}",
                    queue_of(&st.rec)
                ),
                (_, Some(reason)) => reason.to_string(),
                _ => format!("waiting in queue {}", queue_of(&st.rec)),
            };
            let reason = judged
                .filter(|_| gang_complete(job))
                .map(|r| wait_type(r).as_str());
            let write = Write::Enqueue {
                unit: k.clone(),
                job: job_ref(job),
                message,
                reason,
            };
            self.submit_unit_write(&k, Intent::keep(write));
        }
    }
}

/// Whether unit `rec` waits in a backoff that a reclaim or a preemption
/// sent it to (its room was taken, not its job found wanting): it may come
/// back as soon as that room is free (`decide.rs`).
pub(super) fn sent_back_for_room(rec: &crate::controller::records::UnitRecord) -> bool {
    use super::backoff::{FAIR_SHARE, PREEMPTED, RECLAIMED};
    rec.phase == Some(koord_queue_api::queue_unit::QueueUnitPhase::TimeoutBackoff)
        && matches!(
            rec.wait_reason.as_deref(),
            Some(RECLAIMED | PREEMPTED | FAIR_SHARE)
        )
}
