//! The scheduling cycle: the core decides, its decisions become releases and reclaims.

use super::*;

impl Controller {
    pub(super) fn cycle(&mut self) {
        if !self.synced() || !self.leads() {
            return;
        }
        let started = Instant::now();
        let out = self.core.run_cycle();
        tracing::trace!(decisions = out.decisions.len(), "cycle done");
        self.metrics
            .cycle_duration
            .observe(started.elapsed().as_secs_f64());
        if !self.ran_first_cycle {
            self.ran_first_cycle = true;
            self.readiness.set(FIRST_CYCLE, true);
        }
        for decision in out.decisions {
            let k: Key = decision.unit.clone();
            let Some(st) = self.units.get_mut(&k) else {
                core_step("unreserve", &k, self.core.unreserve(&k));
                continue;
            };
            let job = self
                .jobs
                .get(&st.rec.job_key())
                .filter(|j| j.unit_name == st.rec.name);
            // Its phase Enqueued, still waiting for a slot, is moot now.
            if job.is_some() {
                st.withdraw();
            }
            let (Some(job), false) = (job, st.busy) else {
                // Cannot release now (job vanished, or a write is pending).
                core_step("unreserve", &k, self.core.unreserve(&k));
                continue;
            };
            st.member = Membership::Holding;
            st.busy = true;
            st.releasing();
            st.released_at = Some(Instant::now());
            let quota = queue_of(&st.rec).to_string();
            let queue = self.queues.get(&quota);
            let release_phase = release_phase(queue, self.settings.strict_default);
            let checks: Vec<AdmissionCheckState> = queue
                .map(|q| {
                    q.checks
                        .iter()
                        .filter(|c| selector_matches(c.label_selector.as_ref(), &st.rec.labels))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                .map(|c| AdmissionCheckState {
                    name: c.name.clone(),
                    state: CheckState::Pending,
                    last_transition_time: Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::now(),
                        ),
                    ),
                    message: None,
                })
                .collect();
            let how = if decision.guaranteed {
                " (within its guaranteed minimum)"
            } else {
                " (borrowing idle capacity)"
            };
            let (phase, message) = if checks.is_empty() {
                (
                    release_phase,
                    format!(
                        "released: {} reserved in quota {quota}{how}",
                        decision.resources
                    ),
                )
            } else {
                let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
                (
                    QueueUnitPhase::Reserved,
                    format!(
                        "quota reserved ({} in quota {quota}{how}); waiting for admission checks: {}",
                        decision.resources,
                        names.join(", ")
                    ),
                )
            };
            let write = Write::Release {
                unit: k.clone(),
                job: job_ref(job),
                admissions: Some(admissions(&st.rec, &decision.resources)),
                attempts: Some(st.rec.attempts + 1),
                phase,
                checks: (!checks.is_empty()).then_some(checks),
                message,
            };
            self.writer.submit(write);
        }
        for reclaim in out.reclaims {
            self.reclaim(reclaim);
        }
        for (k, reason) in out.waiting {
            if let Some(st) = self.units.get_mut(&k) {
                st.reason = Some(reason.to_string().into_boxed_str());
            }
        }
        self.write_enqueued();
    }

    /// Re-suspends a reclaim victim: its job is held again, it goes to
    /// TimeoutBackoff with the reason "reclaimed", and the core frees its
    /// quota once that is written (or puts it back if it cannot be).
    pub(super) fn reclaim(&mut self, reclaim: crate::core::Reclaim) {
        let k: Key = reclaim.victim.clone();
        let Some(st) = self.units.get_mut(&k) else {
            core_step("cancel_reclaim", &k, self.core.cancel_reclaim(&k));
            return;
        };
        // A Running phase still waiting is moot: the victim goes to backoff.
        if st.busy && !st.withdraw() {
            core_step("cancel_reclaim", &k, self.core.cancel_reclaim(&k));
            return;
        }
        let Some(st) = self.units.get(&k) else {
            return;
        };
        let job = self
            .jobs
            .get(&st.rec.job_key())
            .filter(|j| j.unit_name == st.rec.name);
        tracing::info!(victim = %k, for_unit = %reclaim.for_unit, resources = %reclaim.resources, "reclaiming");
        let write = self.backoff(&k, &st.rec, job, None, RECLAIMED, reclaim.message());
        self.submit_unit_write(&k, write);
    }

    // ---- write results --------------------------------------------------------
}
