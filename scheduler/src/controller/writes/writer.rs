//! The writer: slots that take the most urgent write from the backlog and
//! perform it while this replica leads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_queue_api::{QueueUnit, WriteAck};
use koord_queue_runtime::Leadership;
use kube::api::Api;
use tokio::sync::{Notify, mpsc};

use super::backlog::{Backlog, SETTLE_POLL};
use super::{Claim, Outcome, Write, WriteLatency, Written};
use crate::controller::metrics::Metrics;
use crate::controller::records::Key;

/// Runs writes.
#[derive(Clone)]
pub struct Writer {
    pub(super) client: kube::Client,
    pub(super) leader: Leadership,
    pub(super) backlog: Arc<Mutex<Backlog>>,
    pub(super) ready: Arc<Notify>,
    pub(super) done: mpsc::UnboundedSender<Written>,
    pub(super) metrics: Metrics,
    pub(super) identity: String,
    pub(super) namespace: String,
    pub(super) latency: WriteLatency,
    /// Numbers this replica's fencing tokens (each token differs, so the
    /// API server checks every status write; see [`Writer::fence`]).
    pub(super) writes: Arc<AtomicU64>,
}

/// A write step refused before it was sent: this replica no longer leads.
#[derive(Debug, thiserror::Error)]
#[error("fenced: this replica no longer holds the leader Lease")]
pub(super) struct Fenced;

/// Marks the API server's refusal of a stale leader's write (the message
/// of the chart's fencing policy).
pub const FENCING_REFUSED: &str = "koord-queue fencing";

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

pub(super) const FIELD_MANAGER: &str = "koord-queue-scheduler";

pub(super) fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

pub(super) fn split(unit: &Key) -> (&str, &str) {
    unit.split_once('/').unwrap_or(("", unit))
}

pub(super) fn outcome_of(error: kube::Error) -> Outcome {
    match error {
        kube::Error::Api(e) if e.code == 404 => Outcome::Gone,
        kube::Error::Service(e) if e.is::<Fenced>() => Outcome::NotLeader,
        kube::Error::Api(e) if e.message.contains(FENCING_REFUSED) => Outcome::NotLeader,
        e if outcome_unknown(&e) => Outcome::Unknown(e.to_string()),
        e => Outcome::Failed(e.to_string()),
    }
}

/// Whether a failed request may still have landed: only a 4xx answer says
/// it was not applied (429 too: the server sheds before it acts). A broken
/// connection, a timeout or a 5xx (a write whose etcd round trip timed out
/// answers 504 and may be stored all the same) says nothing either way.
pub(super) fn outcome_unknown(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(e) => !(400..500).contains(&e.code),
        kube::Error::Service(e) => !e.is::<Fenced>(),
        // Not sent: the request could not be built or authenticated.
        kube::Error::BuildRequest(_) | kube::Error::HttpError(_) | kube::Error::Auth(_) => false,
        // A broken connection, or an answer that could not be read (the
        // write may be stored).
        _ => true,
    }
}

impl Writer {
    /// A writer sending results to `done`, at most `concurrency` writes at
    /// once (that many workers, which stop when `done` is closed). Must be
    /// called on a tokio runtime.
    pub fn new(
        client: kube::Client,
        leader: Leadership,
        concurrency: usize,
        done: mpsc::UnboundedSender<Written>,
        metrics: Metrics,
        identity: String,
        namespace: String,
    ) -> Self {
        let this = Self {
            client,
            leader,
            backlog: Arc::default(),
            ready: Arc::new(Notify::new()),
            done,
            metrics,
            identity,
            namespace,
            latency: WriteLatency::default(),
            writes: Arc::default(),
        };
        for _ in 0..concurrency.max(1) {
            tokio::spawn(this.clone().work());
        }
        this
    }

    /// How long recent writes took, in milliseconds.
    pub fn latency_ms(&self) -> u64 {
        self.latency.millis()
    }

    /// Queues `write`; its result arrives on the done channel.
    pub fn submit(&self, write: Write) {
        self.enqueue(write, None);
    }

    /// Queues `write` so that it can be withdrawn until a slot takes it:
    /// `claim.take()` true means it will never be performed (and no result
    /// arrives for it).
    pub fn submit_withdrawable(&self, write: Write) -> Claim {
        let claim = Claim::default();
        self.enqueue(write, Some(claim.clone()));
        claim
    }

    pub(super) fn enqueue(&self, write: Write, claim: Option<Claim>) {
        if let Ok(mut backlog) = self.backlog.lock() {
            if !backlog.push(write, claim) {
                self.metrics.events_dropped.inc();
                return;
            }
            self.metrics.write_backlog.set(backlog.len());
        }
        self.ready.notify_one();
    }

    /// The controller's watch shows `unit`'s last write (its
    /// resourceVersion at least the one that write returned).
    pub fn settled(&self, unit: &Key) {
        let waiting = self
            .backlog
            .lock()
            .is_ok_and(|mut backlog| backlog.settled(unit) && backlog.len() > 0);
        if waiting {
            self.ready.notify_one();
        }
    }

    /// The next write, or, when none may go yet, whether a settle timing
    /// out could let one go.
    pub(super) fn next(&self) -> Result<Write, bool> {
        let Ok(mut backlog) = self.backlog.lock() else {
            return Err(false);
        };
        let write = backlog.pop(Instant::now());
        self.metrics.write_backlog.set(backlog.len());
        write.ok_or_else(|| backlog.only_settling_waits())
    }

    /// One slot: performs the most urgent waiting write, again and again,
    /// until the controller is gone.
    pub(super) async fn work(self) {
        loop {
            let write = loop {
                // Registered before looking, so a submit in between is not missed.
                let ready = self.ready.notified();
                let settling = match self.next() {
                    Ok(write) => break write,
                    Err(settling) => settling,
                };
                tokio::select! {
                    () = ready => {}
                    () = self.done.closed() => return,
                    () = tokio::time::sleep(SETTLE_POLL), if settling => {}
                }
            };
            let outcome = if self.leader.is_leader() {
                let started = Instant::now();
                let outcome = self.perform(&write).await;
                self.latency.observe(started.elapsed());
                outcome
            } else {
                Outcome::NotLeader
            };
            if let Ok(mut backlog) = self.backlog.lock() {
                backlog.finish(&write, &outcome, Instant::now());
                if backlog.len() > 0 {
                    // A write of the same unit may have waited for this one.
                    self.ready.notify_one();
                }
            }
            match &outcome {
                Outcome::Failed(error) | Outcome::Unknown(error) => {
                    self.metrics
                        .write_errors
                        .get_or_create(&crate::controller::metrics::WriteLabels {
                            operation: write.operation(),
                        })
                        .inc();
                    let landed = if matches!(outcome, Outcome::Unknown(_)) {
                        "unknown"
                    } else {
                        "no"
                    };
                    tracing::warn!(operation = write.operation(), %error, landed, "write failed");
                }
                Outcome::NotLeader => {
                    self.metrics.fenced_writes.inc();
                    tracing::debug!(operation = write.operation(), unit = ?write.unit(), "write not sent: this replica no longer leads");
                }
                Outcome::Done(_) | Outcome::Gone => {}
            }
            if self.done.send(Written { write, outcome }).is_err() {
                return;
            }
        }
    }

    /// Every step of a write (a write may take several: a release patches
    /// the unit, then its job, with retries) is sent only while this replica
    /// leads; returns the fencing token its unit status writes carry.
    pub(super) fn fence(&self) -> Result<String, kube::Error> {
        let term = self
            .leader
            .term()
            .ok_or_else(|| kube::Error::Service(Box::new(Fenced)))?;
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(format!("{}/{term}/{n}", self.identity))
    }

    pub(super) fn units(&self, namespace: &str) -> Api<QueueUnit> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The units of `namespace`, for writes whose answer is read for its
    /// resourceVersion alone.
    pub(super) fn unit_acks(&self, namespace: &str) -> Api<WriteAck> {
        WriteAck::api::<QueueUnit>(&self.client, namespace)
    }
}
