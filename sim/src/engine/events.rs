//! The simulation's calendar: events by time, and among events of one time
//! by the order they were scheduled — so that a run is the same every time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Job `0` is submitted: its unit joins its queue.
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

/// Events by `(time, scheduling order)`.
#[derive(Debug, Default)]
pub(crate) struct Calendar {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
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

    /// The next event, if it is due by `until`.
    pub fn pop_until(&mut self, until: Option<i64>) -> Option<(i64, Kind)> {
        let next = self.heap.peek()?;
        if until.is_some_and(|u| next.0.at > u) {
            return None;
        }
        self.heap.pop().map(|Reverse(e)| (e.at, e.kind))
    }
}

#[cfg(test)]
mod tests {
    use super::{Calendar, Kind};

    #[test]
    fn by_time_then_by_scheduling_order() {
        let mut c = Calendar::default();
        c.push(5, Kind::Cycle);
        c.push(1, Kind::Arrive(2));
        c.push(1, Kind::Arrive(1));
        assert_eq!(c.pop_until(None), Some((1, Kind::Arrive(2))));
        assert_eq!(c.pop_until(Some(4)), Some((1, Kind::Arrive(1))));
        assert_eq!(c.pop_until(Some(4)), None);
        assert_eq!(c.pop_until(None), Some((5, Kind::Cycle)));
    }
}
