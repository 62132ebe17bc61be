//! Scheduling cycle benchmarks (architecture §9): a full cycle with 1k, 10k and
//! 100k pending units under the synthetic 3-level quota tree, a full
//! re-evaluation of a loaded steady state, and incremental cycles after one
//! unit is added and after one unit finishes.
//!
//! `cargo bench -p koord-queue-core --bench cycle`

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, criterion_group,
    criterion_main,
};
use koord_queue_core::{Core, synthetic};

/// (pending units, queues used)
const SIZES: [(usize, usize); 3] = [(1_000, 10), (10_000, 100), (100_000, 1_000)];

fn label(units: usize) -> String {
    format!("{}k", units / 1000)
}

/// The cluster as the scheduler keeps it: every cycle lists the units
/// whose reason changed (the core's default).
fn loaded(units: usize, queues: usize) -> Core {
    synthetic::loaded(units, queues).unwrap_or_else(|e| panic!("{e}"))
}

/// The cluster as the simulator and the start-time estimator keep it: they
/// read releases only, so cycles do not list the changed reasons
/// ([`Core::report_reasons`]).
fn loaded_unlisted(units: usize, queues: usize) -> Core {
    let mut core = loaded(units, queues);
    core.report_reasons(false);
    core
}

/// The loaded cluster after its first cycle, with the keys of the released units.
fn steady(units: usize, queues: usize) -> (Core, Vec<String>) {
    let mut core = loaded(units, queues);
    let out = core.run_cycle();
    let held = out.decisions.iter().map(|d| d.unit.to_string()).collect();
    (core, held)
}

/// Times the first cycle of the core `setup` builds (untimed, anew for each
/// sample). The core is returned, so that criterion frees it after the
/// timing: a scheduler keeps its core.
fn first_cycle(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    setup: impl Fn() -> Core,
) {
    group.bench_function(id, |b| {
        b.iter_batched(
            &setup,
            |mut core| {
                let out = core.run_cycle();
                black_box((core, out))
            },
            BatchSize::PerIteration,
        );
    });
}

fn full_cycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("full_cycle");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    for (units, queues) in SIZES {
        first_cycle(
            &mut group,
            BenchmarkId::from_parameter(label(units)),
            || loaded(units, queues),
        );
    }
    // The same first cycle at 100,000 units without the list of changed
    // reasons, as the simulator runs it.
    let (units, queues) = SIZES[2];
    first_cycle(
        &mut group,
        BenchmarkId::new("unlisted", label(units)),
        || loaded_unlisted(units, queues),
    );
    group.finish();
}

/// What a new leader holds when it takes over from one whose cycles had
/// settled: every unit, the released ones holding what they were given,
/// the waiting ones never judged by this core (a standby runs no cycles).
fn taken_over(units: usize, queues: usize) -> Core {
    let mut core = started_cold(units, queues);
    core.mark_all_dirty();
    core
}

/// What a leader holds after a cold start: the same, its units found as
/// its watches listed them (each on its queue's list of changed units).
fn started_cold(units: usize, queues: usize) -> Core {
    let (mut before, _) = steady(units, queues);
    while !before.run_cycle().decisions.is_empty() {}
    let holding: Vec<_> = before
        .holding_units()
        .map(|(k, r)| (k.to_string(), r))
        .collect();
    let mut core = loaded(units, queues);
    for (key, resources) in &holding {
        core.hold(key, resources)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }
    core
}

/// A new leader's first cycle: it judges every waiting unit afresh against
/// the quota the released ones hold (the issue-43 takeover).
fn takeover(c: &mut Criterion) {
    let mut group = c.benchmark_group("takeover_first_cycle");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    for (units, queues) in SIZES {
        first_cycle(&mut group, BenchmarkId::new("warm", label(units)), || {
            taken_over(units, queues)
        });
        first_cycle(&mut group, BenchmarkId::new("cold", label(units)), || {
            started_cold(units, queues)
        });
    }
    group.finish();
}

fn full_reevaluation(c: &mut Criterion) {
    let mut group = c.benchmark_group("full_reevaluation");
    group.sample_size(10);
    for (units, queues) in SIZES {
        let (mut core, _) = steady(units, queues);
        group.bench_function(BenchmarkId::from_parameter(label(units)), |b| {
            b.iter(|| {
                core.mark_all_dirty();
                black_box(core.run_cycle())
            });
        });
    }
    group.finish();
}

fn incremental_add(c: &mut Criterion) {
    let mut group = c.benchmark_group("incremental_add_one");
    for (units, queues) in SIZES {
        let (mut core, _) = steady(units, queues);
        let mut rng = synthetic::Rng::new(7);
        let mut n = units;
        group.bench_function(BenchmarkId::from_parameter(label(units)), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let def = synthetic::unit(n, queues, &mut rng);
                    n += 1;
                    let start = Instant::now();
                    core.upsert_unit(&def).unwrap_or_else(|e| panic!("{e}"));
                    black_box(core.run_cycle());
                    total += start.elapsed();
                    // Back to the same steady state, untimed.
                    core.remove_unit(&def.key());
                    core.run_cycle();
                }
                total
            });
        });
    }
    group.finish();
}

fn incremental_finish(c: &mut Criterion) {
    let mut group = c.benchmark_group("incremental_finish_one");
    for (units, queues) in SIZES {
        let (mut core, held) = steady(units, queues);
        let mut held: VecDeque<String> = held.into();
        let mut rng = synthetic::Rng::new(11);
        let mut n = units;
        group.bench_function(BenchmarkId::from_parameter(label(units)), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let key = held
                        .pop_front()
                        .unwrap_or_else(|| panic!("nothing holds quota"));
                    let start = Instant::now();
                    core.remove_unit(&key);
                    let out = core.run_cycle();
                    total += start.elapsed();
                    held.extend(out.decisions.iter().map(|d| d.unit.to_string()));
                    // Keep the number of pending units steady, untimed.
                    let def = synthetic::unit(n, queues, &mut rng);
                    n += 1;
                    core.upsert_unit(&def).unwrap_or_else(|e| panic!("{e}"));
                    let out = core.run_cycle();
                    held.extend(out.decisions.iter().map(|d| d.unit.to_string()));
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    full_cycle,
    takeover,
    full_reevaluation,
    incremental_add,
    incremental_finish
);
criterion_main!(benches);
