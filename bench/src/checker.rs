//! The quota check on the API's own record: a watch on the benchmark's
//! QueueUnits recomputes the CPU held per leaf, parent and root from
//! `status.admissions` of every unit in a quota-holding phase (architecture §3
//! rule 2) each time a unit's holding changes, and checks every level
//! against its max at each increase. It also counts units that reached
//! Succeed and entries into TimeoutBackoff (reclaims), and follows each
//! unit's releases: a release is an increase of `status.attempts` (every
//! release writes the unit's attempts + 1), and between two releases the
//! unit must have been sent back — seen in a phase that holds no quota
//! (Enqueued, TimeoutBackoff, …) — or its job seen suspended again. Two
//! releases without that are a double release (see
//! [`Checker::double_releases`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::queue_unit::{QueueUnitPhase, QueueUnitStatus};
use koord_queue_api::{QueueUnit, Resources};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::quota::{Limits, Usage, Violation};
use super::runner::Runner;
use super::shape::{CLASS_LABEL, Shape};

#[derive(Debug, Default)]
struct Unit {
    leaf: usize,
    held: i64,
    phase: Option<QueueUnitPhase>,
    job: Option<usize>,
    /// `status.attempts` last seen.
    attempts: i64,
    /// When its last release (attempts increase) was seen.
    last_release: Option<f64>,
    /// Seen sent back (a phase that holds no quota and is not an end)
    /// since its last release.
    sent_back: bool,
    /// The watch's list generation when its last release was seen.
    release_list: u64,
    /// The watch's list generation when it was last seen.
    seen_list: u64,
    /// Times it was seen sent back by a preemption
    /// ([`sent_back_by_preemption`]).
    preemptions: usize,
    /// When it was first seen, released first, seen Succeed: the API's
    /// latencies the simulator models are measured from these
    /// ([`Checker::unit_times`]).
    times: UnitTimes,
}

/// When the watch saw a unit: created (first seen), first released (its
/// `status.attempts` first rose) and Succeed (seconds since the start).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnitTimes {
    /// First seen: the webhook created it.
    pub seen: f64,
    /// Its first release.
    pub released: Option<f64>,
    /// Seen Succeed: its job finished and the scheduler wrote so.
    pub succeeded: Option<f64>,
}

/// Whether a unit's status says it was sent back by a preemption: in
/// TimeoutBackoff, its `Evicted` condition's reason `Preempted`.
fn sent_back_by_preemption(status: &QueueUnitStatus) -> bool {
    status.phase == Some(QueueUnitPhase::TimeoutBackoff)
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == "Evicted" && c.status == "True" && c.reason == "Preempted")
}

/// Preemptions the units' statuses showed.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Preemptions {
    /// In all.
    pub total: usize,
    /// Of the unit preempted most often.
    pub most_of_one_unit: usize,
}

/// Two releases of a unit seen without the unit being sent back between
/// them (a candidate double release, confirmed against the job's
/// suspensions by [`Checker::double_releases`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReleasePair {
    /// `namespace/name` of the unit.
    pub unit: String,
    /// `namespace/name` of its job.
    pub job: Option<String>,
    #[serde(skip)]
    job_index: Option<usize>,
    /// When the earlier release was seen (seconds since the start).
    pub first_release_s: f64,
    /// When the later one was seen.
    pub second_release_s: f64,
    /// `status.attempts` before and after the later release.
    pub attempts: (i64, i64),
    /// The unit's phase before and after the later release.
    pub phases: (Option<String>, Option<String>),
    /// The watch relisted between the two (a 410 Gone or a restarted API
    /// server): the unit's states between them may not all have been seen.
    pub across_relist: bool,
    /// The job's suspensions seen by the job runtime, and its releases.
    pub job_suspensions_s: Vec<f64>,
    /// The job's releases seen by the job runtime.
    pub job_releases_s: Vec<f64>,
}

#[derive(Debug)]
struct State {
    units: HashMap<String, Unit>,
    usage: Usage,
    succeeded: usize,
    last_succeeded: f64,
    entered: BTreeMap<String, usize>,
    /// Violations not explained by units of finished jobs (the first 50).
    examples: Vec<Violation>,
    /// Violations not explained by units of finished jobs.
    beyond_finished: usize,
    /// Lists of the watch (the first one and every relist): when.
    lists: Vec<f64>,
    /// Releases seen (increases of a unit's attempts).
    releases: usize,
    /// Release pairs without a send-back seen between them.
    release_pairs: Vec<ReleasePair>,
}

/// The QueueUnit observer.
#[derive(Debug)]
pub struct Checker {
    shape: Arc<Shape>,
    runner: Option<Arc<Runner>>,
    t0: Instant,
    state: Mutex<State>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// CPU (millicores) held by `unit` per its status.
fn held_cpu(unit: &QueueUnit) -> i64 {
    let Some(status) = unit.status.as_ref() else {
        return 0;
    };
    if !status.phase.is_some_and(QueueUnitPhase::holds_quota) {
        return 0;
    }
    status
        .admissions
        .iter()
        .filter_map(|a| Resources::from_list(&a.resources).ok())
        .map(|r| r.get("cpu"))
        .sum()
}

impl Checker {
    /// Starts watching with `client`; times count from `t0`. `check`
    /// enables the max checks; `runner` (when given) tells which jobs have
    /// finished, to classify violations.
    pub fn start(
        shape: Arc<Shape>,
        client: kube::Client,
        t0: Instant,
        check: bool,
        runner: Option<Arc<Runner>>,
    ) -> Arc<Self> {
        let limits = check.then(|| Limits::of(&shape));
        let checker = Arc::new(Self {
            state: Mutex::new(State {
                units: HashMap::new(),
                usage: Usage::new(&shape, limits),
                succeeded: 0,
                last_succeeded: 0.0,
                entered: BTreeMap::new(),
                examples: Vec::new(),
                beyond_finished: 0,
                lists: Vec::new(),
                releases: 0,
                release_pairs: Vec::new(),
            }),
            runner,
            shape,
            t0,
            task: Mutex::new(None),
        });
        let this = checker.clone();
        let task = tokio::spawn(async move {
            let api: Api<QueueUnit> = Api::all(client);
            let config = watcher::Config::default().labels(CLASS_LABEL);
            let mut stream = watcher(api, config).default_backoff().boxed();
            loop {
                match stream.try_next().await {
                    Ok(Some(watcher::Event::Apply(unit) | watcher::Event::InitApply(unit))) => {
                        this.on_unit(&unit, false)
                    }
                    Ok(Some(watcher::Event::Delete(unit))) => this.on_unit(&unit, true),
                    Ok(Some(watcher::Event::Init)) => this.on_list(),
                    Ok(Some(_)) => {}
                    Ok(None) => return,
                    Err(error) => tracing::warn!(%error, "queue unit watch"),
                }
            }
        });
        if let Ok(mut slot) = checker.task.lock() {
            *slot = Some(task);
        }
        checker
    }

    /// Stops the watch.
    pub fn stop(&self) {
        if let Ok(mut slot) = self.task.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
    }

    fn on_list(&self) {
        let t = self.t0.elapsed().as_secs_f64();
        if let Ok(mut st) = self.state.lock() {
            st.lists.push(t);
        }
    }

    fn on_unit(&self, unit: &QueueUnit, deleted: bool) {
        let t = self.t0.elapsed().as_secs_f64();
        let key = format!(
            "{}/{}",
            unit.metadata.namespace.as_deref().unwrap_or_default(),
            unit.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(leaf) = self.shape.leaf_index(&unit.spec.queue) else {
            return;
        };
        let ns = unit.metadata.namespace.as_deref().unwrap_or_default();
        let job = unit
            .spec
            .consumer_ref
            .name
            .as_deref()
            .and_then(|name| self.shape.job_index(ns, name));
        let held = if deleted { 0 } else { held_cpu(unit) };
        let phase = unit.status.as_ref().and_then(|s| s.phase);
        let preempted = unit.status.as_ref().is_some_and(sent_back_by_preemption);
        let attempts = unit.status.as_ref().and_then(|s| s.attempts).unwrap_or(0);
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let st = &mut *guard;
        let list = st.lists.len() as u64;
        let entry = st.units.entry(key.clone()).or_insert_with(|| Unit {
            leaf,
            job,
            times: UnitTimes {
                seen: t,
                ..UnitTimes::default()
            },
            ..Unit::default()
        });
        let mut pair = None;
        let released = !deleted && attempts > entry.attempts;
        if released {
            entry.times.released.get_or_insert(t);
        }
        // Seen before, through one watch: every write in between was seen,
        // so attempts rise by one a release.
        let seen_through = entry.phase.is_some() && entry.seen_list == list;
        if released {
            let unsent = entry.last_release.is_some() && !entry.sent_back;
            let jumped = seen_through && attempts - entry.attempts >= 2;
            if unsent || jumped {
                let first = entry.last_release.unwrap_or(t);
                pair = Some(ReleasePair {
                    unit: key.clone(),
                    job: job.map(|j| {
                        let p = &self.shape.jobs[j];
                        format!("{}/{}", self.shape.leaves[p.leaf].namespace, p.name)
                    }),
                    job_index: job,
                    first_release_s: first,
                    second_release_s: t,
                    attempts: (entry.attempts, attempts),
                    phases: (
                        entry.phase.map(|p| format!("{p:?}")),
                        phase.map(|p| format!("{p:?}")),
                    ),
                    across_relist: entry.release_list != list,
                    job_suspensions_s: Vec::new(),
                    job_releases_s: Vec::new(),
                });
            }
            entry.last_release = Some(t);
            // Seen for the first time after a relist already sent back
            // (the watch missed the release itself): it is both.
            entry.sent_back = phase.is_some_and(|p| !p.holds_quota() && !p.is_finished());
            entry.release_list = list;
        } else if phase.is_some_and(|p| !p.holds_quota() && !p.is_finished()) {
            entry.sent_back = true;
        }
        entry.attempts = entry.attempts.max(attempts);
        entry.seen_list = list;
        if phase != entry.phase
            && let Some(p) = phase
        {
            *st.entered.entry(format!("{p:?}")).or_default() += 1;
            if preempted {
                entry.preemptions += 1;
            }
            if p == QueueUnitPhase::Succeed {
                entry.times.succeeded.get_or_insert(t);
                st.succeeded += 1;
                st.last_succeeded = t;
            }
        }
        entry.phase = phase;
        let delta = held - entry.held;
        entry.held = held;
        let leaf = entry.leaf;
        if released {
            st.releases += 1;
        }
        if let Some(pair) = pair {
            st.release_pairs.push(pair);
        }
        for mut v in st.usage.change(leaf, delta, t, &key) {
            let stale = self.finished_cpu(st, &v, leaf);
            v.finished_jobs_cpu = Some(stale);
            if v.used_cpu - stale > v.max_cpu + 1e-9 {
                st.beyond_finished += 1;
                if st.examples.len() < 50 {
                    st.examples.push(v);
                }
            }
        }
    }

    /// CPU held, in the quota of violation `v` (found at leaf `leaf`), by
    /// units whose job the runtime had already seen complete.
    fn finished_cpu(&self, st: &State, v: &Violation, leaf: usize) -> f64 {
        let Some(runner) = &self.runner else {
            return 0.0;
        };
        let parent = st.usage.parent_of(leaf);
        let finished = runner.finished_jobs();
        let in_scope = |u: &Unit| match v.level {
            "leaf" => u.leaf == leaf,
            "parent" => st.usage.parent_of(u.leaf) == parent,
            _ => true,
        };
        st.units
            .values()
            .filter(|u| u.held > 0 && in_scope(u))
            .filter(|u| {
                u.job
                    .is_some_and(|j| finished.get(j).copied().unwrap_or(false))
            })
            .map(|u| u.held as f64 / 1000.0)
            .sum()
    }

    /// Violations of the QueueUnit check that exceed the max even without
    /// the CPU still recorded for finished jobs: examples and count.
    pub fn violation_examples(&self) -> (Vec<Violation>, usize) {
        self.state
            .lock()
            .map(|s| (s.examples.clone(), s.beyond_finished))
            .unwrap_or_default()
    }

    /// Releases seen (increases of a unit's `status.attempts`).
    pub fn releases(&self) -> usize {
        self.state.lock().map(|s| s.releases).unwrap_or(0)
    }

    /// When the watch listed (the first list, then every relist).
    pub fn lists(&self) -> Vec<f64> {
        self.state
            .lock()
            .map(|s| s.lists.clone())
            .unwrap_or_default()
    }

    /// Double releases: a unit released again (its attempts increased)
    /// while, since its previous release, it was never seen sent back and
    /// the job runtime never saw its job suspended. Each pair carries the
    /// job's releases and suspensions as the runtime saw them.
    pub fn double_releases(&self) -> Vec<ReleasePair> {
        let pairs = self
            .state
            .lock()
            .map(|s| s.release_pairs.clone())
            .unwrap_or_default();
        pairs
            .into_iter()
            .filter_map(|mut pair| {
                if let (Some(runner), Some(i)) = (&self.runner, pair.job_index)
                    && let Some(timeline) = runner.timeline(i)
                {
                    let (from, to) = (pair.first_release_s, pair.second_release_s);
                    if timeline.suspensions.iter().any(|s| *s >= from && *s <= to) {
                        return None;
                    }
                    pair.job_suspensions_s = timeline.suspensions;
                    pair.job_releases_s = timeline.releases;
                }
                Some(pair)
            })
            .collect()
    }

    /// Each job's unit's times ([`UnitTimes`]), by the job's index in the
    /// shape (`None`: its unit was never seen).
    pub fn unit_times(&self) -> Vec<Option<UnitTimes>> {
        let mut out = vec![None; self.shape.jobs.len()];
        if let Ok(st) = self.state.lock() {
            for u in st.units.values() {
                if let Some(slot) = u.job.and_then(|j| out.get_mut(j)) {
                    *slot = Some(u.times);
                }
            }
        }
        out
    }

    /// Units that reached Succeed.
    pub fn succeeded(&self) -> usize {
        self.state.lock().map(|s| s.succeeded).unwrap_or(0)
    }

    /// When the last unit reached Succeed (seconds since the start).
    pub fn last_succeeded_at(&self) -> f64 {
        self.state.lock().map(|s| s.last_succeeded).unwrap_or(0.0)
    }

    /// The accounting and the violations.
    pub fn usage(&self) -> Option<Usage> {
        self.state.lock().ok().map(|s| s.usage.clone())
    }

    /// How often units were preempted.
    pub fn preemptions(&self) -> Preemptions {
        self.state
            .lock()
            .map(|s| Preemptions {
                total: s.units.values().map(|u| u.preemptions).sum(),
                most_of_one_unit: s.units.values().map(|u| u.preemptions).max().unwrap_or(0),
            })
            .unwrap_or_default()
    }

    /// How many times units entered each phase.
    pub fn phase_entries(&self) -> BTreeMap<String, usize> {
        self.state
            .lock()
            .map(|s| s.entered.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// The status the scheduler writes when it sends a unit back.
    fn sent_back(reason: &str) -> QueueUnitStatus {
        let phase = QueueUnitPhase::TimeoutBackoff;
        QueueUnitStatus {
            phase: Some(phase),
            conditions: phase.standard_conditions(
                Some(reason),
                "sent back",
                &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            ),
            ..QueueUnitStatus::default()
        }
    }

    #[test]
    fn only_a_preemption_counts_as_one() {
        assert!(sent_back_by_preemption(&sent_back("Preempted")));
        assert!(!sent_back_by_preemption(&sent_back("Reclaimed")));
        assert!(!sent_back_by_preemption(&sent_back("FairShareReclaimed")));
        let mut running = sent_back("Preempted");
        running.phase = Some(QueueUnitPhase::Running);
        assert!(!sent_back_by_preemption(&running));
    }
}
