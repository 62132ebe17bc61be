//! `--phases chaos`: the `run` workload with faults injected.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use koord_queue_bench::chaos::{self, ChaosConfig, faults::FaultKind, faults::FaultPlan};
use koord_queue_bench::runner::RuntimeOptions;
use koord_queue_bench::shape::Shape;
use serde_json::json;

use super::Cli;
use super::results::{Start, passed, shape_line, write_result};

/// `--phases chaos`: docs/reliability.md.
pub(super) async fn run(cli: &Cli, shape: Arc<Shape>) -> Result<bool> {
    let start = Start::take(cli)?;
    let kinds = cli
        .faults
        .iter()
        .map(|f| FaultKind::parse(f))
        .collect::<Result<Vec<_>>>()?;
    let plan = FaultPlan {
        kinds,
        interval: cli.fault_interval,
        restart_after: cli.restart_after,
        delay_chunk: cli.delay_chunk,
        delay_for: cli.delay_for,
    };
    let config = ChaosConfig {
        scheduler: cli.scheduler(),
        runtime: RuntimeOptions {
            retry_for: cli.retry_for,
            ..cli.runtime()
        },
        plan: plan.clone(),
        timeout: cli.timeout,
        settle: cli.settle,
        bin_dir: cli.bin_dir.clone(),
        logs_dir: cli.logs_dir.clone().unwrap_or_else(|| {
            PathBuf::from("target/bench-chaos").join(format!("logs-{}", shape.scale))
        }),
    };
    start.announce("bench-e2e chaos", shape_line(&shape));
    let (mut json, failures) = chaos::run(shape.clone(), &config).await?;
    json["benchmark"] =
        json!("koord-queue chaos run (issue 18): Kueue's baseline shape with faults");
    json["command"] = json!(start.command);
    json["source"] = start.source.clone();
    let mut scheduler_json = cli.scheduler_json();
    scheduler_json["processes"] = json!(2);
    scheduler_json["enabled_kinds"] = json!("batchjob");
    scheduler_json["lease"] = json!({ "name": chaos::LEASE, "duration": "15s", "renew_deadline": "10s", "retry_period": "2s", "fencing_policy": true });
    json["settings"] = json!({
        "faults": chaos::plan_json(&plan),
        "runtime_concurrency": cli.runtime_concurrency,
        "runtime_marks_running": !cli.no_running_status,
        "retry_for": format!("{:?}", cli.retry_for),
        "settle": format!("{:?}", cli.settle),
        "scheduler": scheduler_json,
        "webhook": { "processes": 2, "behind": "a TCP balancer to the ready backends" },
        "machine": start.machine(),
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhooks and schedulers as separate processes",
    });
    println!("{}", chaos_text(&json));
    write_result(&cli.out_dir, &format!("chaos-{}", shape.scale), &json, None)?;
    Ok(passed("bench-e2e chaos", &failures))
}

/// The chaos run's summary for the terminal.
fn chaos_text(json: &serde_json::Value) -> String {
    let checks = &json["checks"];
    format!(
        "chaos {}: {} in {} s (jobs done at {} s); faults {} {}\n  quota violations: running jobs {}, QueueUnits {}; double releases {}; finished {}/{}; at the end QueueUnits hold {} m, the leader counts {}\n  relists {} (dropped records {}); create failures {}; passed: {}",
        json["scale"],
        json["jobs"],
        json["wall_seconds"],
        json["jobs_done_at_s"],
        json["faults"]["injected"],
        json["faults"]["by_kind"],
        checks["quota_violations"]["running_jobs"],
        checks["quota_violations"]["queue_units_beyond_finished_jobs"],
        checks["double_releases"]["count"],
        checks["finished"]["jobs_finished"],
        json["jobs"],
        checks["quota_at_end"]["queue_units_holding_cpu_m"],
        checks["quota_at_end"]["leader_quota_used_sum"],
        json["schedulers"]["watch_relists_total"],
        json["schedulers"]["relist_dropped_records_total"],
        json["admission"]["create_failures"]["attempts_by_cause"],
        json["passed"],
    )
}
