//! The default phases (`run`, `saturated`, `floor`): docs/performance.md.

use std::sync::Arc;

use anyhow::{Result, bail};
use koord_queue_bench::api_stats::ApiStats;
use koord_queue_bench::fidelity;
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
        "paced_in_flight": cli.paced_in_flight,
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "scheduler": cli.scheduler_json(),
        "queue_spec": cli.queue_spec,
        "run_bound_factor": cli.run_bound_factor,
        "slow_down": cli.slow_down,
        "floor_writes": round.and_then(|i| floor_writes_by_round.get(i)),
        "machine": start.machine(),
        "source": start.source,
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhook and scheduler in this process",
    });
    let mut json = output::result_json(&shape, &start.command, settings, &results, &rounds, round);
    if let (Some(dir), Some(run)) = (
        &cli.trace_out,
        results.iter().find(|r| r.kind == PhaseKind::Run),
    ) {
        json["fidelity"] = fidelity::write_and_compare(
            dir,
            &shape,
            cli.queue_spec.as_ref(),
            i64::try_from(cli.cycle_batch.as_millis()).unwrap_or(i64::MAX),
            &run.timelines,
            &run.unit_times,
        )?;
        print_fidelity(&json["fidelity"], dir);
    }
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

/// The comparison with the simulator in a few lines.
fn print_fidelity(f: &serde_json::Value, dir: &std::path::Path) {
    let num = |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.3}"));
    eprintln!(
        "fidelity: trace, objects and comparison in {}; latencies measured {}",
        dir.display(),
        f["latencies_measured"]
    );
    for (name, key) in [
        ("no latency", "without_latency"),
        ("measured latencies", "with_measured_latencies"),
    ] {
        let s = &f[key];
        let classes: Vec<String> = s["by_class"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{} {}/{} s ({})",
                    c["name"].as_str().unwrap_or_default(),
                    num(&c["simulated_mean_s"]),
                    num(&c["observed_mean_s"]),
                    num(&c["relative_error"])
                )
            })
            .collect();
        eprintln!(
            "  simulated with {name}: mean time to release simulated/real {}; release order Spearman {}, waits {}",
            classes.join(", "),
            num(&s["release_order_spearman"]),
            num(&s["wait_order_spearman"])
        );
    }
}
