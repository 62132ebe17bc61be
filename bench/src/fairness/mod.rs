//! The fair-sharing scenario (issue 19, `bench-e2e --phases fairness`,
//! `make bench-fairness`): one parent quota whose max is far below what
//! its three children's tenants submit, the children with small mins and
//! weights 1:1:2. Every tenant keeps a backlog of waiting jobs for the
//! whole submission time, so all three always want more than they get.
//! Measured from outside, by the job runtime stand-in: each child's
//! running CPU every sample interval; over the steady window (after a
//! warm-up) each child's share of the borrowed capacity (CPU above its
//! min), Jain's index of the shares over the weights, and the parent's
//! utilization. Run with fair sharing switched on at the parent, off (the
//! baseline: first come in the cycle takes idle capacity), or both, each
//! on a fresh control plane.

pub mod plan;
pub mod report;
pub mod run;
pub mod shares;

use std::sync::Arc;

use anyhow::Result;

use self::plan::FairnessConfig;
use self::run::RunRecord;
use crate::runner::RuntimeOptions;
use crate::scheduler_settings::SchedulerOptions;

/// Runs the scenario once per mode (`true`: fair sharing on), one after
/// the other. Returns the records and what failed.
pub async fn run_all(
    config: &FairnessConfig,
    modes: &[bool],
    scheduler: &SchedulerOptions,
    runtime: &RuntimeOptions,
) -> Result<(Vec<RunRecord>, Vec<String>)> {
    config.validate()?;
    let shape = Arc::new(config.plan());
    let mut records = Vec::new();
    let mut failures = Vec::new();
    for &fair in modes {
        let record = run::run(config, shape.clone(), fair, scheduler, runtime).await?;
        failures.extend(report::failures(config, &record));
        records.push(record);
    }
    Ok((records, failures))
}
