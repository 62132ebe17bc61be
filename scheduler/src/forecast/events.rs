//! The simulation's calendar: events by time, and among events of one time
//! by the order they were scheduled — so that a run is the same every time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Job `0` is submitted: its unit joins its queue (handed out from the
    /// calendar's list of submissions, never pushed).
    Arrive(u32),
    /// Job `0`'s pods are done and its quota is free, if it still runs the
    /// release of generation `1`.
    Finish(u32, u32),
    /// Reclaim victim `0` (generation `1`) is held again: its quota is free.
    Evict(u32, u32),
    /// Victim `0`'s backoff is over: it waits in its queue again.
    Requeue(u32),
    /// The batched scheduling cycle.
    Cycle,
    /// A housekeeping tick that may start a cycle for a due preemption or
    /// reserving head.
    Tick,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: i64,
    seq: u64,
    kind: Kind,
}

/// Events by `(time, scheduling order)`. Submissions, known in advance
/// and most of the events of a trace, are kept apart in a list sorted once
/// (a million-job trace would make the heap a million entries deep); at
/// one time they come before the other events.
#[derive(Debug, Default)]
pub(crate) struct Calendar {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    arrivals: Vec<(i64, u32)>,
    /// The next arrival to hand out.
    next: usize,
    /// Whether `arrivals[next..]` is sorted.
    sorted: bool,
}

impl Calendar {
    /// Schedules `kind` at `at`.
    pub fn push(&mut self, at: i64, kind: Kind) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq: self.seq,
            kind,
        }));
    }

    /// Schedules job `job`'s submission at `at`.
    pub fn push_arrival(&mut self, at: i64, job: u32) {
        if self.arrivals.len() > self.next
            && self.arrivals.last().is_some_and(|last| *last > (at, job))
        {
            self.sorted = false;
        }
        if self.arrivals.len() == self.next {
            // Everything handed out: start afresh.
            self.arrivals.clear();
            self.next = 0;
            self.sorted = true;
        }
        self.arrivals.push((at, job));
    }

    /// The next event, if it is due by `until`.
    pub fn pop_until(&mut self, until: Option<i64>) -> Option<(i64, Kind)> {
        if !self.sorted {
            self.arrivals[self.next..].sort_unstable();
            self.sorted = true;
        }
        let arrival = self.arrivals.get(self.next).copied();
        let other = self.heap.peek().map(|Reverse(e)| e.at);
        match (arrival, other) {
            (Some((at, job)), o) if o.is_none_or(|o| at <= o) => {
                if until.is_some_and(|u| at > u) {
                    return None;
                }
                self.next += 1;
                Some((at, Kind::Arrive(job)))
            }
            (_, Some(at)) => {
                if until.is_some_and(|u| at > u) {
                    return None;
                }
                self.heap.pop().map(|Reverse(e)| (e.at, e.kind))
            }
            (_, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Calendar, Kind};

    #[test]
    fn by_time_then_by_scheduling_order() {
        let mut c = Calendar::default();
        c.push(5, Kind::Cycle);
        c.push(1, Kind::Tick);
        c.push(1, Kind::Requeue(1));
        c.push_arrival(5, 3);
        c.push_arrival(1, 2);
        assert_eq!(c.pop_until(None), Some((1, Kind::Arrive(2))));
        assert_eq!(c.pop_until(Some(4)), Some((1, Kind::Tick)));
        assert_eq!(c.pop_until(Some(4)), Some((1, Kind::Requeue(1))));
        assert_eq!(c.pop_until(Some(4)), None);
        // Submissions first among events of one time.
        assert_eq!(c.pop_until(None), Some((5, Kind::Arrive(3))));
        assert_eq!(c.pop_until(None), Some((5, Kind::Cycle)));
        assert_eq!(c.pop_until(None), None);
        c.push_arrival(9, 4);
        assert_eq!(c.pop_until(None), Some((9, Kind::Arrive(4))));
    }
}
