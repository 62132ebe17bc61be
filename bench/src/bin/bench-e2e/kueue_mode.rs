//! `--phases kueue`: our `run` phase, then the same jobs queued by Kueue.

use std::sync::Arc;

use anyhow::Result;
use koord_queue_bench::api_stats::ApiStats;
use koord_queue_bench::phase::{self, PhaseConfig, PhaseKind};
use koord_queue_bench::shape::Shape;
use serde_json::json;

use super::{Cli, Start, machine_json, write_file, write_json};

/// `--phases kueue`: docs/performance.md, "Against Kueue".
pub(super) async fn run(cli: &Cli, shape: Arc<Shape>) -> Result<bool> {
    // Fail before the first phase when Kueue is not provisioned.
    koord_queue_bench::kueue::Install::find()?;
    let Start {
        command,
        source,
        load,
    } = Start::take(cli)?;
    eprintln!(
        "bench-e2e kueue: {} jobs, {} queues, {} cohorts; Koord-Queue, then Kueue {}; load average {:?}",
        shape.jobs.len(),
        shape.leaves.len(),
        shape.parents.len(),
        koord_queue_bench::kueue::KUEUE_VERSION,
        load.unwrap_or_default()
    );
    let stats = Arc::new(ApiStats::default());
    let mut results = Vec::new();
    for kind in [PhaseKind::Run, PhaseKind::Kueue] {
        let config = PhaseConfig {
            kind,
            scheduler: cli.scheduler(),
            runtime: cli.runtime(),
            create_concurrency: cli.create_concurrency,
            floor_writes: None,
            timeout: cli.timeout,
            queue_spec: cli.queue_spec.clone(),
            components: cli.placement(true),
            logs_dir: cli.logs_dir.clone(),
        };
        results.push(phase::run(shape.clone(), &config, stats.clone()).await?);
    }
    let (ours, kueue) = (&results[0], &results[1]);
    let mut json = koord_queue_bench::kueue::report::comparison_json(&shape, ours, kueue);
    json["benchmark"] = json!(format!(
        "koord-queue against Kueue {} (issue 22): Kueue's scheduler-performance baseline shape as batch/v1 Jobs, the same job stream, runtime stand-in and quota checks",
        koord_queue_bench::kueue::KUEUE_VERSION
    ));
    json["command"] = json!(command);
    json["source"] = source;
    json["scale"] = json!(shape.scale);
    json["jobs"] = json!(shape.jobs.len());
    json["settings"] = json!({
        "koord_queue": {
            "webhook_and_scheduler": cli.placement(true).describe(),
            "write_concurrency": cli.write_concurrency,
            "status_interval": format!("{:?}", cli.status_interval),
            "job_events": cli.job_events,
            "cycle_batch": format!("{:?}", cli.cycle_batch),
            "queue_spec": cli.queue_spec,
        },
        "kueue": koord_queue_bench::kueue::settings_json(),
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "machine": machine_json(load),
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; a fresh one per system",
    });
    let base = cli.out_dir.join(format!("kueue-{}", shape.scale));
    let (json_path, svg_path) = (base.with_extension("json"), base.with_extension("svg"));
    write_json(&json_path, &json)?;
    let subtitle = format!(
        "{} queues (nominal 20, borrowing limit 100 CPU) in {} cohorts; both on kube-apiserver v1.35.4 on this machine",
        shape.leaves.len(),
        shape.parents.len()
    );
    write_file(
        &svg_path,
        koord_queue_bench::kueue::report::svg(&shape, ours, kueue, &subtitle),
    )?;
    print!("{}", koord_queue_bench::kueue::report::text(&json));
    println!(
        "  results: {}  plot: {}",
        json_path.display(),
        svg_path.display()
    );
    let mut passed = true;
    for (name, m) in [
        ("koord-queue", &json["koord_queue"]),
        ("kueue", &json["kueue"]),
    ] {
        let violations = m["quota_violations"].as_u64().unwrap_or(0);
        let finished = m["jobs_finished"].as_u64().unwrap_or(0);
        if violations > 0 || finished < shape.jobs.len() as u64 {
            eprintln!(
                "bench-e2e kueue: FAILED: {name}: {violations} quota violations, {finished}/{} jobs finished",
                shape.jobs.len()
            );
            passed = false;
        }
    }
    Ok(passed)
}
