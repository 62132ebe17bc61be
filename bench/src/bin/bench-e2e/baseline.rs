//! The default phases (`run`, `saturated`, `floor`): docs/performance.md.

use std::sync::Arc;

use anyhow::{Result, bail};
use koord_queue_bench::api_stats::ApiStats;
use koord_queue_bench::output;
use koord_queue_bench::phase::{self, PhaseKind};
use koord_queue_bench::rounds;
use koord_queue_bench::shape::Shape;
use serde_json::json;

use super::Cli;
use super::results::{Start, passed, shape_line, write_result};

/// `--phases run,saturated,floor` (any of them, in order).
pub(super) async fn run(cli: &Cli, shape: Arc<Shape>) -> Result<bool> {
    let kinds = cli
        .phases
        .iter()
        .map(|p| PhaseKind::parse(p))
        .collect::<Result<Vec<_>>>()?;
    if kinds.is_empty() {
        bail!("--phases: nothing to run");
    }
    if cli.rounds == 0 {
        bail!("--rounds: at least 1");
    }
    let start = Start::take(cli)?;
    start.announce(
        "bench-e2e",
        format_args!("{}; phases {:?}", shape_line(&shape), cli.phases),
    );
    let stats = Arc::new(ApiStats::default());
    let mut results = Vec::new();
    // Each round's floor copies that round's saturated writes.
    let mut floor_writes_by_round = Vec::new();
    for kind in rounds::schedule(&kinds, cli.rounds) {
        let config = cli.phase_config(kind, floor_writes_by_round.last().cloned(), false);
        let result = phase::run(shape.clone(), &config, stats.clone()).await?;
        if kind == PhaseKind::Saturated {
            floor_writes_by_round.push(result.writes_for_floor());
        }
        results.push(result);
    }
    let ran: Vec<(PhaseKind, f64)> = results.iter().map(|r| (r.kind, r.throughput())).collect();
    let rounds = rounds::rounds(&ran);
    let round = rounds::median(&rounds);
    let results = rounds::reported(results, |r| r.kind, round);

    let settings = json!({
        "create_concurrency": cli.create_concurrency,
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "scheduler": cli.scheduler_json(),
        "queue_spec": cli.queue_spec,
        "run_bound_factor": cli.run_bound_factor,
        "floor_writes": round.and_then(|i| floor_writes_by_round.get(i)),
        "machine": start.machine(),
        "source": start.source,
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhook and scheduler in this process",
    });
    let json = output::result_json(&shape, &start.command, settings, &results, &rounds, round);
    let subtitle = format!(
        "{} leaf quotas (min 20, max 120 CPU) under {} parents, root {} CPU; webhook + scheduler on a real kube-apiserver v1.35.4; {}",
        shape.leaves.len(),
        shape.parents.len(),
        shape.root_cpu,
        json["wall_seconds"]
            .as_f64()
            .map(|w| format!("wall {w:.1} s"))
            .unwrap_or_default()
    );
    print!("{}", output::text(&shape, &json, &results));
    write_result(
        &cli.out_dir,
        &format!("e2e-{}", shape.scale),
        &json,
        Some(output::svg(&shape, &results, &subtitle)),
    )?;
    let violations = json["quota_violations"].as_u64().unwrap_or(0);
    let failures: Vec<String> = (violations > 0)
        .then(|| {
            format!("{violations} quota violations (see quota_violation_examples in the JSON)")
        })
        .into_iter()
        .collect();
    Ok(passed("bench-e2e", &failures))
}
