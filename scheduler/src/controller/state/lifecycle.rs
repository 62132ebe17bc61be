//! A unit's lifecycle (architecture §3): what its record, its job, its queue and the clock call for next, and the write that does it.

use super::*;

impl Controller {
    /// Brings the core's view of unit `k` in line with the observed unit and
    /// job, then (as leader) issues the lifecycle write the pair calls for.
    pub(super) fn reconcile(&mut self, k: &Key) {
        let Some(st) = self.units.get_mut(k) else {
            return;
        };
        let job = self
            .jobs
            .get(&st.rec.job_key())
            .filter(|j| j.unit_name == st.rec.name);
        let job_finished = job.is_some_and(|j| finished(j.state));
        // A Running phase still waiting for a slot is moot once the job has
        // finished: withdrawn, the Succeed/Failed write takes its place.
        if st.busy && !(job_finished && st.withdraw()) {
            // Quota is freed the moment the job finishes, even while a write
            // for its unit (say, its Running phase) is in flight; the
            // Succeed/Failed write follows once that one is done.
            if st.member == Membership::Holding && job_finished {
                self.set_membership(k, Membership::Absent);
            }
            return;
        }
        let st = &*st;
        tracing::trace!(unit = %k, phase = ?st.rec.phase, job = ?job.map(|j| (j.held, j.state)), "reconcile");
        let desired = desired_membership(&st.rec, job);
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

    /// The lifecycle write unit `k` needs now, if any (leader only).
    pub(super) fn lifecycle(&mut self, k: &Key) {
        let Some(st) = self.units.get(k) else { return };
        if st.busy || st.rec.deleting {
            return;
        }
        let rec = &st.rec;
        let job = self
            .jobs
            .get(&rec.job_key())
            .filter(|j| j.unit_name == rec.name);
        let queue = self.queues.get(queue_of(rec));
        let now_ms = now_ms();
        let mut timed = false;
        let phase = effective_phase(rec, job);
        let write = match (phase, job) {
            (None, Some(job)) if !job.deleting => Some(Write::Adopt {
                unit: k.clone(),
                job: job_ref(job),
            }),
            // Adopted units whose job is gone: delete (the garbage collector
            // would too; doing it now frees the quota at once).
            (Some(_), None) => Some(Write::DeleteUnit { unit: k.clone() }),
            (Some(QueueUnitPhase::Enqueued), Some(job)) if !job.held && !finished(job.state) => {
                // Released by someone else (e.g. while the webhook was down):
                // hold it again, it holds no quota.
                let job = job_ref(job);
                self.event(&job, true, "HeldAgain", format!(
                    "the job was released outside Koord-Queue; it is held again and waits in queue {}", queue_of(rec)
                ));
                Some(Write::HoldJob {
                    unit: k.clone(),
                    job,
                })
            }
            (Some(QueueUnitPhase::TimeoutBackoff), Some(_)) => {
                timed = true;
                rec.requeue_at_ms
                    .is_none_or(|t| t <= now_ms)
                    .then(|| Write::Phase {
                        unit: k.clone(),
                        phase: QueueUnitPhase::Enqueued,
                        admissions: Some(Vec::new()),
                        message: format!("backoff over; waiting in queue {}", queue_of(rec)),
                    })
            }
            // A send-back after a strict-dequeue failure takes three writes
            // (SchedFailed, hold the job, TimeoutBackoff). A crash or a failed
            // write between them leaves the unit in SchedFailed, which nothing
            // else moves on from, its job possibly still released while it
            // holds no quota: finish the send-back (holding is idempotent).
            (Some(QueueUnitPhase::SchedFailed), Some(job)) => Some(self.backoff(
                k,
                rec,
                Some(job),
                None,
                "SchedulingTimeout",
                sched_failed_reason(rec.message.as_deref()),
            )),
            (Some(phase), Some(job)) if phase.holds_quota() => {
                self.holding_outcome(k, st, job, queue, phase, now_ms, &mut timed)
            }
            _ => None,
        };
        if timed {
            self.timed.insert(k.clone());
        } else {
            self.timed.remove(k);
        }
        if write.is_none()
            && rec.phase.is_none()
            && phase == Some(QueueUnitPhase::Enqueued)
            && job.is_some_and(|j| j.held && !j.deleting)
        {
            self.to_enqueue.insert(k.clone());
        }
        // The release reached the job: from now on a held job means re-suspended.
        let running = job.is_some_and(|j| j.state == JobState::Running);
        if let Some(job) = job
            && !job.held
            && let Some(st) = self.units.get_mut(k)
            && st.rec.holds_quota()
        {
            st.release_ack = true;
            if running && st.member == Membership::Holding {
                // Its pods exist now: the namespace's ResourceQuota counts them.
                core_step("mark_started", k, self.core.mark_started(k));
            }
        }
        if let Some(write) = write {
            tracing::debug!(unit = %k, operation = write.operation(), "lifecycle write");
            self.submit_unit_write(k, write);
        }
    }

    /// The next step of a unit that holds quota: finished, waiting for its
    /// checks, suspended again by someone, waiting to be bound (strict), or
    /// running (or past its running timeout). `timed` is set when the answer
    /// depends on the clock.
    #[allow(clippy::too_many_arguments)]
    fn holding_outcome(
        &self,
        k: &Key,
        st: &UnitState,
        job: &JobRecord,
        queue: Option<&QueueRecord>,
        phase: QueueUnitPhase,
        now_ms: i64,
        timed: &mut bool,
    ) -> Option<Write> {
        let rec = &st.rec;
        if finished(job.state) {
            let (phase, text) = match job.state {
                JobState::Succeeded => (QueueUnitPhase::Succeed, "job succeeded"),
                _ => (QueueUnitPhase::Failed, "job failed"),
            };
            Some(Write::Phase {
                unit: k.clone(),
                phase,
                admissions: Some(Vec::new()),
                message: text.into(),
            })
        } else if phase == QueueUnitPhase::Reserved {
            self.checks_outcome(k, rec, job, queue)
        } else if job.held {
            st.held_job_was_suspended_again().then(|| Write::Phase {
                unit: k.clone(),
                phase: QueueUnitPhase::Enqueued,
                admissions: Some(Vec::new()),
                message: format!(
                    "the job was suspended again; waiting in queue {}",
                    queue_of(rec)
                ),
            })
        } else {
            let since_ms = now_ms - rec.allocated_ms.unwrap_or(now_ms);
            match phase {
                QueueUnitPhase::SchedReady => {
                    *timed = true;
                    self.strict_outcome(k, rec, job, queue, since_ms)
                }
                QueueUnitPhase::Dequeued | QueueUnitPhase::SchedSucceed
                    if job.state == JobState::Running =>
                {
                    Some(Write::Phase {
                        unit: k.clone(),
                        phase: QueueUnitPhase::Running,
                        admissions: None,
                        message: "running".into(),
                    })
                }
                QueueUnitPhase::Dequeued | QueueUnitPhase::SchedSucceed => {
                    let limit = queue.and_then(|q| q.running_timeout);
                    *timed = limit.is_some();
                    limit.filter(|t| since_ms > millis(*t)).map(|t| {
                        self.backoff(k, rec, Some(job), None, "RunningTimeout", format!(
                            "the job did not start running within {}s of its release; suspended again", t.as_secs()
                        ))
                    })
                }
                _ => None,
            }
        }
    }

    /// A Reserved unit: release once every check is Ready; back off when one
    /// says Retry or Rejected; otherwise keep waiting (quota held).
    pub(super) fn checks_outcome(
        &self,
        k: &Key,
        rec: &UnitRecord,
        job: &JobRecord,
        queue: Option<&QueueRecord>,
    ) -> Option<Write> {
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
            return Some(self.backoff(k, rec, None, None, "AdmissionCheck", message));
        }
        let all_ready =
            !rec.checks.is_empty() && rec.checks.iter().all(|c| c.state == CheckState::Ready);
        all_ready.then(|| Write::Release {
            unit: k.clone(),
            job: job_ref(job),
            admissions: None,
            attempts: None,
            phase: self.release_phase(queue),
            checks: None,
            message: format!(
                "admission checks passed; released from queue {}",
                queue_of(rec)
            ),
        })
    }

    /// A SchedReady unit (strict dequeue): SchedSucceed once every pod is
    /// bound; SchedFailed and back off when pods stay unbound past the timeout.
    pub(super) fn strict_outcome(
        &self,
        k: &Key,
        rec: &UnitRecord,
        job: &JobRecord,
        queue: Option<&QueueRecord>,
        since_ms: i64,
    ) -> Option<Write> {
        let expected: i64 = rec.pod_sets.iter().map(|(_, c, _)| i64::from(*c)).sum();
        let pods = self.pods.get(&job.uid);
        let scheduled = pods.map_or(0, |p| p.values().filter(|p| p.scheduled).count());
        if i64::try_from(scheduled).unwrap_or(i64::MAX) >= expected.max(1) {
            return Some(Write::Phase {
                unit: k.clone(),
                phase: QueueUnitPhase::SchedSucceed,
                admissions: None,
                message: format!("all {scheduled} pods bound"),
            });
        }
        let timeout = self
            .strict_timeout(queue)
            .unwrap_or(Duration::from_secs(300));
        if since_ms <= millis(timeout) {
            return None;
        }
        let why = pods
            .and_then(|p| {
                p.values().find_map(|p| {
                    p.unschedulable
                        .as_ref()
                        .map(|m| format!("pod {} unschedulable: {m}", p.name))
                })
            })
            .unwrap_or_else(|| format!("{scheduled} of {expected} pods bound"));
        Some(self.backoff(
            k,
            rec,
            Some(job),
            Some(QueueUnitPhase::SchedFailed),
            "SchedulingTimeout",
            format!(
                "SchedFailed: {why} after {}s; suspended again, quota released",
                timeout.as_secs()
            ),
        ))
    }

    /// A backoff write: exponential from 10 s, doubling, capped at 15 min,
    /// with ±10 % jitter so that units sent back together do not return together.
    pub(super) fn backoff(
        &self,
        k: &Key,
        rec: &UnitRecord,
        job: Option<&JobRecord>,
        via: Option<QueueUnitPhase>,
        reason: &'static str,
        message: String,
    ) -> Write {
        let count = rec.requeue_count.saturating_add(1);
        let delay = backoff_delay(count, jitter_seed(k, count));
        let requeue_at = k8s_openapi::jiff::Timestamp::now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(millis(
                delay,
            )))
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
        let message = format!(
            "{message}{BACK_IN_QUEUE}{} at {requeue_at} (attempt {count})",
            queue_of(rec)
        );
        Write::Backoff {
            unit: k.clone(),
            job: job.map(job_ref),
            via,
            reason,
            message,
            count,
            requeue_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(requeue_at),
        }
    }

    pub(super) fn strict_timeout(&self, queue: Option<&QueueRecord>) -> Option<Duration> {
        strict_timeout(queue, self.settings.strict_default)
    }

    pub(super) fn release_phase(&self, queue: Option<&QueueRecord>) -> QueueUnitPhase {
        release_phase(queue, self.settings.strict_default)
    }

    /// Phase Enqueued for the adopted units the last cycle did not release.
    pub(super) fn write_enqueued(&mut self) {
        for k in std::mem::take(&mut self.to_enqueue) {
            let Some(st) = self.units.get(&k) else {
                continue;
            };
            if st.busy || st.rec.phase.is_some() || st.member != Membership::Waiting {
                continue;
            }
            let Some(job) = self
                .jobs
                .get(&st.rec.job_key())
                .filter(|j| j.unit_name == st.rec.name)
            else {
                continue;
            };
            let write = Write::Enqueue {
                unit: k.clone(),
                job: job_ref(job),
                message: format!("waiting in queue {}", queue_of(&st.rec)),
            };
            self.submit_unit_write(&k, write);
        }
    }
}

/// Condition reason (and backoff reason) of a reclaimed unit.
pub(super) const RECLAIMED: &str = "Reclaimed";

/// Where a backoff message says when the unit returns.
pub(super) const BACK_IN_QUEUE: &str = "; back in queue ";

/// The reason to repeat when finishing a SchedFailed send-back that was cut
/// short: the message its first write left, without the "back in queue"
/// tail that the new backoff writes afresh.
pub(super) fn sched_failed_reason(message: Option<&str>) -> String {
    message
        .and_then(|m| m.split(BACK_IN_QUEUE).next())
        .filter(|m| m.starts_with("SchedFailed"))
        .map_or_else(
            || {
                "SchedFailed: the job's pods were not all bound in time; suspended again, quota released"
                    .to_string()
            },
            str::to_string,
        )
}

pub(super) fn finished(state: JobState) -> bool {
    matches!(state, JobState::Succeeded | JobState::Failed)
}

/// Where unit `rec` belongs in the core given its job.
pub(super) fn desired_membership(rec: &UnitRecord, job: Option<&JobRecord>) -> Membership {
    if rec.deleting || rec.invalid.is_some() {
        return Membership::Absent;
    }
    match effective_phase(rec, job) {
        Some(QueueUnitPhase::Enqueued) => match job {
            Some(j) if j.held && !j.deleting => Membership::Waiting,
            _ => Membership::Absent,
        },
        // A finished job's pods are done: its quota is free even before the
        // unit's Succeed/Failed phase is written.
        Some(p) if p.holds_quota() => match job {
            Some(j) if finished(j.state) => Membership::Absent,
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
        job.filter(|j| rec.owner_uid.as_deref() == Some(j.uid.as_str()))
            .map(|_| QueueUnitPhase::Enqueued)
    })
}

/// Admissions of a release: one per pod set with its resources. When the
/// pod sets' resources do not add up to what is held (e.g. an Argo workflow,
/// sized by annotation), the first set carries the total, so the admissions
/// always sum to exactly what the unit holds.
pub(super) fn admissions(rec: &UnitRecord, total: &Resources) -> Vec<Admission> {
    let mut sum = Resources::new();
    let mut out: Vec<Admission> = rec
        .pod_sets
        .iter()
        .map(|(name, count, resources)| {
            sum.add(resources);
            Admission {
                name: name.to_string(),
                replicas: *count,
                running: 0,
                resources: resources.to_list(),
            }
        })
        .collect();
    if out.is_empty() {
        out.push(Admission {
            name: "main".into(),
            replicas: 1,
            running: 0,
            resources: Default::default(),
        });
    }
    if &sum != total {
        for a in &mut out {
            a.resources.clear();
        }
        out[0].resources = total.to_list();
    }
    out
}

/// Strict dequeue timeout of `queue` (its own setting, else the default);
/// `None` when strict dequeue is off.
pub(super) fn strict_timeout(
    queue: Option<&QueueRecord>,
    default: Option<Duration>,
) -> Option<Duration> {
    match queue.and_then(|q| q.strict) {
        Some(setting) => setting,
        None => default,
    }
}

/// The phase a released job enters: SchedReady under strict dequeue.
pub(super) fn release_phase(
    queue: Option<&QueueRecord>,
    strict_default: Option<Duration>,
) -> QueueUnitPhase {
    if strict_timeout(queue, strict_default).is_some() {
        QueueUnitPhase::SchedReady
    } else {
        QueueUnitPhase::Dequeued
    }
}

/// Backoff before attempt `count` (1-based): 10 s × 2^(count-1), at most
/// 15 min, scaled by a jitter factor in [0.9, 1.1) drawn from `seed`.
pub fn backoff_delay(count: i32, seed: u64) -> Duration {
    const BASE_MS: u64 = 10_000;
    const CAP_MS: u64 = 15 * 60 * 1000;
    let exp = u32::try_from(count.saturating_sub(1).max(0))
        .unwrap_or(0)
        .min(20);
    let raw = BASE_MS.saturating_mul(1u64 << exp).min(CAP_MS);
    let jitter_permille = 900 + seed % 200; // 0.9 ..< 1.1
    Duration::from_millis(raw.saturating_mul(jitter_permille) / 1000)
}

/// A seed that differs between units and attempts (and between runs).
pub(super) fn jitter_seed(key: &str, count: i32) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    key.hash(&mut h);
    count.hash(&mut h);
    h.finish()
}

/// Whether `labels` satisfy a Kubernetes label selector; no selector matches all.
pub fn selector_matches(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &Labels,
) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let match_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v.as_str()));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        let listed = |v: &str| values.iter().any(|x| x == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => value.is_none_or(|v| !listed(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    match_labels && expressions
}
