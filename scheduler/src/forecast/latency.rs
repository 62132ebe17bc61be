//! What the API adds to each step of a job: fixed medians, a spread around
//! them, and optionally a profile of how they moved over a run.
//!
//! A fixed median stands for a distribution that is not constant: under
//! load the API server's queue and the scheduler's write backlog grow, and
//! every release holds its quota longer while they do. Jobs released then
//! hold their room longer than the median says, and the queue behind them
//! drains slower. A [`LatencyProfile`], measured by the benchmark over its
//! own run, gives each step the latency of the moment it began instead.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What the API adds to each step (ms). The real system's values are
/// measured by the benchmark (issue 40's fidelity run); zero here.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    /// Submission → the unit waits in its queue (webhook, unit create,
    /// adoption).
    pub admit_ms: i64,
    /// Release → the job's pods run (release write, pod start).
    pub start_ms: i64,
    /// The job's end → its quota is free (pods gone, watch event).
    pub free_ms: i64,
    /// A reclaim decision → the victim's quota is free (its job held).
    pub evict_ms: i64,
    /// A backoff's end → the unit waits again (its Enqueued write).
    pub requeue_ms: i64,
    /// The API's spread around these: each job's admission and the start
    /// of each of its holds move by a draw in `[-spread_ms/2, spread_ms/2)`
    /// (never before the submission or the release), from the seed and the
    /// job; the latencies above stay the medians. Without it the jobs of a
    /// periodic trace arrive and end in the same millisecond and free their
    /// quota together, which a cluster never does: a unit that needs
    /// several cores finds them free at once, where in the cluster single
    /// cores free one by one and smaller units behind it take each
    /// (docs/simulate.md "Latency and its spread").
    pub spread_ms: i64,
    /// How admission, start and free latencies moved over time; where it
    /// has a figure for the moment a step begins, that figure replaces the
    /// fixed median above (the spread applies around it the same way).
    pub profile: Option<Arc<LatencyProfile>>,
    /// A job whose trace says when its unit was first seen waiting arrives
    /// then (never before its submission), instead of `admit_ms` after its
    /// submission: the real system's admissions replayed. Under load they
    /// ranged from 3 to 36 s within one run, which no median stands for.
    pub admit_observed: bool,
}

impl Latency {
    /// Admission of a job submitted at `at`.
    pub fn admit_at(&self, at: i64) -> i64 {
        self.profiled(at, |b| b.admit_ms).unwrap_or(self.admit_ms)
    }

    /// Start of a job released at `at`.
    pub fn start_at(&self, at: i64) -> i64 {
        self.profiled(at, |b| b.start_ms).unwrap_or(self.start_ms)
    }

    /// Free of a job whose pods end at `at`.
    pub fn free_at(&self, at: i64) -> i64 {
        self.profiled(at, |b| b.free_ms).unwrap_or(self.free_ms)
    }

    fn profiled(&self, at: i64, field: impl Fn(&LatencyBucket) -> Option<i64>) -> Option<i64> {
        self.profile.as_ref()?.bucket(at).and_then(field)
    }
}

/// The API's latencies as they moved over a run: consecutive buckets of
/// `bucket_ms` from `start_ms` (on the trace's clock), each holding the
/// medians of the steps that began in it. A step in a bucket without a
/// figure for it (too few samples), before the first bucket or after the
/// last, takes the fixed median of [`Latency`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyProfile {
    /// Where the first bucket starts (ms, the trace's clock).
    pub start_ms: i64,
    /// Width of every bucket (ms, > 0).
    pub bucket_ms: i64,
    /// The buckets, in time order.
    pub buckets: Vec<LatencyBucket>,
}

/// One bucket of a [`LatencyProfile`] (ms; `None`: no figure).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyBucket {
    /// Admission of the jobs submitted in the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admit_ms: Option<i64>,
    /// Start of the jobs released in the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<i64>,
    /// Free of the jobs that ended in the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_ms: Option<i64>,
}

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProfileError {
    #[error("the latency profile's bucketMs must be positive, not {0}")]
    BucketWidth(i64),
    #[error("the latency profile's bucket {index} has a negative latency ({value} ms)")]
    Negative { index: usize, value: i64 },
}

impl LatencyProfile {
    /// Checks what the simulation relies on: a positive width, no negative
    /// latency.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.bucket_ms <= 0 {
            return Err(ProfileError::BucketWidth(self.bucket_ms));
        }
        for (index, b) in self.buckets.iter().enumerate() {
            for value in [b.admit_ms, b.start_ms, b.free_ms].into_iter().flatten() {
                if value < 0 {
                    return Err(ProfileError::Negative { index, value });
                }
            }
        }
        Ok(())
    }

    /// The bucket holding `at`, if any.
    pub fn bucket(&self, at: i64) -> Option<&LatencyBucket> {
        if self.bucket_ms <= 0 || at < self.start_ms {
            return None;
        }
        let index = usize::try_from((at - self.start_ms) / self.bucket_ms).ok()?;
        self.buckets.get(index)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::{Latency, LatencyBucket, LatencyProfile, ProfileError};

    fn profile() -> LatencyProfile {
        LatencyProfile {
            start_ms: 1_000,
            bucket_ms: 10_000,
            buckets: vec![
                LatencyBucket {
                    admit_ms: Some(100),
                    start_ms: Some(5_000),
                    free_ms: None,
                },
                LatencyBucket::default(),
                LatencyBucket {
                    admit_ms: None,
                    start_ms: Some(700),
                    free_ms: Some(30),
                },
            ],
        }
    }

    #[test]
    fn a_step_takes_its_buckets_figure_else_the_median() {
        let l = Latency {
            admit_ms: 1,
            start_ms: 2,
            free_ms: 3,
            profile: Some(Arc::new(profile())),
            ..Latency::default()
        };
        // Before the profile, in a bucket without the figure, after it.
        assert_eq!(l.start_at(999), 2);
        assert_eq!(l.start_at(1_000), 5_000);
        assert_eq!(l.start_at(10_999), 5_000);
        assert_eq!(l.start_at(11_000), 2);
        assert_eq!(l.start_at(21_000), 700);
        assert_eq!(l.start_at(31_000), 2);
        assert_eq!((l.admit_at(5_000), l.admit_at(25_000)), (100, 1));
        assert_eq!((l.free_at(5_000), l.free_at(25_000)), (3, 30));
        let fixed = Latency { profile: None, ..l };
        assert_eq!((fixed.admit_at(5_000), fixed.start_at(5_000)), (1, 2));
    }

    #[test]
    fn profiles_are_read_from_json_and_checked() {
        let p: LatencyProfile = serde_json::from_str(
            r#"{"startMs": 1000, "bucketMs": 10000,
                "buckets": [{"admitMs": 100, "startMs": 5000}, {}, {"startMs": 700, "freeMs": 30}]}"#,
        )
        .unwrap();
        assert_eq!(p, profile());
        assert_eq!(p.validate(), Ok(()));
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<LatencyProfile>(&text).unwrap(), p);
        assert!(
            serde_json::from_str::<LatencyProfile>(
                r#"{"startMs":0,"bucketMs":1,"buckets":[{"start":1}]}"#
            )
            .is_err()
        );
        let flat = LatencyProfile {
            bucket_ms: 0,
            ..profile()
        };
        assert_eq!(flat.validate(), Err(ProfileError::BucketWidth(0)));
        let mut negative = profile();
        negative.buckets[2].free_ms = Some(-5);
        assert_eq!(
            negative.validate(),
            Err(ProfileError::Negative {
                index: 2,
                value: -5
            })
        );
    }
}
