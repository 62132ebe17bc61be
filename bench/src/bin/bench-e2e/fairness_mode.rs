//! `--phases fairness`: three weighted sibling quotas sharing one parent.

use anyhow::Result;
use koord_queue_bench::fairness::{self, plan::FairnessConfig};
use serde_json::json;

use super::{Cli, Start, machine_json, write_file, write_json};

/// `--phases fairness`: docs/performance.md, "Fair sharing".
pub(super) async fn run(cli: &Cli) -> Result<bool> {
    let config = FairnessConfig {
        submit_for: cli.submit_for,
        warmup: cli.warmup,
        backlog: cli.backlog,
        ..FairnessConfig::default()
    };
    config.validate()?;
    let modes = fairness::plan::parse_modes(&cli.fair_sharing)?;
    let Start {
        command,
        source,
        load,
    } = Start::take(cli)?;
    eprintln!(
        "bench-e2e fairness: fair sharing {}; {} children under {} CPU; load average {:?}",
        cli.fair_sharing,
        config.children.len(),
        config.parent_cpu,
        load.unwrap_or_default()
    );
    let scheduler = cli.scheduler();
    let runtime = cli.runtime();
    let (records, failures) = fairness::run_all(&config, &modes, &scheduler, &runtime).await?;
    let json = json!({
        "benchmark": "koord-queue fair sharing (issue 19): three sibling quotas with weights 1:1:2 under one parent, each submitting more than the parent holds",
        "command": command,
        "source": source,
        "config": fairness::report::config_json(&config),
        "settings": {
            "runtime_concurrency": cli.runtime_concurrency,
            "runtime_marks_running": !cli.no_running_status,
            "scheduler": {
                "write_concurrency": cli.write_concurrency,
                "status_interval": format!("{:?}", cli.status_interval),
                "job_events": cli.job_events,
                "cycle_batch": format!("{:?}", cli.cycle_batch),
                "root_capacity_cpu": config.parent_cpu,
            },
        },
        "machine": machine_json(load),
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhook and scheduler in this process; a fresh control plane per run",
        "passed": failures.is_empty(),
        "failures": failures,
        "runs": records.iter().map(|r| fairness::report::run_json(&config, r)).collect::<Vec<_>>(),
    });
    let json_path = cli.out_dir.join("fairness.json");
    let svg_path = cli.out_dir.join("fairness.svg");
    write_json(&json_path, &json)?;
    write_file(&svg_path, fairness::report::svg(&config, &records))?;
    print!("{}", fairness::report::text(&config, &records));
    println!(
        "  results: {}  plot: {}",
        json_path.display(),
        svg_path.display()
    );
    if failures.is_empty() {
        return Ok(true);
    }
    for f in &failures {
        eprintln!("bench-e2e fairness: FAILED: {f}");
    }
    Ok(false)
}
