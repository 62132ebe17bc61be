//! When the next estimate runs. An estimate walks every waiting unit and
//! simulates until each is released, so its cost grows with the backlog:
//! it is paced so that over time it takes at most a share of one core
//! (after an estimate that took `t`, the next waits `t × (1 − s) / s`), at
//! most one at a time, and only when something it depends on changed —
//! an input, a write result or a cycle — or a running unit outlived the
//! end the last estimate gave it.

use std::time::{Duration, Instant};

/// The pacing of estimates.
#[derive(Clone, Debug, Default)]
pub struct Pacing {
    /// An estimate is running.
    in_flight: bool,
    /// Not before then.
    next_at: Option<Instant>,
    /// The generation of what users see when the last estimate was taken
    /// (see `Visibility::generation`).
    taken_at_generation: Option<u64>,
    /// The earliest end (ms since the epoch) the last estimate gave a
    /// running unit: past it, that estimate is out of date.
    valid_until_ms: Option<i64>,
}

impl Pacing {
    /// Whether an estimate should start at `now` (`wall_ms` on the wall
    /// clock), the state being at `generation`.
    pub fn due(&self, now: Instant, wall_ms: i64, generation: u64) -> bool {
        !self.in_flight
            && self.next_at.is_none_or(|at| now >= at)
            && (self.taken_at_generation != Some(generation)
                || self.valid_until_ms.is_some_and(|until| wall_ms >= until))
    }

    /// An estimate starts from the state at `generation`.
    pub fn started(&mut self, generation: u64) {
        self.in_flight = true;
        self.taken_at_generation = Some(generation);
    }

    /// The estimate ended at `now` after `took` (its snapshot included); it
    /// holds until `valid_until_ms`. The next waits for its share of one
    /// core `share` and at least `min_interval`.
    pub fn finished(
        &mut self,
        now: Instant,
        took: Duration,
        share: f64,
        min_interval: Duration,
        valid_until_ms: Option<i64>,
    ) {
        self.in_flight = false;
        let share = share.clamp(0.01, 1.0);
        let rest = took.mul_f64((1.0 - share) / share);
        self.next_at = Some(now + rest.max(min_interval));
        self.valid_until_ms = valid_until_ms;
    }

    /// The estimate failed or was lost: the next may run after `min_interval`.
    pub fn failed(&mut self, now: Instant, min_interval: Duration) {
        self.in_flight = false;
        self.taken_at_generation = None;
        self.next_at = Some(now + min_interval);
    }

    /// A change the controller makes itself (publishing an estimate) moved
    /// the generation to `generation`: not a reason for another estimate.
    pub fn own_change(&mut self, before: u64, generation: u64) {
        if self.taken_at_generation == Some(before) {
            self.taken_at_generation = Some(generation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_its_share_of_a_core_one_at_a_time_and_only_on_change() {
        let t0 = Instant::now();
        let mut p = Pacing::default();
        assert!(p.due(t0, 0, 1), "the first");
        p.started(1);
        assert!(!p.due(t0, 0, 2), "one at a time");
        // 2 s at 10 %: the next after 18 s.
        p.finished(
            t0,
            Duration::from_secs(2),
            0.1,
            Duration::from_secs(10),
            None,
        );
        assert!(!p.due(t0 + Duration::from_secs(17), 0, 2));
        assert!(p.due(t0 + Duration::from_secs(18), 0, 2));
        assert!(
            !p.due(t0 + Duration::from_secs(60), 0, 1),
            "nothing changed since"
        );
        // A cheap one waits the least interval.
        p.started(2);
        p.finished(
            t0,
            Duration::from_millis(1),
            0.1,
            Duration::from_secs(10),
            Some(5_000),
        );
        assert!(!p.due(t0 + Duration::from_secs(9), 9_000, 2));
        assert!(!p.due(t0 + Duration::from_secs(10), 4_999, 2));
        assert!(
            p.due(t0 + Duration::from_secs(10), 5_000, 2),
            "a running unit outlived its estimated end"
        );
        p.own_change(2, 3);
        assert!(
            !p.due(t0 + Duration::from_secs(10), 0, 3),
            "its own publication"
        );
        p.started(3);
        p.failed(t0, Duration::from_secs(10));
        assert!(
            p.due(t0 + Duration::from_secs(10), 0, 3),
            "retried after a failure"
        );
    }
}
