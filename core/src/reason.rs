//! Why a unit waits: a structured value the controller writes (as text) into
//! the unit's `status.message`, and the core uses to decide when the unit is
//! worth looking at again.
//!
//! Numbers are those seen when the unit was last evaluated. A unit that is
//! still blocked by the same limit keeps its reason unchanged, so status
//! writes happen when the situation changes, not whenever usage moves.

use std::fmt;
use std::sync::Arc;

use super::amounts::format_amount;
use super::ids::{NsId, QuotaId, ResId};

/// A limit that can stop a unit, identified so that the core can tell when
/// it relaxes (usage freed, limit raised) and which waiting units to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Blocker {
    /// The max of a quota for one resource.
    QuotaMax(QuotaId, ResId),
    /// The root capacity for one resource.
    Capacity(ResId),
    /// A namespace's ResourceQuota for one resource.
    Namespace(NsId, ResId),
    /// Borrowing of one resource under a quota (the whole cluster when
    /// `None`) while guaranteed units there wait for reclaimed resources.
    /// Its room is 0 while they wait and unlimited afterwards.
    Reclaim(Option<QuotaId>, ResId),
}

/// A unit does not fit under a limit: `used + requested > limit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The limit concerned.
    pub blocker: Blocker,
    /// Name of the quota or namespace (empty for the cluster capacity).
    pub scope: Arc<str>,
    /// The resource.
    pub resource: Arc<str>,
    /// In use (including reservations) when checked.
    pub used: i64,
    /// Requested by the unit.
    pub requested: i64,
    /// The limit.
    pub limit: i64,
}

impl Shortfall {
    /// How much is missing: `used + requested − limit`.
    pub fn missing(&self) -> i64 {
        self.used
            .saturating_add(self.requested)
            .saturating_sub(self.limit)
    }

    /// How much more the unit asks for than the limit holds at all:
    /// `requested − limit` when positive, else 0. Above 0 the unit cannot
    /// fit even with nothing else running, until the limit is raised.
    pub fn beyond_limit(&self) -> i64 {
        self.requested.saturating_sub(self.limit).max(0)
    }

    /// Whether the limit is a quota's max or the capacity and the unit asks
    /// for more than it holds at all: it can never fit under it as it is,
    /// whatever ends (a head so stopped neither reserves nor holds anyone
    /// back, `reserve/`), until the limit is raised.
    pub fn never_fits(&self) -> bool {
        matches!(self.blocker, Blocker::QuotaMax(..) | Blocker::Capacity(..))
            && self.beyond_limit() > 0
    }

    /// For a unit that can never fit: by how much, and what must change.
    fn write_never_fits(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &*self.resource;
        let beyond = format_amount(r, self.beyond_limit());
        match self.blocker {
            Blocker::Capacity(_) => write!(
                f,
                " ({beyond} more than the cluster's capacity even with nothing else running: it can never fit until the capacity grows)"
            ),
            _ => write!(
                f,
                " ({beyond} more than the max of quota {} even with nothing else running: it can never fit until that max is raised)",
                self.scope
            ),
        }
    }

    fn write_figures(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &*self.resource;
        write!(
            f,
            "{r} {}/{} used, needs {}",
            format_amount(r, self.used),
            format_amount(r, self.limit),
            format_amount(r, self.requested)
        )
    }
}

/// Why a unit is not released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// A quota on the unit's path would exceed its max.
    QuotaMax {
        /// The quota, resource and figures.
        shortfall: Shortfall,
        /// Whether the unit stays within its leaf's (effective) min.
        guaranteed: bool,
        /// How much of the resource the other quotas under the same parent use
        /// beyond their min: what a reclaim could take back for a guaranteed unit.
        borrowed_by_others: i64,
    },
    /// A guaranteed unit does not fit only because other quotas borrow
    /// beyond their min; units of theirs are being reclaimed, and it is
    /// released once they have freed what they hold.
    Reclaiming {
        /// The limit the unit does not fit under now, with its figures
        /// (they still count the units being reclaimed).
        shortfall: Shortfall,
        /// Units reclaimed for it that have not freed their resources yet.
        /// 0 when units reclaimed earlier (for others) free enough for it too.
        victims: usize,
    },
    /// A unit stopped by its own quota's max preempts lower-priority units
    /// of that quota (its queue's preemption policy) and is released once
    /// they have freed what they hold.
    Preempting {
        /// The limit, with its figures (counting the victims still).
        shortfall: Shortfall,
        /// Victims that have not freed their resources yet.
        victims: usize,
    },
    /// A guaranteed unit does not fit because other quotas borrow beyond
    /// their min, but its queue does not reclaim.
    ReclaimOff {
        /// The limit the unit does not fit under, with its figures.
        shortfall: Shortfall,
        /// How much of the resource other quotas use beyond their min.
        borrowed_by_others: i64,
        /// The unit's queue.
        queue: Arc<str>,
    },
    /// The unit would fit, but it borrows (takes its quota beyond its min,
    /// or has no quota) and guaranteed units that share a limit with it
    /// wait for reclaimed resources: borrowing is paused until they are
    /// released, so that what is reclaimed for them is not borrowed again.
    BorrowingPaused {
        /// The unit's quota (`None`: the unit has no quota, so no min).
        quota: Option<Arc<str>>,
        /// The resource it borrows.
        resource: Arc<str>,
        /// Usage of its quota once the reclaims in flight are done.
        used: i64,
        /// Requested by the unit.
        requested: i64,
        /// The quota's effective min.
        min: i64,
        /// Where the guaranteed units wait: a quota, or `None` for the
        /// cluster capacity.
        scope: Option<Arc<str>>,
        /// The pause, to wake the unit when it ends.
        blocker: Blocker,
    },
    /// The unit would fit, but it borrows and was sent back (reclaimed,
    /// preempted or taken for fair sharing) so many times already that it
    /// borrows again only while the cluster is idle (less than half of the
    /// capacity of what it borrows in use): in a busy cluster it would be
    /// the next victim of a guaranteed unit once more. Within its quota's
    /// min it runs at once (issue 44: one unit was sent back 8 times).
    SentBackTooOften {
        /// How many times it was sent back.
        times: u32,
        /// The unit's quota (`None`: the unit has no quota, so no min).
        quota: Option<Arc<str>>,
        /// The resource it borrows, the cluster's use of it and its capacity.
        resource: Arc<str>,
        used: i64,
        capacity: i64,
        /// The capacity, with the room at which the cluster is idle: the
        /// unit is looked at again then.
        blocker: Blocker,
        need: i64,
    },
    /// The cluster capacity would be exceeded.
    Capacity {
        /// The resource and figures.
        shortfall: Shortfall,
        /// Whether the unit stays within its leaf's (effective) min.
        guaranteed: bool,
        /// How much of the resource the other top-level quotas use beyond their min.
        borrowed_by_others: i64,
    },
    /// The controller has not reported the cluster capacity yet.
    CapacityUnknown,
    /// The namespace's ResourceQuota would be exceeded.
    NamespaceQuota {
        /// The namespace, resource and figures (`used` includes `reserved`).
        shortfall: Shortfall,
        /// Reserved for released units whose pods do not exist yet.
        reserved: i64,
    },
    /// The head of a `Priority` queue does not fit and reserves: it keeps
    /// the units behind it that need what it is short of from passing it.
    Reserving {
        /// The limit it does not fit under, with its figures.
        shortfall: Shortfall,
    },
    /// A unit waits behind the reserving head of its queue.
    ReservedBehind {
        /// Key (`namespace/name`) of the head.
        unit: Arc<str>,
        /// What the head is short of.
        resource: Arc<str>,
    },
    /// A unit waits behind the reserving head of another queue, which is
    /// short where this unit's quota is too: under an ancestor's max, or
    /// the cluster's capacity (`reserve/across.rs`).
    ReservedAcross {
        /// Key (`namespace/name`) of the head.
        unit: Arc<str>,
        /// The head's queue.
        queue: Arc<str>,
        /// What the head is short of.
        resource: Arc<str>,
        /// The quota whose max stops the head (`None`: the capacity).
        scope: Option<Arc<str>>,
    },
    /// A `Block` queue stops at an earlier unit that does not fit.
    BlockedBehind {
        /// Key (`namespace/name`) of that unit.
        unit: Arc<str>,
    },
    /// The unit's queue is stopped (`spec.stopPolicy`): it releases
    /// nothing until it is resumed.
    QueueStopped {
        /// Name of the queue.
        queue: Arc<str>,
    },
    /// No queue: no mapping plugin chose one and the unit names none.
    NoQueue,
    /// The unit's queue does not exist.
    QueueMissing {
        /// Name of the queue.
        queue: Arc<str>,
    },
    /// The unit's quota does not exist.
    QuotaMissing {
        /// Name of the quota.
        quota: Arc<str>,
    },
    /// The unit's quota is an inner node of the tree.
    ParentQuota {
        /// Name of the quota.
        quota: Arc<str>,
    },
    /// A quota on the unit's path names a parent that does not exist.
    QuotaParentMissing {
        /// The unit's quota.
        quota: Arc<str>,
        /// The quota whose parent is missing.
        child: Arc<str>,
        /// The missing parent.
        parent: Arc<str>,
    },
    /// The parents of the unit's quota form a cycle.
    QuotaCycle {
        /// The unit's quota.
        quota: Arc<str>,
    },
    /// A plugin's own reason.
    Plugin {
        /// Name of the plugin.
        plugin: Arc<str>,
        /// Its explanation.
        message: String,
    },
}

impl WaitReason {
    /// The limit that stops the unit and the amount the unit needs under it,
    /// when the reason is such a limit.
    pub fn blocker(&self) -> Option<(Blocker, i64)> {
        if let Self::BorrowingPaused { blocker, .. } = self {
            // The pause has room 0 while it lasts and unlimited room after.
            return Some((*blocker, 1));
        }
        if let Self::SentBackTooOften { blocker, need, .. } = self {
            return Some((*blocker, *need));
        }
        self.shortfall().map(|s| (s.blocker, s.requested))
    }

    /// The figures, for reasons that are a limit.
    pub fn shortfall(&self) -> Option<&Shortfall> {
        match self {
            Self::QuotaMax { shortfall, .. }
            | Self::Capacity { shortfall, .. }
            | Self::Reclaiming { shortfall, .. }
            | Self::Preempting { shortfall, .. }
            | Self::Reserving { shortfall, .. }
            | Self::ReclaimOff { shortfall, .. }
            | Self::NamespaceQuota { shortfall, .. } => Some(shortfall),
            _ => None,
        }
    }

    /// Whether the reason is a quota's max or the cluster capacity (the
    /// limits a reclaim can make room under), as found by the filters.
    pub fn is_quota_limit(&self) -> bool {
        matches!(self, Self::QuotaMax { .. } | Self::Capacity { .. })
    }

    /// Whether the reason says the unit stays within its quota's min.
    pub fn is_guaranteed(&self) -> bool {
        match self {
            Self::QuotaMax { guaranteed, .. } | Self::Capacity { guaranteed, .. } => *guaranteed,
            Self::Reclaiming { .. } | Self::ReclaimOff { .. } => true,
            _ => false,
        }
    }

    /// Whether a guaranteed unit waits only because other quotas borrow
    /// beyond their min: reclaiming what they borrow would make it fit
    /// (never for a unit that asks for more than the limit holds at all).
    pub fn is_due_to_borrowing(&self) -> bool {
        if self.shortfall().is_some_and(Shortfall::never_fits) {
            return false;
        }
        match self {
            Self::QuotaMax {
                shortfall,
                guaranteed,
                borrowed_by_others,
            }
            | Self::Capacity {
                shortfall,
                guaranteed,
                borrowed_by_others,
            } => *guaranteed && *borrowed_by_others >= shortfall.missing(),
            Self::ReclaimOff {
                shortfall,
                borrowed_by_others,
                ..
            } => *borrowed_by_others >= shortfall.missing(),
            Self::Reclaiming { .. } => true,
            _ => false,
        }
    }

    /// The limit's figures as a prefix: `quota q: ` or `cluster capacity: `.
    fn write_limit(f: &mut fmt::Formatter<'_>, shortfall: &Shortfall) -> fmt::Result {
        match shortfall.blocker {
            Blocker::Capacity(_) => f.write_str("cluster capacity: ")?,
            _ => write!(f, "quota {}: ", shortfall.scope)?,
        }
        shortfall.write_figures(f)
    }

    /// What follows a quota's max or the capacity: that the unit can never
    /// fit, or what others borrow from a guaranteed unit's room.
    fn write_borrowing(
        f: &mut fmt::Formatter<'_>,
        shortfall: &Shortfall,
        guaranteed: bool,
        borrowed: i64,
    ) -> fmt::Result {
        if shortfall.never_fits() {
            return shortfall.write_never_fits(f);
        }
        if guaranteed && borrowed > 0 {
            write!(
                f,
                " (within its guaranteed min; other quotas borrow {} {} beyond their min)",
                shortfall.resource,
                format_amount(&shortfall.resource, borrowed)
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::QuotaMax {
                shortfall,
                guaranteed,
                borrowed_by_others,
            } => {
                write!(f, "quota {}: ", shortfall.scope)?;
                shortfall.write_figures(f)?;
                Self::write_borrowing(f, shortfall, *guaranteed, *borrowed_by_others)
            }
            Self::Capacity {
                shortfall,
                guaranteed,
                borrowed_by_others,
            } => {
                f.write_str("cluster capacity: ")?;
                shortfall.write_figures(f)?;
                Self::write_borrowing(f, shortfall, *guaranteed, *borrowed_by_others)
            }
            Self::Reclaiming { shortfall, victims } => {
                Self::write_limit(f, shortfall)?;
                let r = &shortfall.resource;
                match victims {
                    0 => write!(
                        f,
                        " (within its guaranteed min; waiting for units already being reclaimed to free {r})"
                    ),
                    1 => write!(
                        f,
                        " (within its guaranteed min; waiting for 1 reclaimed unit to free {r})"
                    ),
                    n => write!(
                        f,
                        " (within its guaranteed min; waiting for {n} reclaimed units to free {r})"
                    ),
                }
            }
            Self::Preempting { shortfall, victims } => {
                Self::write_limit(f, shortfall)?;
                let r = &shortfall.resource;
                match victims {
                    0 => write!(f, " (waiting for preempted units to free {r})"),
                    1 => write!(
                        f,
                        " (preempting 1 lower-priority unit of its quota to free {r})"
                    ),
                    n => write!(
                        f,
                        " (preempting {n} lower-priority units of its quota to free {r})"
                    ),
                }
            }
            Self::ReclaimOff {
                shortfall,
                borrowed_by_others,
                queue,
            } => {
                Self::write_limit(f, shortfall)?;
                let r = &shortfall.resource;
                write!(
                    f,
                    " (within its guaranteed min; other quotas borrow {r} {} beyond their min, but reclaim is off for queue {queue})",
                    format_amount(r, *borrowed_by_others)
                )
            }
            Self::SentBackTooOften {
                times,
                quota,
                resource,
                used,
                capacity,
                ..
            } => {
                let r = &**resource;
                write!(
                    f,
                    "sent back {times} times already (reclaimed or preempted): it borrows again only while the cluster is idle, so as not to be sent back once more — {r} {}/{} used in the cluster, it waits until under half",
                    format_amount(r, *used),
                    format_amount(r, *capacity),
                )?;
                match quota {
                    Some(q) => write!(f, "; within quota {q}'s min it runs at once"),
                    None => Ok(()),
                }
            }
            Self::BorrowingPaused {
                quota,
                resource,
                used,
                requested,
                min,
                scope,
                ..
            } => {
                let r = &**resource;
                match quota {
                    Some(q) => write!(
                        f,
                        "quota {q}: {r} {}/{} min used, needs {}: borrowing beyond the min is paused",
                        format_amount(r, *used),
                        format_amount(r, *min),
                        format_amount(r, *requested)
                    )?,
                    None => write!(
                        f,
                        "no quota (nothing guaranteed), needs {r} {}: borrowing is paused",
                        format_amount(r, *requested)
                    )?,
                }
                match scope {
                    Some(s) => write!(
                        f,
                        " while guaranteed units under quota {s} wait for reclaimed {r}"
                    ),
                    None => write!(
                        f,
                        " while guaranteed units wait for reclaimed {r} in the cluster"
                    ),
                }
            }
            Self::CapacityUnknown => f.write_str("cluster capacity not known yet"),
            Self::NamespaceQuota {
                shortfall,
                reserved,
            } => {
                write!(f, "ResourceQuota of namespace {}: ", shortfall.scope)?;
                shortfall.write_figures(f)?;
                if *reserved > 0 {
                    write!(
                        f,
                        " ({} reserved for released jobs not running yet)",
                        format_amount(&shortfall.resource, *reserved)
                    )?;
                }
                Ok(())
            }
            Self::Reserving { shortfall } => {
                f.write_str("reserving: ")?;
                Self::write_limit(f, shortfall)?;
                let r = &shortfall.resource;
                write!(
                    f,
                    " ({} more to free; units behind it that need {r} wait)",
                    format_amount(r, shortfall.missing())
                )
            }
            Self::ReservedBehind { unit, resource } => write!(
                f,
                "waiting behind {unit}, which reserves {resource} (it has waited longest or has the highest priority)"
            ),
            Self::ReservedAcross {
                unit,
                queue,
                resource,
                scope,
            } => {
                write!(
                    f,
                    "waiting behind {unit} of queue {queue}, which reserves {resource} "
                )?;
                match scope {
                    Some(q) => write!(f, "under quota {q}")?,
                    None => f.write_str("of the cluster's capacity")?,
                }
                write!(
                    f,
                    " (it has the higher priority or has waited longer; this unit borrows beyond its min)"
                )
            }
            Self::BlockedBehind { unit } => write!(f, "waiting behind {unit} (Block policy)"),
            Self::QueueStopped { queue } => write!(
                f,
                "queue {queue} is stopped: it releases nothing until it is resumed"
            ),
            Self::NoQueue => {
                f.write_str("no queue: the unit names none and no plugin maps it to one")
            }
            Self::QueueMissing { queue } => write!(f, "queue {queue} does not exist"),
            Self::QuotaMissing { quota } => write!(f, "quota {quota} does not exist"),
            Self::ParentQuota { quota } => write!(
                f,
                "quota {quota} is a parent quota; jobs must be charged to a leaf quota"
            ),
            Self::QuotaParentMissing {
                quota,
                child,
                parent,
            } => {
                if quota == child {
                    write!(f, "quota {quota}: its parent quota {parent} does not exist")
                } else {
                    write!(
                        f,
                        "quota {quota}: parent quota {parent} of {child} does not exist"
                    )
                }
            }
            Self::QuotaCycle { quota } => {
                write!(f, "quota {quota}: its parent quotas form a cycle")
            }
            Self::Plugin { message, .. } => f.write_str(message),
        }
    }
}
