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
    /// A `Block` queue stops at an earlier unit that does not fit.
    BlockedBehind {
        /// Key (`namespace/name`) of that unit.
        unit: Arc<str>,
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
        self.shortfall().map(|s| (s.blocker, s.requested))
    }

    /// The figures, for reasons that are a limit.
    pub fn shortfall(&self) -> Option<&Shortfall> {
        match self {
            Self::QuotaMax { shortfall, .. }
            | Self::Capacity { shortfall, .. }
            | Self::NamespaceQuota { shortfall, .. } => Some(shortfall),
            _ => None,
        }
    }

    /// Whether a guaranteed unit waits only because other quotas borrow
    /// beyond their min: reclaiming what they borrow would make it fit.
    pub fn is_due_to_borrowing(&self) -> bool {
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
            _ => false,
        }
    }

    fn write_borrowing(
        f: &mut fmt::Formatter<'_>,
        shortfall: &Shortfall,
        guaranteed: bool,
        borrowed: i64,
    ) -> fmt::Result {
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
            Self::BlockedBehind { unit } => write!(f, "waiting behind {unit} (Block policy)"),
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
