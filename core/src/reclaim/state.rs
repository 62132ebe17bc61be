//! The data of reclaim (architecture §4.4): what a reclaim is, the victim
//! order, the holder index and the book-keeping of reclaims in flight. The
//! planning that uses them is in [`super`].

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use koord_queue_model::Resources;

use crate::amounts::ResVec;
use crate::ids::{Id, IdHash, QueueId, QuotaId, ResId, UnitId};
use crate::quota_tree::QuotaTree;
use crate::reason::Blocker;
use crate::units::{Stamp, UnitEntry, Units};

/// A unit chosen to give its quota back for a guaranteed unit. The core
/// keeps counting what it holds until the controller reports it freed
/// ([`Core::remove_unit`] or [`Core::free`] once its job is re-suspended),
/// or puts it back with [`Core::cancel_reclaim`] if that cannot be done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reclaim {
    /// The unit to re-suspend, `namespace/name`.
    pub victim: Arc<str>,
    /// The quota it is charged to (which uses more than its min); `None`
    /// for a unit charged to no quota (nothing of it is guaranteed).
    pub quota: Option<Arc<str>>,
    /// What it holds.
    pub resources: Resources,
    /// The guaranteed unit that waits for these resources, `namespace/name`.
    pub for_unit: Arc<str>,
    /// That unit's quota.
    pub for_quota: Arc<str>,
    /// Why it is taken back.
    pub kind: ReclaimKind,
    /// How many times it has been sent back, this time included.
    pub times: u32,
}

/// Why a unit gives its quota back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimKind {
    /// Its quota borrows beyond its min what a guaranteed unit needs.
    Borrowed,
    /// A unit of higher priority in its own quota needs it (preemption).
    Preempted {
        /// The victim's priority.
        priority: i32,
        /// The preemptor's.
        by_priority: i32,
    },
    /// Under a fair-sharing parent, its quota holds more of the pool than
    /// the waiting unit's quota would with it (weighted shares, in
    /// millionths of the pool per unit of weight).
    FairShare {
        /// The victim's quota's share before the reclaim.
        share: i64,
        /// The waiting unit's quota's share once it is admitted.
        for_share: i64,
    },
}

/// Which holding units a plan may take, besides the rules of reclaim.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Eligible {
    /// Any (reclaim for a guaranteed unit of `priority`), but with
    /// `spare_heads` not a unit released as a reserving head of higher
    /// priority (what a head was promised is not taken back for a unit of
    /// lower priority), with `spare_sent_back` not one sent back
    /// [`SPARED_AFTER`] times already (no churn of one unit). A plan first
    /// tries sparing both, and takes them only when nothing else makes
    /// room: the min stays a guarantee. A unit of higher priority whose
    /// run bound ends within [`SPARE_BOUNDED_WITHIN_MS`] (a head or not) is
    /// spared in every plan: it ends by itself by then.
    Reclaim {
        priority: i32,
        spare_heads: bool,
        spare_sent_back: bool,
    },
    /// Preemption's victims ([`VictimRule`]).
    Preempt(VictimRule),
}

/// Who a preemption may take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VictimRule {
    /// The preemptor.
    pub by: UnitId,
    pub policy: koord_queue_model::PreemptionPolicy,
    pub priority: i32,
    pub created_ms: i64,
    pub min_run_ms: i64,
    pub max_per_unit: u32,
}

impl From<VictimRule> for Eligible {
    fn from(rule: VictimRule) -> Self {
        Self::Preempt(rule)
    }
}

impl VictimRule {
    /// Whether a unit of `priority` created at `created_ms` may be taken.
    pub fn allows(&self, priority: i32, created_ms: i64) -> bool {
        use koord_queue_model::PreemptionPolicy as P;
        match self.policy {
            P::Never => false,
            P::LowerPriority => priority < self.priority,
            P::LowerOrNewerEqualPriority => {
                priority < self.priority
                    || (priority == self.priority && created_ms > self.created_ms)
            }
        }
    }
}

/// Why victims are being taken for a waiting unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taking {
    /// For a guaranteed unit, from quotas that borrow.
    Borrowed,
    /// For a unit of higher priority, in its own quota.
    Preempting,
    /// For a borrowing unit, from a sibling above its fair share.
    FairShare,
}

impl Reclaim {
    /// A sentence for the victim's status and events.
    pub fn message(&self) -> String {
        match self.kind {
            ReclaimKind::Preempted {
                priority,
                by_priority,
            } => {
                return format!(
                    "preempted by {} (priority {by_priority}, above this job's {priority}), which needs the quota it holds in quota {}",
                    self.for_unit, self.for_quota
                );
            }
            ReclaimKind::FairShare { share, for_share } => {
                let pct = |s: i64| s as f64 / 10_000.0;
                return format!(
                    "reclaimed for fair sharing: quota {} holds {:.1}% of the shared pool per unit of weight, more than quota {} would with {} ({:.1}%)",
                    self.quota.as_deref().unwrap_or("-"),
                    pct(share),
                    self.for_quota,
                    self.for_unit,
                    pct(for_share)
                );
            }
            ReclaimKind::Borrowed => {}
        }
        let why = match &self.quota {
            Some(q) => format!("quota {q} uses more than its min"),
            None => "it is charged to no quota, so nothing of it is guaranteed".to_string(),
        };
        let again = if self.times > SPARED_AFTER {
            format!(
                "; sent back {} times now: a unit sent back {SPARED_AFTER} times is taken only when nothing else frees a guaranteed min",
                self.times
            )
        } else {
            String::new()
        };
        format!(
            "reclaimed: {why}, and {} needs the resources within the guaranteed min of quota {}{again}",
            self.for_unit, self.for_quota
        )
    }
}

/// A unit being reclaimed, as [`Core::reclaims_in_flight`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimInFlight<'a> {
    /// The unit being reclaimed.
    pub victim: &'a str,
    /// The guaranteed unit waiting for it (`None` once that unit no longer
    /// waits for it: released, removed or changed).
    pub for_unit: Option<&'a str>,
}

/// A holding unit's place in the victim order: lowest priority first, then
/// most recently released, then by id for a stable order. It carries the
/// unit's quota so that candidates in quotas that cannot give anything are
/// passed over without reading the unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct VictimKey {
    priority: i32,
    since: Reverse<Stamp>,
    pub(crate) id: UnitId,
    pub(crate) quota: Option<QuotaId>,
}

impl VictimKey {
    pub fn of(u: &UnitEntry, id: UnitId, since: Stamp) -> Self {
        Self {
            priority: u.priority,
            since: Reverse(since),
            id,
            quota: u.quota,
        }
    }
}

/// Holding units (not being reclaimed) in victim order: listed under every
/// quota of their quota's path, or with the units of no quota.
#[derive(Clone, Debug, Default)]
pub(crate) struct HolderIndex {
    by_quota: Vec<BTreeSet<VictimKey>>,
    no_quota: BTreeSet<VictimKey>,
}

/// Where the candidates of one part of a reclaim's search come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The units under a quota (its subtree).
    Quota(QuotaId),
    /// The units of no quota.
    NoQuota,
}

impl HolderIndex {
    /// The quotas a unit of `quota` is listed under (a unit whose quota has
    /// no path is listed under its quota only, where no reclaim looks).
    fn places<'t>(tree: &'t QuotaTree, quota: &'t QuotaId) -> &'t [QuotaId] {
        tree.path(*quota)
            .unwrap_or_else(|_| std::slice::from_ref(quota))
    }

    pub fn insert(&mut self, tree: &QuotaTree, key: VictimKey) {
        let Some(quota) = &key.quota else {
            self.no_quota.insert(key);
            return;
        };
        for q in Self::places(tree, quota) {
            while self.by_quota.len() <= q.index() {
                self.by_quota.push(BTreeSet::new());
            }
            self.by_quota[q.index()].insert(key);
        }
    }

    pub fn remove(&mut self, tree: &QuotaTree, key: &VictimKey) {
        let Some(quota) = &key.quota else {
            self.no_quota.remove(key);
            return;
        };
        for q in Self::places(tree, quota) {
            if let Some(set) = self.by_quota.get_mut(q.index()) {
                set.remove(key);
            }
        }
    }

    pub(crate) fn set(&self, source: Source) -> Option<&BTreeSet<VictimKey>> {
        match source {
            Source::NoQuota => Some(&self.no_quota),
            Source::Quota(q) => self.by_quota.get(q.index()),
        }
    }

    /// The first candidate of `source` after `after` (from the start: `None`).
    pub(crate) fn next(&self, source: Source, after: Option<&VictimKey>) -> Option<VictimKey> {
        let set = self.set(source)?;
        match after {
            None => set.first().copied(),
            Some(k) => set
                .range((Bound::Excluded(*k), Bound::Unbounded))
                .next()
                .copied(),
        }
    }

    /// Lists every holding unit that is not being reclaimed again, after
    /// the tree changed shape (paths changed).
    pub(crate) fn rebuild(
        &mut self,
        units: &Units,
        tree: &QuotaTree,
        victims: &HashMap<UnitId, Option<UnitId>, IdHash>,
    ) {
        self.by_quota.clear();
        self.no_quota.clear();
        for (id, u) in units.iter_ids() {
            if let Some((_, since)) = u.holding()
                && !victims.contains_key(&id)
            {
                self.insert(tree, VictimKey::of(u, id, since));
            }
        }
    }
}

/// A guaranteed unit waiting for reclaimed resources.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// Victims reclaimed for it that still hold their resources.
    pub victims: Vec<UnitId>,
    /// Its quota and request, counted as promised on the quota path.
    pub quota: Option<QuotaId>,
    pub promised: ResVec,
    /// Where borrowing is paused for it: (quota or cluster, resource).
    pub pauses: Vec<(Option<QuotaId>, ResId)>,
    /// Why its victims are taken.
    pub taking: Taking,
}

/// The reclaim book-keeping of the core.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReclaimState {
    /// Sequence number of the next release.
    next_seq: u64,
    /// The latest release time reported by the controller.
    latest_ms: i64,
    /// First sequence number of the running cycle: units with a later one
    /// were released by this cycle and not written yet.
    pub cycle_start: u64,
    pub index: HolderIndex,
    /// Units being reclaimed, with the unit waiting for them (if any still does).
    pub victims: HashMap<UnitId, Option<UnitId>, IdHash>,
    /// Guaranteed units waiting for reclaimed resources.
    pub plans: HashMap<UnitId, Plan, IdHash>,
    /// Guaranteed units that no reclaim could make fit: tried again when
    /// borrowing may have grown (`stale`).
    pub retry: HashSet<UnitId, IdHash>,
    pub stale: bool,
    /// Queues with units judged to borrow, by their quota: when the quota
    /// gets room under its min again they may be guaranteed now.
    pub watch: HashMap<QuotaId, HashSet<QueueId, IdHash>, IdHash>,
    /// Quotas whose usage dropped (to check for room under their min).
    pub room_check: Vec<QuotaId>,
    /// Waiting units to look at again in the next pass.
    pub touch: Vec<UnitId>,
    /// Units taken back in this cycle, to put back in their queue.
    pub requeue: Vec<UnitId>,
    /// Decisions of this cycle withdrawn (by index).
    pub withdrawn: Vec<usize>,
    /// Units released in this cycle into room taken back for them: they are
    /// not taken back in turn (two units each holding what the other's
    /// guarantee needs would otherwise swap places pass after pass).
    pub made_room: HashSet<UnitId, IdHash>,
    /// Those of them that hold quota, not in the holder index yet.
    pub unlisted: Vec<UnitId>,
    /// Units that preempted, with the units they displaced: a displaced
    /// unit never preempts the unit that displaced it (no swapping back).
    pub displaced: HashMap<UnitId, Vec<UnitId>, IdHash>,
    /// Recent preemptions per quota (ms), for the per-minute cap.
    pub preempted_at: HashMap<QuotaId, Vec<i64>, IdHash>,
    /// Units that could preempt once a victim has run its minimum time: the
    /// earliest such time per unit (looked at again then).
    pub preempt_later: HashMap<UnitId, i64, IdHash>,
    /// Times each unit was sent back (reclaimed, preempted or taken for
    /// fair sharing), and when last (ms), by key. Preemption and fair
    /// sharing never take a unit sent back `Preemption::max_per_unit` times,
    /// and reclaim for a guaranteed unit takes one only when nothing else
    /// makes room (the min stays a guarantee). The key outlives the unit's
    /// absence from the core during its backoff; an entry whose unit has
    /// been gone an hour is dropped (its job ended).
    pub sent_back_times: HashMap<Arc<str>, (u32, i64)>,
}

/// Send-backs after which reclaim for a guaranteed unit spares a unit while
/// others can make room (issue 44: the last released is the first victim,
/// so a unit back from its backoff was the next one taken, up to 8 times in
/// the simulator). Preemption's default cap, so that no unit is sent back
/// more than twice unless a min needs it.
pub(crate) const SPARED_AFTER: u32 = koord_queue_model::Preemption::DEFAULT_MAX_PER_UNIT;

/// A bounded unit of higher priority is spared by reclaim for a guaranteed
/// unit only while its bound ends within this (ms): the longest a min waits
/// for it. A longer bound (an hours-long training run's deadline) would make
/// the guarantee a promise for later; such a unit is taken as before.
pub(crate) const SPARE_BOUNDED_WITHIN_MS: i64 = 120_000;

impl ReclaimState {
    /// The stamp of a release happening now.
    pub fn now(&mut self) -> Stamp {
        let seq = self.next_seq;
        self.next_seq += 1;
        Stamp {
            ms: self.latest_ms,
            seq,
        }
    }

    /// The stamp of a release the cycle at `now_ms` decides: at that time
    /// (never before a release already reported).
    pub fn now_at(&mut self, now_ms: i64) -> Stamp {
        self.latest_ms = self.latest_ms.max(now_ms);
        self.now()
    }

    /// The stamp of a release at `ms` (reported by the controller).
    pub fn at(&mut self, ms: i64) -> Stamp {
        self.latest_ms = self.latest_ms.max(ms);
        let seq = self.next_seq;
        self.next_seq += 1;
        Stamp { ms, seq }
    }

    /// The sequence number the next release will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether a pass of the cycle has work left that only reclaim created.
    pub fn has_pending(&self) -> bool {
        (self.stale && !self.retry.is_empty())
            || !self.room_check.is_empty()
            || !self.touch.is_empty()
    }

    /// How many times the unit of `key` was sent back.
    pub fn sent_back(&self, key: &str) -> u32 {
        self.sent_back_times.get(key).map_or(0, |(n, _)| *n)
    }

    /// Counts a send-back of the unit of `key` at `now_ms`.
    pub fn note_sent_back(&mut self, key: &Arc<str>, now_ms: i64) {
        let n = self
            .sent_back_times
            .entry(Arc::clone(key))
            .or_insert((0, now_ms));
        *n = (n.0.saturating_add(1), now_ms);
    }

    /// Takes back the count of a send-back that was not done (its write
    /// failed: the unit kept running).
    pub fn unnote_sent_back(&mut self, key: &str) {
        if let Some(n) = self.sent_back_times.get_mut(key) {
            n.0 = n.0.saturating_sub(1);
        }
    }

    /// Forgets the plan of `id`: its request is no longer promised and the
    /// pauses it held are lifted (recorded in `relaxed`). Its victims stay
    /// in flight, waiting for nobody.
    pub fn drop_plan(
        &mut self,
        id: UnitId,
        tree: &mut QuotaTree,
        relaxed: &mut HashSet<Blocker>,
    ) -> Option<Plan> {
        let plan = self.plans.remove(&id)?;
        tree.mark_promised(plan.quota, &plan.promised, false);
        for &(scope, k) in &plan.pauses {
            if tree.add_waiters(scope, k, -1) {
                relaxed.insert(Blocker::Reclaim(scope, k));
            }
        }
        for v in &plan.victims {
            if let Some(waiting) = self.victims.get_mut(v) {
                *waiting = None;
            }
        }
        if let Some(q) = plan.quota {
            // Less is promised in its quota: others there may be within the min now.
            self.room_check.push(q);
        }
        Some(plan)
    }

    /// Lists a unit that starts holding quota (or is no longer reclaimed).
    pub fn list(&mut self, tree: &QuotaTree, id: UnitId, u: &UnitEntry) {
        if let Some((_, since)) = u.holding() {
            self.index.insert(tree, VictimKey::of(u, id, since));
        }
    }

    /// Unlists a holding unit (it stops holding, or is being reclaimed).
    pub fn unlist(&mut self, tree: &QuotaTree, id: UnitId, u: &UnitEntry) {
        if let Some((_, since)) = u.holding() {
            self.index.remove(tree, &VictimKey::of(u, id, since));
        }
    }
}
