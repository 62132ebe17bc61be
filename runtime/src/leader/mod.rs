//! Leader election over a `coordination.k8s.io/v1` Lease, after client-go's
//! `leaderelection`: hot standbys poll the Lease and take it over when it is
//! free or has expired; the holder renews it and stops acting as leader the
//! moment it can no longer prove, within its renew deadline, that the Lease
//! is still its own.
//!
//! Expiry is judged on the local clock: a standby records when *it* last saw
//! the Lease record change and waits `leaseDurationSeconds` from then, so a
//! skewed clock on another node cannot make a live lease look expired. Every
//! write is a replace conditional on the resourceVersion just read, so two
//! candidates can never both win the same race.
//!
//! Only the holder may write, so callers check [`LeaderHandle::is_leader`]
//! (or [`Leadership::is_leader`]) right before every write. The check also
//! consults the local renew deadline itself, so it turns false on time even
//! if the election task is not scheduled.

use std::cmp::max;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

/// How long a Lease stays valid after its last renewal, by default.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long the leader keeps trying to renew before it gives up, by default.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often the leader renews and standbys retry, by default.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Which Lease to campaign for, as whom, and with which timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease; every candidate of one election uses the same name.
    pub name: String,
    /// This candidate's identity, written to `holderIdentity`; unique per
    /// process (typically the pod name).
    pub identity: String,
    /// How long standbys wait, after they last saw the Lease change, before
    /// taking it over. Written to `leaseDurationSeconds`, rounded up.
    pub lease_duration: Duration,
    /// How long the leader may go without a successful renewal before it
    /// stops leading. Must be shorter than `lease_duration`, so the leader
    /// steps down before any standby can consider the Lease expired.
    pub renew_deadline: Duration,
    /// How often the leader renews and standbys try to acquire.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// A configuration with the default timings (15s lease, 10s renew
    /// deadline, 2s retry period).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Checks that the names are set and that
    /// `lease_duration > renew_deadline > retry_period > 0`.
    pub fn validate(&self) -> Result<(), LeaseConfigError> {
        for (field, value) in [
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("identity", &self.identity),
        ] {
            if value.is_empty() {
                return Err(LeaseConfigError::Empty(field));
            }
        }
        if self.retry_period.is_zero() {
            return Err(LeaseConfigError::ZeroRetryPeriod);
        }
        if self.renew_deadline <= self.retry_period {
            return Err(LeaseConfigError::RenewDeadlineTooShort {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaseConfigError::LeaseDurationTooShort {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.lease_duration > Duration::from_secs(i32::MAX.unsigned_abs().into()) {
            return Err(LeaseConfigError::LeaseDurationTooLong(self.lease_duration));
        }
        Ok(())
    }

    /// `leaseDurationSeconds` to write: rounded up, so standbys never wait
    /// less than this candidate's own lease duration.
    fn lease_duration_seconds(&self) -> i32 {
        let mut seconds = self.lease_duration.as_secs();
        if self.lease_duration.subsec_nanos() > 0 {
            seconds = seconds.saturating_add(1);
        }
        i32::try_from(seconds).unwrap_or(i32::MAX)
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Why a [`LeaseConfig`] is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseConfigError {
    /// A name field is empty.
    #[error("lease {0} must not be empty")]
    Empty(&'static str),
    /// The retry period is zero.
    #[error("retry period must be greater than zero")]
    ZeroRetryPeriod,
    /// The renew deadline leaves no room for a retry.
    #[error(
        "renew deadline ({renew_deadline:?}) must be longer than the retry period ({retry_period:?})"
    )]
    RenewDeadlineTooShort {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured retry period.
        retry_period: Duration,
    },
    /// Standbys could take over while the leader still believes it leads.
    #[error(
        "lease duration ({lease_duration:?}) must be longer than the renew deadline ({renew_deadline:?})"
    )]
    LeaseDurationTooShort {
        /// The configured lease duration.
        lease_duration: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
    /// `leaseDurationSeconds` is a 32-bit number of seconds.
    #[error("lease duration ({0:?}) does not fit leaseDurationSeconds")]
    LeaseDurationTooLong(Duration),
}

/// Leadership state shared by the election task and every view of it.
#[derive(Debug)]
struct Shared {
    /// Origin of `lead_until`.
    epoch: Instant,
    /// Nanoseconds after `epoch` until which this process may act as leader;
    /// 0 when it is not leader. One atomic, so `is_leader` takes no lock and
    /// expires on its own even if the election task stalls.
    lead_until: AtomicU64,
    /// The same state for subscribers, updated on each change.
    leading: watch::Sender<bool>,
    /// The Lease's `leaseTransitions` when this process last acquired it:
    /// its term, the fencing token of its writes (see [`Leadership::term`]).
    term: AtomicU64,
}

impl Shared {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            lead_until: AtomicU64::new(0),
            leading: watch::Sender::new(false),
            term: AtomicU64::new(0),
        }
    }

    fn nanos_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    fn is_leader(&self) -> bool {
        let until = self.lead_until.load(Ordering::Acquire);
        until != 0 && self.nanos_since_epoch(Instant::now()) < until
    }

    /// Leads (or keeps leading) until `until`.
    fn lead_until(&self, until: Instant) {
        // 0 means "not leader", so a deadline at the epoch itself becomes 1ns.
        let nanos = max(self.nanos_since_epoch(until), 1);
        self.lead_until.store(nanos, Ordering::Release);
        self.publish(true);
    }

    fn set_term(&self, transitions: i32) {
        self.term
            .store(u64::try_from(transitions).unwrap_or(0), Ordering::Release);
    }

    /// Stops leading now. The flag drops before subscribers hear of it.
    fn step_down(&self) {
        self.lead_until.store(0, Ordering::Release);
        self.publish(false);
    }

    fn publish(&self, leading: bool) {
        self.leading.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
    }
}

/// Steps down when the election task ends for any reason, including being
/// aborted, so no view of it keeps reporting leadership.
struct StepDownOnDrop(Arc<Shared>);

impl Drop for StepDownOnDrop {
    fn drop(&mut self) {
        self.0.step_down();
    }
}

/// A cheap, cloneable view of a candidate's leadership, for the code that
/// writes: check [`Leadership::is_leader`] right before each write.
#[derive(Clone, Debug)]
pub struct Leadership {
    shared: Arc<Shared>,
}

impl Leadership {
    /// A leadership that does not change: leading (or not) for good. For a
    /// single replica run without election, and for tests that drive a
    /// writer without a Lease.
    pub fn fixed(leading: bool) -> Self {
        let shared = Shared::new();
        if leading {
            shared.lead_until.store(u64::MAX, Ordering::Release);
            shared.publish(true);
        }
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Whether this process holds the Lease right now. Lock-free; false once
    /// the renew deadline has passed without a successful renewal, once the
    /// Lease is seen held by another, and after the election stops.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// The term this process leads in — the Lease's `leaseTransitions` when
    /// it acquired it — while it leads. A write that carries it (with the
    /// holder's identity) can be checked by the API server against the
    /// Lease itself, so a write of a leader that lost the Lease fails there
    /// (the chart's ValidatingAdmissionPolicy `…-fencing`).
    pub fn term(&self) -> Option<u64> {
        self.is_leader()
            .then(|| self.shared.term.load(Ordering::Acquire))
    }

    /// Leadership changes as they happen. A receiver sees the latest state;
    /// a loss followed quickly by a new acquisition may reach it as a single
    /// change. On a missed renew deadline [`Leadership::is_leader`] turns
    /// false at the deadline itself and the notification follows as soon as
    /// the election task runs, so writers check `is_leader`, not this.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.shared.leading.subscribe()
    }
}

/// Controls a running election; see [`LeaderElector::spawn`].
///
/// Dropping the handle stops the election *without* giving up the Lease, as
/// a crash would: standbys take over once it expires. Call
/// [`LeaderHandle::release`] on graceful shutdown instead.
#[derive(Debug)]
pub struct LeaderHandle {
    leadership: Leadership,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl LeaderHandle {
    /// Whether this process holds the Lease right now; see
    /// [`Leadership::is_leader`].
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// Leadership changes as they happen; see [`Leadership::subscribe`].
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leadership.subscribe()
    }

    /// A cloneable view of the leadership, to hand to the code that writes.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Stops campaigning and, if this process holds the Lease, gives it up
    /// (empty `holderIdentity`) so a standby acquires it at once. Leadership
    /// ends before the Lease is written. Waits at most about the renew
    /// deadline for the API server; if it cannot be reached, the Lease simply
    /// expires.
    pub async fn release(mut self) {
        if let Some(stop) = self.stop.take() {
            // An error means the task has already ended; nothing to stop.
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            tracing::warn!(%error, "leader election task ended abnormally");
        }
        // Also covers a task that never ran (no runtime).
        self.leadership.shared.step_down();
    }
}

impl Drop for LeaderHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

mod elector;
pub use elector::LeaderElector;

#[cfg(test)]
mod tests;
