//! The backlog after the answers: each namespace's share of it, and the
//! units worked off, each retried with backoff while its job has not
//! appeared or the API fails.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

use super::attempt::Attempt;
use super::{Pending, Shared};
use crate::metrics::Metrics;

/// How many units each namespace has in the backlog. An entry exists only
/// while its namespace has a unit there, so there are never more entries
/// than the backlog holds units, whatever namespaces reviews name.
pub(super) struct NamespaceShares {
    pub(super) counts: Mutex<HashMap<String, usize>>,
    pub(super) limit: usize,
    pub(super) metrics: Metrics,
}

/// One unit's place in its namespace's share; given back when dropped.
pub(super) struct Share {
    shares: Arc<NamespaceShares>,
    namespace: String,
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Share").field(&self.namespace).finish()
    }
}

impl NamespaceShares {
    /// A place for one more unit of `namespace`, unless it holds its share.
    pub(super) fn take(self: &Arc<Self>, namespace: &str) -> Option<Share> {
        // A poisoned lock only means another thread panicked between two
        // plain integer updates; the counts are still whole.
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(namespace.to_string()).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        self.metrics
            .unit_backlog_namespaces
            .set(i64::try_from(counts.len()).unwrap_or(i64::MAX));
        Some(Share {
            shares: self.clone(),
            namespace: namespace.to_string(),
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut counts = self
            .shares
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.namespace) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.namespace);
            }
        }
        self.shares
            .metrics
            .unit_backlog_namespaces
            .set(i64::try_from(counts.len()).unwrap_or(i64::MAX));
    }
}

/// Takes units from the backlog and creates each in its own task, at most
/// `max_in_flight` calls at a time; returns once the backlog is closed and done.
pub(super) async fn dispatch(shared: Arc<Shared>, mut rx: mpsc::Receiver<Pending>) {
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(pending) = rx.recv().await {
        // Reap finished tasks so the set stays small.
        while tasks.try_join_next().is_some() {}
        let shared = shared.clone();
        tasks.spawn(async move {
            tokio::time::sleep_until((pending.answered + shared.config.linger).into()).await;
            shared.create_for_stored_job(&pending).await;
            shared.metrics.unit_backlog.dec();
        });
    }
    while tasks.join_next().await.is_some() {}
}

impl Shared {
    /// Reads the job and creates its unit from what is stored; retried with
    /// backoff while the job has not appeared (up to `job_wait`) or the API
    /// fails (up to `give_up_after`).
    pub(super) async fn create_for_stored_job(&self, pending: &Pending) {
        let mut delay = self.config.first_retry;
        loop {
            let attempt = {
                let Ok(_slot) = self.background.acquire().await else {
                    return;
                };
                self.attempt(pending).await
            };
            let waited = pending.answered.elapsed() + delay;
            match attempt {
                Attempt::Done => return,
                Attempt::NotNamed => {
                    self.count_skip("job-names-another-unit");
                    tracing::debug!(
                        namespace = %pending.namespace, job = %pending.job, unit = %pending.unit,
                        "the job names another QueueUnit; none created"
                    );
                    return;
                }
                Attempt::NoJob if waited > self.config.job_wait => {
                    self.count_skip("job-missing");
                    tracing::debug!(
                        namespace = %pending.namespace, job = %pending.job,
                        "the job did not appear; no QueueUnit created"
                    );
                    return;
                }
                Attempt::NoJob => {}
                Attempt::Failed(error) => {
                    if !error.retryable || waited > self.config.give_up_after {
                        tracing::error!(
                            error = %error.message,
                            "QueueUnit not created; its job stays held until the scheduler creates it"
                        );
                        return;
                    }
                    tracing::warn!(error = %error.message, retry_in = ?delay, "QueueUnit create failed; retrying");
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(self.config.max_retry);
        }
    }
}
