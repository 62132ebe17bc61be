//! A synthetic cluster for the benchmarks and the memory probe (architecture §9):
//! a 3-level quota tree of 10 parents × 10 middle quotas × 10 leaves, one
//! Priority queue per leaf, and units of 1–4 cpu and 1–8 GiB spread over the
//! first `queues` leaves. Every level's max binds somewhere: leaves (30 cpu),
//! middles (250 cpu, less than their 10 leaves' 300), parents (2,000 cpu,
//! less than their middles' 2,500) and the capacity (15,000 cpu, less than
//! the parents' 20,000).

use koord_queue_model::Resources;

use super::engine::Core;
use super::model::{QueueDef, QuotaDef, RootCapacity, UnitDef};

/// Parents, middles per parent, leaves per middle.
pub const FANOUT: usize = 10;
/// Number of leaf quotas (and queues).
pub const LEAVES: usize = FANOUT * FANOUT * FANOUT;

const GIB: i64 = 1 << 30;

/// Name of leaf `i`.
pub fn leaf_name(i: usize) -> String {
    let (p, m, l) = (i / (FANOUT * FANOUT), (i / FANOUT) % FANOUT, i % FANOUT);
    format!("leaf-{p}-{m}-{l}")
}

/// A small deterministic generator, so every run loads the same cluster.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// The core with the tree, the capacity and all 1,000 queues, and no unit.
pub fn cluster() -> Result<Core, String> {
    let mut core = Core::from_yaml(
        "plugins:\n- name: Priority\n- name: ElasticQuota\n  args: { rootCapacity: { cpu: \"15000\", memory: 64Ti } }\n",
    )
    .map_err(|e| e.to_string())?;
    let res = |cpu: i64, mem_gib: i64| -> Resources {
        [
            ("cpu".to_string(), cpu * 1000),
            ("memory".to_string(), mem_gib * GIB),
        ]
        .into_iter()
        .collect()
    };
    for p in 0..FANOUT {
        let parent = format!("parent-{p}");
        let mut def = QuotaDef::new(&parent).parent_node();
        def.min = res(1000, 4000);
        def.max = res(2000, 8000);
        core.upsert_quota(&def).map_err(|e| e.to_string())?;
        for m in 0..FANOUT {
            let middle = format!("middle-{p}-{m}");
            let mut def = QuotaDef::new(&middle).under(&parent).parent_node();
            def.min = res(100, 400);
            def.max = res(250, 1000);
            core.upsert_quota(&def).map_err(|e| e.to_string())?;
        }
    }
    for i in 0..LEAVES {
        let name = leaf_name(i);
        let middle = format!("middle-{}-{}", i / (FANOUT * FANOUT), (i / FANOUT) % FANOUT);
        let mut def = QuotaDef::new(&name).under(&middle);
        def.min = res(10, 40);
        def.max = res(30, 120);
        core.upsert_quota(&def).map_err(|e| e.to_string())?;
        core.upsert_queue(&QueueDef::new(&name));
    }
    core.set_capacity(&RootCapacity::Limited(res(15_000, 64 * 1024)));
    Ok(core)
}

/// Unit number `n` of the synthetic load, in queue `n % queues`.
pub fn unit(n: usize, queues: usize, rng: &mut Rng) -> UnitDef {
    let queue = n % queues.clamp(1, LEAVES);
    UnitDef::new(format!("ns-{}", queue % 50), format!("job-{n:07}"))
        .with_quota(leaf_name(queue))
        .with_priority(i32::try_from(rng.below(4)).unwrap_or(0))
        .created_at(i64::try_from(n).unwrap_or(i64::MAX))
        .requesting("cpu", (1 + i64::try_from(rng.below(4)).unwrap_or(0)) * 1000)
        .requesting(
            "memory",
            (1 + i64::try_from(rng.below(8)).unwrap_or(0)) * GIB,
        )
}

/// The cluster with `units` waiting units spread over the first `queues` queues.
pub fn loaded(units: usize, queues: usize) -> Result<Core, String> {
    let mut core = cluster()?;
    let mut rng = Rng::new(42);
    for n in 0..units {
        core.upsert_unit(&unit(n, queues, &mut rng))
            .map_err(|e| e.to_string())?;
    }
    Ok(core)
}
