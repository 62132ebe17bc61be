//! Reads the controller publishes: positions, counts, reasons, quota figures
//! and min warnings.

use std::sync::Arc;

use koord_queue_model::{QueuePolicy, Resources};

use super::engine::Core;
use super::model::QueueCounts;
use super::quota_tree::{MinWarning, QuotaFigures};
use super::reason::WaitReason;
use super::units::UnitState;

/// A waiting unit at its place in its queue.
#[derive(Clone, Copy, Debug)]
pub struct WaitingUnit<'a> {
    /// 1-based place in the queue.
    pub position: usize,
    /// `namespace/name`.
    pub key: &'a str,
    /// Priority of the job.
    pub priority: i32,
    /// Why it waits (`None` until a cycle has looked at it).
    pub reason: Option<&'a WaitReason>,
}

/// Where a unit stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitStatus<'a> {
    /// In line.
    Waiting {
        /// Its queue, if it has one.
        queue: Option<&'a str>,
        /// Why it waits (`None` until a cycle has looked at it).
        reason: Option<&'a WaitReason>,
    },
    /// Holding quota.
    Holding {
        /// Its queue, if it has one.
        queue: Option<&'a str>,
        /// What it holds.
        resources: Resources,
        /// Whether its pods were reported as created.
        started: bool,
    },
}

/// A queue as the core knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSummary<'a> {
    /// Name.
    pub name: &'a str,
    /// Serving priority.
    pub priority: i32,
    /// Policy.
    pub policy: QueuePolicy,
    /// Whether reclaim is enabled for it.
    pub reclaim: bool,
    /// Waiting and admitted units.
    pub counts: QueueCounts,
}

impl Core {
    /// The waiting units of `queue` in serving order, with their 1-based
    /// positions (empty if the queue is unknown).
    pub fn queue_waiting<'a>(&'a self, queue: &str) -> impl Iterator<Item = WaitingUnit<'a>> + 'a {
        let entry = self.queues.id(queue).and_then(|q| self.queues.get(q));
        entry
            .into_iter()
            .flat_map(|e| e.waiting.iter())
            .enumerate()
            .filter_map(move |(i, w)| {
                let u = self.units.get(w.id)?;
                Some(WaitingUnit {
                    position: i + 1,
                    key: &w.key,
                    priority: u.priority,
                    reason: u.reason(),
                })
            })
    }

    /// Pending and admitted counts of `queue` (`None` if no unit or
    /// definition ever named it).
    pub fn queue_counts(&self, queue: &str) -> Option<QueueCounts> {
        let e = self.queues.get(self.queues.id(queue)?)?;
        Some(QueueCounts {
            pending: e.waiting.len(),
            admitted: e.admitted,
        })
    }

    /// The defined queues in serving order.
    pub fn queues(&self) -> impl Iterator<Item = QueueSummary<'_>> {
        self.queues.order.iter().filter_map(|(_, _, q)| {
            let e = self.queues.get(*q)?;
            let d = e.def.as_ref()?;
            Some(QueueSummary {
                name: &e.name,
                priority: d.priority,
                policy: d.policy,
                reclaim: d.reclaim,
                counts: QueueCounts {
                    pending: e.waiting.len(),
                    admitted: e.admitted,
                },
            })
        })
    }

    /// Where unit `key` stands (`None` if unknown).
    pub fn unit_status(&self, key: &str) -> Option<UnitStatus<'_>> {
        let u = self.units.get(self.units.lookup(key)?)?;
        let queue = u.queue.and_then(|q| self.queues.get(q)).map(|e| &*e.name);
        Some(match &u.state {
            UnitState::Waiting { reason, .. } => UnitStatus::Waiting {
                queue,
                reason: reason.as_ref(),
            },
            UnitState::Holding {
                amount, started, ..
            } => UnitStatus::Holding {
                queue,
                resources: amount.to_resources(&self.state.resources),
                started: *started,
            },
        })
    }

    /// Why waiting unit `key` waits.
    pub fn reason(&self, key: &str) -> Option<&WaitReason> {
        self.units.get(self.units.lookup(key)?)?.reason()
    }

    /// Number of units known (waiting or holding).
    pub fn unit_count(&self) -> usize {
        self.units.len()
    }

    /// Keys of the units holding quota, with what they hold.
    pub fn holding_units(&self) -> impl Iterator<Item = (&Arc<str>, Resources)> {
        self.units.iter().filter_map(|u| match &u.state {
            UnitState::Holding { amount, .. } => {
                Some((&u.key, amount.to_resources(&self.state.resources)))
            }
            UnitState::Waiting { .. } => None,
        })
    }

    /// Quotas whose children's mins add up to more than their own min (the
    /// children's mins are scaled down); the controller surfaces each as a
    /// condition on the quota's Queue.
    pub fn min_warnings(&self) -> &[MinWarning] {
        self.state.quotas.warnings()
    }

    /// Min, effective min, max and usage of quota `name` (`None` if not defined).
    pub fn quota_figures(&self, name: &str) -> Option<QuotaFigures> {
        let q = self.state.quotas.id(name)?;
        self.state.quotas.figures(q, &self.state.resources)
    }

    /// Usage of the whole cluster by units holding quota.
    pub fn cluster_used(&self) -> Resources {
        (0..self.state.resources.len())
            .map(<super::ids::ResId as super::ids::Id>::from_index)
            .map(|k| {
                (
                    self.state.resources.name(k).to_string(),
                    self.state.quotas.root_used(k),
                )
            })
            .filter(|(_, v)| *v != 0)
            .collect()
    }
}
