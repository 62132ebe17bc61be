//! The job stream of a run, as its spec says: the job runtime stand-in
//! (class runtimes or none, running CPU checked against the maxima where
//! they bind), the arrivals (paced, saturated, or the null scheduler's),
//! the progress line, and the run's times. `phase::run` and the chaos run
//! both drive their jobs through it.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::task::{JoinError, JoinHandle};

use super::spec::{Arrivals, PhaseSpec};
use crate::floor::{self, FloorClients, FloorWrites};
use crate::runner::{self, Runner, RuntimeOptions};
use crate::shape::Shape;

/// What the null scheduler's arrivals need besides the creator (the floor).
#[derive(Clone, Debug)]
pub struct NullScheduler {
    /// Its clients.
    pub clients: FloorClients,
    /// The writes it makes per job.
    pub writes: FloorWrites,
    /// Its writes in flight at most.
    pub write_concurrency: usize,
}

/// The jobs of a run on their way.
#[derive(Debug)]
pub struct JobFlow {
    shape: Arc<Shape>,
    runner: Arc<Runner>,
    generation: Option<JoinHandle<Result<()>>>,
    generation_done_at: Option<f64>,
}

impl JobFlow {
    /// Starts the job runtime (with `runtime`'s settings, class runtimes as
    /// `spec` says) through `client`; no job is created yet.
    pub fn start(
        spec: &PhaseSpec,
        shape: Arc<Shape>,
        client: kube::Client,
        mut runtime: RuntimeOptions,
    ) -> Self {
        runtime.class_runtimes = spec.class_runtimes();
        let runner = Runner::start(shape.clone(), client, runtime, spec.limits_bind());
        Self {
            shape,
            runner,
            generation: None,
            generation_done_at: None,
        }
    }

    /// The job runtime.
    pub fn runner(&self) -> &Arc<Runner> {
        &self.runner
    }

    /// Starts creating the jobs as `spec` says: by `creator`, at most
    /// `concurrency` creates in flight when saturated or for the floor
    /// (whose null scheduler is `null_scheduler`) and `paced_in_flight`
    /// when paced.
    pub fn arrive(
        &mut self,
        spec: &PhaseSpec,
        creator: kube::Client,
        concurrency: usize,
        paced_in_flight: usize,
        null_scheduler: Option<NullScheduler>,
    ) -> Result<()> {
        let (shape, runner) = (self.shape.clone(), self.runner.clone());
        self.generation = Some(match spec.arrivals {
            Arrivals::Paced => tokio::spawn(runner::create_paced(
                shape,
                runner,
                creator,
                paced_in_flight,
                false,
            )),
            Arrivals::Saturated => tokio::spawn(runner::create_saturated(
                shape,
                runner,
                creator,
                concurrency,
                false,
            )),
            Arrivals::NullScheduler => {
                let null = null_scheduler.context("the floor's null scheduler")?;
                tokio::spawn(async move {
                    floor::run(
                        shape,
                        runner,
                        null.clients,
                        null.writes,
                        concurrency,
                        null.write_concurrency,
                    )
                    .await
                })
            }
        });
        Ok(())
    }

    /// Whether jobs are still being created.
    pub fn creating(&self) -> bool {
        self.generation.is_some()
    }

    /// Once the creation task has ended: its outcome (a join error if it
    /// panicked), once; `None` while it runs or after it was reported.
    pub async fn creation_ended(&mut self) -> Option<Result<Result<()>, JoinError>> {
        if !self.generation.as_ref()?.is_finished() {
            return None;
        }
        let task = self.generation.take()?;
        let outcome = task.await;
        self.generation_done_at = Some(self.runner.now());
        Some(outcome)
    }

    /// Prints how far the jobs are, under `name`, with the queue system's
    /// count of units that succeeded.
    pub fn print_progress(&self, name: &str, succeeded: usize) {
        let n = self.shape.jobs.len();
        let timelines = self.runner.timelines();
        let created = timelines.iter().filter(|j| j.created.is_some()).count();
        let released = timelines.iter().filter(|j| !j.releases.is_empty()).count();
        eprintln!(
            "[{name}] {:>6.1}s created {created}/{n} released {released} finished {} units succeeded {succeeded}",
            self.runner.now(),
            self.runner.finished()
        );
    }

    /// The run's wall time (from the first create to the last job finished,
    /// its unit seen succeed at `last_succeeded`, or creation ended,
    /// whichever is last) and its creation time (to the last create).
    pub fn times(&self, last_succeeded: f64) -> (f64, f64) {
        let timelines = self.runner.timelines();
        let last_finish = timelines
            .iter()
            .filter_map(|j| j.finished)
            .fold(0.0f64, f64::max);
        let wall_seconds = last_finish
            .max(last_succeeded)
            .max(self.generation_done_at.unwrap_or(0.0));
        let creation_seconds = timelines
            .iter()
            .filter_map(|j| j.created)
            .fold(0.0f64, f64::max);
        (wall_seconds, creation_seconds)
    }
}
