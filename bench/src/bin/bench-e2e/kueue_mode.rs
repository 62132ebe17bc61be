//! `--phases kueue`: our `run` phase, then the same jobs queued by Kueue.

use std::sync::Arc;

use anyhow::Result;
use koord_queue_bench::api_stats::ApiStats;
use koord_queue_bench::phase::{self, PhaseKind};
use koord_queue_bench::shape::Shape;
use serde_json::json;

use super::Cli;
use super::results::{Start, passed, shape_line, write_result};

/// `--phases kueue`: docs/performance.md, "Against Kueue".
pub(super) async fn run(cli: &Cli, shape: Arc<Shape>) -> Result<bool> {
    // Fail before the first phase when Kueue is not provisioned.
    koord_queue_bench::kueue::Install::find()?;
    let start = Start::take(cli)?;
    start.announce(
        "bench-e2e kueue",
        format_args!(
            "{}; Koord-Queue, then Kueue {} (client rate {})",
            shape_line(&shape),
            koord_queue_bench::kueue::KUEUE_VERSION,
            cli.kueue_client_rate
        ),
    );
    let stats = Arc::new(ApiStats::default());
    let mut results = Vec::new();
    for kind in [PhaseKind::Run, PhaseKind::Kueue] {
        let config = cli.phase_config(kind, None, true);
        results.push(phase::run(shape.clone(), &config, stats.clone()).await?);
    }
    let (ours, kueue) = (&results[0], &results[1]);
    let mut json = koord_queue_bench::kueue::report::comparison_json(&shape, ours, kueue);
    json["benchmark"] = json!(format!(
        "koord-queue against Kueue {} (issue 22): Kueue's scheduler-performance baseline shape as batch/v1 Jobs, the same job stream, runtime stand-in and quota checks",
        koord_queue_bench::kueue::KUEUE_VERSION
    ));
    json["command"] = json!(start.command);
    json["source"] = start.source.clone();
    json["scale"] = json!(shape.scale);
    json["jobs"] = json!(shape.jobs.len());
    let mut koord_queue = cli.scheduler_json();
    koord_queue["webhook_and_scheduler"] = json!(cli.placement(true).describe());
    koord_queue["queue_spec"] = json!(cli.queue_spec);
    json["settings"] = json!({
        "koord_queue": koord_queue,
        "run_bound_factor": cli.run_bound_factor,
        "slow_down": cli.slow_down,
        "kueue": koord_queue_bench::kueue::settings_json(cli.kueue_client_rate),
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "machine": start.machine(),
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; a fresh one per system",
    });
    let subtitle = format!(
        "{} queues (nominal 20, borrowing limit 100 CPU) in {} cohorts; both on kube-apiserver v1.35.4 on this machine",
        shape.leaves.len(),
        shape.parents.len()
    );
    print!("{}", koord_queue_bench::kueue::report::text(&json));
    write_result(
        &cli.out_dir,
        &format!("kueue-{}", shape.scale),
        &json,
        Some(koord_queue_bench::kueue::report::svg(
            &shape, ours, kueue, &subtitle,
        )),
    )?;
    let jobs = shape.jobs.len();
    let failures: Vec<String> = [
        ("koord-queue", &json["koord_queue"]),
        ("kueue", &json["kueue"]),
    ]
    .into_iter()
    .filter_map(|(name, m)| {
        let violations = m["quota_violations"].as_u64().unwrap_or(0);
        let finished = m["jobs_finished"].as_u64().unwrap_or(0);
        (violations > 0 || finished < jobs as u64).then(|| {
            format!("{name}: {violations} quota violations, {finished}/{jobs} jobs finished")
        })
    })
    .collect();
    Ok(passed("bench-e2e kueue", &failures))
}
