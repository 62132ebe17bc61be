//! The results of writes: what a finished, failed or withdrawn write means for the records and the core.

use koord_queue_api::Resources;
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, QueueUnitPhase};

use super::backoff::{FAIR_SHARE, PREEMPTED, RECLAIMED, event_reason};
use super::{Controller, Membership, core_step, job_ref, queue_of};
use crate::controller::metrics::AttemptLabels;
use crate::controller::records::{JobKey, Key, intern, intern_uid};
use crate::controller::writes::{JobRef, Outcome, Write, Written};

impl Controller {
    pub(super) fn on_written(&mut self, done: Written) {
        self.visibility.changed();
        let Written { write, outcome } = done;
        tracing::debug!(operation = write.operation(), unit = ?write.unit(), ?outcome, "write done");
        let Some(k) = write.unit().cloned() else {
            match &write {
                Write::RecreateUnit { job, .. } => {
                    self.repair.recreated(&JobKey::new(
                        job.adapter.kind().kind,
                        &job.namespace,
                        &job.name,
                    ));
                }
                Write::EnsureQueue { name, .. }
                | Write::DeleteQueue { name }
                | Write::QueueStatus { name, .. } => {
                    self.visibility.queue_write_done(name);
                }
                _ => {}
            }
            return;
        };
        let ok_rv = match &outcome {
            Outcome::Done(rv) => Some(*rv),
            _ => None,
        };
        let Some(st) = self.units.get_mut(&k) else {
            return;
        };
        if let Some(Some(rv)) = ok_rv {
            st.expect_rv = Some(st.expect_rv.map_or(rv, |e| e.max(rv)));
            if st.rec.resource_version.is_some_and(|seen| seen >= rv) {
                // The watch showed this write before its answer came back.
                self.writer.settled(&k);
            }
        }
        if !matches!(write, Write::Visibility { .. }) {
            st.claim = None;
        }
        match write {
            Write::Visibility {
                reason,
                message,
                estimated_start,
                ..
            } => {
                st.publishing = false;
                if ok_rv.is_some() {
                    st.rec.stale_position = false;
                    st.rec.wait_reason = Some(reason.into());
                    st.rec.message = Some(intern(&message));
                    st.rec.estimated_start_ms = estimated_start;
                }
                return;
            }
            Write::Release {
                job,
                admissions,
                attempts,
                phase,
                checks,
                ..
            } => self.on_release_written(
                &k,
                job,
                phase,
                admissions,
                attempts,
                checks,
                match outcome {
                    Outcome::Done(_) => Landed::Yes,
                    Outcome::Unknown(_) => Landed::Unknown,
                    _ => Landed::No,
                },
            ),
            Write::Backoff {
                job,
                reason,
                message,
                count,
                requeue_at,
                ..
            } => self.on_backoff_written(
                &k,
                job,
                reason,
                message,
                (count, requeue_at),
                ok_rv.is_some(),
            ),
            Write::Adopt { job, .. } => {
                st.awaiting = false;
                if ok_rv.is_some() {
                    st.rec.owner_uid = Some(intern_uid(&job.uid));
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::Enqueue {
                job,
                reason,
                message,
                ..
            } => self.on_enqueue_written(&k, job, reason, message, ok_rv.is_some()),
            Write::Phase {
                phase, admissions, ..
            } => self.on_phase_written(&k, phase, admissions.is_some(), ok_rv.is_some()),
            Write::HoldJob { job, .. } => {
                st.awaiting = false;
                if ok_rv.is_some() {
                    // Until its watch event comes, the record must not read
                    // running: that would hold it again, and a deleting
                    // unit would wait for a job already held.
                    if job.group.is_none()
                        && let Some(j) = self.jobs.get_mut(&JobKey::new(
                            job.adapter.kind().kind,
                            &job.namespace,
                            &job.name,
                        ))
                        && *j.uid == *job.uid
                    {
                        j.held = true;
                    }
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::DeleteUnit { .. } => {
                st.awaiting = false;
                if ok_rv.is_some() {
                    // Deleted (or deleting, kept by its finalizer): not
                    // deleted again before the watch says so.
                    st.rec.deleting = true;
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::RemoveFinalizer { .. } => {
                st.awaiting = false;
                if ok_rv.is_some() {
                    // Not taken off again before the watch shows it gone.
                    st.rec.guarded = false;
                    st.rec.finalizer_at = None;
                } else {
                    self.retry.insert(k.clone());
                }
            }
            Write::ReleaseMembers { .. } => {
                st.awaiting = false;
                if ok_rv.is_none() {
                    self.retry.insert(k.clone());
                }
            }
            _ => {}
        }
        self.reconcile(&k);
    }

    /// A release's unit status was written (or not): the record follows, the
    /// job hears of it; a failed release gives its reservation back.
    #[allow(clippy::too_many_arguments)]
    fn on_release_written(
        &mut self,
        k: &Key,
        job: JobRef,
        phase: QueueUnitPhase,
        admissions: Option<Vec<Admission>>,
        attempts: Option<i64>,
        checks: Option<Vec<AdmissionCheckState>>,
        landed: Landed,
    ) {
        let now = self.now;
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        st.awaiting = false;
        let from_reserved = admissions.is_none();
        if landed == Landed::Unknown {
            // It may have landed and its job may run: giving the reservation
            // back would let the quota serve another unit meanwhile. The unit
            // is taken as released, and sent again (`unconfirmed` in
            // `decide.rs`) until the API server answers; should its watch
            // event come first, the record is the API's again: a release
            // found there is finished, one that never landed frees the quota.
            tracing::warn!(unit = %k, "release outcome unknown; quota kept, the release is finished later");
            self.metrics.releases_uncertain.inc();
            st.release_written(phase, admissions.as_deref(), attempts, checks, now.wall_ms);
            st.released_here = false;
            st.release_ack = false;
            st.unconfirmed = true;
            self.timed.insert(k.clone());
            return;
        }
        if landed == Landed::Yes {
            st.release_written(phase, admissions.as_deref(), attempts, checks, now.wall_ms);
            let waited = (now.wall_ms - st.rec.created_ms).max(0);
            let queue = queue_of(&st.rec).to_string();
            if phase == QueueUnitPhase::Reserved {
                let names: Vec<String> = st.rec.checks.iter().map(|c| c.name.clone()).collect();
                self.event(
                    &job,
                    false,
                    "QuotaReserved",
                    format!(
                        "quota reserved in queue {queue}; waiting for admission checks: {}",
                        names.join(", ")
                    ),
                );
            } else {
                self.metrics
                    .attempts
                    .get_or_create(&AttemptLabels {
                        result: "released".into(),
                    })
                    .inc();
                self.metrics.dequeue_latency.observe(waited as f64 / 1000.0);
                self.history.released(&queue, waited);
                self.event(
                    &job,
                    false,
                    "Released",
                    format!(
                        "released from queue {queue} after {:.1}s",
                        waited as f64 / 1000.0
                    ),
                );
            }
        } else if from_reserved {
            st.unconfirmed = false;
            // The unit still holds its reservation; retried on the next pass.
            self.retry.insert(k.clone());
        } else {
            // Roll the reservation back; a later cycle retries.
            if std::mem::take(&mut st.unconfirmed) {
                // The record held the release as sent; the API server
                // refused it (and the unit was put back to Enqueued).
                st.rec.phase = Some(QueueUnitPhase::Enqueued);
                st.rec.held = Resources::new();
            }
            core_step("unreserve", k, self.core.unreserve(k));
            st.member = Membership::Waiting;
            st.released_here = false;
            self.metrics
                .attempts
                .get_or_create(&AttemptLabels {
                    result: "failed".into(),
                })
                .inc();
            self.request_cycle();
        }
    }

    /// A backoff was written (or not): the unit waits out its delay, the job
    /// hears why; a failed reclaim gives the victim its quota back.
    fn on_backoff_written(
        &mut self,
        k: &Key,
        job: Option<JobRef>,
        reason: &'static str,
        message: String,
        requeue: (i32, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        ok: bool,
    ) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        let (count, requeue_at) = requeue;
        st.awaiting = false;
        if ok {
            st.rec.phase = Some(QueueUnitPhase::TimeoutBackoff);
            st.rec.held = Resources::new();
            st.rec.checks.clear();
            st.rec.requeue_count = count;
            st.rec.requeue_at_ms = Some(requeue_at.0.as_millisecond());
            st.released_here = false;
            self.timed.insert(k.clone());
            // The write held the job too: until its watch event comes, the
            // record must not read running (which holds it again).
            if job.is_some()
                && let Some(j) = self.jobs.get_mut(&st.rec.job_key())
            {
                j.held = true;
            }
            let event_reason = event_reason(reason);
            let target = job.or_else(|| super::unit_job(&self.jobs, &st.rec).map(job_ref));
            if let Some(job) = target {
                self.event(&job, true, event_reason, message);
            }
        } else if [RECLAIMED, PREEMPTED, FAIR_SHARE].contains(&reason) {
            // The victim keeps its quota; the guaranteed unit plans again.
            core_step("cancel_reclaim", k, self.core.cancel_reclaim(k));
            self.request_cycle();
        } else {
            self.retry.insert(k.clone());
        }
    }

    /// Phase Enqueued was written (or not).
    fn on_enqueue_written(
        &mut self,
        k: &Key,
        job: JobRef,
        reason: Option<&'static str>,
        message: String,
        ok: bool,
    ) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        st.awaiting = false;
        if ok {
            st.rec.phase = Some(QueueUnitPhase::Enqueued);
            // What it wrote, so the next visibility pass does not write it
            // again before the watch shows it; and the job hears why it
            // waits, as it hears every later change of reason.
            let waiting = reason.map(|r| format!("{r}: {message}"));
            if let Some(r) = reason {
                st.rec.wait_reason = Some(r.into());
                st.rec.message = Some(intern(&message));
                st.last_waiting_event = Some(self.now.at);
            }
            let queue = st.rec.queue.clone();
            self.event(
                &job,
                false,
                "Queued",
                format!("queued in queue {queue}; the job is held until Koord-Queue releases it"),
            );
            if let Some(note) = waiting {
                self.event(&job, false, "Waiting", note);
            }
        } else {
            self.retry.insert(k.clone());
        }
    }

    /// A phase change was written (or not): a finished or re-held job hears
    /// of it; `freed` when it gave the unit's quota back.
    fn on_phase_written(&mut self, k: &Key, phase: QueueUnitPhase, freed: bool, ok: bool) {
        if ok && phase.is_finished() {
            self.learn_runtime(k);
        }
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        st.awaiting = false;
        if ok {
            st.rec.phase = Some(phase);
            if freed {
                st.rec.held = Resources::new();
            }
            if let Some(job) = super::unit_job(&self.jobs, &st.rec) {
                let job = job_ref(job);
                match phase {
                    QueueUnitPhase::Succeed | QueueUnitPhase::Failed => {
                        self.event(&job, false, "Finished", format!("{phase}: quota released"));
                    }
                    QueueUnitPhase::Enqueued => {
                        self.event(
                            &job,
                            true,
                            "Requeued",
                            format!(
                                "the job was suspended again: quota released, waiting in queue {}",
                                self.units
                                    .get(k)
                                    .map(|s| s.rec.queue.clone())
                                    .unwrap_or_default()
                            ),
                        );
                    }
                    _ => {}
                }
            }
        } else {
            self.retry.insert(k.clone());
        }
    }

    // ---- periodic work --------------------------------------------------------
}

/// Whether a release reached the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Landed {
    Yes,
    No,
    /// Not known: the connection broke or the server failed (see
    /// `writes::Outcome::Unknown`).
    Unknown,
}
