//! How the API server asks the process that holds the queue's state. The
//! scheduler's controller owns that state in one task; a request becomes a
//! [`Query`] on a channel and the controller answers it between two inputs,
//! from the same state it decides on (so positions are the order it serves).

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::history::History;
use crate::types::{PendingUnit, QuotaUsage};

/// Which items of an answer: `limit` items after the first `offset`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Page {
    /// Items skipped.
    pub offset: usize,
    /// Items at most (`None`: all).
    pub limit: Option<usize>,
}

impl Page {
    /// The page's part of `items`, and how many follow it.
    pub fn cut<T>(&self, items: impl ExactSizeIterator<Item = T>) -> (Vec<T>, usize) {
        let total = items.len();
        let taken: Vec<T> = items
            .skip(self.offset)
            .take(self.limit.unwrap_or(usize::MAX))
            .collect();
        let after = total.saturating_sub(self.offset.saturating_add(taken.len()));
        (taken, after)
    }
}

/// What is asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ask {
    /// The waiting units of a namespace (`None`: of every namespace).
    Namespace(Option<String>),
    /// One Queue's backlog in serving order.
    Queue(String),
    /// The quotas serving a namespace and their ancestors (`None`: all).
    Quotas(Option<String>),
    /// The history of those quotas and their queues (`None`: of all).
    History(Option<String>),
}

/// The answer (not `Eq`: a history's percentiles are floats).
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// The state has not changed since the generation the asker holds an
    /// answer of ([`Query::known`]): that answer stands.
    Unchanged,
    /// A page of waiting units and how many follow it.
    Units {
        /// The page.
        items: Vec<PendingUnit>,
        /// Items after it.
        remaining: usize,
    },
    /// The Queue asked for does not exist.
    NoSuchQueue,
    /// Quotas.
    Quotas(Vec<QuotaUsage>),
    /// The history.
    History(History),
}

/// A question with the channel its answer goes back on.
#[derive(Debug)]
pub struct Query {
    /// What.
    pub ask: Ask,
    /// Which part.
    pub page: Page,
    /// The generation of the state the asker already holds this answer
    /// for, if any: while it stands the owner replies [`Answer::Unchanged`]
    /// instead of working the answer out again.
    pub known: Option<u64>,
    /// Where the answer goes (dropped: the asker gave up).
    pub reply: oneshot::Sender<Reply>,
}

/// An answer and the state it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The answer.
    pub answer: Answer,
    /// The generation of the owner's state the answer was read at, when the
    /// same question gets the same answer for as long as that generation
    /// stands (`None`: the answer may change without the state changing,
    /// as a history gains samples with time).
    pub generation: Option<u64>,
}

impl Reply {
    /// An answer that is not kept.
    pub fn once(answer: Answer) -> Self {
        Self {
            answer,
            generation: None,
        }
    }
}

/// Why a query got no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    /// The state's owner is gone (shutting down).
    #[error("the scheduler's state is not available (shutting down)")]
    Gone,
    /// It did not answer in time (busy, or not started).
    #[error("the scheduler did not answer within {0:?}")]
    Timeout(Duration),
    /// Its queue of questions is full.
    #[error("too many visibility requests at once; retry")]
    Busy,
}

/// The asking end, cloned into every request.
#[derive(Clone, Debug)]
pub struct Queries {
    tx: mpsc::Sender<Query>,
    timeout: Duration,
}

impl Queries {
    /// A channel of at most `depth` waiting questions, each answered within
    /// `timeout`; the receiver goes to the state's owner.
    pub fn channel(depth: usize, timeout: Duration) -> (Self, mpsc::Receiver<Query>) {
        let (tx, rx) = mpsc::channel(depth.max(1));
        (Self { tx, timeout }, rx)
    }

    /// Asks and waits for the answer; `known`: the generation the asker
    /// holds an answer of (see [`Query::known`]).
    pub async fn ask(&self, ask: Ask, page: Page, known: Option<u64>) -> Result<Reply, Unanswered> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .try_send(Query {
                ask,
                page,
                known,
                reply,
            })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => Unanswered::Busy,
                mpsc::error::TrySendError::Closed(_) => Unanswered::Gone,
            })?;
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(Unanswered::Gone),
            Err(_) => Err(Unanswered::Timeout(self.timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_cuts_and_counts_what_follows() {
        let page = |offset, limit| Page { offset, limit };
        assert_eq!(page(0, None).cut(1..6), (vec![1, 2, 3, 4, 5], 0));
        assert_eq!(page(1, Some(2)).cut(1..6), (vec![2, 3], 2));
        assert_eq!(page(4, Some(2)).cut(1..6), (vec![5], 0));
        assert_eq!(page(9, Some(2)).cut(1..6), (vec![], 0));
    }

    #[tokio::test]
    async fn an_owner_that_is_gone_or_silent_is_an_error_not_a_hang() {
        let (queries, rx) = Queries::channel(1, Duration::from_millis(50));
        let silent = tokio::spawn(async move {
            let mut rx = rx;
            let held = rx.recv().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(held);
            drop(rx);
        });
        let ask = || queries.ask(Ask::Queue("q".into()), Page::default(), None);
        assert_eq!(
            ask().await,
            Err(Unanswered::Timeout(Duration::from_millis(50)))
        );
        silent.await.ok();
        assert_eq!(ask().await, Err(Unanswered::Gone));
    }
}
