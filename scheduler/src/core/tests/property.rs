//! Randomized check of the core against an independent model: arbitrary
//! sequences of submissions, completions, deletions, failed writes, quota,
//! capacity, namespace-quota and policy changes.
//!
//! After every cycle:
//! - no limit (max at any level, capacity, ResourceQuota) that the cycle
//!   added usage under is exceeded, recomputed from the held units;
//! - the cycle is maximal: no waiting unit that a full, from-scratch
//!   evaluation would release is left waiting (this is what checks that the
//!   incremental shortcuts never miss anything);
//! - the core's accounting equals the model's (nothing lost, nothing counted twice).
//!
//! At the end everything is finished repeatedly: every unit that fits on its
//! own into the empty cluster is released.

// The model keeps parallel arrays indexed by resource, quota and queue
// number; index loops read more plainly than zipped iterators here.
#![allow(clippy::needless_range_loop)]

use std::collections::BTreeMap;

use koord_queue_api::{QueuePolicy, Resources};
use proptest::prelude::*;

use crate::core::{Core, QueueDef, QuotaDef, RootCapacity, UnitDef};

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
    Capacity(Option<[Option<i64>; 2]>),
    NsQuota {
        ns: usize,
        hard: Option<i64>,
    },
    Policy {
        queue: usize,
        block: bool,
    },
    Cycle {
        fail_mask: u8,
    },
}

fn event() -> impl Strategy<Value = Event> {
    use proptest::option::of;
    prop_oneof![
        8 => (0..5usize, 0..2usize, 0..3i32, 0..6i64, 0..3i64).prop_map(|(queue, ns, prio, cpu, gpu)| {
            Event::Submit { queue, ns, prio, cpu: cpu * 1000, gpu }
        }),
        3 => any::<usize>().prop_map(Event::Finish),
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
        2 => of((of(0..25i64), of(0..5i64))).prop_map(|c| {
            Event::Capacity(c.map(|(cpu, gpu)| [cpu.map(|c| c * 1000), gpu]))
        }),
        1 => (0..2usize, of(0..15i64)).prop_map(|(ns, hard)| Event::NsQuota {
            ns,
            hard: hard.map(|h| h * 1000),
        }),
        1 => (0..5usize, any::<bool>()).prop_map(|(queue, block)| Event::Policy { queue, block }),
        5 => any::<u8>().prop_map(|m| Event::Cycle { fail_mask: if m < 180 { 0 } else { m } }),
    ]
}

#[derive(Clone, Debug)]
struct QuotaModel {
    parent: Option<usize>,
    is_parent: bool,
    min: i64,
    max: [Option<i64>; 2],
    defined: bool,
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
    waiting: BTreeMap<String, UnitModel>,
    held: BTreeMap<String, UnitModel>,
    next: i64,
}

impl Model {
    fn new() -> Self {
        let q = |parent, is_parent, min: i64, cpu_max: Option<i64>, gpu_max| QuotaModel {
            parent,
            is_parent,
            min: min * 1000,
            max: [cpu_max.map(|m| m * 1000), gpu_max],
            defined: true,
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
            waiting: BTreeMap::new(),
            held: BTreeMap::new(),
            next: 0,
        }
    }

    fn def(&self, q: usize) -> QuotaDef {
        let m = &self.quotas[q];
        let mut d = QuotaDef::new(QUOTAS[q]).min("cpu", m.min);
        d.parent = m.parent.map(|p| QUOTAS[p].to_string());
        d.is_parent = m.is_parent;
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

    /// Asserts that no unit a from-scratch evaluation would release still waits.
    fn assert_maximal(&self, used: &Usage) -> Result<(), TestCaseError> {
        for q in 0..QUEUES.len() {
            let line = self.line(q);
            let candidates = if self.block[q] {
                &line[..line.len().min(1)]
            } else {
                &line[..]
            };
            for (key, unit) in candidates {
                prop_assert!(
                    !self.fits(unit, used),
                    "{key} in {} fits but was not released: {unit:?}, usage {used:?}",
                    QUEUES[q]
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
        self.assert_maximal(&after)?;
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
                    if let Some(u) = self.held.remove(&key) {
                        self.waiting.insert(key, u);
                    }
                }
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
                let policy = if *block {
                    QueuePolicy::Block
                } else {
                    QueuePolicy::Priority
                };
                core.upsert_queue(&QueueDef::new(QUEUES[*queue]).with_policy(policy));
            }
            Event::Cycle { fail_mask } => {
                self.cycle(core, *fail_mask)?;
            }
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
    for q in QUEUES {
        core.upsert_queue(&QueueDef::new(q));
    }
    core
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_event_sequences_keep_every_limit_and_release_what_fits(
        events in proptest::collection::vec(event(), 1..80)
    ) {
        let mut model = Model::new();
        let mut core = new_core(&model);
        for e in &events {
            model.apply(&mut core, e)?;
        }
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
                prop_assert!(!model.fits(unit, &empty), "{key} fits alone but never ran: {unit:?}");
            }
        }
    }
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
