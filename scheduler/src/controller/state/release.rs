//! The scheduling cycle: the core decides, its decisions become releases and reclaims.

use super::backoff::{FAIR_SHARE, PREEMPTED, RECLAIMED, backoff};
use super::decide::Intent;
use super::history;
use super::release_write::release;
use super::{Controller, FIRST_CYCLE, Membership, core_step};
use crate::controller::clock::Stopwatch;
use crate::controller::records::Key;

/// A cycle at least this long is logged with what it did (the bound of
/// issue 43's goal for a cycle at 100,000 waiting units).
const LONG_CYCLE_SECONDS: f64 = 0.05;

impl Controller {
    pub(super) fn cycle(&mut self) {
        self.visibility.changed();
        if !self.synced() || !self.leads() {
            return;
        }
        let started = Stopwatch::start();
        self.core.set_now(self.now.wall_ms);
        let out = self.core.run_cycle();
        let took = started.seconds();
        tracing::trace!(decisions = out.decisions.len(), "cycle done");
        self.metrics.cycle_duration.observe(took);
        if took >= LONG_CYCLE_SECONDS {
            // The loop answers nothing during a cycle: say what one this
            // long did (a new leader's first looks at every waiting unit).
            let s = out.stats;
            tracing::info!(
                ms = (took * 1000.0).round(),
                queues = s.queues_visited,
                units = s.units_visited,
                filter_runs = s.filter_runs,
                releases = out.decisions.len(),
                reclaims = out.reclaims.len(),
                "long scheduling cycle"
            );
        }
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
            let job = super::unit_job(&self.jobs, &st.rec);
            // Its phase Enqueued, still waiting for a slot, is moot now.
            if job.is_some() {
                st.withdraw();
            }
            let (Some(job), false) = (job, st.awaiting) else {
                // Cannot release now (job vanished, or a write is pending).
                core_step("unreserve", &k, self.core.unreserve(&k));
                continue;
            };
            st.member = Membership::Holding;
            st.awaiting = true;
            st.releasing();
            let Some(view) = self.view(&k) else {
                continue;
            };
            let write = release(&view, job, &decision);
            self.writer.submit(write);
        }
        for reclaim in out.reclaims {
            self.reclaim(reclaim);
        }
        // `out.waiting` is not kept: the core holds each waiting unit's
        // reason, and the visibility pass and API read it there.
        self.write_enqueued();
    }

    /// Re-suspends a reclaim or preemption victim: its job is held again, it
    /// goes to TimeoutBackoff with the reason `Reclaimed` or `Preempted` (an
    /// Event on its job names the unit it made room for), and the core frees its
    /// quota once that is written (or puts it back if it cannot be).
    pub(super) fn reclaim(&mut self, reclaim: crate::core::Reclaim) {
        let k: Key = reclaim.victim.clone();
        let Some(st) = self.units.get_mut(&k) else {
            core_step("cancel_reclaim", &k, self.core.cancel_reclaim(&k));
            return;
        };
        // A Running phase still waiting is moot: the victim goes to backoff.
        if st.awaiting && !st.withdraw() {
            core_step("cancel_reclaim", &k, self.core.cancel_reclaim(&k));
            return;
        }
        // Counted for the history (`history.rs`) whatever the write's fate:
        // the scheduler chose to send it back.
        let how = match reclaim.kind {
            crate::core::ReclaimKind::Preempted { .. } => history::SentBack::Preempted,
            _ => history::SentBack::Reclaimed,
        };
        let queue = super::queue_of(&st.rec).to_string();
        self.history.sent_back(&queue, how);
        let Some(view) = self.view(&k) else {
            return;
        };
        let reason = match reclaim.kind {
            crate::core::ReclaimKind::Borrowed => RECLAIMED,
            crate::core::ReclaimKind::Preempted { .. } => PREEMPTED,
            crate::core::ReclaimKind::FairShare { .. } => FAIR_SHARE,
        };
        tracing::info!(victim = %k, for_unit = %reclaim.for_unit, resources = %reclaim.resources, reason, "taking quota back");
        self.metrics
            .reclaims
            .get_or_create(&crate::controller::metrics::ReasonLabels { reason })
            .inc();
        let write = backoff(&view, view.job, None, reason, reclaim.message());
        // A reclaim victim keeps counting until its job is held again: the
        // guaranteed unit waits for the resources to be really free.
        self.submit_unit_write(&k, Intent::keep(write));
    }

    // ---- write results --------------------------------------------------------
}
