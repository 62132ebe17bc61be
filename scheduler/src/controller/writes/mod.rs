//! API writes of the controller, run asynchronously with bounded concurrency.
//! Every write first checks that this replica still leads: a replica that
//! lost the Lease stops writing at once. Results return to the controller
//! as [`Written`] so it can confirm or roll back its bookkeeping.
//!
//! Writes wait in lanes by urgency and a free slot always takes the most
//! urgent one: a burst of new jobs (adoptions) or of position updates and
//! Events must not delay releases and the phases that free quota, or the
//! cluster idles while the API server works through bookkeeping. Events
//! are best effort: beyond [`EVENT_BACKLOG`] waiting, new ones are dropped.
//!
//! Some writes can be withdrawn while they wait ([`Claim`]): a unit's
//! Enqueued status that a release makes moot, a Running phase that the job's
//! end makes moot. Under load they wait longest, so the busier the API
//! server, the more of them are never sent.

mod apply;
mod backlog;
mod finalizer;
mod group;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_queue_api::queue_unit::{Admission, AdmissionCheckState, QueueUnitPhase};
use koord_queue_api::{Queue, QueueStatus};

pub use super::job_ref::{GroupTarget, JobRef};
use crate::controller::records::Key;

use backlog::Lane;
pub use writer::Writer;

/// Where the controller hands its writes: the [`Writer`] in a running
/// scheduler, a recorder in tests that drive the controller without an API
/// server (`state/scenarios.rs`).
pub trait WriteSink: Send {
    /// Queues `write`; its result comes back as a [`Written`].
    fn submit(&self, write: Write);
    /// Queues `write` so that it can be withdrawn while it waits.
    fn submit_withdrawable(&self, write: Write) -> Claim;
    /// The watch shows the last write of `unit`: its next one may go.
    fn settled(&self, unit: &Key);
    /// Recent write latency, milliseconds.
    fn latency_ms(&self) -> u64;
}

impl WriteSink for Writer {
    fn submit(&self, write: Write) {
        Writer::submit(self, write);
    }
    fn submit_withdrawable(&self, write: Write) -> Claim {
        Writer::submit_withdrawable(self, write)
    }
    fn settled(&self, unit: &Key) {
        Writer::settled(self, unit);
    }
    fn latency_ms(&self) -> u64 {
        Writer::latency_ms(self)
    }
}

/// A write the controller wants.
#[derive(Debug, Clone)]
pub enum Write {
    /// Adopt a unit: owner reference to its job (architecture §4.6).
    Adopt {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
    },
    /// Phase Enqueued for an adopted unit that was not released at once.
    Enqueue {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
        /// Status message.
        message: String,
        /// Why it waits (a wait type), when the cycle said: written with
        /// the phase, so a unit's first reason costs no write of its own.
        reason: Option<&'static str>,
    },
    /// Release: unit status Dequeued with admissions, then lift the job's hold.
    Release {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
        /// What is held, per pod set (`None`: keep what the unit holds, for a
        /// Reserved unit whose checks passed).
        admissions: Option<Vec<Admission>>,
        /// `status.attempts` after this release (`None`: keep).
        attempts: Option<i64>,
        /// Reserved (quota only, checks pending), Dequeued or SchedReady.
        phase: QueueUnitPhase,
        /// The admission checks to start (`Some` with Reserved).
        checks: Option<Vec<AdmissionCheckState>>,
        /// The unit does not carry the quota finalizer yet
        /// (`records::QUOTA_FINALIZER`): it is put on before the job's hold
        /// is lifted, so that the unit outlives its job's pods.
        guard: bool,
        /// Status message.
        message: String,
    },
    /// Send the unit back: (optionally) hold its job again, free its quota,
    /// TimeoutBackoff until `requeue_at`.
    Backoff {
        /// The unit.
        unit: Key,
        /// The job to hold again, when it was released.
        job: Option<JobRef>,
        /// A phase to pass through first (SchedFailed).
        via: Option<QueueUnitPhase>,
        /// Condition reason: Reclaimed, AdmissionCheck, SchedulingTimeout, RunningTimeout.
        reason: &'static str,
        /// Status message.
        message: String,
        /// `requeueState.count` after this backoff.
        count: i32,
        /// When the unit may wait again.
        requeue_at: Time,
    },
    /// Set the unit's phase (and clear or keep its admissions).
    Phase {
        /// The unit.
        unit: Key,
        /// The new phase.
        phase: QueueUnitPhase,
        /// `Some(vec![])` clears the admissions (quota freed).
        admissions: Option<Vec<Admission>>,
        /// Status message.
        message: String,
    },
    /// Hold the job again (it runs without holding quota).
    HoldJob {
        /// The unit, for the result.
        unit: Key,
        /// The job.
        job: JobRef,
    },
    /// Lift the gate of more members of a released pod group: members that
    /// appeared after its release (a replacement, the last pods of a gang),
    /// within the group's size. The unit's status stays as it is.
    ReleaseMembers {
        /// The unit.
        unit: Key,
        /// The group.
        job: JobRef,
    },
    /// Create the unit of a held job whose unit never appeared (the webhook
    /// answered but did not create it).
    RecreateUnit {
        /// The unit.
        unit: Key,
        /// The job.
        job: JobRef,
    },
    /// Publish why a waiting unit waits, when that changed: its wait type
    /// (the QuotaReserved condition's reason) and sentence. Its place is
    /// not written (the visibility API answers it).
    Visibility {
        /// The unit.
        unit: Key,
        /// The wait type.
        reason: &'static str,
        /// The sentence.
        message: String,
        /// Its estimated start (ms since the epoch); `None` clears it.
        estimated_start: Option<i64>,
    },
    /// Delete a unit (its job is gone, or it is an orphan).
    DeleteUnit {
        /// The unit.
        unit: Key,
    },
    /// Take the quota finalizer off a deleting unit: no pod it paid for is
    /// alive any more.
    RemoveFinalizer {
        /// The unit.
        unit: Key,
        /// Where the watch last showed the finalizer in the unit's list
        /// (`UnitRecord::finalizer_at`): removed there without a read.
        at: Option<u16>,
    },
    /// Create (or update the policy of) the Queue kept for an ElasticQuota.
    EnsureQueue {
        /// Queue name.
        name: String,
        /// Its body.
        queue: Box<Queue>,
        /// Whether it exists already (patch instead of create).
        exists: bool,
    },
    /// Delete a Queue.
    DeleteQueue {
        /// Queue name.
        name: String,
    },
    /// Write a Queue's status.
    QueueStatus {
        /// Queue name.
        name: String,
        /// The status.
        status: Box<QueueStatus>,
    },
    /// An Event on a job (or a quota).
    Event {
        /// The object it is about.
        regarding: ObjectReference,
        /// Normal or Warning.
        warning: bool,
        /// PascalCase reason.
        reason: &'static str,
        /// Message.
        note: String,
    },
}

/// How a write ended.
#[derive(Debug)]
pub enum Outcome {
    /// Done; the unit's new resourceVersion when the unit was written.
    Done(Option<u64>),
    /// The object is gone.
    Gone,
    /// Not written: this replica does not lead.
    NotLeader,
    /// Failed: the API server refused it, so it did not land.
    Failed(String),
    /// Sent, but whether it landed is not known: the connection broke, the
    /// API server was unreachable or answered with a server error. What
    /// depends on it (a release's reservation) is kept until the API says.
    Unknown(String),
}

/// A finished write.
#[derive(Debug)]
pub struct Written {
    /// What was asked.
    pub write: Write,
    /// How it ended.
    pub outcome: Outcome,
}

/// Events waiting at most; more are dropped (and counted), as client-go's
/// event broadcaster does: Events are a courtesy to people, and an API
/// server already behind must not be made to fall further behind for them.
pub const EVENT_BACKLOG: usize = 1000;

/// Who gets a withdrawable write: the slot that would perform it or the
/// controller that withdraws it, whichever takes it first; the other learns
/// that it lost.
#[derive(Clone, Debug, Default)]
pub struct Claim(Arc<AtomicBool>);

impl Claim {
    /// Takes the write; false when the other side took it already.
    pub fn take(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }
}

/// How long recent writes took (ms, exponentially weighted): while the API
/// server is slow, the controller holds back the writes it can do without.
#[derive(Clone, Debug, Default)]
pub struct WriteLatency(Arc<AtomicU64>);

impl WriteLatency {
    fn observe(&self, took: Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        // Slots race here; a lost update only delays the average a little.
        let old = self.0.load(Ordering::Relaxed);
        let new = old.saturating_mul(7).saturating_add(ms) / 8;
        self.0.store(new, Ordering::Relaxed);
    }

    /// The current average, in milliseconds.
    pub fn millis(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Write {
    fn lane(&self) -> Lane {
        match self {
            // Phases that change nothing held say where a unit is, as
            // positions do; the longer they wait, the likelier a later write
            // makes them moot.
            w if w.withdrawable() => Lane::Visibility,
            Self::Adopt { .. } => Lane::Adoption,
            Self::Enqueue { .. } | Self::Visibility { .. } | Self::QueueStatus { .. } => {
                Lane::Visibility
            }
            Self::Event { .. } => Lane::Events,
            Self::Release { .. }
            | Self::Backoff { .. }
            | Self::Phase { .. }
            | Self::HoldJob { .. }
            | Self::ReleaseMembers { .. }
            | Self::RecreateUnit { .. }
            | Self::DeleteUnit { .. }
            | Self::RemoveFinalizer { .. }
            | Self::EnsureQueue { .. }
            | Self::DeleteQueue { .. } => Lane::Lifecycle,
        }
    }

    /// Whether a later write makes this one moot while it waits: phase
    /// Enqueued (a release follows) and phase Running (the job's end follows).
    pub(super) fn withdrawable(&self) -> bool {
        matches!(
            self,
            Self::Enqueue { .. }
                | Self::Phase {
                    phase: QueueUnitPhase::Running,
                    ..
                }
        )
    }

    /// Short name of the operation, for logs and metrics.
    pub fn operation(&self) -> &'static str {
        match self {
            Self::Adopt { .. } => "adopt",
            Self::Enqueue { .. } => "enqueue",
            Self::Release { .. } => "release",
            Self::Backoff { .. } => "backoff",
            Self::Phase { .. } => "phase",
            Self::HoldJob { .. } => "hold_job",
            Self::ReleaseMembers { .. } => "release_members",
            Self::RecreateUnit { .. } => "recreate_unit",
            Self::Visibility { .. } => "visibility",
            Self::DeleteUnit { .. } => "delete_unit",
            Self::RemoveFinalizer { .. } => "remove_finalizer",
            Self::EnsureQueue { .. } => "ensure_queue",
            Self::DeleteQueue { .. } => "delete_queue",
            Self::QueueStatus { .. } => "queue_status",
            Self::Event { .. } => "event",
        }
    }

    /// The unit the write concerns, if any.
    pub fn unit(&self) -> Option<&Key> {
        match self {
            Self::Adopt { unit, .. }
            | Self::Enqueue { unit, .. }
            | Self::Release { unit, .. }
            | Self::Backoff { unit, .. }
            | Self::Phase { unit, .. }
            | Self::HoldJob { unit, .. }
            | Self::ReleaseMembers { unit, .. }
            | Self::Visibility { unit, .. }
            | Self::DeleteUnit { unit }
            | Self::RemoveFinalizer { unit, .. } => Some(unit),
            _ => None,
        }
    }
}
