//! Housekeeping: orphan units collected, jobs without their unit held or given one again (architecture §4.6).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::decide::{Intent, finished};
use super::failing::kind_unseen;
use super::{Controller, job_ref};
use crate::controller::clock::Now;
use crate::controller::records::{JobKey, Key};
use crate::controller::writes::Write;

/// Only jobs younger than this get a missing unit re-created: the webhook's
/// create of an answered job is late by seconds at most, while an old held
/// job without its unit had it deleted (architecture §3 rule 3), perhaps while no
/// scheduler was running to see it.
const RECREATE_WINDOW_MS: i64 = 10 * 60 * 1000;

/// How often every unit and job is looked at for a missing counterpart
/// (orphan units, jobs without their unit): these wait out a grace period
/// of seconds anyway, and on every 500 ms tick they were most of the
/// housekeeping's 7 % of the scheduler's CPU in a saturated 15,000-job run.
const MISSING_SCAN_INTERVAL: Duration = Duration::from_secs(2);

/// What the repairs keep between housekeeping ticks: which jobs lost their
/// unit for good, which wait for theirs and since when, which get theirs
/// re-created, and when jobs and units were last scanned for a missing
/// counterpart.
#[derive(Debug, Default)]
pub(super) struct Repair {
    /// Jobs whose unit existed and is gone (deleted, or missing under a
    /// running job): held again once, never re-created (architecture §3 rule 3).
    unit_gone: HashSet<JobKey>,
    /// Held jobs whose unit has not appeared, since when.
    missing_unit_since: HashMap<JobKey, Instant>,
    /// Jobs whose unit is being re-created.
    recreating: HashSet<JobKey>,
    /// When the last scan for missing units ran.
    last_scan: Option<Instant>,
    /// When a unit this process had not seen last appeared (the webhook,
    /// or whoever creates units, at work).
    last_new_unit: Option<Instant>,
}

impl Repair {
    /// The unit of job `job` existed and is gone: it is never re-created.
    pub(super) fn unit_gone(&mut self, job: JobKey) {
        self.unit_gone.insert(job);
    }

    /// Job `job` is deleted: nothing is repaired for it any more.
    pub(super) fn job_deleted(&mut self, job: &JobKey) {
        self.unit_gone.remove(job);
        self.missing_unit_since.remove(job);
    }

    /// A unit this process had not seen appeared at `now`.
    pub(super) fn unit_appeared(&mut self, now: Instant) {
        self.last_new_unit = Some(now);
    }

    /// Whether the creator of units has stopped: none appeared for `grace`.
    fn creator_idle(&self, now: Instant, grace: Duration) -> bool {
        self.last_new_unit
            .is_none_or(|t| now.saturating_duration_since(t) >= grace)
    }

    /// The re-creation of job `job`'s unit was written (whatever its
    /// outcome: a unit that did not appear is missed again).
    pub(super) fn recreated(&mut self, job: &JobKey) {
        self.recreating.remove(job);
    }

    /// Whether a scan is due at `now` ([`MISSING_SCAN_INTERVAL`] after the
    /// last), and if so, it starts.
    fn start_scan(&mut self, now: Instant) -> bool {
        if self
            .last_scan
            .is_some_and(|t| now.duration_since(t) < MISSING_SCAN_INTERVAL)
        {
            return false;
        }
        self.last_scan = Some(now);
        true
    }

    /// Since when held job `job` misses its unit, `now` if it was not
    /// missed at the last scan.
    fn missing_since(&self, job: &JobKey, now: Instant) -> Instant {
        self.missing_unit_since.get(job).copied().unwrap_or(now)
    }

    /// The held jobs that miss their unit after a scan, and since when: a
    /// job no longer listed has its unit, or is no longer waited for.
    fn still_missing(&mut self, missing: HashMap<JobKey, Instant>) {
        self.missing_unit_since = missing;
    }

    /// Job `job`'s unit is being re-created.
    fn recreating(&mut self, job: JobKey) {
        self.recreating.insert(job);
    }

    /// Whether job `job` is left alone: its unit is gone for good or being
    /// re-created.
    fn settled(&self, job: &JobKey) -> bool {
        self.unit_gone.contains(job) || self.recreating.contains(job)
    }
}

impl Controller {
    pub(super) fn housekeeping(&mut self) {
        if !self.synced() {
            return;
        }
        self.publish_metrics();
        if !self.leads() {
            return;
        }
        for k in std::mem::take(&mut self.retry) {
            self.reconcile(&k);
        }
        // A unit that may preempt once a victim has run its minimum time,
        // or a queue head that starts to reserve.
        let wall_ms = self.now.wall_ms;
        if self
            .core
            .next_preemption_due()
            .into_iter()
            .chain(self.core.next_reservation_due())
            .any(|due| due <= wall_ms)
        {
            self.request_cycle();
        }
        let timed: Vec<Key> = self.timed.iter().cloned().collect();
        for k in timed {
            self.reconcile(&k);
        }
        if self.repair.start_scan(self.now.at) {
            self.collect_orphans();
            self.jobs_without_unit();
        }
        self.sync_queues_with_quotas();
        self.visibility_pass();
        self.maybe_estimate();
    }

    /// Units whose job never appeared (refused after the webhook, retried
    /// admission) are deleted after the grace period (architecture §4.6).
    pub(super) fn collect_orphans(&mut self) {
        let grace_ms = i64::try_from(self.settings.orphan_grace.as_millis()).unwrap_or(i64::MAX);
        let now_ms = self.now.wall_ms;
        let orphans: Vec<Key> = self
            .units
            .iter()
            .filter(|(_, st)| st.rec.phase.is_none() && !st.awaiting && !st.rec.deleting)
            .filter(|(_, st)| !kind_unseen(&self.failing_kinds, &st.rec))
            .filter(|(_, st)| now_ms - st.rec.created_ms > grace_ms)
            .filter(|(_, st)| super::unit_job(&self.jobs, &st.rec).is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for k in orphans {
            tracing::info!(unit = %k, "deleting orphan QueueUnit: its job did not appear");
            self.submit_unit_write(&k, Intent::keep(Write::DeleteUnit { unit: k.clone() }));
        }
    }

    /// Jobs whose unit is missing, in one pass over the jobs (it runs
    /// every [`MISSING_SCAN_INTERVAL`]):
    /// - a job running without its unit is held (it would run unqueued),
    ///   once, with an Event;
    /// - a held job whose unit never appeared within the grace period gets
    ///   it created from the job (the webhook answered but did not create
    ///   it, e.g. it was killed) — only for jobs younger than
    ///   [`RECREATE_WINDOW_MS`] whose unit is not known to be gone, and only
    ///   once the webhook has passed it by: units appear for jobs created a
    ///   grace period after it, or none appeared for a grace period. A
    ///   webhook working off a backlog (a burst of creates, a slow API
    ///   server) creates units in the order of their jobs, later than the
    ///   grace but still; racing it doubled the API calls of the units
    ///   (read the job, create, a conflict, an Event) exactly when the API
    ///   server had none to spare (Kueue's large shape, 50,000 jobs).
    pub(super) fn jobs_without_unit(&mut self) {
        let Now {
            at: now,
            wall_ms: now_ms,
        } = self.now;
        let grace = self.settings.orphan_grace;
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let mut to_hold = Vec::new();
        let mut overdue = Vec::new();
        let mut missing = HashMap::new();
        // The newest job whose unit exists: how far the webhook has got.
        let mut newest_with_unit = i64::MIN;
        // Nothing is allocated for a job that has its unit: this runs over
        // every job twice a second.
        for (job_key, job) in &self.jobs {
            // The cheap tests first.
            if job.deleting
                || finished(job.state)
                || (job.held && now_ms - job.created_ms > RECREATE_WINDOW_MS)
            {
                continue;
            }
            if self.units.contains_key(&job.unit) {
                newest_with_unit = newest_with_unit.max(job.created_ms);
                continue;
            }
            if self.repair.settled(job_key) {
                continue;
            }
            let job_key = job_key.clone();
            if !job.held {
                to_hold.push(job.clone());
                continue;
            }
            let since = self.repair.missing_since(&job_key, now);
            if now.duration_since(since) >= grace {
                overdue.push((job_key, since, job.clone()));
            } else {
                missing.insert(job_key, since);
            }
        }
        let idle = self.repair.creator_idle(now, grace);
        let mut to_create = Vec::new();
        for (job_key, since, job) in overdue {
            if idle || newest_with_unit.saturating_sub(job.created_ms) >= grace_ms {
                to_create.push(job);
            } else {
                missing.insert(job_key, since);
            }
        }
        self.repair.still_missing(missing);
        for job in to_hold {
            self.repair.unit_gone(job.key());
            let job_ref = job_ref(&job);
            self.writer.submit(Write::HoldJob {
                unit: job.unit.clone(),
                job: job_ref.clone(),
            });
            self.event(&job_ref, true, "QueueUnitMissing", format!(
                "QueueUnit {} does not exist: the job is held. Delete and re-create the job to queue it again",
                job.unit_name()
            ));
        }
        for job in to_create {
            self.repair.recreating(job.key());
            let job_ref = job_ref(&job);
            self.writer.submit(Write::RecreateUnit {
                unit: job.unit.clone(),
                job: job_ref.clone(),
            });
            self.event(&job_ref, true, "QueueUnitRecreated", format!(
                "QueueUnit {} did not appear within {:?} of the job's admission: created from the job",
                job.unit_name(), self.settings.orphan_grace
            ));
        }
    }
}
