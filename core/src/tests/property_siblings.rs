//! Randomized check of fairness across the tree (issue 44): random trees of
//! two parents over five leaves under a cpu capacity, each leaf's queue
//! with preemption inside its quota and across siblings (`withinParent`)
//! on or off, a reserving head or not, a minimum run time or not; units of
//! random priorities, sizes and run times submitted, released, ended when
//! their run is over, sent back by reclaims and preemptions and returning
//! from their backoff, while time passes (`Core::set_now`).
//!
//! After every cycle:
//! - no max is exceeded at any level of the tree, nor the capacity,
//!   recomputed from the held units (victims in flight included: they
//!   hold until freed);
//! - no min is broken by a preemption: every quota a preemption took from
//!   (below the one it shares with the preemptor) keeps at least its min
//!   once that preemption's victims and every victim taken before are gone
//!   (checked in the cycles that withdrew no decision: the model does not
//!   see a unit released and taken back within a cycle);
//! - no unit is preempted by a unit it displaced, nor preempted once it
//!   was sent back `maxPerUnit` times (reclaim for a guaranteed unit may
//!   still take it, as the min stays a guarantee, and its message says so);
//! - a unit held back for having been sent back too often was sent back
//!   twice and the cluster is busy (half its capacity or more in use).
//!
//! - a unit that can never fit (some submitted units ask for more than
//!   their leaf's max, an ancestor's or the capacity) never reserves, holds
//!   no one back, sends no one back, and its reason says it never fits.
//!
//! At the end every victim is freed, every sent-back unit returns, and time
//! runs until every unit that fits alone has run: nothing waits for ever
//! (a unit that can never fit may).

use std::collections::{BTreeMap, BTreeSet};

use koord_queue_model::{Preemption, PreemptionPolicy, QueuePolicy, Reserve};
use proptest::prelude::*;

use super::quota_core;
use crate::{Core, CycleOutput, QueueDef, QuotaDef, ReclaimKind, UnitDef, WaitReason};

const PARENTS: [&str; 2] = ["p0", "p1"];
/// Leaves and their parent (index into `PARENTS`).
const LEAVES: [(&str, usize); 5] = [("a", 0), ("b", 0), ("c", 0), ("d", 1), ("e", 1)];
const MAX_PER_UNIT: u32 = Preemption::DEFAULT_MAX_PER_UNIT;

/// A leaf's queue settings.
#[derive(Clone, Copy, Debug)]
struct QueueSpec {
    within_quota: PreemptionPolicy,
    within_parent: PreemptionPolicy,
    reserve: bool,
    min_run_s: i64,
}

fn policy() -> impl Strategy<Value = PreemptionPolicy> {
    prop_oneof![
        2 => Just(PreemptionPolicy::Never),
        3 => Just(PreemptionPolicy::LowerPriority),
        1 => Just(PreemptionPolicy::LowerOrNewerEqualPriority),
    ]
}

fn queue_spec() -> impl Strategy<Value = QueueSpec> {
    (
        policy(),
        policy(),
        any::<bool>(),
        prop_oneof![Just(0i64), Just(3)],
    )
        .prop_map(
            |(within_quota, within_parent, reserve, min_run_s)| QueueSpec {
                within_quota,
                within_parent,
                reserve,
                min_run_s,
            },
        )
}

/// A tree: capacity, then per quota (parents, then leaves) a min and a
/// max as fractions (percent) of what they may have; mins never add up
/// beyond the parent's min (or the capacity), so no min is scaled down.
#[derive(Clone, Debug)]
struct Tree {
    capacity: i64,
    min: [i64; 7],
    max: [i64; 7],
}

fn tree() -> impl Strategy<Value = Tree> {
    (
        6..=16i64,
        prop::array::uniform7(0..=100i64),
        prop::array::uniform7(0..=100i64),
    )
        .prop_map(|(capacity, min_pct, max_pct)| {
            let mut min = [0i64; 7];
            let mut max = [0i64; 7];
            // Parents share the capacity's min; their max is from their min
            // up to the capacity.
            let mut left = capacity;
            for p in 0..2 {
                min[p] = left * min_pct[p] / 100;
                left -= min[p];
                max[p] = (min[p] + (capacity - min[p]) * max_pct[p] / 100).max(1);
            }
            // Leaves share their parent's min; a max from their min up to
            // the capacity (above the parent's: only the parent binds).
            let mut share = [min[0], min[1]];
            for (i, (_, parent)) in LEAVES.iter().enumerate() {
                let q = 2 + i;
                min[q] = share[*parent] * min_pct[q] / 100;
                share[*parent] -= min[q];
                max[q] = (min[q] + (capacity - min[q]) * max_pct[q] / 100).max(1);
            }
            Tree { capacity, min, max }
        })
}

#[derive(Clone, Debug)]
enum Event {
    Submit {
        leaf: usize,
        prio: i32,
        cpu: i64,
        run_s: i64,
        bounded: bool,
        /// `cpu` more than fits alone (its leaf's max, an ancestor's or
        /// the capacity): it can never fit; else at most what fits alone.
        oversize: bool,
    },
    Cycle,
    /// Time passes (s): units whose run is over end.
    Advance(i64),
    /// The controller re-suspends victims chosen by the mask: they leave
    /// for their backoff, or (odd positions) wait again at once.
    FreeVictims(u8),
    /// A unit back from its backoff.
    Return(usize),
    /// A victim's re-suspension could not be written.
    Cancel(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (
            0..5usize,
            0..4i32,
            1..=4i64,
            1..8i64,
            any::<bool>(),
            prop::bool::weighted(0.15),
        )
            .prop_map(|(leaf, prio, cpu, run_s, bounded, oversize)| Event::Submit {
                leaf,
                prio,
                cpu,
                run_s,
                bounded,
                oversize,
            }),
        6 => Just(Event::Cycle),
        2 => (1..6i64).prop_map(Event::Advance),
        4 => any::<u8>().prop_map(Event::FreeVictims),
        4 => any::<usize>().prop_map(Event::Return),
        1 => any::<usize>().prop_map(Event::Cancel),
    ]
}

#[derive(Clone, Debug)]
struct Unit {
    leaf: usize,
    prio: i32,
    /// Millicores.
    cpu: i64,
    run_ms: i64,
    bounded: bool,
    created: i64,
}

impl Unit {
    fn def(&self, key: &str) -> UnitDef {
        let name = key.trim_start_matches("ns/");
        let def = UnitDef::new("ns", name)
            .with_quota(LEAVES[self.leaf].0)
            .with_priority(self.prio)
            .created_at(self.created)
            .requesting("cpu", self.cpu);
        if self.bounded {
            def.running_at_most(self.run_ms)
        } else {
            def
        }
    }
}

#[derive(Debug)]
struct Model {
    tree: Tree,
    now: i64,
    next: usize,
    units: BTreeMap<String, Unit>,
    waiting: BTreeSet<String>,
    /// Held units, with the time they were released.
    held: BTreeMap<String, i64>,
    /// Victims in flight, with the unit they were taken for.
    in_flight: BTreeMap<String, String>,
    /// Units in their backoff (sent back, not in the core).
    backoff: BTreeSet<String>,
    /// (preemptor, victim) of every preemption so far.
    displaced: BTreeSet<(String, String)>,
    sent_back: BTreeMap<String, u32>,
}

impl Model {
    fn new(tree: Tree) -> Self {
        Self {
            tree,
            now: 1_000_000,
            next: 0,
            units: BTreeMap::new(),
            waiting: BTreeSet::new(),
            held: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            backoff: BTreeSet::new(),
            displaced: BTreeSet::new(),
            sent_back: BTreeMap::new(),
        }
    }

    fn core(&self, specs: &[QueueSpec; 5]) -> Result<Core, TestCaseError> {
        let t = &self.tree;
        let mut core = quota_core(t.capacity);
        let fail = |e: crate::CoreError| TestCaseError::fail(e.to_string());
        for (p, name) in PARENTS.iter().enumerate() {
            core.upsert_quota(
                &QuotaDef::new(*name)
                    .parent_node()
                    .min("cpu", t.min[p] * 1000)
                    .max("cpu", t.max[p] * 1000),
            )
            .map_err(fail)?;
        }
        for (i, (leaf, parent)) in LEAVES.iter().enumerate() {
            let s = specs[i];
            let mut queue = QueueDef::new(*leaf)
                .with_policy(QueuePolicy::Priority)
                .with_preemption(Preemption {
                    policy: s.within_quota,
                    within_parent: s.within_parent,
                    min_run_ms: s.min_run_s * 1000,
                    ..Default::default()
                });
            if s.reserve {
                queue = queue.with_reserve(Reserve {
                    after_ms: None,
                    above_priority: Some(2),
                });
            }
            core.upsert_queue(&queue);
            core.upsert_quota(
                &QuotaDef::new(*leaf)
                    .under(PARENTS[*parent])
                    .min("cpu", t.min[2 + i] * 1000)
                    .max("cpu", t.max[2 + i] * 1000),
            )
            .map_err(fail)?;
        }
        core.set_now(self.now);
        Ok(core)
    }

    /// The quotas (indices: parents 0–1, leaves 2–6) a unit of `leaf` uses.
    fn path(leaf: usize) -> [usize; 2] {
        [2 + leaf, LEAVES[leaf].1]
    }

    /// Cpu held under each quota and the root (victims in flight too).
    fn usage(&self) -> ([i64; 7], i64) {
        let mut q = [0i64; 7];
        let mut root = 0;
        for key in self.held.keys() {
            let u = &self.units[key];
            for a in Self::path(u.leaf) {
                q[a] += u.cpu;
            }
            root += u.cpu;
        }
        (q, root)
    }

    fn fits_alone(&self, u: &Unit) -> bool {
        Self::path(u.leaf)
            .iter()
            .all(|a| u.cpu <= self.tree.max[*a] * 1000)
            && u.cpu <= self.tree.capacity * 1000
    }

    fn apply(&mut self, core: &mut Core, e: &Event) -> Result<(), TestCaseError> {
        match e {
            Event::Submit {
                leaf,
                prio,
                cpu,
                run_s,
                bounded,
                oversize,
            } => {
                self.next += 1;
                let key = format!("ns/u{:03}", self.next);
                // What fits alone: the tightest max on its path, or the
                // capacity. An oversize unit asks for more: it may wait for
                // ever, but never reserves nor holds anyone back.
                let most = Self::path(*leaf)
                    .iter()
                    .map(|a| self.tree.max[*a])
                    .min()
                    .unwrap_or(1)
                    .min(self.tree.capacity);
                let cores = if *oversize {
                    most + cpu
                } else {
                    (*cpu).min(most)
                };
                let unit = Unit {
                    leaf: *leaf,
                    prio: *prio,
                    cpu: cores * 1000,
                    run_ms: run_s * 1000,
                    bounded: *bounded,
                    created: self.now,
                };
                core.upsert_unit(&unit.def(&key))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                self.units.insert(key.clone(), unit);
                self.waiting.insert(key);
            }
            Event::Cycle => self.cycle(core)?,
            Event::Advance(s) => self.advance(core, s * 1000)?,
            Event::FreeVictims(mask) => {
                let victims: Vec<String> = self.in_flight.keys().cloned().collect();
                for (i, key) in victims.iter().enumerate() {
                    if mask & (1 << (i % 8)) != 0 {
                        self.free_victim(core, key, i % 2 == 1)?;
                    }
                }
            }
            Event::Return(i) => {
                if let Some(key) = nth(&self.backoff, *i) {
                    self.back(core, &key)?;
                }
            }
            Event::Cancel(i) => {
                let victims: BTreeSet<String> = self.in_flight.keys().cloned().collect();
                if let Some(key) = nth(&victims, *i) {
                    core.cancel_reclaim(&key)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.in_flight.remove(&key);
                    if let Some(n) = self.sent_back.get_mut(&key) {
                        *n -= 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn back(&mut self, core: &mut Core, key: &str) -> Result<(), TestCaseError> {
        self.backoff.remove(key);
        let def = self.units[key].def(key);
        core.upsert_unit(&def)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.waiting.insert(key.to_string());
        Ok(())
    }

    fn free_victim(
        &mut self,
        core: &mut Core,
        key: &str,
        back_in_line: bool,
    ) -> Result<(), TestCaseError> {
        self.in_flight.remove(key);
        self.held.remove(key);
        if back_in_line {
            core.free(key)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            self.waiting.insert(key.to_string());
        } else {
            prop_assert!(core.remove_unit(key));
            self.backoff.insert(key.to_string());
        }
        Ok(())
    }

    /// Time passes: units whose run is over end (victims too: their job
    /// ended before it was re-suspended).
    fn advance(&mut self, core: &mut Core, ms: i64) -> Result<(), TestCaseError> {
        self.now += ms;
        core.set_now(self.now);
        let over: Vec<String> = self
            .held
            .iter()
            .filter(|(k, since)| **since + self.units[*k].run_ms <= self.now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in over {
            prop_assert!(core.remove_unit(&key));
            self.held.remove(&key);
            self.in_flight.remove(&key);
        }
        Ok(())
    }

    fn cycle(&mut self, core: &mut Core) -> Result<(), TestCaseError> {
        let out = core.run_cycle();
        for d in &out.decisions {
            let key = d.unit.to_string();
            prop_assert!(self.waiting.remove(&key), "released {key}, not waiting");
            self.held.insert(key, self.now);
        }
        self.take_reclaims(&out)?;
        self.assert_max()?;
        self.assert_held_back(core)?;
        self.assert_never_fits_holds_no_one(core, &out)?;
        Ok(())
    }

    /// A unit that can never fit is never released (`assert_max`), never
    /// reserves, holds no one back (in its queue or across), sends no one
    /// back, and says which limit it exceeds alone.
    fn assert_never_fits_holds_no_one(
        &self,
        core: &Core,
        out: &CycleOutput,
    ) -> Result<(), TestCaseError> {
        let never = |key: &str| self.units.get(key).is_some_and(|u| !self.fits_alone(u));
        for r in &out.reclaims {
            prop_assert!(
                !never(&r.for_unit),
                "{} sent back for {}, which can never fit",
                r.victim,
                r.for_unit
            );
        }
        for key in &self.waiting {
            let Some(reason) = core.reason(key) else {
                continue;
            };
            match reason {
                WaitReason::ReservedBehind { unit, .. }
                | WaitReason::ReservedAcross { unit, .. } => {
                    prop_assert!(
                        !never(unit),
                        "{key} waits behind {unit}, which can never fit: {reason}"
                    );
                }
                WaitReason::Reserving { .. }
                | WaitReason::Reclaiming { .. }
                | WaitReason::Preempting { .. } => {
                    prop_assert!(!never(key), "{key} can never fit: {reason}");
                }
                WaitReason::QuotaMax { shortfall, .. } | WaitReason::Capacity { shortfall, .. } => {
                    prop_assert_eq!(shortfall.never_fits(), never(key), "{}: {}", key, reason);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks a cycle's victims in the order they were taken and records
    /// them as in flight.
    fn take_reclaims(&mut self, out: &CycleOutput) -> Result<(), TestCaseError> {
        for (i, r) in out.reclaims.iter().enumerate() {
            let (victim, by) = (r.victim.to_string(), r.for_unit.to_string());
            prop_assert!(self.held.contains_key(&victim), "took {victim}, not held");
            prop_assert!(
                self.in_flight.insert(victim.clone(), by.clone()).is_none(),
                "took {victim} twice"
            );
            let before = self.sent_back.get(&victim).copied().unwrap_or(0);
            self.sent_back.insert(victim.clone(), before + 1);
            prop_assert_eq!(r.times, before + 1);
            if before >= MAX_PER_UNIT {
                prop_assert!(
                    r.message().contains("sent back"),
                    "a third send-back says so: {}",
                    r.message()
                );
            }
            let ReclaimKind::Preempted { .. } = r.kind else {
                continue;
            };
            prop_assert!(
                !self.displaced.contains(&(victim.clone(), by.clone())),
                "{by} preempted {victim}, which it had displaced"
            );
            prop_assert!(
                before < MAX_PER_UNIT,
                "{victim} preempted after {before} send-backs"
            );
            self.displaced.insert((by.clone(), victim.clone()));
            let last_of_preemption = out.reclaims.get(i + 1).is_none_or(|n| {
                *n.for_unit != *r.for_unit || !matches!(n.kind, ReclaimKind::Preempted { .. })
            });
            // A decision withdrawn in the cycle is a unit the model never
            // saw held: one released before the preemption, counted by it,
            // and taken back after it by a reclaim (whole units while a
            // quota is above its min) would be blamed on the preemption.
            if last_of_preemption && out.stats.withdrawn == 0 {
                self.assert_min_kept(out, i)?;
            }
        }
        Ok(())
    }

    /// No min broken by a preemption: once the victims up to the `i`-th
    /// of the cycle (a preemption's last) are gone, with every victim
    /// taken before, each quota it took from below the one it shares with
    /// the preemptor keeps its min. (A reclaim for a guaranteed unit later
    /// in the cycle may take more: reclaim takes while a quota is above its
    /// min, whole units.)
    fn assert_min_kept(&self, out: &CycleOutput, i: usize) -> Result<(), TestCaseError> {
        let later: BTreeSet<&str> = out.reclaims[i + 1..].iter().map(|r| &*r.victim).collect();
        let mut kept = [0i64; 7];
        for key in self.held.keys() {
            if self.in_flight.contains_key(key) && !later.contains(key.as_str()) {
                continue;
            }
            for a in Self::path(self.units[key].leaf) {
                kept[a] += self.units[key].cpu;
            }
        }
        let by = &*out.reclaims[i].for_unit;
        let shared = Self::path(self.units[by].leaf);
        for r in out.reclaims[..=i].iter().rev() {
            if &*r.for_unit != by || !matches!(r.kind, ReclaimKind::Preempted { .. }) {
                break;
            }
            for a in Self::path(self.units[&*r.victim].leaf) {
                if shared.contains(&a) {
                    break;
                }
                prop_assert!(
                    kept[a] >= self.tree.min[a] * 1000,
                    "preempting for {by} took quota {a} to {} m, below its min {}",
                    kept[a],
                    self.tree.min[a]
                );
            }
        }
        Ok(())
    }

    fn assert_max(&self) -> Result<(), TestCaseError> {
        let (used, root) = self.usage();
        for (a, u) in used.iter().enumerate() {
            prop_assert!(
                *u <= self.tree.max[a] * 1000,
                "quota {a} holds {u} m, max {}",
                self.tree.max[a]
            );
        }
        prop_assert!(root <= self.tree.capacity * 1000, "root holds {root} m");
        Ok(())
    }

    /// A unit held back for its send-backs was sent back twice, and the
    /// cluster is busy.
    fn assert_held_back(&self, core: &Core) -> Result<(), TestCaseError> {
        let (_, root) = self.usage();
        for key in &self.waiting {
            if let Some(WaitReason::SentBackTooOften { times, .. }) = core.reason(key) {
                let n = self.sent_back.get(key).copied().unwrap_or(0);
                prop_assert!(n >= MAX_PER_UNIT && *times == n, "{key}: {times} vs {n}");
                prop_assert!(
                    root * 2 >= self.tree.capacity * 1000,
                    "{key} held back in an idle cluster ({root} m)"
                );
            }
        }
        Ok(())
    }

    /// Frees every victim, brings back every sent-back unit and lets time
    /// run until nothing that fits alone waits.
    fn drain(&mut self, core: &mut Core, rounds: usize) -> Result<(), TestCaseError> {
        for _ in 0..rounds {
            let victims: Vec<String> = self.in_flight.keys().cloned().collect();
            for key in victims {
                self.free_victim(core, &key, false)?;
            }
            let back: Vec<String> = self.backoff.iter().cloned().collect();
            for key in back {
                self.back(core, &key)?;
            }
            self.cycle(core)?;
            self.cycle(core)?;
            let runs = self.units.values().map(|u| u.run_ms).max().unwrap_or(0);
            self.advance(core, runs.max(3_000))?;
            let open = self.waiting.iter().any(|k| self.fits_alone(&self.units[k]));
            if !open && self.held.is_empty() && self.backoff.is_empty() {
                return Ok(());
            }
        }
        let left: Vec<String> = self
            .waiting
            .iter()
            .filter(|k| self.fits_alone(&self.units[*k]))
            .map(|k| format!("{k}: {}", super::reason_text(core, k)))
            .collect();
        prop_assert!(left.is_empty(), "never released: {left:#?}");
        prop_assert!(self.held.is_empty() && self.backoff.is_empty());
        Ok(())
    }
}

fn nth(set: &BTreeSet<String>, i: usize) -> Option<String> {
    if set.is_empty() {
        None
    } else {
        set.iter().nth(i % set.len()).cloned()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn across_the_tree_no_max_exceeded_no_min_broken_no_swap_back(
        tree in tree(),
        specs in prop::array::uniform5(queue_spec()),
        events in proptest::collection::vec(event(), 1..200)
    ) {
        let mut model = Model::new(tree);
        let mut core = model.core(&specs)?;
        for e in &events {
            model.apply(&mut core, e)?;
        }
        model.drain(&mut core, events.len() + 4)?;
    }
}
