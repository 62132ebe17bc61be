//! The job runtime of a tier 1 control plane (no controller manager, no
//! nodes), as Kueue's scheduler-performance runner plays it: it watches the
//! benchmark's Jobs, and when one is released (unsuspended) it marks it
//! running (`startTime`, `active: 1`, `ready: 1`), and after its runtime
//! (its class's in Kueue's shape) complete (`SuccessCriteriaMet` +
//! `Complete`, `completionTime`, `succeeded: 1`). A job suspended again
//! (reclaimed) loses its pods (`active: 0`, `startTime` cleared, as the job
//! controller does) and its pending completion. It also records when each
//! job was created, released and finished, and checks the CPU of the jobs
//! that actually run against every quota's max.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::quota::{Limits, Usage};
use super::shape::{CLASS_LABEL, Shape};

/// How the runtime behaves.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Mark a released job running before completing it.
    pub mark_running: bool,
    /// Run each job for its planned runtime (its class's in Kueue's shape;
    /// `false`: complete at once).
    pub class_runtimes: bool,
    /// Job status writes in flight at most.
    pub write_concurrency: usize,
    /// How long a job create or status write that fails for a reason a
    /// retry can cure (the API server or the webhook unreachable) is
    /// retried: at least 5 attempts, and attempts go on until this much
    /// time has passed since the first (zero: 5 attempts). The chaos run
    /// sets it so that an outage delays jobs instead of losing them.
    pub retry_for: Duration,
}

/// Failed job create attempts, as the creators saw them: each failed
/// attempt (it is retried) by cause, and the jobs that needed a retry.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CreateFailures {
    /// Failed attempts by cause (see [`create_failure_cause`]).
    pub attempts_by_cause: std::collections::BTreeMap<String, u64>,
    /// Jobs with at least one failed attempt.
    pub jobs: usize,
    /// Jobs never created (every attempt failed).
    pub gave_up: usize,
    /// The first five failures of each cause: (seconds since the start,
    /// job, cause, error).
    pub examples: Vec<(f64, String, String, String)>,
}

/// Why a job create failed, in a word: `webhook_call_failed` (the API
/// server could not call the webhook: with failurePolicy Fail the create
/// is refused), `webhook_denied` (the webhook answered and refused),
/// `webhook_busy` (the webhook's back-pressure: retry, see [`asks_to_retry`]),
/// `api_<code>` (another answer of the API server), `api_unreachable` (no
/// answer: connection refused or cut).
pub fn create_failure_cause(error: &kube::Error) -> String {
    match error {
        _ if asks_to_retry(error) => "webhook_busy".into(),
        kube::Error::Api(e) if e.message.contains("failed calling webhook") => {
            "webhook_call_failed".into()
        }
        kube::Error::Api(e) if e.message.contains("denied the request") => "webhook_denied".into(),
        kube::Error::Api(e) => format!("api_{}", e.code),
        _ => "api_unreachable".into(),
    }
}

/// Whether a failed create is the webhook's back-pressure: its backlog of
/// units to create (or the namespace's share of it) is full, and it asks
/// the client to retry (`webhook/src/unit_creator/mod.rs`).
pub fn asks_to_retry(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e)
        if e.message.contains("denied the request") && e.message.contains("; retry"))
}

/// What happened to one job (seconds since the start of the phase).
#[derive(Clone, Debug, Default)]
pub struct JobTimeline {
    /// The create request was sent.
    pub created: Option<f64>,
    /// Each time the job was seen released.
    pub releases: Vec<f64>,
    /// Each time it was seen suspended again after a release.
    pub suspensions: Vec<f64>,
    /// Seen complete.
    pub finished: Option<f64>,
    /// The completion was sent (the job's pods are done from then on).
    pub completion_sent: Option<f64>,
    /// The completion write was answered OK (the API says complete from
    /// then on, whenever this runtime's watch shows it).
    pub completion_written: Option<f64>,
    /// Seen suspended after it was seen complete and running: a reclaim or
    /// preemption of a finished job (goal: never).
    pub suspended_finished: bool,
    /// Seen complete while suspended from the first: this runtime completed
    /// a job that had been suspended (its own race; goal: never).
    pub completed_suspended: bool,
    released_now: bool,
    generation: u64,
    /// resourceVersion of the newest state seen: an older one is ignored.
    last_rv: u64,
    /// The release states seen (time, resourceVersion, suspended), for the
    /// report of a job that did not finish.
    pub transitions: Vec<(f64, u64, bool)>,
}

#[cfg(test)]
impl JobTimeline {
    /// A job created at `created`, released, sent back and finished at
    /// those times (the report's tests).
    pub(crate) fn seen(
        created: f64,
        releases: &[f64],
        suspensions: &[f64],
        finished: Option<f64>,
    ) -> Self {
        Self {
            created: Some(created),
            releases: releases.to_vec(),
            suspensions: suspensions.to_vec(),
            finished,
            ..Self::default()
        }
    }
}

struct State {
    jobs: Vec<JobTimeline>,
    running: Usage,
    create_failures: CreateFailures,
    /// Violations beyond the CPU of jobs whose completion was written (the
    /// first 20 in detail) and how many.
    beyond_completed: (Vec<RunningViolation>, usize),
}

/// A quota found above its max by the CPU of running jobs, with the jobs
/// counted in it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunningViolation {
    /// The violation (`finished_jobs_cpu`: CPU of counted jobs whose
    /// completion had been written, not yet seen back).
    pub violation: super::quota::Violation,
    /// The jobs counted in the quota then: (job, seen released at,
    /// completion written at), at most 60.
    pub jobs: Vec<(String, f64, Option<f64>)>,
}

impl State {
    /// Each of `found` with the CPU, in its quota, of the jobs counted
    /// running whose completion the API server already accepted: their
    /// pods are done and the API says so, the runtime has not seen its own
    /// write come back yet (its watch lags, say relisting after
    /// kube-apiserver restarted), while the scheduler may have seen it and
    /// given the quota to another job. A violation beyond that CPU is one
    /// the scheduler made.
    fn classify(&mut self, shape: &Shape, leaf: usize, found: Vec<super::quota::Violation>) {
        for mut v in found {
            let parent = self.running.parent_of(leaf);
            let in_scope = |l: usize| match v.level {
                "leaf" => l == leaf,
                "parent" => self.running.parent_of(l) == parent,
                _ => true,
            };
            let mut sent = 0i64;
            let mut jobs = Vec::new();
            for (i, j) in self.jobs.iter().enumerate() {
                let planned = &shape.jobs[i];
                if !j.released_now || !in_scope(planned.leaf) {
                    continue;
                }
                if j.completion_written.is_some() {
                    sent += i64::from(planned.cpu) * 1000;
                }
                if jobs.len() < 60 {
                    let name = format!("{}/{}", shape.leaves[planned.leaf].namespace, planned.name);
                    jobs.push((
                        name,
                        j.releases.last().copied().unwrap_or(0.0),
                        j.completion_written,
                    ));
                }
            }
            v.finished_jobs_cpu = Some(sent as f64 / 1000.0);
            if v.used_cpu - sent as f64 / 1000.0 > v.max_cpu + 1e-9 {
                self.beyond_completed.1 += 1;
                if self.beyond_completed.0.len() < 20 {
                    self.beyond_completed
                        .0
                        .push(RunningViolation { violation: v, jobs });
                }
            }
        }
    }
}

/// The job runtime and recorder.
pub struct Runner {
    shape: Arc<Shape>,
    t0: Instant,
    client: kube::Client,
    options: RuntimeOptions,
    state: Mutex<State>,
    writes: Semaphore,
    finished: AtomicUsize,
    write_errors: AtomicU64,
    last_error: Mutex<Option<String>>,
    watch: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").finish_non_exhaustive()
    }
}

fn now_time() -> Value {
    // Whole seconds, as the API server stores them: completionTime is then
    // never before startTime.
    let now = k8s_openapi::jiff::Timestamp::now();
    let secs = k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
    serde_json::to_value(Time(secs)).unwrap_or(Value::Null)
}

fn condition(type_: &str, reason: &str) -> Value {
    json!({
        "type": type_, "status": "True", "reason": reason,
        "message": "marked by the koord-queue benchmark runtime",
        "lastProbeTime": now_time(), "lastTransitionTime": now_time(),
    })
}

impl Runner {
    /// Starts watching the benchmark's Jobs with `client` (admin); times are
    /// measured from now. `check` enables the quota check of running jobs.
    pub fn start(
        shape: Arc<Shape>,
        client: kube::Client,
        options: RuntimeOptions,
        check: bool,
    ) -> Arc<Self> {
        let limits = check.then(|| Limits::of(&shape));
        let runner = Arc::new(Self {
            state: Mutex::new(State {
                jobs: vec![JobTimeline::default(); shape.jobs.len()],
                running: Usage::new(&shape, limits),
                create_failures: CreateFailures::default(),
                beyond_completed: (Vec::new(), 0),
            }),
            shape,
            t0: Instant::now(),
            client,
            writes: Semaphore::new(options.write_concurrency.max(1)),
            options,
            finished: AtomicUsize::new(0),
            write_errors: AtomicU64::new(0),
            last_error: Mutex::new(None),
            watch: Mutex::new(None),
        });
        let this = runner.clone();
        let task = tokio::spawn(async move { this.watch_jobs().await });
        if let Ok(mut watch) = runner.watch.lock() {
            *watch = Some(task);
        }
        runner
    }

    /// Stops the watch.
    pub fn stop(&self) {
        if let Ok(mut watch) = self.watch.lock()
            && let Some(task) = watch.take()
        {
            task.abort();
        }
    }

    /// The start of the phase.
    pub fn t0(&self) -> Instant {
        self.t0
    }

    /// Seconds since the start of the phase.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Jobs seen complete.
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::Relaxed)
    }

    /// Failed job status writes (after retries) and the last error.
    pub fn write_errors(&self) -> (u64, Option<String>) {
        (
            self.write_errors.load(Ordering::Relaxed),
            self.last_error.lock().ok().and_then(|e| e.clone()),
        )
    }

    /// Records that job `i`'s create request is being sent.
    pub fn mark_created(&self, i: usize) {
        let t = self.now();
        if let Ok(mut st) = self.state.lock()
            && let Some(job) = st.jobs.get_mut(i)
        {
            job.created.get_or_insert(t);
        }
    }

    /// Job `i`'s timeline.
    pub fn timeline(&self, i: usize) -> Option<JobTimeline> {
        self.state.lock().ok().and_then(|s| s.jobs.get(i).cloned())
    }

    /// The failed job create attempts so far.
    pub fn create_failures(&self) -> CreateFailures {
        self.state
            .lock()
            .map(|s| s.create_failures.clone())
            .unwrap_or_default()
    }

    /// Records a failed create attempt of job `i` (`first`: its first).
    fn record_create_failure(&self, i: usize, first: bool, error: &kube::Error) {
        let t = self.now();
        let cause = create_failure_cause(error);
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let f = &mut st.create_failures;
        *f.attempts_by_cause.entry(cause.clone()).or_default() += 1;
        if first {
            f.jobs += 1;
        }
        // The first five of each cause.
        if f.examples.iter().filter(|e| e.2 == cause).count() < 5 {
            let job = &self.shape.jobs[i];
            let name = format!("{}/{}", self.shape.leaves[job.leaf].namespace, job.name);
            f.examples.push((t, name, cause, error.to_string()));
        }
    }

    fn record_create_given_up(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.create_failures.gave_up += 1;
        }
    }

    /// Whether another attempt is due after `attempt` failed ones, the
    /// first sent at `started`.
    fn retry_due(&self, attempt: u32, started: Instant) -> bool {
        attempt < 5 || started.elapsed() < self.options.retry_for
    }

    /// Every job's timeline.
    pub fn timelines(&self) -> Vec<JobTimeline> {
        self.state
            .lock()
            .map(|s| s.jobs.clone())
            .unwrap_or_default()
    }

    /// Whether each job's completion has been sent (or seen): from then on
    /// its pods are done, whenever the API and the scheduler catch up.
    pub fn finished_jobs(&self) -> Vec<bool> {
        self.state
            .lock()
            .map(|s| {
                s.jobs
                    .iter()
                    .map(|j| j.finished.is_some() || j.completion_sent.is_some())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Violations of the running-jobs check beyond the CPU of jobs whose
    /// completion was written and not seen back yet: examples and count.
    pub fn violations_beyond_completed(&self) -> (Vec<RunningViolation>, usize) {
        self.state
            .lock()
            .map(|s| s.beyond_completed.clone())
            .unwrap_or_default()
    }

    /// The running-jobs quota accounting.
    pub fn running_usage(&self) -> Option<Usage> {
        self.state.lock().ok().map(|s| s.running.clone())
    }

    async fn watch_jobs(self: Arc<Self>) {
        let api: Api<Job> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(CLASS_LABEL);
        let mut stream = watcher(api, config).default_backoff().boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(job) | watcher::Event::InitApply(job))) => {
                    self.on_job(&job)
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(error) => tracing::warn!(%error, "job watch"),
            }
        }
    }

    fn on_job(self: &Arc<Self>, job: &Job) {
        let (Some(ns), Some(name)) = (
            job.metadata.namespace.as_deref(),
            job.metadata.name.as_deref(),
        ) else {
            return;
        };
        let Some(i) = self.shape.job_index(ns, name) else {
            return;
        };
        let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
        let rv = job
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let status = job.status.as_ref();
        let complete = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
        let t = self.now();
        let planned = &self.shape.jobs[i];
        let cpu = i64::from(planned.cpu) * 1000;
        let leaf = planned.leaf;
        let object = format!("{ns}/{name}");
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let st = &mut *guard;
        let timeline = &mut st.jobs[i];
        // A state older than one already acted on (a re-read racing the
        // watch) must not undo it.
        if rv != 0 && rv < timeline.last_rv {
            return;
        }
        timeline.last_rv = timeline.last_rv.max(rv);
        if complete {
            // Which side is wrong: a job seen complete and running, then
            // suspended, was suspended by the queue after it finished; one
            // complete and suspended when first seen complete was completed
            // by this runtime after it was suspended.
            match (timeline.finished.is_some(), suspended) {
                (true, true) if !timeline.completed_suspended && !timeline.suspended_finished => {
                    timeline.suspended_finished = true;
                    tracing::warn!(job = %object, "a finished job was suspended");
                }
                (false, true) => {
                    timeline.completed_suspended = true;
                    tracing::warn!(job = %object, "a suspended job was completed");
                }
                _ => {}
            }
            if timeline.finished.is_none() {
                timeline.finished = Some(t);
                timeline.generation += 1;
                if timeline.released_now {
                    timeline.released_now = false;
                    st.running.change(leaf, -cpu, t, &object);
                }
                self.finished.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if suspended == timeline.released_now {
            timeline.transitions.push((t, rv, suspended));
        }
        if !suspended && !timeline.released_now {
            timeline.released_now = true;
            timeline.releases.push(t);
            timeline.generation += 1;
            let generation = timeline.generation;
            let found = st.running.change(leaf, cpu, t, &object);
            if !found.is_empty() {
                st.classify(&self.shape, leaf, found);
            }
            drop(guard);
            // A job released again whose pods-deleted write did not land
            // yet keeps its startTime: the API server refuses to change it.
            let start_time = status
                .and_then(|s| s.start_time.as_ref())
                .and_then(|t| serde_json::to_value(t).ok());
            let this = self.clone();
            tokio::spawn(async move { this.run_job(i, generation, start_time).await });
        } else if suspended && timeline.released_now {
            timeline.released_now = false;
            timeline.suspensions.push(t);
            timeline.generation += 1;
            let generation = timeline.generation;
            st.running.change(leaf, -cpu, t, &object);
            drop(guard);
            let this = self.clone();
            tokio::spawn(async move {
                // The job controller deletes the pods of a suspended job.
                let patch = json!({ "status": { "startTime": null, "active": 0, "ready": 0 } });
                this.patch_status(i, &patch, generation, false).await;
            });
        }
    }

    async fn run_job(self: Arc<Self>, i: usize, generation: u64, start_time: Option<Value>) {
        let runtime = if self.options.class_runtimes {
            self.shape.jobs[i].runtime
        } else {
            Duration::ZERO
        };
        let deadline = tokio::time::Instant::now() + runtime;
        let start = start_time.unwrap_or_else(now_time);
        if self.options.mark_running {
            let patch = json!({ "status": { "startTime": start, "active": 1, "ready": 1 } });
            self.patch_status(i, &patch, generation, false).await;
        }
        tokio::time::sleep_until(deadline).await;
        {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            if st.jobs[i].generation != generation {
                return;
            }
            let t = self.now();
            st.jobs[i].completion_sent.get_or_insert(t);
        }
        // startTime again: a finished Job must have one, and the pods-deleted
        // write of an earlier reclaim may have landed after this run's start.
        let status = json!({
            "startTime": start, "active": 0, "ready": 0, "succeeded": 1,
            "completionTime": now_time(),
            "conditions": [
                condition("SuccessCriteriaMet", "CompletionsReached"),
                condition("Complete", "CompletionsReached"),
            ],
        });
        // Conditional on the newest state seen: a job suspended meanwhile
        // (a reclaim this runtime's watch has not shown yet) must not be
        // marked complete while suspended — its pods were deleted, as the
        // job controller, which writes from its own cache with the same
        // precondition, would find.
        if self
            .patch_status(i, &json!({ "status": status }), generation, true)
            .await
        {
            let t = self.now();
            if let Ok(mut st) = self.state.lock()
                && st.jobs[i].generation == generation
            {
                st.jobs[i].completion_written.get_or_insert(t);
            }
        }
    }

    fn last_rv(&self, i: usize) -> u64 {
        self.state.lock().map_or(0, |s| s.jobs[i].last_rv)
    }

    /// A state this runtime wrote itself is the newest it knows, before
    /// its watch shows it: it is acted on now (level-triggered), so that a
    /// conditional write after it neither conflicts with it nor passes a
    /// change it carries. A write answered with the job suspended (the
    /// queue's reclaim landed before it) ends this run: only moving the
    /// resourceVersion on, as before, dropped that suspension as "older
    /// than seen" when the watch brought it, and the completion, made
    /// conditional on the newer resourceVersion, then completed a
    /// suspended job.
    fn observe(self: &Arc<Self>, job: &Job) {
        self.on_job(job);
    }

    fn current(&self, i: usize, generation: u64) -> bool {
        self.state
            .lock()
            .is_ok_and(|s| s.jobs[i].generation == generation)
    }

    /// Writes job `i`'s status while the job is still in `generation`
    /// (released, or suspended again): a write overtaken by a newer state
    /// (e.g. a completion racing a reclaim) is dropped, not an error.
    /// Whether the write was answered OK. With `conditional`, the write
    /// carries the resourceVersion of the newest state seen and is retried
    /// on a conflict after the job is read again (and acted on).
    async fn patch_status(
        self: &Arc<Self>,
        i: usize,
        patch: &Value,
        generation: u64,
        conditional: bool,
    ) -> bool {
        let job = &self.shape.jobs[i];
        let ns = &self.shape.leaves[job.leaf].namespace;
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let mut last = String::new();
        let started = Instant::now();
        let mut attempt = 0u32;
        while self.retry_due(attempt, started) {
            attempt += 1;
            let result = {
                let _permit = self.writes.acquire().await;
                if !self.current(i, generation) {
                    return false;
                }
                // Only a conditional write needs its own copy (the newest
                // resourceVersion, read at each attempt).
                let patch = if conditional {
                    let mut with_rv = patch.clone();
                    with_rv["metadata"] = json!({ "resourceVersion": self.last_rv(i).to_string() });
                    std::borrow::Cow::Owned(with_rv)
                } else {
                    std::borrow::Cow::Borrowed(patch)
                };
                api.patch_status(&job.name, &PatchParams::default(), &Patch::Merge(&*patch))
                    .await
            };
            match result {
                Ok(written) => {
                    self.observe(&written);
                    return true;
                }
                Err(kube::Error::Api(e)) if e.code == 409 && conditional => {
                    // Changed since: act on it as it is now, then try again
                    // if it is still in this generation.
                    last = e.to_string();
                    if let Ok(now) = api.get(&job.name).await {
                        self.on_job(&now);
                    }
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return false,
                Err(_) if !self.current(i, generation) => return false,
                // Refused for the job's state (say, pods removed from a job
                // released again meanwhile): no retry changes that.
                Err(kube::Error::Api(e)) if e.code == 422 => {
                    last = e.to_string();
                    break;
                }
                Err(error) => {
                    last = error.to_string();
                    let wait = Duration::from_millis(50 << (attempt - 1).min(5));
                    tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                }
            }
        }
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(job = %job.name, namespace = %ns, error = %last, %patch, generation, "job status write failed");
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(format!("{ns}/{}: {last}", job.name));
        }
        // The write was refused for a state this runtime has not seen yet
        // (say, pods removed from a job released again meanwhile): act on
        // the job as it is now, as a level-triggered controller would.
        if let Ok(now) = api.get(&job.name).await {
            self.on_job(&now);
        }
        false
    }
}

mod create;
pub use create::{
    PACED_IN_FLIGHT, create, create_job, create_paced, create_saturated, interleaved,
};

#[cfg(test)]
mod tests {
    use super::{asks_to_retry, create_failure_cause};

    fn denied(message: &str) -> kube::Error {
        let message = format!(
            "admission webhook \"jobs.koord-queue.x-k8s.io\" denied the request: {message}"
        );
        kube::Error::Api(Box::new(
            kube::core::Status::failure(&message, "").with_code(400),
        ))
    }

    #[test]
    fn the_webhooks_back_pressure_is_retried_and_counted_apart() {
        // The webhook's two refusals of a full backlog
        // (`webhook/src/unit_creator/mod.rs`).
        for busy in [
            "Koord-Queue's webhook is busy: 10000 QueueUnits wait to be created; retry",
            "namespace bench-cq-0-0 has 1000 QueueUnits waiting to be created, its share of \
             Koord-Queue's backlog; retry once they are created",
        ] {
            assert!(asks_to_retry(&denied(busy)), "{busy}");
            assert_eq!(create_failure_cause(&denied(busy)), "webhook_busy");
        }
        // A refusal for cause is not retried without end.
        let refused = denied("queue q: no such Queue");
        assert!(!asks_to_retry(&refused));
        assert_eq!(create_failure_cause(&refused), "webhook_denied");
    }
}
