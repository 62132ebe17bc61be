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
}

impl Shared {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            lead_until: AtomicU64::new(0),
            leading: watch::Sender::new(false),
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

/// How the election was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// [`LeaderHandle::release`]: give the Lease up.
    Release,
    /// The handle was dropped: leave the Lease to expire.
    Abandon,
}

/// The outcome of one attempt to acquire or renew.
#[derive(Debug)]
enum Attempt {
    /// This candidate holds the Lease and may lead until `valid_until`.
    Held {
        valid_until: Instant,
        /// Whether this write took the Lease from another holder (or from
        /// nobody), rather than renewing this candidate's own.
        took_over: bool,
        transitions: i32,
    },
    /// Another candidate holds an unexpired Lease.
    HeldBy(String),
    /// The outcome is unknown (API error, conflict, timeout).
    Failed(String),
}

/// What interrupted a wait in the election loop.
enum Event<T> {
    Stopped(Stop),
    Deadline,
    Done(T),
}

/// A candidate in a Lease election; runs as a background task, controlled
/// through the [`LeaderHandle`] that [`LeaderElector::spawn`] returns.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    shared: Arc<Shared>,
    /// The Lease spec as last read or written, and when (local clock) it was
    /// first seen in that form: the basis of expiry.
    observed: Option<(LeaseSpec, Instant)>,
    /// Whether a write of ours may have made us holder since we last saw the
    /// Lease held by someone else; decides whether release must look.
    may_hold: bool,
}

impl LeaderElector {
    /// Starts campaigning for `config`'s Lease in a task on the current tokio
    /// runtime. An invalid configuration (see [`LeaseConfig::validate`]) or
    /// the absence of a runtime is logged and the candidate never leads.
    #[must_use = "dropping the handle stops the election"]
    pub fn spawn(client: kube::Client, config: LeaseConfig) -> LeaderHandle {
        let shared = Arc::new(Shared::new());
        let (stop_tx, stop_rx) = oneshot::channel();
        let span = tracing::info_span!(
            "leader_election",
            lease = %config.describe(),
            identity = %config.identity,
        );
        let elector = Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            shared: Arc::clone(&shared),
            observed: None,
            may_hold: false,
        };
        let task = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Some(runtime.spawn(elector.run(stop_rx).instrument(span))),
            Err(error) => {
                tracing::error!(%error, "no tokio runtime; not campaigning for the lease");
                None
            }
        };
        LeaderHandle {
            leadership: Leadership { shared },
            stop: Some(stop_tx),
            task,
        }
    }

    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let _step_down = StepDownOnDrop(Arc::clone(&self.shared));
        if let Err(error) = self.config.validate() {
            tracing::error!(%error, "invalid lease configuration; not campaigning");
            let _ = stopped(&mut stop).await;
            return;
        }
        tracing::info!("campaigning for leadership");
        let how = loop {
            let valid_until = match self.campaign(&mut stop).await {
                Ok(valid_until) => valid_until,
                Err(how) => break how,
            };
            if let Err(how) = self.lead(valid_until, &mut stop).await {
                break how;
            }
        };
        // Leadership ends before the release write, so nothing this process
        // does can overlap with a standby that acquires once it lands.
        if self.shared.is_leader() {
            tracing::info!("giving up leadership: stopping");
        }
        self.shared.step_down();
        if how == Stop::Release {
            self.release_lease().await;
        }
    }

    /// Tries until this candidate holds the Lease; returns until when it may
    /// lead.
    async fn campaign(&mut self, stop: &mut oneshot::Receiver<()>) -> Result<Instant, Stop> {
        // Logged when it changes, not on every poll.
        let mut last_holder: Option<String> = None;
        loop {
            let attempt = tokio::select! {
                stop = stopped(stop) => return Err(stop),
                attempt = self.attempt() => attempt,
            };
            match attempt {
                Attempt::Held {
                    valid_until,
                    took_over,
                    transitions,
                } => {
                    tracing::info!(took_over, transitions, "acquired the lease");
                    return Ok(valid_until);
                }
                Attempt::HeldBy(holder) => {
                    if last_holder.as_deref() != Some(&holder) {
                        tracing::info!(%holder, "lease held by another candidate; standing by");
                        last_holder = Some(holder);
                    }
                }
                Attempt::Failed(reason) => {
                    tracing::debug!(%reason, "could not acquire the lease; retrying");
                }
            }
            tokio::select! {
                stop = stopped(stop) => return Err(stop),
                () = tokio::time::sleep(jittered(self.config.retry_period)) => {}
            }
        }
    }

    /// Leads while renewals succeed within the renew deadline. `Ok` when
    /// leadership is lost (back to campaigning), `Err` when stopped.
    async fn lead(
        &mut self,
        mut valid_until: Instant,
        stop: &mut oneshot::Receiver<()>,
    ) -> Result<(), Stop> {
        if Instant::now() >= valid_until {
            tracing::warn!("lease acquired too late to lead before the renew deadline");
            return Ok(());
        }
        self.shared.lead_until(valid_until);
        tracing::info!("became leader");
        loop {
            let next_renewal = (Instant::now() + self.config.retry_period).min(valid_until);
            let waited = tokio::select! {
                stop = stopped(stop) => Event::Stopped(stop),
                () = tokio::time::sleep_until(next_renewal.into()) => Event::Done(()),
            };
            if let Event::Stopped(stop) = waited {
                return Err(stop);
            }
            // The deadline also bounds a renewal in flight: leadership must
            // end on time even if the API server never answers.
            let renewal = if Instant::now() >= valid_until {
                Event::Deadline
            } else {
                tokio::select! {
                    stop = stopped(stop) => Event::Stopped(stop),
                    () = tokio::time::sleep_until(valid_until.into()) => Event::Deadline,
                    attempt = self.attempt() => Event::Done(attempt),
                }
            };
            match renewal {
                Event::Stopped(stop) => return Err(stop),
                Event::Deadline => {
                    self.shared.step_down();
                    tracing::warn!(
                        renew_deadline = ?self.config.renew_deadline,
                        "leadership lost: could not renew the lease within the renew deadline"
                    );
                    return Ok(());
                }
                Event::Done(Attempt::Held {
                    valid_until: renewed_until,
                    took_over,
                    transitions,
                }) => {
                    if took_over {
                        // Someone emptied the holder; the conditional write
                        // still proves nobody else holds it.
                        tracing::info!(transitions, "re-acquired the lease after it was freed");
                    }
                    valid_until = max(valid_until, renewed_until);
                    self.shared.lead_until(valid_until);
                }
                Event::Done(Attempt::HeldBy(holder)) => {
                    self.shared.step_down();
                    tracing::warn!(%holder, "leadership lost: the lease is held by another candidate");
                    return Ok(());
                }
                Event::Done(Attempt::Failed(reason)) => {
                    tracing::warn!(%reason, "could not renew the lease; retrying until the renew deadline");
                }
            }
        }
    }

    /// One acquire-or-renew, bounded in time: the client sets no read
    /// timeout, and a hung request must not stall the election.
    async fn attempt(&mut self) -> Attempt {
        let limit = self.config.renew_deadline;
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(attempt) => attempt,
            Err(_) => Attempt::Failed(format!("no answer from the API server within {limit:?}")),
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let name = self.config.name.clone();
        let current = match self.api.get_opt(&name).await {
            Ok(current) => current,
            Err(error) => return Attempt::Failed(format!("reading the lease: {error}")),
        };
        let now = now_micro_time();
        let duration_seconds = self.config.lease_duration_seconds();

        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            // Taken before the write: the server applies it later, so the
            // deadline counted from here ends before any standby's expiry.
            let write_started = Instant::now();
            self.may_hold = true;
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => self.held(created, write_started, true),
                Err(error) if is_conflict(&error) => {
                    Attempt::Failed("another candidate created the lease first".into())
                }
                Err(error) => Attempt::Failed(format!("creating the lease: {error}")),
            };
        };

        if lease.metadata.resource_version.is_none() {
            // Without it the replace would be unconditional.
            return Attempt::Failed("the lease has no resourceVersion".into());
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let changed_at = self.observe(&spec);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.config.identity;
        if !holder.is_empty() && !mine {
            self.may_hold = false;
            if !self.expired(changed_at, &spec) {
                return Attempt::HeldBy(holder);
            }
            tracing::info!(previous_holder = %holder, "the lease has expired; taking it over");
        }

        let mut next = spec.clone();
        next.holder_identity = Some(self.config.identity.clone());
        next.lease_duration_seconds = Some(duration_seconds);
        next.renew_time = Some(now.clone());
        if !mine {
            next.acquire_time = Some(now);
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        } else if next.acquire_time.is_none() {
            next.acquire_time = Some(now);
        }
        lease.spec = Some(next);
        let write_started = Instant::now();
        self.may_hold = true;
        // `lease` keeps the resourceVersion it was read with: a 409 means
        // another write came first, and the next attempt re-reads.
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => self.held(updated, write_started, !mine),
            Err(error) if is_conflict(&error) => {
                Attempt::Failed("the lease changed since it was read".into())
            }
            Err(error) => Attempt::Failed(format!("writing the lease: {error}")),
        }
    }

    fn held(&mut self, written: Lease, write_started: Instant, took_over: bool) -> Attempt {
        let spec = written.spec.unwrap_or_default();
        let transitions = spec.lease_transitions.unwrap_or(0);
        self.observe(&spec);
        Attempt::Held {
            valid_until: write_started
                .checked_add(self.config.renew_deadline)
                .unwrap_or(write_started),
            took_over,
            transitions,
        }
    }

    /// Records `spec` as seen now if it differs from the last one seen, and
    /// returns when the current form was first seen.
    fn observe(&mut self, spec: &LeaseSpec) -> Instant {
        match &self.observed {
            Some((seen, at)) if seen == spec => *at,
            _ => {
                let now = Instant::now();
                self.observed = Some((spec.clone(), now));
                now
            }
        }
    }

    /// Whether a Lease unchanged since `changed_at` has expired, by the
    /// duration it declares (ours if it declares none).
    fn expired(&self, changed_at: Instant, spec: &LeaseSpec) -> bool {
        let duration = spec
            .lease_duration_seconds
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .map_or(self.config.lease_duration, Duration::from_secs);
        changed_at
            .checked_add(duration)
            .is_none_or(|expiry| expiry <= Instant::now())
    }

    /// Gives the Lease up if we hold it; bounded by the renew deadline.
    async fn release_lease(&mut self) {
        if !self.may_hold {
            tracing::info!("stopped campaigning");
            return;
        }
        let limit = self.config.renew_deadline;
        match tokio::time::timeout(limit, self.try_release()).await {
            Ok(Ok(true)) => tracing::info!("released the lease"),
            Ok(Ok(false)) => tracing::info!("stopped campaigning; the lease was not ours"),
            Ok(Err(reason)) => {
                tracing::warn!(%reason, "could not release the lease; it will expire instead");
            }
            Err(_) => tracing::warn!(
                ?limit,
                "could not release the lease in time; it will expire instead"
            ),
        }
    }

    async fn try_release(&mut self) -> Result<bool, String> {
        // A conflict can be our own last renewal landing late; re-read and
        // try again a few times.
        for _ in 0..3 {
            let current = self
                .api
                .get_opt(&self.config.name)
                .await
                .map_err(|error| format!("reading the lease: {error}"))?;
            let Some(mut lease) = current else {
                return Ok(false);
            };
            if lease.metadata.resource_version.is_none() {
                return Err("the lease has no resourceVersion".into());
            }
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(false);
            };
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = Some(String::new());
            spec.renew_time = Some(now_micro_time());
            match self
                .api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => {
                    self.may_hold = false;
                    return Ok(true);
                }
                Err(error) if is_conflict(&error) => continue,
                Err(error) => return Err(format!("writing the lease: {error}")),
            }
        }
        Err("the lease kept changing".into())
    }
}

/// Resolves when the handle asks to stop (release) or is dropped (abandon).
async fn stopped(stop: &mut oneshot::Receiver<()>) -> Stop {
    match stop.await {
        Ok(()) => Stop::Release,
        Err(_) => Stop::Abandon,
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_conflict() || status.is_already_exists())
}

/// `period` plus up to a fifth more, so standbys that started together do
/// not poll in lockstep.
fn jittered(period: Duration) -> Duration {
    // A fresh RandomState is randomly keyed: random enough without a
    // dependency.
    let random = RandomState::new().hash_one(Instant::now()) % 1000;
    let per_mille = u32::try_from(random).unwrap_or(0);
    period + period / 5 * per_mille / 1000
}

/// The wall clock as a MicroTime, for `renewTime`/`acquireTime` (which only
/// inform humans and other clients; expiry here uses the local clock).
fn now_micro_time() -> MicroTime {
    let micros = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
        });
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaseConfig {
        LeaseConfig::new("ns", "lease", "me")
    }

    #[test]
    fn defaults_are_valid() {
        let config = config();
        assert_eq!(config.lease_duration, Duration::from_secs(15));
        assert_eq!(config.renew_deadline, Duration::from_secs(10));
        assert_eq!(config.retry_period, Duration::from_secs(2));
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.lease_duration_seconds(), 15);
    }

    #[test]
    fn rejects_unsafe_timings_and_empty_names() {
        let mut c = config();
        c.identity.clear();
        assert_eq!(c.validate(), Err(LeaseConfigError::Empty("identity")));

        let mut c = config();
        c.renew_deadline = c.lease_duration;
        assert!(matches!(
            c.validate(),
            Err(LeaseConfigError::LeaseDurationTooShort { .. })
        ));

        let mut c = config();
        c.retry_period = c.renew_deadline;
        assert!(matches!(
            c.validate(),
            Err(LeaseConfigError::RenewDeadlineTooShort { .. })
        ));

        let mut c = config();
        c.retry_period = Duration::ZERO;
        assert_eq!(c.validate(), Err(LeaseConfigError::ZeroRetryPeriod));

        let mut c = config();
        c.lease_duration = Duration::from_secs(u64::MAX);
        assert!(matches!(
            c.validate(),
            Err(LeaseConfigError::LeaseDurationTooLong(_))
        ));
    }

    #[test]
    fn lease_duration_seconds_round_up() {
        let mut c = config();
        c.lease_duration = Duration::from_millis(2500);
        assert_eq!(c.lease_duration_seconds(), 3);
        c.lease_duration = Duration::from_secs(2);
        assert_eq!(c.lease_duration_seconds(), 2);
    }

    #[test]
    fn leadership_expires_on_its_own_and_steps_down() {
        let shared = Shared::new();
        let rx = shared.leading.subscribe();
        assert!(!shared.is_leader());
        shared.lead_until(Instant::now() + Duration::from_secs(60));
        assert!(shared.is_leader());
        assert!(*rx.borrow());
        shared.step_down();
        assert!(!shared.is_leader());
        assert!(!*rx.borrow());
        // A deadline already past means no leadership, with no task needed.
        shared.lead_until(Instant::now());
        assert!(!shared.is_leader());
    }

    /// A client for an address where nothing listens.
    fn unreachable_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn unreachable_api_server_never_leads_and_release_returns() {
        let config = LeaseConfig {
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(100),
            ..config()
        };
        let handle = LeaderElector::spawn(unreachable_client(), config);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!handle.is_leader());
        // Never held, so nothing to give up and no request to wait for.
        tokio::time::timeout(Duration::from_secs(1), handle.release())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn invalid_config_never_campaigns() {
        let mut config = config();
        config.renew_deadline = config.lease_duration * 2;
        let handle = LeaderElector::spawn(unreachable_client(), config);
        let view = handle.leadership();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!view.is_leader());
        handle.release().await;
        assert!(!view.is_leader());
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        let period = Duration::from_millis(300);
        for _ in 0..100 {
            let d = jittered(period);
            assert!(d >= period && d <= period + period / 5, "{d:?}");
        }
    }
}
