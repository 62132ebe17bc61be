//! How good the scheduler's start-time estimates are (issue 40): during the
//! run phase the waiting units' `estimatedStart` is read every few seconds
//! through the visibility API — as a user reads it, through the
//! kube-apiserver's aggregation layer, page by page — and afterwards
//! compared with when each job was actually released.
//!
//! The measure, per class: of the units with an estimate read at least
//! [`LEAD`] before their release, the median of |estimate − release| over
//! the unit's actual wait (release − create). The estimate taken is the
//! last one read at least [`LEAD`] before the release: what a user looking
//! then would have been told. Goal: ≤ 25 %.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use koord_queue_visibility::types::PendingUnitList;
use serde::Serialize;

use crate::report::{Distribution, percentile};
use crate::runner::JobTimeline;
use crate::shape::Shape;
use crate::visibility_listing::list_pages;

/// How long before its release a unit's estimate must have been read to
/// count (the 10 s).
pub const LEAD: f64 = 10.0;

/// Every waiting unit of the cluster, as the visibility API lists them.
const PATH: &str = "/apis/visibility.koord-queue.io/v1alpha1/pendingunits";

/// One reading of every waiting unit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Poll {
    /// When it started (seconds since the start of the phase).
    pub at_s: f64,
    /// How long its pages took together, seconds.
    pub took_s: f64,
    /// Requests (pages).
    pub requests: usize,
    /// Units listed.
    pub units: usize,
    /// Units listed with an estimate.
    pub estimated: usize,
}

/// What the sampler read.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Each reading.
    pub polls: Vec<Poll>,
    /// Per job (the shape's index): (read at, estimated release), seconds
    /// since the start of the phase.
    pub estimates: Vec<Vec<(f64, f64)>>,
    /// Listings that failed, and the last error.
    pub errors: (usize, Option<String>),
    /// The reading interval.
    pub interval: Duration,
    /// The page size.
    pub page_limit: usize,
}

/// Reads the estimates in the background until stopped.
#[derive(Debug)]
pub struct Sampler {
    samples: Arc<Mutex<Samples>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts reading every `interval` as `client` (an administrator: the
    /// cluster-wide list), in pages of `page_limit`; times are counted from
    /// `t0`, the phase's start, whose wall-clock time is taken now to place
    /// the RFC 3339 estimates on the same axis.
    pub fn start(
        shape: Arc<Shape>,
        client: kube::Client,
        t0: Instant,
        interval: Duration,
        page_limit: usize,
    ) -> Self {
        let samples = Arc::new(Mutex::new(Samples {
            estimates: vec![Vec::new(); shape.jobs.len()],
            interval,
            page_limit,
            ..Samples::default()
        }));
        let wall_t0_ms = now_ms() - t0.elapsed().as_secs_f64() * 1000.0;
        let out = samples.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let at = t0.elapsed().as_secs_f64();
                let read = read_once(&client, &shape, page_limit, wall_t0_ms).await;
                let took = t0.elapsed().as_secs_f64() - at;
                let Ok(mut s) = out.lock() else {
                    return;
                };
                match read {
                    Ok((requests, units)) => {
                        let estimated = units.iter().filter(|u| u.1.is_some()).count();
                        for (job, estimate) in &units {
                            if let (Some(e), Some(slot)) = (estimate, s.estimates.get_mut(*job)) {
                                slot.push((at, *e));
                            }
                        }
                        s.polls.push(Poll {
                            at_s: at,
                            took_s: took,
                            requests,
                            units: units.len(),
                            estimated,
                        });
                    }
                    Err(e) => {
                        s.errors.0 += 1;
                        s.errors.1 = Some(format!("{e:#}"));
                    }
                }
            }
        });
        Self { samples, task }
    }

    /// Stops reading; what was read.
    pub fn stop(self) -> Samples {
        self.task.abort();
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// One listing of every page: the requests it took, and each listed unit
/// of the shape with its estimate (seconds since the phase's start).
async fn read_once(
    client: &kube::Client,
    shape: &Shape,
    page_limit: usize,
    wall_t0_ms: f64,
) -> Result<(usize, Vec<(usize, Option<f64>)>)> {
    let mut units = Vec::new();
    let requests = list_pages(client, PATH, Some(page_limit), |page: &PendingUnitList| {
        for item in &page.items {
            let ns = item.metadata.namespace.as_deref().unwrap_or_default();
            // The job's name (the unit's may differ), else the unit's.
            let name = item.job.as_ref().map_or(&item.metadata.name, |j| &j.name);
            let Some(job) = shape.job_index(ns, name) else {
                continue;
            };
            let estimate = item
                .estimated_start
                .as_deref()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| (t.as_millisecond() as f64 - wall_t0_ms) / 1000.0);
            units.push((job, estimate));
        }
    })
    .await?
    .requests;
    Ok((requests, units))
}

/// One class's accuracy.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ClassAccuracy {
    /// The class.
    pub class: String,
    /// Its jobs released.
    pub released: usize,
    /// Of those, units with an estimate read at least [`LEAD`] before their
    /// release: the ones measured.
    pub estimated_early: usize,
    /// Median of |estimate − release| / (release − create); goal ≤ 0.25.
    pub median_relative_error: Option<f64>,
    /// 90th percentile of the same.
    pub p90_relative_error: Option<f64>,
    /// Median |estimate − release|, seconds.
    pub median_absolute_error_s: Option<f64>,
    /// Median (estimate − release), seconds: negative when the estimates
    /// were early (too optimistic).
    pub median_signed_error_s: Option<f64>,
    /// Median |estimate − release| over the wait left when the estimate was
    /// read (release − read): stricter, as less of the wait is known.
    pub median_error_of_remaining_wait: Option<f64>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| percentile(&v, 0.5))
}

/// Per class (the shape's), the accuracy of `estimates` (per job: read
/// at, estimated release) against the jobs' `timelines` (created, first
/// release), for estimates read at least `lead` seconds before the release.
pub fn accuracy(
    shape: &Shape,
    timelines: &[JobTimeline],
    estimates: &[Vec<(f64, f64)>],
    lead: f64,
) -> Vec<ClassAccuracy> {
    shape
        .classes
        .iter()
        .enumerate()
        .map(|(c, class)| {
            let (mut released, mut relative, mut absolute, mut signed, mut remaining) =
                (0, Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (i, t) in timelines.iter().enumerate() {
                if shape.jobs.get(i).is_none_or(|j| j.class != c) {
                    continue;
                }
                let (Some(created), Some(&release)) = (t.created, t.releases.first()) else {
                    continue;
                };
                released += 1;
                let early = estimates
                    .get(i)
                    .into_iter()
                    .flatten()
                    .filter(|(at, _)| *at <= release - lead)
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                let Some(&(at, estimate)) = early else {
                    continue;
                };
                let wait = release - created;
                let error = estimate - release;
                if wait > 0.0 {
                    relative.push(error.abs() / wait);
                }
                absolute.push(error.abs());
                signed.push(error);
                remaining.push(error.abs() / (release - at));
            }
            let mut sorted = relative.clone();
            sorted.sort_by(f64::total_cmp);
            ClassAccuracy {
                class: class.name.to_string(),
                released,
                estimated_early: absolute.len(),
                p90_relative_error: (!sorted.is_empty()).then(|| percentile(&sorted, 0.9)),
                median_relative_error: median(relative),
                median_absolute_error_s: median(absolute),
                median_signed_error_s: median(signed),
                median_error_of_remaining_wait: median(remaining),
            }
        })
        .collect()
}

/// What reading the estimates cost: readings, their pages and time.
#[derive(Clone, Debug, Serialize)]
pub struct Cost {
    /// Readings made.
    pub readings: usize,
    /// The interval between two, seconds.
    pub interval_s: f64,
    /// Page size.
    pub page_limit: usize,
    /// Requests in all (pages).
    pub requests: usize,
    /// Most units listed in one reading.
    pub most_units: usize,
    /// Time of one reading (all its pages).
    pub reading: Distribution,
    /// Readings that failed, and the last error.
    pub failed: usize,
    /// The last failure.
    pub last_error: Option<String>,
}

/// The cost of `samples`' readings.
pub fn cost(samples: &Samples) -> Cost {
    Cost {
        readings: samples.polls.len(),
        interval_s: samples.interval.as_secs_f64(),
        page_limit: samples.page_limit,
        requests: samples.polls.iter().map(|p| p.requests).sum(),
        most_units: samples.polls.iter().map(|p| p.units).max().unwrap_or(0),
        reading: Distribution::of(samples.polls.iter().map(|p| p.took_s).collect()),
        failed: samples.errors.0,
        last_error: samples.errors.1.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{LEAD, accuracy};
    use crate::runner::JobTimeline;
    use crate::shape::Shape;

    fn timeline(created: f64, release: f64) -> JobTimeline {
        let mut t = JobTimeline::default();
        t.created = Some(created);
        t.releases = vec![release];
        t
    }

    #[test]
    fn the_last_estimate_read_early_enough_counts() {
        // 30 queues, one small job each (the first 30 jobs are small).
        let shape = Shape::new("t", 30, 30, 5, crate::shape::CLASSES).unwrap();
        let small = |i: usize| shape.jobs[i].class == 0;
        let (a, b, c) = (0, 1, 2);
        assert!(small(a) && small(b) && small(c));
        let mut timelines = vec![JobTimeline::default(); shape.jobs.len()];
        let mut estimates = vec![Vec::new(); shape.jobs.len()];
        // a: created at 0, released at 100; read at 50 (said 90, error 10)
        // and at 95 (too late to count: said 100).
        timelines[a] = timeline(0.0, 100.0);
        estimates[a] = vec![(50.0, 90.0), (95.0, 100.0), (20.0, 200.0)];
        // b: created at 0, released at 40; read at 30 (said 70, error 30).
        timelines[b] = timeline(0.0, 40.0);
        estimates[b] = vec![(30.0, 70.0)];
        // c: released, estimated only 5 s before: not measured.
        timelines[c] = timeline(0.0, 20.0);
        estimates[c] = vec![(15.0, 20.0)];
        let small_class = &accuracy(&shape, &timelines, &estimates, LEAD)[0];
        assert_eq!(small_class.class, "small");
        assert_eq!((small_class.released, small_class.estimated_early), (3, 2));
        // Relative errors 0.1 and 0.75: the nearest-rank median is 0.1.
        assert_eq!(small_class.median_relative_error, Some(0.1));
        assert_eq!(small_class.p90_relative_error, Some(0.75));
        assert_eq!(small_class.median_absolute_error_s, Some(10.0));
        assert_eq!(small_class.median_signed_error_s, Some(-10.0));
        // Of the wait left: 10 / 50 and 30 / 10.
        assert_eq!(small_class.median_error_of_remaining_wait, Some(0.2));
    }

    #[test]
    fn no_estimate_no_figure() {
        let shape = Shape::new("t", 30, 30, 5, crate::shape::CLASSES).unwrap();
        let timelines = vec![timeline(0.0, 1.0); shape.jobs.len()];
        let estimates = vec![Vec::new(); shape.jobs.len()];
        let all = accuracy(&shape, &timelines, &estimates, LEAD);
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].released, 30);
        assert_eq!(all[0].estimated_early, 0);
        assert_eq!(all[0].median_relative_error, None);
    }
}
