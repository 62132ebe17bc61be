//! What users see without the visibility API: why each waiting unit waits
//! (its wait type, written when it changes), Events, metrics, and when a
//! pass runs; Queue status is written by `queue_status.rs`, the API's
//! answers by `pending.rs`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use koord_queue_api::queue_unit::QueueUnitPhase;

use super::{Controller, UnitState, job_ref};
use crate::controller::estimate::status_step;
use crate::controller::metrics::{CauseLabels, QueueLabels, QuotaLabels};
use crate::controller::records::Key;
use crate::controller::writes::Write;
use crate::core::Core;
use crate::wait_view::wait_type;

/// Minimum interval between two "Waiting" Events of one job.
const WAITING_EVENT_INTERVAL: Duration = Duration::from_secs(30);

/// What the visibility passes keep between them: whether a pass can find
/// anything, when the last one ran, the Queues whose write is in flight and
/// when each Queue's status was written, and the quota series published.
#[derive(Debug, Default)]
pub(super) struct Visibility {
    /// Whether a pass can find anything to write.
    gate: VisibilityGate,
    /// When the last pass ran.
    last_pass: Option<Instant>,
    /// Queues with a write in flight (created, deleted or their status): a
    /// Queue is written one write at a time.
    queue_writes: HashSet<String>,
    /// When each Queue's status was last written.
    queue_published: HashMap<String, Instant>,
    /// Quota usage series published non-zero by the last metrics pass
    /// (those that drop to zero are removed by the next).
    quota_series: HashSet<QuotaLabels>,
}

impl Visibility {
    /// Something a pass depends on may have changed (see [`VisibilityGate`]).
    pub(super) fn changed(&mut self) {
        self.gate.changed();
    }

    /// The generation of what users see (bumped by every change).
    pub(super) fn generation(&self) -> u64 {
        self.gate.generation
    }

    /// Whether a pass is due at `now` — something may have changed and the
    /// last pass is at least `interval` ago — and if so, it starts.
    fn start_pass(&mut self, now: Instant, interval: Duration) -> bool {
        if !self.gate.due()
            || self
                .last_pass
                .is_some_and(|t| now.duration_since(t) < interval)
        {
            return false;
        }
        self.last_pass = Some(now);
        true
    }

    /// A pass ran; `complete` when it left nothing for a later pass.
    fn passed(&mut self, complete: bool) {
        self.gate.passed(complete);
    }

    /// Whether Queue `name` has a write in flight.
    pub(super) fn queue_busy(&self, name: &str) -> bool {
        self.queue_writes.contains(name)
    }

    /// A write of Queue `name` was submitted.
    pub(super) fn queue_write_sent(&mut self, name: &str) {
        self.queue_writes.insert(name.to_string());
    }

    /// The write of Queue `name` is done (whatever its outcome).
    pub(super) fn queue_write_done(&mut self, name: &str) {
        self.queue_writes.remove(name);
    }

    /// Whether Queue `name`'s status was written less than `interval`
    /// before `now`.
    pub(super) fn queue_status_recent(&self, name: &str, now: Instant, interval: Duration) -> bool {
        self.queue_published
            .get(name)
            .is_some_and(|t| now.duration_since(*t) < interval)
    }

    /// A write of Queue `name`'s status was submitted at `now`.
    pub(super) fn queue_status_sent(&mut self, name: &str, now: Instant) {
        self.queue_published.insert(name.to_string(), now);
        self.queue_write_sent(name);
    }
}

impl Controller {
    /// A visibility pass, when one is due: reasons of waiting units, then
    /// Queue status.
    pub(super) fn visibility_pass(&mut self) {
        let now = self.now.at;
        if !self
            .visibility
            .start_pass(now, self.settings.status_interval)
        {
            return;
        }
        let reasons_done = self.publish_reasons(now);
        let queues_done = self.publish_queue_status(now);
        self.visibility.passed(reasons_done && queues_done);
    }

    /// Why waiting units wait, written when the wait type changed (not when
    /// a unit's place or the figures move: the visibility API answers
    /// those), and their estimated start when it moved by a large step
    /// (`estimate::status_step`), at most once per status interval per
    /// unit, within a budget per pass. Returns whether the pass was
    /// complete: every waiting unit compared, none left for a later pass.
    pub(super) fn publish_reasons(&mut self, now: Instant) -> bool {
        let scan = scan_reasons(
            &self.core,
            &self.units,
            now,
            if self.writer.latency_ms() >= SLOW_WRITES_MS {
                self.settings.status_interval * SLOW_VISIBILITY_FACTOR
            } else {
                self.settings.status_interval
            },
            VISIBILITY_BUDGET,
            &|key| self.estimates.start_of(key),
            self.now.wall_ms,
        );
        for Publish {
            unit: k,
            wait_type: reason,
            message,
            estimated_start,
            cause,
        } in scan.writes
        {
            let Some(st) = self.units.get_mut(&k) else {
                continue;
            };
            self.metrics
                .status_publishes
                .get_or_create(&CauseLabels {
                    cause: cause.as_str(),
                })
                .inc();
            st.publishing = true;
            st.last_published = Some(now);
            let event_due = st
                .last_waiting_event
                .is_none_or(|t| now.duration_since(t) >= WAITING_EVENT_INTERVAL);
            let job = super::unit_job(&self.jobs, &st.rec).map(job_ref);
            if event_due && let Some(job) = job {
                st.last_waiting_event = Some(now);
                self.event(&job, false, "Waiting", format!("{reason}: {message}"));
            }
            self.writer.submit(Write::Visibility {
                unit: k,
                reason,
                message,
                estimated_start,
            });
        }
        scan.complete
    }

    pub(super) fn publish_metrics(&mut self) {
        for q in self.core.queues() {
            let labels = QueueLabels {
                queue: q.name.to_string(),
            };
            if let Some(c) = self.core.queue_counts(q.name) {
                self.metrics
                    .pending
                    .get_or_create(&labels)
                    .set(i64::try_from(c.pending).unwrap_or(i64::MAX));
                self.metrics
                    .admitted
                    .get_or_create(&labels)
                    .set(i64::try_from(c.admitted).unwrap_or(i64::MAX));
            }
        }
        let mut used = Vec::new();
        for name in self.quotas.keys() {
            let Some(f) = self.core.quota_figures(name) else {
                continue;
            };
            let labels = |resource: &str| QuotaLabels {
                quota: name.clone(),
                resource: resource.to_string(),
            };
            for (family, values) in [
                (&self.metrics.quota_min, &f.min),
                (&self.metrics.quota_max, &f.max),
            ] {
                for (resource, amount) in values.iter() {
                    family.get_or_create(&labels(resource)).set(amount);
                }
            }
            used.extend(f.used.iter().map(|(r, amount)| (labels(r), amount)));
        }
        self.visibility.quota_series = self
            .metrics
            .publish_quota_used(&self.visibility.quota_series, used);
    }
}

/// Most position/reason writes per visibility pass.
pub(super) const VISIBILITY_BUDGET: usize = 200;

/// While the API server is slow ([`SLOW_WRITES_MS`]), a waiting unit's
/// position is refreshed this many status intervals apart at most: its time
/// goes to creates, releases and completions instead.
pub(super) const SLOW_VISIBILITY_FACTOR: u32 = 10;

/// Average write latency from which the API server counts as slow (a write
/// takes a few milliseconds on an idle one).
pub(super) const SLOW_WRITES_MS: u64 = 50;

/// Tells whether a visibility pass can find anything new. The pass compares
/// every waiting unit's rendered position and reason with what it last
/// published; with 100,000 waiting units that took 15-20 % of a core every
/// status interval on an idle scheduler. What is rendered depends only on the
/// core and the controller's records, which change only when an input, a
/// write result, a cycle or a leadership change is handled: each of those
/// bumps the generation, and a complete pass at an unchanged generation has
/// nothing left to find.
#[derive(Debug, Default)]
pub(super) struct VisibilityGate {
    generation: u64,
    /// The generation at the end of the last complete pass.
    clean_at: Option<u64>,
}

/// What a visibility pass over the waiting units found.
#[derive(Debug, Default)]
pub(super) struct ReasonScan {
    /// The statuses to write.
    pub(super) writes: Vec<Publish>,
    /// Every waiting unit was compared and none was deferred.
    pub(super) complete: bool,
}

/// One waiting unit's status to write: its wait type, the sentence and its
/// estimated start, and what made it due.
#[derive(Debug)]
pub(super) struct Publish {
    pub(super) unit: Key,
    pub(super) wait_type: &'static str,
    pub(super) message: String,
    pub(super) estimated_start: Option<i64>,
    pub(super) cause: PublishCause,
}

/// What made a waiting unit's status due (the label of
/// `unit_status_publishes_total`), so a run's status writes can be told
/// apart: a wait type that changes, an estimate that steps, or a position
/// an older version wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PublishCause {
    WaitType,
    Estimate,
    Position,
}

impl PublishCause {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::WaitType => "wait_type",
            Self::Estimate => "estimate",
            Self::Position => "position",
        }
    }
}

/// The waiting units whose published wait type is out of date (or that
/// still carry a position from an older version), or whose estimated start
/// (`estimate` of a unit's key) moved by a large step, at most `budget`,
/// skipping units published less than `interval` ago.
pub(super) fn scan_reasons(
    core: &Core,
    units: &HashMap<Key, Box<UnitState>>,
    now: Instant,
    interval: Duration,
    budget: usize,
    estimate: &dyn Fn(&str) -> Option<i64>,
    wall_ms: i64,
) -> ReasonScan {
    let mut scan = ReasonScan {
        complete: true,
        ..ReasonScan::default()
    };
    for queue in core.queues() {
        for w in core.queue_waiting(queue.name) {
            // No cycle has judged it yet: nothing new to say.
            let Some(reason) = w.reason else {
                continue;
            };
            let Some(st) = units.get(w.key) else {
                continue;
            };
            // Busy or publishing units are looked at again when their write
            // result arrives (which reopens the gate).
            if st.awaiting || st.publishing || st.rec.phase != Some(QueueUnitPhase::Enqueued) {
                continue;
            }
            let kind = wait_type(reason).as_str();
            let estimated_start = estimate(w.key);
            let cause = if st.rec.wait_reason.as_deref() != Some(kind) {
                PublishCause::WaitType
            } else if st.rec.stale_position {
                PublishCause::Position
            } else if status_step(st.rec.estimated_start_ms, estimated_start, wall_ms) {
                PublishCause::Estimate
            } else {
                continue;
            };
            if scan.writes.len() >= budget {
                scan.complete = false;
                return scan;
            }
            if st
                .last_published
                .is_some_and(|t| now.duration_since(t) < interval)
            {
                scan.complete = false;
                continue;
            }
            scan.writes.push(Publish {
                unit: st.rec.key(),
                wait_type: kind,
                message: reason.to_string(),
                estimated_start,
                cause,
            });
        }
    }
    scan
}

impl VisibilityGate {
    /// Something the pass depends on may have changed.
    pub(super) fn changed(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Whether a pass may find something to write.
    pub(super) fn due(&self) -> bool {
        self.clean_at != Some(self.generation)
    }

    /// A pass ran; `complete` when it left nothing for a later pass (no
    /// budget exhausted, no unit or Queue deferred by its status interval).
    pub(super) fn passed(&mut self, complete: bool) {
        self.clean_at = complete.then_some(self.generation);
    }
}
