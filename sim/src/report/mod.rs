//! What a run shows: per queue, quota and priority class the time to
//! release (mean, p50, p90, p99) and the units sent back; each quota's and
//! the root's usage over time; fair-sharing children's shares of what was
//! borrowed against their weights. Serialized as the JSON report; the HTML
//! report (`html.rs`) and the comparison (`compare.rs`) read it.

pub mod compare;
mod dist;
mod fair;
pub mod fidelity;
pub mod html;
mod svg;

use std::collections::BTreeMap;

use koord_queue_api::keys;
use koord_queue_core::RootCapacity;
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::engine::{RunStats, Simulation, UnitOutcome, UsageSeries};
use crate::job::Job;
pub use dist::Dist;
pub use fair::{FairShare, FairShareGroup};
pub use fidelity::Fidelity;

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Totals.
    pub summary: Summary,
    /// Resources, with the unit amounts are given in.
    pub resources: Vec<ResourceUnit>,
    /// Per queue.
    pub by_queue: Vec<Group>,
    /// Per leaf quota.
    pub by_quota: Vec<Group>,
    /// Per priority class.
    pub by_class: Vec<Group>,
    /// Usage over time: the root first, then every quota.
    pub usage: UsageReport,
    /// Shares of fair-sharing parents' pools.
    pub fair_shares: Vec<FairShareGroup>,
    /// Objects ignored, and other remarks.
    pub notes: Vec<String>,
    /// Simulated against real times to release, when the trace has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Fidelity>,
}

/// A resource and the unit of its amounts in the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceUnit {
    /// The resource.
    pub name: String,
    /// `cores` for cpu, `GiB` for memory, else `count`.
    pub unit: String,
}

/// Totals of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs released at least once.
    pub released: usize,
    /// Jobs that ran to their end.
    pub finished: usize,
    /// Jobs never released (still waiting when nothing else could happen).
    pub never_released: usize,
    /// Submission to first release, released jobs.
    pub time_to_release: Dist,
    /// Reclaims for guaranteed units.
    pub reclaimed: u64,
    /// Preemptions inside quotas.
    pub preempted: u64,
    /// Reclaims for fair sharing.
    pub fair_share_reclaimed: u64,
    /// Jobs ended by their run bound.
    pub bounded_out: usize,
    /// First submission (ms).
    pub start_ms: i64,
    /// Last event (ms).
    pub end_ms: i64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Events handled.
    pub events: u64,
    /// Most units waiting at once.
    pub peak_waiting: u64,
    /// Jobs refused: submitted while a job of their name existed.
    pub refused: u64,
    /// Time in which work waited (in its queue or in backoff) while the
    /// root held less than half its capacity (s).
    #[serde(default)]
    pub idle_while_waiting_s: f64,
    /// The whole seconds of the run that had some of that.
    #[serde(default)]
    pub idle_while_waiting_seconds: u64,
    /// The most times one unit was sent back (reclaimed, preempted or
    /// reclaimed for fair sharing).
    #[serde(default)]
    pub max_sent_back_of_one: u32,
    /// The seed of the backoff jitter.
    pub seed: u64,
}

/// One queue's, quota's or class's jobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// Jobs.
    pub jobs: usize,
    /// Jobs released at least once.
    pub released: usize,
    /// Jobs never released.
    pub never_released: usize,
    /// Submission to first release (s).
    pub time_to_release: Dist,
    /// The same in the real system, when the trace says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_time_to_release: Option<Dist>,
    /// Times its jobs were reclaimed for guaranteed units.
    pub reclaimed: u64,
    /// Times preempted inside their quota.
    pub preempted: u64,
    /// Times reclaimed for fair sharing.
    pub fair_share_reclaimed: u64,
}

/// Usage of the root and the quotas.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// Start of the first bucket (ms).
    pub start_ms: i64,
    /// Width of a bucket (ms).
    pub bucket_ms: i64,
    /// The root (its max is the capacity), then each quota.
    pub nodes: Vec<QuotaUse>,
}

/// One quota's (or the root's) usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuotaUse {
    /// Name (the root quota's name for the root).
    pub name: String,
    /// Its parent (`None`: under the root, or the root itself).
    pub parent: Option<String>,
    /// Min per resource (the root: none).
    pub min: BTreeMap<String, f64>,
    /// Max per resource, where limited (the root: the capacity).
    pub max: BTreeMap<String, f64>,
    /// Mean held over the run.
    pub mean: BTreeMap<String, f64>,
    /// Peak held.
    pub peak: BTreeMap<String, f64>,
    /// Mean held over the max.
    pub utilization: BTreeMap<String, f64>,
    /// Mean held per bucket: `[bucket][resource]` in the order of
    /// `Report::resources`.
    pub series: Vec<Vec<f64>>,
}

/// An amount in the report's unit of `resource`.
pub fn display(resource: &str, amount: f64) -> f64 {
    match resource {
        "cpu" => amount / 1000.0,
        "memory" => amount / f64::from(1u32 << 30),
        _ => amount,
    }
}

fn unit_of(resource: &str) -> &'static str {
    match resource {
        "cpu" => "cores",
        "memory" => "GiB",
        _ => "count",
    }
}

#[derive(Default)]
struct Acc {
    jobs: usize,
    waits: Vec<i64>,
    observed: Vec<i64>,
    o: UnitOutcome,
}

impl Acc {
    fn add(&mut self, job: &Job, o: &UnitOutcome) {
        self.jobs += 1;
        if let Some(r) = o.first_release_ms {
            self.waits.push(r - job.submit_ms);
        }
        self.observed.extend(job.observed_wait_ms);
        self.o.reclaimed += o.reclaimed;
        self.o.preempted += o.preempted;
        self.o.fair_share_reclaimed += o.fair_share_reclaimed;
    }

    fn group(self, name: String) -> Group {
        Group {
            name,
            jobs: self.jobs,
            released: self.waits.len(),
            never_released: self.jobs - self.waits.len(),
            time_to_release: Dist::of_ms(self.waits),
            observed_time_to_release: (!self.observed.is_empty())
                .then(|| Dist::of_ms(self.observed)),
            reclaimed: u64::from(self.o.reclaimed),
            preempted: u64::from(self.o.preempted),
            fair_share_reclaimed: u64::from(self.o.fair_share_reclaimed),
        }
    }
}

fn groups(map: BTreeMap<String, Acc>) -> Vec<Group> {
    map.into_iter().map(|(name, acc)| acc.group(name)).collect()
}

/// The report of a finished run.
pub fn build(sim: &mut Simulation, cluster: &Cluster, run: RunStats, seed: u64) -> Report {
    let mut by_queue: BTreeMap<String, Acc> = BTreeMap::new();
    let mut by_quota: BTreeMap<String, Acc> = BTreeMap::new();
    let mut by_class: BTreeMap<String, Acc> = BTreeMap::new();
    let mut all = Acc::default();
    let (mut finished, mut bounded_out) = (0, 0);
    let start_ms = sim.start_ms();
    for (job, o) in sim.jobs().iter().zip(sim.outcomes()) {
        all.add(job, o);
        by_queue
            .entry(job.queue.to_string())
            .or_default()
            .add(job, o);
        if let Some(q) = &job.quota {
            by_quota.entry(q.to_string()).or_default().add(job, o);
        }
        by_class
            .entry(job.class.to_string())
            .or_default()
            .add(job, o);
        if o.end_ms.is_some() {
            finished += 1;
            if job.bounded_out {
                bounded_out += 1;
            }
        }
    }
    let total = all.group(String::new());
    let summary = Summary {
        jobs: total.jobs,
        released: total.released,
        finished,
        never_released: total.never_released,
        time_to_release: total.time_to_release,
        reclaimed: total.reclaimed,
        preempted: total.preempted,
        fair_share_reclaimed: total.fair_share_reclaimed,
        bounded_out,
        start_ms,
        end_ms: run.end_ms,
        cycles: run.cycles,
        events: run.events,
        peak_waiting: run.peak_waiting,
        refused: run.refused,
        idle_while_waiting_s: run.idle_waiting_ms as f64 / 1000.0,
        idle_while_waiting_seconds: run.idle_waiting_seconds,
        max_sent_back_of_one: run.max_sent_back_of_one,
        seed,
    };
    let resources: Vec<String> = sim.resources().to_vec();
    let capacity = sim.root_capacity().cloned();
    let series = sim.usage(None);
    let usage = usage_report(cluster, &resources, capacity.as_ref(), series.as_ref());
    let fair_shares = fair::shares(cluster, &resources, series.as_ref());
    Report {
        summary,
        resources: resources
            .iter()
            .map(|r| ResourceUnit {
                name: r.clone(),
                unit: unit_of(r).to_string(),
            })
            .collect(),
        by_queue: groups(by_queue),
        by_quota: groups(by_quota),
        by_class: groups(by_class),
        usage,
        fair_shares,
        notes: cluster.notes.clone(),
        fidelity: None,
    }
}

fn usage_report(
    cluster: &Cluster,
    resources: &[String],
    capacity: Option<&RootCapacity>,
    series: Option<&UsageSeries>,
) -> UsageReport {
    let Some(series) = series else {
        return UsageReport::default();
    };
    let per_resource = |values: &[f64]| -> BTreeMap<String, f64> {
        resources
            .iter()
            .zip(values)
            .map(|(r, v)| (r.clone(), display(r, *v)))
            .collect()
    };
    let limits = |res: &koord_queue_api::Resources, only_set: bool| -> BTreeMap<String, f64> {
        resources
            .iter()
            .filter(|r| !only_set || res.contains(r))
            .map(|r| (r.clone(), display(r, res.get(r) as f64)))
            .collect()
    };
    let mut nodes = Vec::with_capacity(series.nodes.len());
    for (n, node) in series.nodes.iter().enumerate() {
        let (name, parent, min, max) = if n == 0 {
            let max = match capacity {
                Some(RootCapacity::Limited(r)) => limits(r, true),
                _ => BTreeMap::new(),
            };
            (
                keys::ROOT_QUOTA_NAME.to_string(),
                None,
                BTreeMap::new(),
                max,
            )
        } else {
            let Some(q) = cluster.quotas.get(n - 1) else {
                continue;
            };
            (
                q.name.clone(),
                q.parent.clone(),
                limits(&q.min, false),
                limits(&q.max, true),
            )
        };
        let mean = per_resource(&node.overall);
        let utilization = mean
            .iter()
            .filter_map(|(r, m)| {
                let limit = max.get(r).copied().filter(|l| *l > 0.0)?;
                Some((r.clone(), m / limit))
            })
            .collect();
        let peak: Vec<f64> = node.peak.iter().map(|v| *v as f64).collect();
        nodes.push(QuotaUse {
            name,
            parent,
            min,
            max,
            mean,
            peak: per_resource(&peak),
            utilization,
            series: node
                .mean
                .iter()
                .map(|row| {
                    row.iter()
                        .zip(resources)
                        .map(|(v, r)| display(r, *v))
                        .collect()
                })
                .collect(),
        });
    }
    UsageReport {
        start_ms: series.start_ms,
        bucket_ms: series.bucket_ms,
        nodes,
    }
}
