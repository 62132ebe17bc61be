//! The backlog of writes: lanes by urgency, one write in flight per unit,
//! a unit's next write held until the watch shows its last one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::{Claim, EVENT_BACKLOG, Outcome, Write};
use crate::controller::records::Key;

/// How urgent a write is; lower is served first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    /// Releases, phases that free quota, holds, deletions, Queues.
    Lifecycle = 0,
    /// Adoptions: a new unit joins its queue.
    Adoption = 1,
    /// Positions, reasons, Queue status, and the phases that change
    /// nothing held (Enqueued before a release, Running).
    Visibility = 2,
    /// Events on jobs (best effort, see [`EVENT_BACKLOG`]).
    Events = 3,
}

pub(super) const LANES: usize = 4;

/// Capacity a lane of the backlog keeps however empty it gets.
pub(super) const LANE_KEPT_CAPACITY: usize = 1024;

/// A write waiting for a slot.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) write: Write,
    /// Set for a withdrawable write.
    pub(super) claim: Option<Claim>,
}

/// How long a unit's next write waits at most for the watch to show the
/// unit's previous write (see [`Backlog::settling`]): a watch that lags or
/// restarts delays writes by this much, never stops them.
pub(super) const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often an idle slot looks again while writes wait only for units to
/// settle (a settle that times out sends no notification).
pub(super) const SETTLE_POLL: Duration = Duration::from_millis(50);

/// Writes waiting for a slot, one FIFO per lane. A withdrawn write stays
/// in its lane until a slot pops and skips it.
#[derive(Debug, Default)]
pub(super) struct Backlog {
    pub(super) lanes: [VecDeque<Queued>; LANES],
    /// Units one of whose writes a slot is sending: their next write waits
    /// for it (the order of sends; whether the controller awaits a result
    /// is `UnitState::awaiting`).
    pub(super) sending: HashSet<Key>,
    /// Units written whose watch event of that write the controller has not
    /// seen yet, with the time their next write goes anyway. The API server
    /// checks an update against its watch cache first: a write that follows
    /// the previous one before the cache holds it fails that check and is
    /// done a second time against etcd (an adoption and the release right
    /// after it did so for a fifth of all releases). The scheduler's own watch
    /// is served from that cache, so once it shows the write, the cache
    /// holds it.
    pub(super) settling: HashMap<Key, Instant>,
    /// `settling`'s size after its last purge of timed-out units.
    pub(super) settling_purged_at: usize,
}

impl Backlog {
    /// Queues `write` in its lane; false when it is an Event and too many
    /// are waiting already (it is dropped).
    pub(super) fn push(&mut self, write: Write, claim: Option<Claim>) -> bool {
        let lane = write.lane();
        let queue = &mut self.lanes[lane as usize];
        if lane == Lane::Events && queue.len() >= EVENT_BACKLOG {
            return false;
        }
        queue.push_back(Queued { write, claim });
        true
    }

    /// The most urgent write still wanted whose unit has no write in
    /// flight and has settled (or timed out settling) by `now`. Two writes
    /// to one unit at once (say, its adoption and its release) make the API
    /// server retry one of them after a resourceVersion conflict: a second
    /// full update for nothing.
    pub(super) fn pop(&mut self, now: Instant) -> Option<Write> {
        let Self {
            lanes,
            sending,
            settling,
            ..
        } = self;
        for lane in lanes.iter_mut() {
            let mut at = 0;
            while let Some(queued) = lane.get(at) {
                let busy = |unit: &Key| {
                    sending.contains(unit) || settling.get(unit).is_some_and(|until| now < *until)
                };
                if queued.write.unit().is_some_and(busy) {
                    at += 1;
                    continue;
                }
                let Some(Queued { write, claim }) = lane.remove(at) else {
                    break;
                };
                // A lane keeps its largest size otherwise: the adoptions of
                // 100,000 units found at start take 26 MB (200 bytes a write),
                // held for good once they are done.
                if lane.capacity() > LANE_KEPT_CAPACITY && lane.len() < lane.capacity() / 4 {
                    lane.shrink_to(lane.len() * 2);
                }
                if claim.is_none_or(|c| c.take()) {
                    if let Some(unit) = write.unit() {
                        settling.remove(unit);
                        sending.insert(unit.clone());
                    }
                    return Some(write);
                }
            }
        }
        None
    }

    /// `write` is done: its unit's next write may go once the unit has
    /// settled, when the write changed it (`outcome`), else at once.
    pub(super) fn finish(&mut self, write: &Write, outcome: &Outcome, now: Instant) {
        let Some(unit) = write.unit() else {
            return;
        };
        self.sending.remove(unit);
        if let Outcome::Done(Some(_)) = outcome {
            self.settling.insert(unit.clone(), now + SETTLE_TIMEOUT);
            // Units that never settle (deleted, or their watch restarted)
            // time out; their entries go here, amortized over the inserts.
            if self.settling.len() > 2 * self.settling_purged_at.max(512) {
                self.settling.retain(|_, until| now < *until);
                self.settling_purged_at = self.settling.len();
            }
        }
    }

    /// The controller's watch shows `unit`'s last write: its next write
    /// may go. True when a write may have waited for this.
    pub(super) fn settled(&mut self, unit: &Key) -> bool {
        self.settling.remove(unit).is_some()
    }

    /// Writes wait and some unit is settling: a settle that times out may
    /// let one go without a notification, so an idle slot looks again.
    pub(super) fn only_settling_waits(&self) -> bool {
        self.len() > 0 && !self.settling.is_empty()
    }

    pub(super) fn len(&self) -> i64 {
        self.lanes
            .iter()
            .map(|l| i64::try_from(l.len()).unwrap_or(i64::MAX))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::{Backlog, LANE_KEPT_CAPACITY, Lane, SETTLE_TIMEOUT};
    use crate::controller::records::Key;
    use crate::controller::writes::{Claim, EVENT_BACKLOG, JobRef, Outcome, Write, WriteLatency};
    use koord_queue_api::queue_unit::QueueUnitPhase;
    use std::time::{Duration, Instant};

    fn job() -> JobRef {
        JobRef {
            group: None,
            adapter: koord_queue_api::jobs::all()[0],
            namespace: "ns".into(),
            name: "j".into(),
            uid: "u".into(),
        }
    }

    pub(super) fn event(note: &str) -> Write {
        Write::Event {
            regarding: job().object_ref(),
            warning: false,
            reason: "Queued",
            note: note.into(),
        }
    }

    #[test]
    fn a_units_next_write_waits_for_the_one_sending() {
        let mut backlog = Backlog::default();
        let adopt = Write::Adopt {
            unit: "ns/u".into(),
            job: job(),
        };
        let phase = Write::Phase {
            unit: "ns/u".into(),
            phase: QueueUnitPhase::Succeed,
            admissions: None,
            message: String::new(),
        };
        let other = Write::Adopt {
            unit: "ns/other".into(),
            job: job(),
        };
        for w in [phase, adopt, other] {
            assert!(backlog.push(w, None));
        }
        // The phase (more urgent lane) goes first; the adoption of the same
        // unit waits, the other unit's does not.
        let first = backlog.pop(Instant::now()).map(|w| w.operation());
        assert_eq!(first, Some("phase"));
        let second = backlog.pop(Instant::now());
        assert_eq!(
            second.as_ref().and_then(|w| w.unit()).map(|u| &**u),
            Some("ns/other")
        );
        assert!(
            backlog.pop(Instant::now()).is_none(),
            "ns/u has a write in flight"
        );
        backlog.finish(
            &Write::DeleteUnit {
                unit: "ns/u".into(),
            },
            &Outcome::Done(None),
            Instant::now(),
        );
        assert_eq!(
            backlog.pop(Instant::now()).map(|w| w.operation()),
            Some("adopt")
        );
    }

    #[test]
    fn a_units_next_write_waits_until_the_watch_shows_its_last_one() {
        let mut backlog = Backlog::default();
        let unit: Key = "ns/u".into();
        let phase = || Write::Phase {
            unit: unit.clone(),
            phase: QueueUnitPhase::Succeed,
            admissions: None,
            message: String::new(),
        };
        let t0 = Instant::now();
        assert!(backlog.push(phase(), None));
        assert!(backlog.push(phase(), None));
        let first = backlog.pop(t0).expect("nothing holds the unit yet");
        backlog.finish(&first, &Outcome::Done(Some(7)), t0);
        assert!(backlog.pop(t0).is_none(), "written, not yet seen");
        assert!(backlog.only_settling_waits());
        // Seen by the watch: the next write goes.
        assert!(backlog.settled(&unit));
        let second = backlog.pop(t0).expect("settled");
        // A failed write changed nothing: nothing to wait for.
        assert!(backlog.push(phase(), None));
        backlog.finish(&second, &Outcome::Failed("conflict".into()), t0);
        let third = backlog
            .pop(t0)
            .expect("the failed write left nothing to see");
        // A watch that never shows the write delays the next one, no more.
        assert!(backlog.push(phase(), None));
        backlog.finish(&third, &Outcome::Done(Some(9)), t0);
        assert!(backlog.pop(t0 + SETTLE_TIMEOUT / 2).is_none());
        assert!(backlog.pop(t0 + SETTLE_TIMEOUT).is_some());
        assert!(!backlog.settled(&unit), "taken by the write that went");
    }

    #[test]
    fn the_most_urgent_lane_is_served_first_and_each_lane_in_order() {
        let mut backlog = Backlog::default();
        let writes = [
            event("e1"),
            Write::Visibility {
                unit: "ns/v".into(),
                reason: "QuotaExceeded",
                message: String::new(),
                estimated_start: None,
            },
            Write::Adopt {
                unit: "ns/a".into(),
                job: job(),
            },
            Write::DeleteUnit {
                unit: "ns/d1".into(),
            },
            event("e2"),
            Write::DeleteUnit {
                unit: "ns/d2".into(),
            },
        ];
        for w in writes {
            assert!(backlog.push(w, None));
        }
        assert_eq!(backlog.len(), 6);
        let order: Vec<String> = std::iter::from_fn(|| backlog.pop(Instant::now()))
            .map(|w| match w {
                Write::Event { note, .. } => note,
                w => w.unit().map(ToString::to_string).unwrap_or_default(),
            })
            .collect();
        assert_eq!(order, ["ns/d1", "ns/d2", "ns/a", "ns/v", "e1", "e2"]);
        assert_eq!(backlog.len(), 0);
    }

    #[test]
    fn events_beyond_the_backlog_are_dropped_other_writes_never() {
        let mut backlog = Backlog::default();
        for i in 0..EVENT_BACKLOG {
            assert!(backlog.push(event(&i.to_string()), None));
        }
        assert!(!backlog.push(event("one too many"), None));
        for i in 0..3 * EVENT_BACKLOG {
            assert!(backlog.push(
                Write::DeleteUnit {
                    unit: format!("ns/{i}").into(),
                },
                None
            ));
        }
        assert_eq!(backlog.len(), 4 * EVENT_BACKLOG as i64);
    }

    #[test]
    fn a_drained_lane_gives_its_memory_back() {
        let mut backlog = Backlog::default();
        for i in 0..100_000 {
            backlog.push(
                Write::DeleteUnit {
                    unit: format!("ns/{i}").into(),
                },
                None,
            );
        }
        let lane = Lane::Lifecycle as usize;
        assert!(backlog.lanes[lane].capacity() >= 100_000);
        let mut popped = 0;
        while backlog.pop(Instant::now()).is_some() {
            popped += 1;
        }
        assert_eq!(popped, 100_000);
        assert!(backlog.lanes[lane].capacity() <= 2 * LANE_KEPT_CAPACITY);
    }

    #[test]
    fn write_latency_follows_recent_writes() {
        let latency = WriteLatency::default();
        for _ in 0..40 {
            latency.observe(Duration::from_millis(300));
        }
        assert!(
            (250..=300).contains(&latency.millis()),
            "{}",
            latency.millis()
        );
        for _ in 0..40 {
            latency.observe(Duration::from_millis(4));
        }
        assert!(latency.millis() <= 10, "{}", latency.millis());
    }

    #[test]
    fn a_withdrawn_write_is_skipped_and_a_taken_one_cannot_be_withdrawn() {
        let mut backlog = Backlog::default();
        let enqueue = |unit: &str| Write::Enqueue {
            unit: unit.into(),
            job: job(),
            message: String::new(),
            reason: None,
        };
        let withdrawn = Claim::default();
        let kept = Claim::default();
        backlog.push(enqueue("ns/withdrawn"), Some(withdrawn.clone()));
        backlog.push(enqueue("ns/kept"), Some(kept.clone()));
        backlog.push(enqueue("ns/plain"), None);
        assert!(
            withdrawn.take(),
            "still waiting: the controller withdraws it"
        );
        let order: Vec<String> = std::iter::from_fn(|| backlog.pop(Instant::now()))
            .map(|w| w.unit().map(ToString::to_string).unwrap_or_default())
            .collect();
        assert_eq!(order, ["ns/kept", "ns/plain"]);
        assert!(!kept.take(), "a slot took it: too late to withdraw");
    }
}
