//! The election loop: acquire, renew, step down, release.

use super::*;

/// How the election was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
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
                Ok((valid_until, term)) => {
                    self.shared.set_term(term);
                    valid_until
                }
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
    /// lead, and the Lease's `leaseTransitions` (its term).
    async fn campaign(&mut self, stop: &mut oneshot::Receiver<()>) -> Result<(Instant, i32), Stop> {
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
                    return Ok((valid_until, transitions));
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
                        self.shared.set_term(transitions);
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
pub(super) fn jittered(period: Duration) -> Duration {
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
