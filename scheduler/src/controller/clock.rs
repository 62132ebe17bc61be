//! The controller's time, read in one place. The state machine
//! (`state/`) never reads a clock: the run loop reads [`Now`] once per input
//! and hands it in, so a decision depends only on its inputs, and a test or
//! a simulator drives time as it drives watch changes (`state/scenarios`
//! `advance`). `tests/state_clock.rs` keeps the clock reads out of `state/`.

use std::time::Instant;

use k8s_openapi::jiff::Timestamp;

/// The time an input is handled at: the monotonic instant (intervals,
/// deadlines of this process) and the wall clock (what is compared with the
/// API's timestamps and written to it), read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// For intervals measured by this process.
    pub at: Instant,
    /// Milliseconds since the Unix epoch.
    pub wall_ms: i64,
}

impl Now {
    /// The time now, from the system's clocks. Only the run loop calls it.
    pub fn read() -> Self {
        Self {
            at: Instant::now(),
            wall_ms: Timestamp::now().as_millisecond(),
        }
    }

    /// The wall clock as a timestamp.
    pub fn wall(&self) -> Timestamp {
        wall_time(self.wall_ms)
    }

    /// This time moved on by `by` (both clocks): a test's clock.
    #[cfg(test)]
    #[must_use]
    pub fn advanced(self, by: std::time::Duration) -> Self {
        Self {
            at: self.at + by,
            wall_ms: self
                .wall_ms
                .saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

/// The timestamp of `wall_ms` milliseconds since the Unix epoch. Every such
/// figure of the controller comes from a [`Timestamp`], so it is in range; the
/// epoch stands in for one that is not.
pub fn wall_time(wall_ms: i64) -> Timestamp {
    Timestamp::from_millisecond(wall_ms).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Measures how long a piece of work took, for a metric (the cycle's
/// duration) or the pace of background work (start-time estimates). No
/// decision about a unit depends on it, so it may read the clock where the
/// state machine may not.
#[derive(Debug)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts measuring.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Seconds since the start.
    pub fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }

    /// Time since the start.
    pub fn elapsed(&self) -> std::time::Duration {
        self.0.elapsed()
    }
}
