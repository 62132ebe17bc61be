//! `--phases fairness`: three weighted sibling quotas sharing one parent.

use anyhow::Result;
use koord_queue_bench::fairness::{self, plan::FairnessConfig};
use serde_json::json;

use super::Cli;
use super::results::{Start, passed, write_result};

/// `--phases fairness`: docs/performance.md, "Fair sharing".
pub(super) async fn run(cli: &Cli) -> Result<bool> {
    let config = FairnessConfig {
        submit_for: cli.submit_for,
        warmup: cli.warmup,
        backlog: cli.backlog,
        queue_spec: cli.queue_spec.clone(),
        ..FairnessConfig::default()
    };
    config.validate()?;
    let modes = fairness::plan::parse_modes(&cli.fair_sharing)?;
    let start = Start::take(cli)?;
    start.announce(
        "bench-e2e fairness",
        format_args!(
            "fair sharing {}; {} children under {} CPU",
            cli.fair_sharing,
            config.children.len(),
            config.parent_cpu
        ),
    );
    let scheduler = cli.scheduler();
    let runtime = cli.runtime();
    let (records, failures) = fairness::run_all(&config, &modes, &scheduler, &runtime).await?;
    let mut scheduler_json = cli.scheduler_json();
    scheduler_json["root_capacity_cpu"] = json!(config.parent_cpu);
    let json = json!({
        "benchmark": "koord-queue fair sharing (issue 19): three sibling quotas with weights 1:1:2 under one parent, each submitting more than the parent holds",
        "command": start.command,
        "source": start.source,
        "config": fairness::report::config_json(&config),
        "settings": {
            "runtime_concurrency": cli.runtime_concurrency,
            "runtime_marks_running": !cli.no_running_status,
            "scheduler": scheduler_json,
        },
        "machine": start.machine(),
        "control_plane": "tier 1: etcd v3.6.16 + kube-apiserver v1.35.4 (built from source), loopback; webhook and scheduler in this process; a fresh control plane per run",
        "passed": failures.is_empty(),
        "failures": failures,
        "runs": records.iter().map(|r| fairness::report::run_json(&config, r)).collect::<Vec<_>>(),
    });
    print!("{}", fairness::report::text(&config, &records));
    write_result(
        &cli.out_dir,
        "fairness",
        &json,
        Some(fairness::report::svg(&config, &records)),
    )?;
    Ok(passed("bench-e2e fairness", &failures))
}
