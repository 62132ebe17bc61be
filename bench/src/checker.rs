//! The quota check on the API's own record: a watch on the benchmark's
//! QueueUnits recomputes the CPU held per leaf, parent and root from
//! `status.admissions` of every unit in a quota-holding phase (architecture §3
//! rule 2) each time a unit's holding changes, and checks every level
//! against its max at each increase. It also counts units that reached
//! Succeed and entries into TimeoutBackoff (reclaims).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use koord_queue_api::ResourceListExt as _;
use koord_queue_api::queue_unit::QueueUnitPhase;
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
        let Ok(mut guard) = self.state.lock() else {
            return;
        };
        let st = &mut *guard;
        let entry = st.units.entry(key.clone()).or_insert_with(|| Unit {
            leaf,
            job,
            ..Unit::default()
        });
        if phase != entry.phase
            && let Some(p) = phase
        {
            *st.entered.entry(format!("{p:?}")).or_default() += 1;
            if p == QueueUnitPhase::Succeed {
                st.succeeded += 1;
                st.last_succeeded = t;
            }
        }
        entry.phase = phase;
        let delta = held - entry.held;
        entry.held = held;
        let leaf = entry.leaf;
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

    /// How many times units entered each phase.
    pub fn phase_entries(&self) -> BTreeMap<String, usize> {
        self.state
            .lock()
            .map(|s| s.entered.clone())
            .unwrap_or_default()
    }
}
