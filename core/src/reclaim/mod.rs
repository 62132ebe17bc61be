//! Reclaim of borrowed quota (architecture §4.4, rule 3).
//!
//! A unit is *guaranteed* when its leaf quota stays within its (effective)
//! min with it. When a guaranteed unit does not fit under a quota's max or
//! the cluster capacity only because other quotas use more than their min,
//! the core picks *victims* among the units holding quota in those quotas —
//! lowest priority first, then most recently released — taking a victim only
//! while every quota between it and the shared limit is above its min, and
//! only as many as make the unit fit. The controller re-suspends the victims
//! and reports them freed ([`Core::remove_unit`] or [`Core::free`]); until
//! then they still count as used, and the guaranteed unit waits for them.
//!
//! Which usage is borrowed:
//! - only resources a quota governs (names in its min or max) are
//!   guaranteed or borrowed there: a quota is "above its min" only for
//!   those, a quota that does not govern a resource is passed through when
//!   checking a victim's quotas, and a unit reclaims only for resources its
//!   own quota governs (a unit stopped by, say, memory its CPU-only quota
//!   does not guarantee just waits);
//! - units charged to no quota have no min: all they hold is borrowed, and
//!   they may be reclaimed for the capacity.
//!
//! Book-keeping, all of it incremental:
//! - the quota tree keeps, next to each quota's usage, the part held by
//!   units being reclaimed and the requests of guaranteed units waiting for
//!   them (*promised*), so that planning sees the state once the reclaims
//!   in flight are done and never reclaims the same room twice;
//! - a *holder index* lists, for every quota, the units holding quota in its
//!   subtree (and, apart, the units of no quota) in victim order. Picking
//!   merges the lists of the quotas beside the guaranteed unit's path, drops
//!   a list whose quota is at its min and splits one whose child is, so it
//!   reads little more than the victims it takes;
//! - while a guaranteed unit waits for reclaimed resources, borrowing of
//!   those resources under the quota where it is short (or anywhere, for the
//!   capacity) is paused, so that what is reclaimed is not borrowed again.
//!   The pause is a limit ([`Blocker::Reclaim`]) like the others: units it
//!   stops are looked at again when it ends.
//!
//! A victim released earlier in the same cycle has not been written yet: it
//! is taken back (its decision is withdrawn, it waits in line again) instead
//! of being reclaimed, and the guaranteed unit is usually released at once.

mod calls;
mod fair;
mod pick;
mod preempt;
mod sent_back;
mod siblings;
pub(crate) mod state;

use state::{Eligible, Plan, Reclaim, ReclaimKind, Taking};

use std::sync::Arc;

use super::amounts::{ResVec, UNLIMITED};
use super::cycle::{Pass, Verdict};
use super::ids::{QuotaId, ResId, UnitId};
use super::reason::{Blocker, Shortfall, WaitReason};
use super::units::{UnitEntry, UnitState};
/// What became of a guaranteed unit's reclaim.
pub(crate) enum Outcome {
    /// Units released in this cycle were taken back: it fits now.
    Fits,
    /// It waits for reclaimed resources, with this reason.
    Waits(WaitReason),
    /// No reclaim can make it fit now; try again when borrowing changes.
    Impossible(WaitReason),
    /// Something other than quota stops it.
    Other(WaitReason),
}

/// The smallest set of `picks` (in the order taken) that still covers
/// `deficits`: last taken first, a victim it can do without is given back.
fn minimal(mut picks: Vec<(UnitId, ResVec)>, deficits: &mut [Deficit]) -> Vec<UnitId> {
    let mut i = picks.len();
    while i > 0 {
        i -= 1;
        let spare = deficits
            .iter()
            .all(|d| d.left.saturating_add(picks[i].1.get(d.resource)) <= 0);
        if spare {
            let (_, amount) = picks.remove(i);
            for d in deficits.iter_mut() {
                d.left = d.left.saturating_add(amount.get(d.resource));
            }
        }
    }
    picks.into_iter().map(|(v, _)| v).collect()
}

/// A limit on the guaranteed unit's path it does not fit under.
#[derive(Clone, Copy, Debug)]
struct Deficit {
    /// The quota (`None`: the cluster capacity).
    at: Option<QuotaId>,
    resource: ResId,
    /// What is missing once the reclaims in flight are done.
    left: i64,
}

impl Pass<'_> {
    /// A waiting unit was rejected by the filters with `reason`: the verdict,
    /// after reclaim was considered for it.
    pub(crate) fn after_rejection(&mut self, id: UnitId, reason: WaitReason) -> Verdict {
        let outstanding = self.reclaim.plans.get(&id).map(|p| p.victims.len());
        // A unit that asks for more than a limit holds at all is not helped
        // by anything taken back: nobody is sent back for it.
        let in_vain = reason.shortfall().is_some_and(Shortfall::never_fits);
        if !reason.is_quota_limit() || in_vain {
            if outstanding.is_some() {
                self.reclaim
                    .drop_plan(id, &mut self.state.quotas, self.relaxed);
            }
            return Verdict::Blocked(reason);
        }
        if let Some(n) = outstanding {
            if n > 0
                && let Some(shortfall) = reason.shortfall()
            {
                let shortfall = shortfall.clone();
                let preempting = self
                    .reclaim
                    .plans
                    .get(&id)
                    .is_some_and(|p| p.taking == Taking::Preempting);
                return Verdict::Blocked(if preempting {
                    WaitReason::Preempting {
                        shortfall,
                        victims: n,
                    }
                } else {
                    WaitReason::Reclaiming {
                        shortfall,
                        victims: n,
                    }
                });
            }
            // What was reclaimed for it is free, yet it does not fit (the
            // room went to others, or limits changed): plan afresh.
            self.reclaim
                .drop_plan(id, &mut self.state.quotas, self.relaxed);
        }
        if let Some(outcome) = self.preempt(id, &reason) {
            return self.verdict(id, outcome);
        }
        let Some(u) = self.units.get(id) else {
            return Verdict::Blocked(reason);
        };
        if !self
            .state
            .quotas
            .is_guaranteed_projected(u.quota, &u.request)
        {
            // A borrowing unit reclaims only for its fair share.
            return match self.fair_reclaim(id, &reason) {
                Some(outcome) => self.verdict(id, outcome),
                None => Verdict::Blocked(reason),
            };
        }
        if !self.reclaim_on {
            let borrowed = match &reason {
                WaitReason::QuotaMax {
                    borrowed_by_others, ..
                }
                | WaitReason::Capacity {
                    borrowed_by_others, ..
                } => *borrowed_by_others,
                _ => 0,
            };
            return match (reason.shortfall(), borrowed > 0) {
                (Some(shortfall), true) => Verdict::Blocked(WaitReason::ReclaimOff {
                    shortfall: shortfall.clone(),
                    borrowed_by_others: borrowed,
                    queue: Arc::clone(&self.queue_name),
                }),
                _ => Verdict::Blocked(reason),
            };
        }
        let outcome = self.plan(id, reason);
        self.verdict(id, outcome)
    }

    /// The verdict on unit `id` of a reclaim's or a preemption's outcome.
    fn verdict(&mut self, id: UnitId, outcome: Outcome) -> Verdict {
        match outcome {
            Outcome::Fits => {
                self.reclaim.retry.remove(&id);
                self.reclaim.made_room.insert(id);
                Verdict::Fits
            }
            Outcome::Waits(r) => {
                self.reclaim.retry.remove(&id);
                Verdict::Blocked(r)
            }
            Outcome::Impossible(r) => {
                self.reclaim.retry.insert(id);
                Verdict::Blocked(r)
            }
            Outcome::Other(r) => Verdict::Blocked(r),
        }
    }

    /// Whether a unit that passed the filters must wait because it borrows
    /// what guaranteed units wait for; the reason if so.
    pub(crate) fn paused(&self, id: UnitId) -> Option<WaitReason> {
        let tree = &self.state.quotas;
        if !tree.has_waiters() || self.reclaim.plans.contains_key(&id) {
            return None;
        }
        let u = self.units.get(id)?;
        let path: &[QuotaId] = match u.quota {
            Some(q) => tree.path(q).unwrap_or(&[]),
            None => &[],
        };
        for (k, r) in u.request.iter() {
            let (used, min) = match u.quota {
                Some(l) => (tree.projected(l, k), tree.min_effective(l, k)),
                None => (0, 0),
            };
            if let Some(l) = u.quota
                && (used.saturating_add(r) <= min || !tree.governs(l, k))
            {
                // Within its min for this resource, or a resource its quota
                // does not govern: not borrowing it.
                continue;
            }
            let scopes = path.iter().map(|a| Some(*a)).chain([None]);
            for scope in scopes {
                if tree.waiters(scope, k) > 0 {
                    return Some(WaitReason::BorrowingPaused {
                        quota: u.quota.map(|q| tree.name(q).clone()),
                        resource: self.state.resource_name(k).clone(),
                        used,
                        requested: r,
                        min,
                        scope: scope.map(|s| tree.name(s).clone()),
                        blocker: Blocker::Reclaim(scope, k),
                    });
                }
            }
        }
        None
    }

    /// Plans a reclaim for guaranteed unit `id`, stopped by quota `reason`.
    fn plan(&mut self, id: UnitId, reason: WaitReason) -> Outcome {
        let Some(u) = self.units.get(id) else {
            return Outcome::Other(reason);
        };
        // Reclaim only makes room under quota limits: if another filter
        // stops the unit anyway, taking from others would not help it.
        if let Err(other) = self
            .framework
            .filter_beyond_quota_limits(&u.as_ref(), self.state)
        {
            return Outcome::Other(other);
        }
        let tree = &self.state.quotas;
        let Some(leaf) = u.quota else {
            return Outcome::Impossible(reason);
        };
        let Ok(path) = tree.path(leaf) else {
            return Outcome::Impossible(reason);
        };
        // What is missing under each limit, now and once the reclaims in
        // flight are done (promised room included).
        let mut deficits: Vec<Deficit> = Vec::new();
        let mut pauses: Vec<(Option<QuotaId>, ResId)> = Vec::new();
        let mut note = |at: Option<QuotaId>, k: ResId, real: i64, projected: i64| {
            if projected > 0 {
                deficits.push(Deficit {
                    at,
                    resource: k,
                    left: projected,
                });
            }
            if real > 0 || projected > 0 {
                // The topmost limit per resource is where borrowing pauses.
                match pauses.iter_mut().find(|(_, r)| *r == k) {
                    Some(p) => p.0 = at,
                    None => pauses.push((at, k)),
                }
            }
        };
        for &a in path {
            for (k, r) in u.request.iter() {
                let max = tree.max(a, k);
                if max == UNLIMITED {
                    continue;
                }
                let real = tree.used(a, k).saturating_add(r).saturating_sub(max);
                let projected = tree.projected(a, k).saturating_add(r).saturating_sub(max);
                if a == leaf && projected > 0 {
                    // Its own max, even once the reclaims in flight there are
                    // done: no other quota's units can make room there.
                    return Outcome::Impossible(reason);
                }
                if (real > 0 || projected > 0) && !tree.governs(leaf, k) {
                    // Short of something its quota does not guarantee.
                    return Outcome::Impossible(reason);
                }
                note(Some(a), k, real, projected);
            }
        }
        for (k, r) in u.request.iter() {
            let Some(cap) = tree.capacity_of(k) else {
                return Outcome::Impossible(reason);
            };
            if cap == UNLIMITED {
                continue;
            }
            let real = tree.root_used(k).saturating_add(r).saturating_sub(cap);
            let projected = tree.root_projected(k).saturating_add(r).saturating_sub(cap);
            if (real > 0 || projected > 0) && !tree.governs(leaf, k) {
                return Outcome::Impossible(reason);
            }
            note(None, k, real, projected);
        }
        if pauses.is_empty() {
            return Outcome::Impossible(reason);
        }
        let picks = if deficits.is_empty() {
            // Reclaims in flight for others free enough for it too.
            Vec::new()
        } else {
            if !self.may_cover(path, &deficits) {
                return Outcome::Impossible(reason);
            }
            // What a reserving head of higher priority was released into,
            // and a unit sent back twice already, are spared while others
            // can make room; the min stays a guarantee, so they are taken
            // when nothing else would do — a head before such a unit: a
            // head is sent back once, the other a third time. A unit of
            // higher priority whose run is bounded is never taken: the
            // guarantee waits at most its bound (`pick.rs`).
            let priority = u.priority;
            let mut none = None;
            let tiers = [(true, true), (false, true), (false, false)];
            let mut found = None;
            for (spare_heads, spare_sent_back) in tiers {
                let rule = Eligible::Reclaim {
                    priority,
                    spare_heads,
                    spare_sent_back,
                };
                let mut tried = deficits.clone();
                if let Some(picks) = self.pick(id, path, &mut tried, &rule, &mut none) {
                    found = Some(picks);
                    break;
                }
            }
            match found {
                Some(picks) => picks,
                None => return Outcome::Impossible(reason),
            }
        };
        self.commit(id, reason, picks, pauses, Taking::Borrowed)
    }

    /// Takes the picked victims: those released by this cycle are taken
    /// back at once, the others are reported for the controller to
    /// re-suspend. Then the unit either fits or waits for them.
    fn commit(
        &mut self,
        id: UnitId,
        reason: WaitReason,
        picks: Vec<UnitId>,
        pauses: Vec<(Option<QuotaId>, ResId)>,
        taking: Taking,
    ) -> Outcome {
        let mut in_flight = Vec::new();
        let mut withdrew = false;
        for v in picks {
            let fresh = self
                .units
                .get(v)
                .and_then(UnitEntry::holding)
                .is_some_and(|(_, since)| since.seq >= self.reclaim.cycle_start);
            if fresh {
                self.withdraw(v);
                withdrew = true;
            } else {
                in_flight.push(v);
            }
        }
        let mut reason = reason;
        if withdrew {
            let Some(u) = self.units.get(id) else {
                return Outcome::Other(reason);
            };
            match self.framework.filter(&u.as_ref(), self.state) {
                Ok(()) => {
                    // It fits in what was taken back; anything also taken
                    // from earlier releases frees room for the others
                    // counted in the plan (waiting for nobody).
                    for v in in_flight {
                        let kind = self.kind_for(v, id, taking);
                        self.mark_victim(v, None, id, kind);
                    }
                    return Outcome::Fits;
                }
                Err(r) if r.is_quota_limit() => reason = r,
                Err(r) => return Outcome::Other(r),
            }
        }
        let Some(shortfall) = reason.shortfall().cloned() else {
            return Outcome::Other(reason);
        };
        for &v in &in_flight {
            let kind = self.kind_for(v, id, taking);
            self.mark_victim(v, Some(id), id, kind);
        }
        let Some(u) = self.units.get(id) else {
            return Outcome::Other(reason);
        };
        let tree = &mut self.state.quotas;
        tree.mark_promised(u.quota, &u.request, true);
        for &(scope, k) in &pauses {
            tree.add_waiters(scope, k, 1);
        }
        let victims = in_flight.len();
        self.reclaim.plans.insert(
            id,
            Plan {
                victims: in_flight,
                quota: u.quota,
                promised: u.request.clone(),
                pauses,
                taking,
            },
        );
        if taking == Taking::Preempting {
            return Outcome::Waits(WaitReason::Preempting { shortfall, victims });
        }
        Outcome::Waits(WaitReason::Reclaiming { shortfall, victims })
    }

    /// Why victim `v` is taken for unit `id`.
    fn kind_for(&self, v: UnitId, id: UnitId, taking: Taking) -> ReclaimKind {
        match taking {
            Taking::Borrowed => ReclaimKind::Borrowed,
            Taking::Preempting => {
                let priority = |u: UnitId| self.units.get(u).map_or(0, |e| e.priority);
                ReclaimKind::Preempted {
                    priority: priority(v),
                    by_priority: priority(id),
                }
            }
            Taking::FairShare => {
                let tree = &self.state.quotas;
                let scope = |u: UnitId| {
                    let e = self.units.get(u)?;
                    let (parent, child) = tree.fair_scope(e.quota?)?;
                    Some((parent, child, e.request.clone()))
                };
                let share = scope(v).map_or(0, |(p, c, _)| {
                    tree.weighted_share(p, c, &Default::default(), &Default::default())
                });
                let for_share = scope(id).map_or(0, |(p, c, request)| {
                    tree.weighted_share(p, c, &request, &Default::default())
                });
                ReclaimKind::FairShare { share, for_share }
            }
        }
    }

    /// Marks holding unit `v` as being reclaimed for `waiting` (reported as
    /// reclaimed for `for_unit`).
    fn mark_victim(
        &mut self,
        v: UnitId,
        waiting: Option<UnitId>,
        for_unit: UnitId,
        kind: ReclaimKind,
    ) {
        let Some(u) = self.units.get(v) else {
            return;
        };
        let Some((amount, _)) = u.holding() else {
            return;
        };
        self.reclaim.unlist(&self.state.quotas, v, u);
        self.reclaim.note_sent_back(&u.key, self.now_ms);
        self.reclaim.victims.insert(v, waiting);
        self.state.quotas.mark_reclaiming(u.quota, amount, true);
        if let Some(q) = u.quota {
            self.reclaim.room_check.push(q);
        }
        let tree = &self.state.quotas;
        let (for_key, for_quota) = self.units.get(for_unit).map_or_else(
            || (Arc::from(""), Arc::from("")),
            |f| {
                let quota = f
                    .quota
                    .map_or_else(|| Arc::from(""), |q| tree.name(q).clone());
                (Arc::clone(&f.key), quota)
            },
        );
        self.out.reclaims.push(Reclaim {
            victim: Arc::clone(&u.key),
            quota: u.quota.map(|q| tree.name(q).clone()),
            resources: amount.to_resources(&self.state.resources),
            for_unit: for_key,
            for_quota,
            kind,
            times: self.reclaim.sent_back(&u.key),
        });
    }

    /// Takes back unit `v`, released earlier in this cycle: its decision is
    /// withdrawn and it waits again (put back in its queue after the
    /// current queue is done).
    fn withdraw(&mut self, v: UnitId) {
        let Some(u) = self.units.get_mut(v) else {
            return;
        };
        let UnitState::Holding { amount, since, .. } = &u.state else {
            return;
        };
        let (amount, since) = (amount.clone(), *since);
        self.reclaim.unlist(&self.state.quotas, v, u);
        self.framework
            .unreserve(&u.as_ref_with(&amount), &amount, self.state);
        u.state = UnitState::Waiting {
            reason: None,
            trusted: 0,
        };
        let index = since.seq.saturating_sub(self.reclaim.cycle_start);
        self.reclaim
            .withdrawn
            .push(usize::try_from(index).unwrap_or(usize::MAX));
        self.reclaim.requeue.push(v);
        if let Some(q) = u.quota {
            self.reclaim.room_check.push(q);
        }
        super::engine::membership::note_freed(
            self.relaxed,
            self.state,
            u.quota,
            u.namespace,
            &amount,
        );
    }
}
