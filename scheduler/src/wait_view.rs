//! A core's wait reason as the visibility API, the unit's status condition
//! and the job's Events name it: one type of a fixed list
//! ([`WaitType`]), the sentence, and the figures that make it actionable —
//! which quota (the unit's own or an ancestor) or namespace, which resource,
//! short by how much, behind which unit.

use koord_queue_core::amounts::format_amount;
use koord_queue_core::{Blocker, Shortfall, WaitReason};
use koord_queue_visibility::{WaitReasonView, WaitType};

/// The type of a core's reason.
pub fn wait_type(reason: &WaitReason) -> WaitType {
    match reason {
        WaitReason::QuotaMax { .. } => WaitType::QuotaExceeded,
        WaitReason::Capacity { .. } | WaitReason::CapacityUnknown => WaitType::ClusterCapacity,
        WaitReason::NamespaceQuota { .. } => WaitType::NamespaceQuota,
        WaitReason::Reserving { .. } => WaitType::Reserving,
        WaitReason::ReservedBehind { .. } | WaitReason::ReservedAcross { .. } => {
            WaitType::BehindReservingHead
        }
        WaitReason::BlockedBehind { .. } => WaitType::BehindHead,
        WaitReason::Reclaiming { .. } => WaitType::Reclaiming,
        WaitReason::Preempting { .. } => WaitType::Preempting,
        // Both hold back a unit that fits only because it would borrow.
        WaitReason::BorrowingPaused { .. } | WaitReason::SentBackTooOften { .. } => {
            WaitType::BorrowingPaused
        }
        WaitReason::ReclaimOff { .. } => WaitType::ReclaimOff,
        WaitReason::NoQueue
        | WaitReason::QueueMissing { .. }
        | WaitReason::QuotaMissing { .. }
        | WaitReason::ParentQuota { .. }
        | WaitReason::QuotaParentMissing { .. }
        | WaitReason::QuotaCycle { .. } => WaitType::Misconfigured,
        WaitReason::QueueStopped { .. } => WaitType::QueueStopped,
        WaitReason::Plugin { .. } => WaitType::Plugin,
    }
}

/// The view of a core's reason.
pub fn view(reason: &WaitReason) -> WaitReasonView {
    let mut out = WaitReasonView {
        kind: wait_type(reason),
        message: reason.to_string(),
        quota: None,
        resource: None,
        short_by: None,
        behind: None,
        until: None,
    };
    if let Some(shortfall) = reason.shortfall() {
        set_figures(&mut out, shortfall);
    }
    match reason {
        WaitReason::ReservedBehind { unit, resource } => {
            out.behind = Some(unit.to_string());
            out.resource = Some(resource.to_string());
        }
        WaitReason::ReservedAcross {
            unit,
            resource,
            scope,
            ..
        } => {
            out.behind = Some(unit.to_string());
            out.resource = Some(resource.to_string());
            out.quota = scope.as_deref().map(str::to_string);
        }
        WaitReason::BlockedBehind { unit } => out.behind = Some(unit.to_string()),
        WaitReason::BorrowingPaused {
            resource, scope, ..
        } => {
            out.resource = Some(resource.to_string());
            out.quota = scope.as_deref().map(str::to_string);
        }
        WaitReason::SentBackTooOften {
            resource, quota, ..
        } => {
            out.resource = Some(resource.to_string());
            out.quota = quota.as_deref().map(str::to_string);
        }
        WaitReason::QueueMissing { queue } | WaitReason::QueueStopped { queue } => {
            out.quota = Some(queue.to_string());
        }
        WaitReason::QuotaMissing { quota }
        | WaitReason::ParentQuota { quota }
        | WaitReason::QuotaCycle { quota } => out.quota = Some(quota.to_string()),
        WaitReason::QuotaParentMissing { child, .. } => out.quota = Some(child.to_string()),
        _ => {}
    }
    out
}

fn set_figures(out: &mut WaitReasonView, s: &Shortfall) {
    if !matches!(s.blocker, Blocker::Capacity(_)) && !s.scope.is_empty() {
        out.quota = Some(s.scope.to_string());
    }
    out.resource = Some(s.resource.to_string());
    out.short_by = Some(format_amount(&s.resource, s.missing().max(0)));
}

/// A wait the controller knows and the core does not: the unit is not in
/// line (sent back until `until`, its admission checks pending, not adopted).
pub fn outside_the_core(kind: WaitType, message: String, until: Option<String>) -> WaitReasonView {
    WaitReasonView {
        kind,
        message,
        quota: None,
        resource: None,
        short_by: None,
        behind: None,
        until,
    }
}
