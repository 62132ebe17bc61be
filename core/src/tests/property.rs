//! Randomized check of the core against an independent model: arbitrary
//! sequences of submissions, completions, deletions, failed writes, quota,
//! capacity, namespace-quota and policy changes.
//!
//! After every cycle:
//! - no limit (max at any level, capacity, ResourceQuota) that the cycle
//!   added usage under is exceeded, recomputed from the held units — units
//!   being reclaimed included, as they hold quota until freed;
//! - the cycle is maximal: no waiting unit that a full, from-scratch
//!   evaluation would release is left waiting (this is what checks that the
//!   incremental shortcuts never miss anything), except borrowers paused
//!   while a guaranteed unit waits for reclaimed resources and borrowers
//!   sent back twice, held back in a busy cluster;
//! - every reclaim takes a unit that holds quota and is not being reclaimed
//!   already, in another quota than the guaranteed unit's (and not an
//!   ancestor of it), for a waiting unit of a queue with reclaim on; a unit
//!   waiting for reclaimed resources has them in flight;
//! - the core's accounting equals the model's (nothing lost, nothing counted twice).
//!
//! Victims are freed (removed or freed), or their reclaim cancelled, by
//! events. Before the end, victims are freed cycle after cycle until no
//! reclaim is in flight: then no unit waits for reclaimed resources any more
//! (every guaranteed unit got what was reclaimed for it, or planned again).
//! At the end everything is finished repeatedly: every unit that fits on its
//! own into the empty cluster is released.

// The model keeps parallel arrays indexed by resource, quota and queue
// number; index loops read more plainly than zipped iterators here.
#![allow(clippy::needless_range_loop)]

use std::collections::{BTreeMap, BTreeSet};

use koord_queue_model::{QueuePolicy, Resources};
use proptest::prelude::*;

use crate::{Core, QueueDef, QuotaDef, RootCapacity, UnitDef, WaitReason};

const QUOTAS: [&str; 6] = ["p0", "p1", "l0", "l1", "l2", "l3"];
const P1: usize = 1;
const L3: usize = 5;
/// Queues: one per leaf quota, and `default` for units without a quota.
const QUEUES: [&str; 5] = ["l0", "l1", "l2", "l3", "default"];
const RES: [&str; 2] = ["cpu", "nvidia.com/gpu"];

#[derive(Clone, Debug)]
enum Event {
    Submit {
        queue: usize,
        ns: usize,
        prio: i32,
        cpu: i64,
        gpu: i64,
    },
    Finish(usize),
    Delete(usize),
    Free(usize),
    SetMax {
        quota: usize,
        res: usize,
        max: Option<i64>,
    },
    SetMin {
        quota: usize,
        min: i64,
    },
    MoveL3 {
        under_p1: bool,
    },
    Toggle(usize),
    /// Fair sharing on or off at a parent, and a weight of one quota.
    Fair {
        parent: usize,
        on: bool,
        quota: usize,
        weight_milli: i64,
    },
    Capacity(Option<[Option<i64>; 2]>),
    NsQuota {
        ns: usize,
        hard: Option<i64>,
    },
    Policy {
        queue: usize,
        block: bool,
    },
    Reclaim {
        queue: usize,
        on: bool,
    },
    /// The controller frees victims (chosen by the mask): re-suspended and
    /// removed, or (odd positions) suspended and waiting again.
    FreeVictims(u8),
    /// The controller could not re-suspend a victim.
    CancelReclaim(usize),
    Cycle {
        fail_mask: u8,
    },
}

fn event() -> impl Strategy<Value = Event> {
    events([8, 3, 5, 3], 6)
}

/// Submissions, victims freed, cycles and finished units weigh `w[0]` to
/// `w[3]`; units ask for less than `cpus` cores.
fn events(w: [u32; 4], cpus: i64) -> impl Strategy<Value = Event> {
    use proptest::option::of;
    prop_oneof![
        w[0] => (0..5usize, 0..2usize, 0..3i32, 0..cpus, 0..3i64).prop_map(|(queue, ns, prio, cpu, gpu)| {
            Event::Submit { queue, ns, prio, cpu: cpu * 1000, gpu }
        }),
        w[3] => any::<usize>().prop_map(Event::Finish),
        1 => any::<usize>().prop_map(Event::Delete),
        1 => any::<usize>().prop_map(Event::Free),
        2 => (0..6usize, 0..2usize, of(0..14i64)).prop_map(|(quota, res, max)| Event::SetMax {
            quota,
            res,
            max: max.map(|m| if res == 0 { m * 1000 } else { m }),
        }),
        1 => (0..6usize, 0..8i64).prop_map(|(quota, min)| Event::SetMin { quota, min: min * 1000 }),
        1 => any::<bool>().prop_map(|under_p1| Event::MoveL3 { under_p1 }),
        1 => (0..6usize).prop_map(Event::Toggle),
        1 => (0..2usize, any::<bool>(), 0..6usize, 1..4000i64).prop_map(|(parent, on, quota, weight_milli)| {
            Event::Fair { parent, on, quota, weight_milli }
        }),
        2 => of((of(0..25i64), of(0..5i64))).prop_map(|c| {
            Event::Capacity(c.map(|(cpu, gpu)| [cpu.map(|c| c * 1000), gpu]))
        }),
        1 => (0..2usize, of(0..15i64)).prop_map(|(ns, hard)| Event::NsQuota {
            ns,
            hard: hard.map(|h| h * 1000),
        }),
        1 => (0..5usize, any::<bool>()).prop_map(|(queue, block)| Event::Policy { queue, block }),
        1 => (0..5usize, prop::bool::weighted(0.7)).prop_map(|(queue, on)| Event::Reclaim { queue, on }),
        w[1] => any::<u8>().prop_map(Event::FreeVictims),
        1 => any::<usize>().prop_map(Event::CancelReclaim),
        w[2] => any::<u8>().prop_map(|m| Event::Cycle { fail_mask: if m < 180 { 0 } else { m } }),
    ]
}

#[derive(Clone, Debug)]
struct QuotaModel {
    parent: Option<usize>,
    is_parent: bool,
    min: i64,
    max: [Option<i64>; 2],
    defined: bool,
    fair: bool,
    weight_milli: i64,
}

#[derive(Clone, Debug)]
struct UnitModel {
    ns: usize,
    quota: Option<usize>,
    queue: usize,
    prio: i32,
    created: i64,
    req: [i64; 2],
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cap {
    Unknown,
    Unlimited,
    Limited([Option<i64>; 2]),
}

/// Usage recomputed from the held units.
#[derive(Clone, Debug, PartialEq)]
struct Usage {
    quota: [[i64; 2]; 6],
    root: [i64; 2],
    ns_cpu: [i64; 2],
}

#[derive(Debug)]
struct Model {
    quotas: Vec<QuotaModel>,
    cap: Cap,
    ns_hard: [Option<i64>; 2],
    block: [bool; 5],
    reclaim: [bool; 5],
    waiting: BTreeMap<String, UnitModel>,
    held: BTreeMap<String, UnitModel>,
    /// Held units being reclaimed, with the unit they were reclaimed for.
    in_flight: BTreeMap<String, String>,
    next: i64,
}

impl Model {
    /// A tree where reclaim happens often: real mins everywhere but `l3`,
    /// and a known capacity that the mins fill.
    fn reclaim_heavy() -> Self {
        let mut m = Self::new();
        let mins = [8, 2, 4, 4, 2, 0];
        for (q, min) in mins.iter().enumerate() {
            m.quotas[q].min = min * 1000;
        }
        m.quotas[0].max = [Some(12_000), None];
        m.cap = Cap::Limited([Some(10_000), Some(4)]);
        m
    }

    fn new() -> Self {
        let q = |parent, is_parent, min: i64, cpu_max: Option<i64>, gpu_max| QuotaModel {
            parent,
            is_parent,
            min: min * 1000,
            max: [cpu_max.map(|m| m * 1000), gpu_max],
            defined: true,
            fair: false,
            weight_milli: 1000,
        };
        Self {
            quotas: vec![
                q(None, true, 6, Some(10), None),
                q(None, true, 0, None, Some(3)),
                q(Some(0), false, 4, Some(6), None),
                q(Some(0), false, 4, None, None),
                q(Some(1), false, 0, None, Some(2)),
                q(None, false, 0, None, None),
            ],
            cap: Cap::Unknown,
            ns_hard: [None, None],
            block: [false; 5],
            reclaim: [true; 5],
            waiting: BTreeMap::new(),
            held: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            next: 0,
        }
    }

    fn def(&self, q: usize) -> QuotaDef {
        let m = &self.quotas[q];
        let mut d = QuotaDef::new(QUOTAS[q]).min("cpu", m.min);
        d.parent = m.parent.map(|p| QUOTAS[p].to_string());
        d.is_parent = m.is_parent;
        d.fair_sharing = m.fair;
        d.weight_milli = m.weight_milli;
        for (r, max) in m.max.iter().enumerate() {
            if let Some(max) = max {
                d.max.set(RES[r], *max);
            }
        }
        d
    }

    /// The quota and its ancestors, if all are defined.
    fn path(&self, q: usize) -> Option<Vec<usize>> {
        let mut out = vec![q];
        let mut cur = q;
        loop {
            let m = &self.quotas[cur];
            if !m.defined {
                return None;
            }
            match m.parent {
                None => return Some(out),
                Some(p) => {
                    out.push(p);
                    cur = p;
                }
            }
        }
    }

    fn usage(&self) -> Usage {
        let mut u = Usage {
            quota: [[0; 2]; 6],
            root: [0; 2],
            ns_cpu: [0; 2],
        };
        for unit in self.held.values() {
            for r in 0..2 {
                u.root[r] += unit.req[r];
            }
            u.ns_cpu[unit.ns] += unit.req[0];
            if let Some(q) = unit.quota {
                let nodes = self.path(q).unwrap_or_else(|| vec![q]);
                for n in nodes {
                    for r in 0..2 {
                        u.quota[n][r] += unit.req[r];
                    }
                }
            }
        }
        u
    }

    /// Whether a full evaluation would let `unit` through given `used`.
    fn fits(&self, unit: &UnitModel, used: &Usage) -> bool {
        if let Some(q) = unit.quota {
            let Some(path) = self.path(q) else {
                return false;
            };
            for n in path {
                for r in 0..2 {
                    if unit.req[r] > 0
                        && let Some(max) = self.quotas[n].max[r]
                        && used.quota[n][r] + unit.req[r] > max
                    {
                        return false;
                    }
                }
            }
        }
        if unit.req.iter().any(|r| *r > 0) {
            match self.cap {
                Cap::Unknown => return false,
                Cap::Unlimited => {}
                Cap::Limited(cap) => {
                    for r in 0..2 {
                        if unit.req[r] > 0
                            && let Some(c) = cap[r]
                            && used.root[r] + unit.req[r] > c
                        {
                            return false;
                        }
                    }
                }
            }
        }
        if unit.req[0] > 0
            && let Some(h) = self.ns_hard[unit.ns]
            && used.ns_cpu[unit.ns] + unit.req[0] > h
        {
            return false;
        }
        true
    }

    /// Waiting units of queue `q` in serving order.
    fn line(&self, q: usize) -> Vec<(&String, &UnitModel)> {
        let mut line: Vec<_> = self.waiting.iter().filter(|(_, u)| u.queue == q).collect();
        line.sort_by(|(ka, a), (kb, b)| {
            (-a.prio, a.created, ka.as_str()).cmp(&(-b.prio, b.created, kb.as_str()))
        });
        line
    }

    /// Asserts that no unit a from-scratch evaluation would release still
    /// waits, unless it borrows while a guaranteed unit waits for reclaim.
    fn assert_maximal(&self, core: &Core, used: &Usage) -> Result<(), TestCaseError> {
        let waiting_for_reclaim = self
            .waiting
            .keys()
            .any(|k| matches!(core.reason(k), Some(WaitReason::Reclaiming { .. })));
        for q in 0..QUEUES.len() {
            let line = self.line(q);
            let candidates = if self.block[q] {
                &line[..line.len().min(1)]
            } else {
                &line[..]
            };
            for (key, unit) in candidates {
                if !self.fits(unit, used) {
                    continue;
                }
                let reason = core.reason(key);
                if let Some(WaitReason::SentBackTooOften { times, .. }) = reason {
                    // Sent back twice: it borrows again only in an idle
                    // cluster (property_siblings.rs checks the rule).
                    prop_assert!(*times >= 2, "{key}: {reason:?}");
                    continue;
                }
                prop_assert!(
                    matches!(reason, Some(WaitReason::BorrowingPaused { .. }))
                        && waiting_for_reclaim,
                    "{key} in {} fits but was not released: {unit:?}, usage {used:?}, reason {reason:?}",
                    QUEUES[q]
                );
            }
        }
        Ok(())
    }

    /// Whether quota `a` is `q` or one of its ancestors.
    fn is_on_path(&self, a: usize, q: usize) -> bool {
        self.path(q).is_some_and(|p| p.contains(&a))
    }

    /// Checks a cycle's reclaims and records them as in flight.
    fn take_reclaims(&mut self, out: &crate::CycleOutput) -> Result<(), TestCaseError> {
        for r in &out.reclaims {
            let victim = r.victim.to_string();
            let for_unit = r.for_unit.to_string();
            let v = self.held.get(&victim);
            prop_assert!(v.is_some(), "reclaimed {victim}, which does not hold quota");
            prop_assert!(
                !self.in_flight.contains_key(&victim),
                "reclaimed {victim} twice"
            );
            let f = self.waiting.get(&for_unit);
            prop_assert!(
                f.is_some(),
                "reclaimed for {for_unit}, which is not waiting"
            );
            let (Some(v), Some(f)) = (v, f) else { break };
            if let crate::ReclaimKind::Preempted { .. } = r.kind {
                // Preemption: from its own quota, of lower priority (or
                // equal and newer), by a queue that preempts.
                let policy = preemption_of(f.queue).policy;
                prop_assert!(
                    policy != koord_queue_model::PreemptionPolicy::Never,
                    "{for_unit} preempted in a queue that does not preempt"
                );
                prop_assert_eq!(v.quota, f.quota, "{} preempted outside its quota", for_unit);
                prop_assert!(
                    v.prio <= f.prio,
                    "{for_unit} (priority {}) preempted {victim} (priority {})",
                    f.prio,
                    v.prio
                );
                for k in 0..2 {
                    prop_assert_eq!(r.resources.get(RES[k]), v.req[k]);
                }
                self.in_flight.insert(victim, for_unit);
                continue;
            }
            prop_assert!(
                self.reclaim[f.queue],
                "reclaimed for {for_unit} in a queue without reclaim"
            );
            let Some(fq) = f.quota else {
                prop_assert!(false, "reclaimed for {for_unit}, which has no quota");
                break;
            };
            if let Some(vq) = v.quota {
                prop_assert!(
                    !self.is_on_path(vq, fq),
                    "{for_unit} in {} reclaimed {victim} from its own quota path ({})",
                    QUOTAS[fq],
                    QUOTAS[vq]
                );
            }
            for k in 0..2 {
                prop_assert_eq!(r.resources.get(RES[k]), v.req[k]);
            }
            self.in_flight.insert(victim, for_unit);
        }
        Ok(())
    }

    /// Asserts that the units being reclaimed are those the model knows, and
    /// that every unit waiting for reclaimed resources has some in flight.
    fn assert_reclaims(&self, core: &Core) -> Result<(), TestCaseError> {
        let mut flying: Vec<(String, Option<String>)> = core
            .reclaims_in_flight()
            .map(|r| (r.victim.to_string(), r.for_unit.map(str::to_string)))
            .collect();
        flying.sort();
        let keys: BTreeSet<&String> = flying.iter().map(|(v, _)| v).collect();
        prop_assert_eq!(keys, self.in_flight.keys().collect::<BTreeSet<_>>());
        for key in self.waiting.keys() {
            if let Some(
                WaitReason::Reclaiming { victims, .. } | WaitReason::Preempting { victims, .. },
            ) = core.reason(key)
            {
                let mine = flying
                    .iter()
                    .filter(|(_, f)| f.as_deref() == Some(key.as_str()))
                    .count();
                prop_assert_eq!(mine, *victims, "{} waits for {} victims", key, victims);
                prop_assert!(
                    !flying.is_empty(),
                    "{key} waits for reclaim, none in flight"
                );
            }
        }
        Ok(())
    }

    /// Asserts that the cycle added usage only within the limits.
    fn assert_within_limits(&self, before: &Usage, after: &Usage) -> Result<(), TestCaseError> {
        for (q, m) in self.quotas.iter().enumerate() {
            for r in 0..2 {
                if m.defined
                    && after.quota[q][r] > before.quota[q][r]
                    && let Some(max) = m.max[r]
                {
                    prop_assert!(
                        after.quota[q][r] <= max,
                        "{} {} over max: {} > {max}",
                        QUOTAS[q],
                        RES[r],
                        after.quota[q][r]
                    );
                }
            }
        }
        for r in 0..2 {
            if after.root[r] > before.root[r] {
                match self.cap {
                    Cap::Unknown => prop_assert!(false, "released before the capacity was known"),
                    Cap::Unlimited => {}
                    Cap::Limited(cap) => {
                        if let Some(c) = cap[r] {
                            prop_assert!(after.root[r] <= c, "{} over capacity", RES[r]);
                        }
                    }
                }
            }
        }
        for ns in 0..2 {
            if after.ns_cpu[ns] > before.ns_cpu[ns]
                && let Some(h) = self.ns_hard[ns]
            {
                prop_assert!(after.ns_cpu[ns] <= h, "ns{ns} over its ResourceQuota");
            }
        }
        Ok(())
    }

    /// Asserts that the core's accounting matches the held units.
    fn assert_accounting(&self, core: &Core) -> Result<(), TestCaseError> {
        let used = self.usage();
        for (q, m) in self.quotas.iter().enumerate() {
            if !m.defined {
                continue;
            }
            let figures = core.quota_figures(QUOTAS[q]);
            prop_assert!(figures.is_some(), "{} unknown to the core", QUOTAS[q]);
            let got = figures.map(|f| f.used).unwrap_or_default();
            for r in 0..2 {
                prop_assert_eq!(
                    got.get(RES[r]),
                    used.quota[q][r],
                    "{} {}",
                    QUOTAS[q],
                    RES[r]
                );
            }
        }
        let cluster = core.cluster_used();
        for r in 0..2 {
            prop_assert_eq!(cluster.get(RES[r]), used.root[r]);
        }
        let mut holding: Vec<String> = core.holding_units().map(|(k, _)| k.to_string()).collect();
        holding.sort();
        prop_assert_eq!(holding, self.held.keys().cloned().collect::<Vec<_>>());
        let mut pending = 0;
        for q in QUEUES {
            pending += core.queue_counts(q).map_or(0, |c| c.pending);
        }
        prop_assert_eq!(pending, self.waiting.len());
        Ok(())
    }

    /// Runs a cycle, checks it, and fails the writes chosen by `fail_mask`.
    fn cycle(&mut self, core: &mut Core, fail_mask: u8) -> Result<usize, TestCaseError> {
        let before = self.usage();
        let out = core.run_cycle();
        self.take_reclaims(&out)?;
        for d in &out.decisions {
            let key = d.unit.to_string();
            let unit = self.waiting.remove(&key);
            prop_assert!(unit.is_some(), "released {key}, which was not waiting");
            let Some(unit) = unit else { break };
            for r in 0..2 {
                prop_assert_eq!(d.resources.get(RES[r]), unit.req[r]);
            }
            self.held.insert(key, unit);
        }
        let after = self.usage();
        self.assert_within_limits(&before, &after)?;
        self.assert_maximal(core, &after)?;
        self.assert_reclaims(core)?;
        for (i, d) in out.decisions.iter().enumerate() {
            if fail_mask & (1 << (i % 8)) != 0 {
                core.unreserve(&d.unit)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                if let Some(u) = self.held.remove(&*d.unit) {
                    self.waiting.insert(d.unit.to_string(), u);
                }
            }
        }
        self.assert_accounting(core)?;
        Ok(out.decisions.len())
    }

    fn nth_key(map: &BTreeMap<String, UnitModel>, i: usize) -> Option<String> {
        if map.is_empty() {
            None
        } else {
            map.keys().nth(i % map.len()).cloned()
        }
    }

    fn apply(&mut self, core: &mut Core, event: &Event) -> Result<(), TestCaseError> {
        match event {
            Event::Submit {
                queue,
                ns,
                prio,
                cpu,
                gpu,
            } => {
                self.next += 1;
                let name = format!("u{}", self.next);
                let quota = (*queue < 4).then_some(*queue + 2);
                let mut def = UnitDef::new(format!("ns{ns}"), &name)
                    .with_priority(*prio)
                    .created_at(self.next)
                    .requesting("cpu", *cpu)
                    .requesting("nvidia.com/gpu", *gpu);
                if let Some(q) = quota {
                    def = def.with_quota(QUOTAS[q]);
                }
                core.upsert_unit(&def)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                self.waiting.insert(
                    def.key(),
                    UnitModel {
                        ns: *ns,
                        quota,
                        queue: *queue,
                        prio: *prio,
                        created: self.next,
                        req: [*cpu, *gpu],
                    },
                );
            }
            Event::Finish(i) => {
                if let Some(key) = Self::nth_key(&self.held, *i) {
                    prop_assert!(core.remove_unit(&key));
                    self.held.remove(&key);
                    self.in_flight.remove(&key);
                }
            }
            Event::Delete(i) => {
                if let Some(key) = Self::nth_key(&self.waiting, *i) {
                    prop_assert!(core.remove_unit(&key));
                    self.waiting.remove(&key);
                }
            }
            Event::Free(i) => {
                if let Some(key) = Self::nth_key(&self.held, *i) {
                    core.free(&key)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.in_flight.remove(&key);
                    if let Some(u) = self.held.remove(&key) {
                        self.waiting.insert(key, u);
                    }
                }
            }
            Event::FreeVictims(mask) => {
                let victims: Vec<String> = self.in_flight.keys().cloned().collect();
                for (i, key) in victims.into_iter().enumerate() {
                    if mask & (1 << (i % 8)) == 0 {
                        continue;
                    }
                    self.free_victim(core, &key, i % 2 == 1)?;
                }
            }
            Event::CancelReclaim(i) => {
                if let Some(key) = self
                    .in_flight
                    .keys()
                    .nth(i % self.in_flight.len().max(1))
                    .cloned()
                {
                    core.cancel_reclaim(&key)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.in_flight.remove(&key);
                    prop_assert!(!core.is_being_reclaimed(&key));
                    prop_assert!(core.cancel_reclaim(&key).is_err());
                }
            }
            Event::Reclaim { queue, on } => {
                self.reclaim[*queue] = *on;
                self.push_queue(core, *queue);
            }
            Event::SetMax { quota, res, max } => {
                self.quotas[*quota].max[*res] = *max;
                self.push_quota(core, *quota);
            }
            Event::SetMin { quota, min } => {
                self.quotas[*quota].min = *min;
                self.push_quota(core, *quota);
            }
            Event::MoveL3 { under_p1 } => {
                self.quotas[L3].parent = under_p1.then_some(P1);
                self.push_quota(core, L3);
            }
            Event::Fair {
                parent,
                on,
                quota,
                weight_milli,
            } => {
                // Only the order of releases changes: every invariant holds.
                self.quotas[*parent].fair = *on;
                self.quotas[*quota].weight_milli = *weight_milli;
                for q in [*parent, *quota] {
                    if self.quotas[q].defined {
                        self.push_quota(core, q);
                    }
                }
            }
            Event::Toggle(q) => {
                let m = &mut self.quotas[*q];
                m.defined = !m.defined;
                if m.defined {
                    self.push_quota(core, *q);
                } else {
                    prop_assert!(core.remove_quota(QUOTAS[*q]));
                }
            }
            Event::Capacity(cap) => match cap {
                None => {
                    self.cap = Cap::Unlimited;
                    core.set_capacity(&RootCapacity::Unlimited);
                }
                Some(limits) => {
                    self.cap = Cap::Limited(*limits);
                    let mut r = Resources::new();
                    for (i, l) in limits.iter().enumerate() {
                        if let Some(l) = l {
                            r.set(RES[i], *l);
                        }
                    }
                    core.set_capacity(&RootCapacity::Limited(r));
                }
            },
            Event::NsQuota { ns, hard } => {
                self.ns_hard[*ns] = *hard;
                let name = format!("ns{ns}");
                match hard {
                    Some(h) => {
                        let hard: Resources =
                            [("requests.cpu".to_string(), *h)].into_iter().collect();
                        core.set_namespace_quota(&name, &hard, &Resources::new());
                    }
                    None => core.remove_namespace_quota(&name),
                }
            }
            Event::Policy { queue, block } => {
                self.block[*queue] = *block;
                self.push_queue(core, *queue);
            }
            Event::Cycle { fail_mask } => {
                self.cycle(core, *fail_mask)?;
            }
        }
        Ok(())
    }

    fn push_queue(&self, core: &mut Core, q: usize) {
        let policy = if self.block[q] {
            QueuePolicy::Block
        } else {
            QueuePolicy::Priority
        };
        core.upsert_queue(
            &QueueDef::new(QUEUES[q])
                .with_policy(policy)
                .with_reclaim(self.reclaim[q])
                .with_preemption(preemption_of(q)),
        );
    }

    /// The controller re-suspended victim `key`: it is removed (backoff),
    /// or with `back_in_line` waits again.
    fn free_victim(
        &mut self,
        core: &mut Core,
        key: &str,
        back_in_line: bool,
    ) -> Result<(), TestCaseError> {
        self.in_flight.remove(key);
        let Some(u) = self.held.remove(key) else {
            return Ok(());
        };
        if back_in_line {
            core.free(key)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            self.waiting.insert(key.to_string(), u);
        } else {
            prop_assert!(core.remove_unit(key));
        }
        Ok(())
    }

    /// Frees every victim, cycle after cycle, until no reclaim is in
    /// flight; then nothing waits for reclaimed resources.
    fn settle(&mut self, core: &mut Core) -> Result<(), TestCaseError> {
        let bound = self.waiting.len() + self.held.len() + 3;
        for round in 0..=bound {
            self.cycle(core, 0)?;
            if self.in_flight.is_empty() {
                break;
            }
            prop_assert!(round < bound, "reclaims never end: {:?}", self.in_flight);
            let victims: Vec<String> = self.in_flight.keys().cloned().collect();
            for (i, key) in victims.into_iter().enumerate() {
                self.free_victim(core, &key, i % 2 == 1)?;
            }
        }
        for key in self.waiting.keys() {
            let reason = core.reason(key);
            prop_assert!(
                !matches!(
                    reason,
                    Some(WaitReason::Reclaiming { .. })
                        | Some(WaitReason::Preempting { .. })
                        | Some(WaitReason::BorrowingPaused { .. })
                ),
                "{key} still waits for reclaim with nothing in flight: {reason:?}"
            );
        }
        Ok(())
    }

    fn push_quota(&self, core: &mut Core, q: usize) {
        if self.quotas[q].defined {
            let _ = core.upsert_quota(&self.def(q));
        }
    }
}

fn new_core(model: &Model) -> Core {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n- name: DefaultQueue\n- name: ResourceQuota\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for q in 0..QUOTAS.len() {
        model.push_quota(&mut core, q);
    }
    if let Cap::Limited(limits) = model.cap {
        let mut r = Resources::new();
        for (i, l) in limits.iter().enumerate() {
            if let Some(l) = l {
                r.set(RES[i], *l);
            }
        }
        core.set_capacity(&RootCapacity::Limited(r));
    }
    for (i, q) in QUEUES.iter().enumerate() {
        core.upsert_queue(&QueueDef::new(*q).with_preemption(preemption_of(i)));
    }
    core
}

/// Every other queue preempts lower priorities in its quota: the invariants
/// (no max exceeded, every reclaim and preemption ends) hold with both.
fn preemption_of(queue: usize) -> koord_queue_model::Preemption {
    let policy = match queue % 3 {
        1 => koord_queue_model::PreemptionPolicy::LowerPriority,
        2 => koord_queue_model::PreemptionPolicy::LowerOrNewerEqualPriority,
        _ => koord_queue_model::PreemptionPolicy::Never,
    };
    koord_queue_model::Preemption {
        policy,
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_event_sequences_keep_every_limit_and_release_what_fits(
        events in proptest::collection::vec(event(), 1..80)
    ) {
        run(Model::new(), &events)?;
    }

    #[test]
    fn reclaim_heavy_sequences_keep_every_limit_and_guarantee(
        events in proptest::collection::vec(events([40, 10, 16, 6], 4), 1..120)
    ) {
        run(Model::reclaim_heavy(), &events)?;
    }
}

/// Applies `events`, settles the reclaims, then drains the cluster.
fn run(mut model: Model, events: &[Event]) -> Result<(), TestCaseError> {
    let mut core = new_core(&model);
    for e in events {
        model.apply(&mut core, e)?;
    }
    // Every guaranteed unit waiting for reclaim gets its resources once
    // its victims are freed.
    model.settle(&mut core)?;
    // Drain: finish everything that holds quota until nothing more is released.
    for _ in 0..=events.len() + 1 {
        let released = model.cycle(&mut core, 0)?;
        if released == 0 && model.held.is_empty() {
            break;
        }
        let keys: Vec<String> = model.held.keys().cloned().collect();
        for k in keys {
            prop_assert!(core.remove_unit(&k));
            model.held.remove(&k);
            model.in_flight.remove(&k);
        }
    }
    prop_assert!(model.held.is_empty());
    let empty = model.usage();
    // Every unit that fits on its own into the empty cluster was released
    // (in a Block queue: unless a unit ahead of it can never fit).
    for q in 0..QUEUES.len() {
        for (i, (key, unit)) in model.line(q).into_iter().enumerate() {
            if model.block[q] && i > 0 {
                break;
            }
            prop_assert!(
                !model.fits(unit, &empty),
                "{key} fits alone but never ran: {unit:?}"
            );
        }
    }
    Ok(())
}

/// A fixed sequence mixing the tricky cases, as a quick regression.
#[test]
fn replay_of_a_mixed_sequence() {
    let mut model = Model::new();
    let mut core = new_core(&model);
    let events = [
        Event::Submit {
            queue: 0,
            ns: 0,
            prio: 1,
            cpu: 4000,
            gpu: 0,
        },
        Event::Cycle { fail_mask: 0 },
        Event::Capacity(Some([Some(8000), None])),
        Event::Submit {
            queue: 1,
            ns: 1,
            prio: 0,
            cpu: 5000,
            gpu: 1,
        },
        Event::Policy {
            queue: 0,
            block: true,
        },
        Event::Submit {
            queue: 0,
            ns: 0,
            prio: 2,
            cpu: 3000,
            gpu: 0,
        },
        Event::Cycle { fail_mask: 0b10 },
        Event::Toggle(0),
        Event::Cycle { fail_mask: 0 },
        Event::MoveL3 { under_p1: true },
        Event::Submit {
            queue: 3,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 2,
        },
        Event::NsQuota {
            ns: 0,
            hard: Some(3000),
        },
        Event::Cycle { fail_mask: 0 },
        Event::Toggle(0),
        Event::Free(0),
        Event::Cycle { fail_mask: 0xff },
        Event::Cycle { fail_mask: 0 },
    ];
    for e in &events {
        model.apply(&mut core, e).unwrap();
    }
    assert!(!model.held.is_empty());
}

/// Found by the reclaim-heavy property: a Block queue came to stop at a unit
/// ahead of one waiting for reclaim, which kept borrowing paused for a unit
/// that could not be released anyway.
#[test]
fn replay_of_a_reclaiming_unit_that_a_block_queue_stops_before() {
    use Event::*;
    let events = vec![
        Submit {
            queue: 3,
            ns: 0,
            prio: 1,
            cpu: 3000,
            gpu: 0,
        },
        Submit {
            queue: 0,
            ns: 1,
            prio: 0,
            cpu: 1000,
            gpu: 0,
        },
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 3000,
            gpu: 2,
        },
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 2,
        },
        Submit {
            queue: 3,
            ns: 0,
            prio: 0,
            cpu: 2000,
            gpu: 0,
        },
        Submit {
            queue: 3,
            ns: 0,
            prio: 0,
            cpu: 2000,
            gpu: 0,
        },
        Submit {
            queue: 3,
            ns: 0,
            prio: 2,
            cpu: 2000,
            gpu: 2,
        },
        Submit {
            queue: 0,
            ns: 1,
            prio: 0,
            cpu: 2000,
            gpu: 1,
        },
        Cycle { fail_mask: 0 },
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        Submit {
            queue: 0,
            ns: 1,
            prio: 0,
            cpu: 2000,
            gpu: 0,
        },
        Policy {
            queue: 3,
            block: true,
        },
        Submit {
            queue: 4,
            ns: 1,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 0,
        },
        Finish(13472745003978312130),
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 2,
        },
        Cycle { fail_mask: 0 },
        Submit {
            queue: 2,
            ns: 1,
            prio: 0,
            cpu: 1000,
            gpu: 0,
        },
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 0,
        },
        Submit {
            queue: 3,
            ns: 1,
            prio: 1,
            cpu: 0,
            gpu: 0,
        },
        SetMin {
            quota: 5,
            min: 6000,
        },
        Submit {
            queue: 0,
            ns: 1,
            prio: 0,
            cpu: 0,
            gpu: 2,
        },
        Capacity(None),
        Capacity(Some([Some(14000), None])),
        Finish(399572010054240918),
        Submit {
            queue: 0,
            ns: 1,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        Finish(5251205668334090311),
        Cycle { fail_mask: 0 },
        Finish(16238614234224371214),
        Submit {
            queue: 1,
            ns: 0,
            prio: 1,
            cpu: 1000,
            gpu: 0,
        },
        Cycle { fail_mask: 0 },
        Submit {
            queue: 3,
            ns: 0,
            prio: 1,
            cpu: 2000,
            gpu: 0,
        },
    ];
    if let Err(e) = run(Model::reclaim_heavy(), &events) {
        panic!("{e}");
    }
}

/// Found by the reclaim-heavy property: two units each within their cpu
/// min, each short of gpu (which their quotas do not govern), took each
/// other's place pass after pass.
#[test]
fn replay_of_two_units_that_could_take_each_others_place() {
    use Event::*;
    let events = vec![
        Submit {
            queue: 0,
            ns: 1,
            prio: 2,
            cpu: 1000,
            gpu: 1,
        },
        Submit {
            queue: 0,
            ns: 1,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        Cycle { fail_mask: 0 },
        Submit {
            queue: 0,
            ns: 1,
            prio: 1,
            cpu: 1000,
            gpu: 1,
        },
        Submit {
            queue: 2,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        MoveL3 { under_p1: false },
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 1,
        },
        Finish(4309239709805689867),
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 1,
        },
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 1,
        },
        Submit {
            queue: 2,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 1,
        },
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        Cycle { fail_mask: 0 },
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 0,
        },
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 0,
            gpu: 1,
        },
        Submit {
            queue: 0,
            ns: 0,
            prio: 1,
            cpu: 1000,
            gpu: 1,
        },
        Submit {
            queue: 0,
            ns: 0,
            prio: 2,
            cpu: 2000,
            gpu: 2,
        },
        Cycle { fail_mask: 0 },
        FreeVictims(223),
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 2,
        },
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 0,
        },
        Free(647948831820358407),
        Submit {
            queue: 1,
            ns: 0,
            prio: 0,
            cpu: 1000,
            gpu: 2,
        },
        Free(549725146470661232),
        Submit {
            queue: 0,
            ns: 0,
            prio: 0,
            cpu: 3000,
            gpu: 0,
        },
        NsQuota { ns: 0, hard: None },
    ];
    if let Err(e) = run(Model::reclaim_heavy(), &events) {
        panic!("{e}");
    }
}
