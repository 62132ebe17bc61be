//! The bounded history the visibility API serves (`histories`, issue 42):
//! one sample a minute for the last six hours — per quota used against its
//! effective min and max, per queue how many wait and hold, how long the
//! units released since the sample before had waited, how many were sent
//! back for another. A sample is taken on the first input after its minute
//! (the housekeeping tick is one every half second), from the state the
//! controller decides on; an answer ends with the state as it is now, so
//! that a chart reaches the present and a fresh scheduler shows something.
//!
//! Memory: 360 samples × (quotas + queues) small records; with 1,000 quotas
//! and their queues, a few tens of MB at most, kept by the leader and the
//! standbys alike (each takes its own samples).

use std::collections::{BTreeSet, HashMap, VecDeque};

use koord_queue_api::Resources;
use koord_queue_visibility::history::{
    Amounts, History as HistoryAnswer, Percentiles, QueueSample, QuotaSample, Sample,
};

use super::Controller;
use crate::controller::clock::wall_time;

/// Milliseconds between two samples.
const INTERVAL_MS: i64 = 60_000;
/// Samples kept: six hours of them.
const KEPT: usize = 360;
/// Waits kept for a queue's percentiles between two samples (a burst of
/// releases beyond it keeps the most recent).
const WAITS_KEPT: usize = 10_000;

/// What a queue did since the last sample.
#[derive(Debug, Default, Clone)]
struct Since {
    released: u64,
    waits_s: VecDeque<f64>,
    reclaimed: u64,
    preempted: u64,
}

/// The samples and what is counted towards the next one.
#[derive(Debug, Default)]
pub(super) struct History {
    samples: VecDeque<Sample>,
    last_ms: Option<i64>,
    since: HashMap<String, Since>,
}

/// How a unit was sent back for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SentBack {
    /// Its quota was taken back (borrowed beyond its min, or fair share).
    Reclaimed,
    /// A higher-priority unit of its own quota took its place.
    Preempted,
}

impl History {
    /// A unit of `queue` was released after waiting `waited_ms`.
    pub(super) fn released(&mut self, queue: &str, waited_ms: i64) {
        let since = self.since.entry(queue.to_string()).or_default();
        since.released += 1;
        if since.waits_s.len() == WAITS_KEPT {
            since.waits_s.pop_front();
        }
        since.waits_s.push_back(waited_ms.max(0) as f64 / 1000.0);
    }

    /// A unit of `queue` was sent back for another.
    pub(super) fn sent_back(&mut self, queue: &str, how: SentBack) {
        let since = self.since.entry(queue.to_string()).or_default();
        match how {
            SentBack::Reclaimed => since.reclaimed += 1,
            SentBack::Preempted => since.preempted += 1,
        }
    }

    /// Whether a sample is due at `now_ms`.
    fn due(&self, now_ms: i64) -> bool {
        self.last_ms.is_none_or(|last| now_ms - last >= INTERVAL_MS)
    }

    fn keep(&mut self, now_ms: i64, sample: Sample) {
        if self.samples.len() == KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.last_ms = Some(now_ms);
        self.since.clear();
    }
}

/// Integer amounts by resource name.
fn amounts(r: &Resources) -> Amounts {
    r.iter().map(|(k, v)| (k.to_string(), v)).collect()
}

impl Controller {
    /// Takes a sample when one is due (called with each input's time).
    pub(super) fn sample_history(&mut self) {
        let now_ms = self.now.wall_ms;
        if self.history.due(now_ms) {
            let sample = self.history_sample(now_ms);
            self.history.keep(now_ms, sample);
        }
    }

    /// The state now, with what happened since the last sample.
    fn history_sample(&self, now_ms: i64) -> Sample {
        let mut names: Vec<&str> = self.quotas.keys().map(String::as_str).collect();
        names.sort_by_key(|n| (self.quota_depth(n), *n));
        let quotas = names
            .into_iter()
            .filter_map(|name| {
                let f = self.core.quota_figures(name)?;
                Some(QuotaSample {
                    name: name.to_string(),
                    used: amounts(&f.used),
                    min: amounts(&f.min_effective),
                    max: amounts(&f.max),
                })
            })
            .collect();
        let mut queues: Vec<QueueSample> = self
            .core
            .queues()
            .map(|q| {
                let since = self.history.since.get(q.name).cloned().unwrap_or_default();
                QueueSample {
                    name: q.name.to_string(),
                    pending: q.counts.pending as u64,
                    admitted: q.counts.admitted as u64,
                    released: since.released,
                    release_seconds: Percentiles::of(since.waits_s.into_iter().collect()),
                    reclaimed: since.reclaimed,
                    preempted: since.preempted,
                }
            })
            .collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        Sample {
            time: wall_time(now_ms).to_string(),
            quotas,
            queues,
        }
    }

    /// The history for a user of `namespace` (`None`: all of it): the
    /// quotas serving the namespace with their ancestors (as `quotausages`
    /// answers), and those quotas' queues.
    pub(super) fn history_answer(&self, namespace: Option<&str>) -> HistoryAnswer {
        let visible: Option<BTreeSet<String>> = namespace.map(|ns| {
            self.quota_usage(Some(ns))
                .into_iter()
                .map(|q| q.metadata.name)
                .collect()
        });
        let keep = |name: &str| visible.as_ref().is_none_or(|v| v.contains(name));
        let now = self.history_sample(self.now.wall_ms);
        let items = self
            .history
            .samples
            .iter()
            .chain(std::iter::once(&now))
            .map(|s| Sample {
                time: s.time.clone(),
                quotas: s.quotas.iter().filter(|q| keep(&q.name)).cloned().collect(),
                queues: s.queues.iter().filter(|q| keep(&q.name)).cloned().collect(),
            })
            .collect();
        HistoryAnswer::new(
            (INTERVAL_MS / 1000) as u64,
            (INTERVAL_MS / 1000) as u64 * KEPT as u64,
            items,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_bounded_and_counters_start_again_after_each() {
        let mut h = History::default();
        assert!(h.due(0));
        h.released("q", 1500);
        h.sent_back("q", SentBack::Preempted);
        assert_eq!(h.since["q"].released, 1);
        for i in 0..(KEPT as i64 + 5) {
            h.keep(i * INTERVAL_MS, Sample::default());
        }
        assert_eq!(h.samples.len(), KEPT);
        assert!(h.since.is_empty());
        let last = (KEPT as i64 + 4) * INTERVAL_MS;
        assert!(!h.due(last + INTERVAL_MS - 1));
        assert!(h.due(last + INTERVAL_MS));
    }

    #[test]
    fn waits_kept_between_two_samples_are_bounded() {
        let mut h = History::default();
        for i in 0..(WAITS_KEPT + 10) {
            h.released("q", i as i64);
        }
        assert_eq!(h.since["q"].waits_s.len(), WAITS_KEPT);
        assert_eq!(h.since["q"].released, (WAITS_KEPT + 10) as u64);
    }
}
