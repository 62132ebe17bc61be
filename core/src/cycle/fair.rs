//! The fair round of a cycle (architecture §4.3): the queues of quotas under a
//! fair-sharing parent are served one borrowing release at a time, always the
//! one whose quota has the lowest weighted share (`quota_tree/fair.rs`), so
//! that borrowed capacity is split by weight rather than by queue order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::CycleOutput;
use crate::engine::Core;
use crate::ids::{QueueId, QuotaId};
use crate::queues::QueueEntry;

impl Core {
    /// Serves the queues of fair-sharing quotas (see `quota_tree/fair.rs`):
    /// always the one whose quota has the lowest weighted share under its
    /// fair-sharing parent, one borrowing release at a time, until none
    /// releases more. Ties go by the queues' order.
    pub(super) fn fair_round(
        &mut self,
        queues: Vec<((QuotaId, QuotaId), usize, QueueId)>,
        out: &mut CycleOutput,
    ) {
        let share = |core: &Self, (parent, child): (QuotaId, QuotaId)| {
            let none = Default::default();
            core.state
                .quotas
                .weighted_share(parent, child, &none, &none)
        };
        let mut heap: BinaryHeap<_> = queues
            .into_iter()
            .map(|(scope, position, q)| Reverse((share(self, scope), position, q, scope)))
            .collect();
        while let Some(Reverse((_, position, q, scope))) = heap.pop() {
            if !self.queues.get(q).is_some_and(QueueEntry::needs_visit) {
                continue;
            }
            let borrowed = self.evaluate_queue(q, out, true);
            self.refresh_hold(q);
            self.requeue_withdrawn();
            if borrowed {
                heap.push(Reverse((share(self, scope), position, q, scope)));
            }
        }
    }

    /// The fair-sharing scope of queue `q`: the quota it serves (the one of
    /// its name) has a fair-sharing ancestor.
    pub(super) fn fair_scope_of(&self, q: QueueId) -> Option<(QuotaId, QuotaId)> {
        let entry = self.queues.get(q)?;
        let quota = self.state.quotas.id(&entry.name)?;
        self.state.quotas.fair_scope(quota)
    }
}
