//! A job's pods, as far as the queue cares: how many are bound (strict
//! dequeue), and whether any still runs. Quota is held while anything it
//! paid for runs: it is freed when the pods are gone, not when the job says
//! it is done, is suspended again, is sent back or is deleted — a pod runs
//! out its grace period after its deletion, a Job deleted with propagation
//! Orphan leaves its pods running, and a RayJob's cluster may outlive the
//! job's success. A pod is alive until it is Succeeded, Failed or gone.
//!
//! Pods are found by the uid of the job they run for (`PodRecord::job_uid`,
//! which an orphaned Job pod keeps in its labels) and units by the uids of
//! theirs (`UnitRecord::job_uids`, the consumer uid kept in the unit's
//! spec): the pair survives the job's object and a restart of the scheduler.

use std::collections::HashMap;

use koord_queue_api::queue_unit::QueueUnitPhase;

use super::{Controller, UnitState};
use crate::controller::records::{JobKey, JobRecord, Key, PodRecord, Uid, UnitRecord};
use crate::controller::sources::Change;

/// A unit deleted while pods it paid for still ran, and which carried no
/// `records::QUOTA_FINALIZER` to keep its object until they are gone (released by
/// an earlier version, or the finalizer could not be written): it keeps
/// its quota in the core, in memory only, until they are gone.
#[derive(Debug)]
struct Lingering {
    unit: Key,
    job_uids: Vec<String>,
    /// The job's pod group, if it has one: namespace, label, value.
    group: Option<PodGroup>,
}

/// A pod group: namespace, label, value (see `JobAdapter::pod_group`).
pub(super) type PodGroup = (String, &'static str, String);

/// The pods of queued jobs, and the indexes that find a pod's units: what
/// the controller knows of pods. Kept in step with the Pod watch
/// ([`Pods::applied`], [`Pods::deleted`]) and with the job and unit records
/// ([`Pods::index_job`], [`Pods::index_unit`]); the count of alive pods of
/// a group always follows the pods recorded.
#[derive(Debug, Default)]
pub(super) struct Pods {
    /// By the uid of the job they run for, then by name.
    by_job_uid: HashMap<String, HashMap<String, PodRecord>>,
    /// Alive pods per pod group (a group with none is absent).
    alive_in_group: HashMap<PodGroup, usize>,
    /// Jobs by uid.
    jobs_by_uid: HashMap<Uid, JobKey>,
    /// Units by the uids of their jobs: found by a pod also once the job
    /// is gone.
    units_by_uid: HashMap<Uid, Key>,
    /// Jobs by their pod group.
    jobs_by_group: HashMap<PodGroup, JobKey>,
    /// Deleted units whose job's pods still run.
    lingering: Vec<Lingering>,
}

/// A pod as recorded after a change, and whether it was alive before.
pub(super) struct PodChanged {
    pub(super) pod: PodRecord,
    pub(super) was_alive: bool,
}

impl Pods {
    /// Records pod `pod`; `None` when it is recorded as it is already.
    pub(super) fn applied(&mut self, pod: PodRecord) -> Option<PodChanged> {
        let pods = self.by_job_uid.entry(pod.job_uid.clone()).or_default();
        let before = pods.get(&pod.name);
        if before == Some(&pod) {
            return None;
        }
        let was_alive = before.is_some_and(|p| p.alive);
        pods.insert(pod.name.clone(), pod.clone());
        self.count_alive(&pod, was_alive);
        Some(PodChanged { pod, was_alive })
    }

    /// Forgets pod `name` of namespace `ns`; it is returned as not alive.
    pub(super) fn deleted(&mut self, ns: &str, name: &str) -> Option<PodChanged> {
        let owner = self
            .by_job_uid
            .iter()
            .find(|(_, p)| p.get(name).is_some_and(|p| p.namespace == ns))
            .map(|(o, _)| o.clone())?;
        let pods = self.by_job_uid.get_mut(&owner)?;
        let mut pod = pods.remove(name)?;
        if pods.is_empty() {
            self.by_job_uid.remove(&owner);
        }
        let was_alive = pod.alive;
        pod.alive = false;
        self.count_alive(&pod, was_alive);
        Some(PodChanged { pod, was_alive })
    }

    /// Keeps the count of alive pods of `pod`'s group in step.
    fn count_alive(&mut self, pod: &PodRecord, was_alive: bool) {
        if was_alive == pod.alive {
            return;
        }
        let Some(group) = pod_group(pod) else {
            return;
        };
        let count = self.alive_in_group.entry(group.clone()).or_default();
        if pod.alive {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.alive_in_group.remove(&group);
            }
        }
    }

    /// Every pod recorded: namespace and name.
    pub(super) fn names(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.by_job_uid
            .values()
            .flat_map(|pods| pods.values().map(|p| (p.namespace.clone(), p.name.clone())))
    }

    /// The pods of the job of uid `uid`, by name.
    pub(super) fn of_job(&self, uid: &str) -> Option<&HashMap<String, PodRecord>> {
        self.by_job_uid.get(uid)
    }

    /// Keeps the jobs' indexes by uid and by pod group in step: the record
    /// of `job_key` was `old` and is `new` now (`None`: deleted).
    pub(super) fn index_job(
        &mut self,
        job_key: &JobKey,
        old: Option<&JobRecord>,
        new: Option<&JobRecord>,
    ) {
        if let Some(old) = old {
            self.jobs_by_uid.remove(&old.uid);
            if let Some(group) = group_of(old) {
                self.jobs_by_group.remove(&group);
            }
        }
        if let Some(job) = new {
            self.jobs_by_uid.insert(job.uid.clone(), job_key.clone());
            if let Some(group) = group_of(job) {
                self.jobs_by_group.insert(group, job_key.clone());
            }
        }
    }

    /// Keeps the units' index by their jobs' uids in step: unit `k` was
    /// found by `old` and is found by `new` now.
    pub(super) fn index_unit(&mut self, k: &Key, old: &[Uid], new: &[Uid]) {
        for uid in old {
            if self.units_by_uid.get(uid) == Some(k) {
                self.units_by_uid.remove(uid);
            }
        }
        for uid in new {
            self.units_by_uid.insert(uid.clone(), k.clone());
        }
    }

    /// The units `pod` runs for: its job's (found by the job, or by the
    /// unit's own record of the job's uid once the job is gone), and its
    /// group's job's; sorted, each once.
    pub(super) fn units_of(&self, pod: &PodRecord, jobs: &HashMap<JobKey, JobRecord>) -> Vec<Key> {
        let mut units: Vec<Key> = Vec::new();
        if let Some(job) = self
            .jobs_by_uid
            .get(pod.job_uid.as_str())
            .and_then(|k| jobs.get(k))
        {
            units.push(job.unit.clone());
        }
        if let Some(unit) = self.units_by_uid.get(pod.job_uid.as_str()) {
            units.push(unit.clone());
        }
        if let Some(job) = pod_group(pod)
            .and_then(|g| self.jobs_by_group.get(&g))
            .and_then(|k| jobs.get(k))
        {
            units.push(job.unit.clone());
        }
        units.sort();
        units.dedup();
        units
    }

    /// Whether a pod that unit `rec` paid for is alive: its job's (by the
    /// uids the unit records, and by its job's uid when the job is seen) or
    /// its job's pod group's (`remembered` once the job is gone).
    pub(super) fn unit_alive(
        &self,
        rec: &UnitRecord,
        remembered: Option<&PodGroup>,
        job: Option<&JobRecord>,
    ) -> bool {
        let group = job.and_then(group_of);
        self.alive(
            rec.job_uids().chain(job.map(|j| &j.uid)).map(|u| &**u),
            group.as_ref().or(remembered),
        )
    }

    /// Whether a pod runs for one of `job_uids` or in `group`.
    fn alive<'a>(
        &self,
        mut job_uids: impl Iterator<Item = &'a str>,
        group: Option<&PodGroup>,
    ) -> bool {
        job_uids.any(|uid| {
            self.by_job_uid
                .get(uid)
                .is_some_and(|pods| pods.values().any(|p| p.alive))
        }) || group.is_some_and(|g| self.alive_in_group.contains_key(g))
    }

    /// Unit `unit`, gone from the API, keeps its quota until the pods of
    /// `job_uids` and `group` are gone.
    fn linger(&mut self, unit: Key, job_uids: Vec<String>, group: Option<PodGroup>) {
        self.lingering.push(Lingering {
            unit,
            job_uids,
            group,
        });
    }

    /// The lingering units whose pods are all gone now, forgotten.
    fn lingering_done(&mut self) -> Vec<Key> {
        if self.lingering.is_empty() {
            return Vec::new();
        }
        let (gone, still): (Vec<Lingering>, Vec<Lingering>) = std::mem::take(&mut self.lingering)
            .into_iter()
            .partition(|l| !self.alive(l.job_uids.iter().map(String::as_str), l.group.as_ref()));
        self.lingering = still;
        gone.into_iter().map(|l| l.unit).collect()
    }
}

/// The pod group `pod` is a member of, keyed for the indexes.
fn pod_group(pod: &PodRecord) -> Option<PodGroup> {
    pod.group
        .as_ref()
        .map(|(label, value)| (pod.namespace.clone(), *label, value.clone()))
}

impl Controller {
    pub(super) fn on_pod(&mut self, change: Change<Box<PodRecord>>) {
        let changed = match change {
            Change::Applied(pod) => self.pods.applied(*pod),
            Change::Deleted(ns, name) => self.pods.deleted(&ns, &name),
            Change::Relisted(listed) => return self.pods_relisted(&listed),
            Change::Failing(why) => return self.source_failing("pods", why),
            Change::Synced | Change::Absent => return self.source_done("pods"),
        };
        let Some(PodChanged { pod, was_alive }) = changed else {
            return;
        };
        if was_alive != pod.alive {
            self.release_lingering();
        }
        for unit in self.pods.units_of(&pod, &self.jobs) {
            let Some(st) = self.units.get(&unit) else {
                continue;
            };
            // Strict dequeue counts bound pods; whatever the unit's phase,
            // its quota is held while a pod it paid for is alive.
            let strict = st.rec.phase == Some(QueueUnitPhase::SchedReady);
            if strict || was_alive != pod.alive {
                self.reconcile(&unit);
            }
        }
    }

    /// Keeps the jobs' indexes by uid and by pod group in step with the
    /// record `job` of `job_key` (`None`: deleted).
    pub(super) fn index_job(&mut self, job_key: &JobKey, job: Option<&JobRecord>) {
        self.pods.index_job(job_key, self.jobs.get(job_key), job);
    }

    /// Whether a pod that unit `st` paid for is alive (see
    /// [`Pods::unit_alive`]).
    pub(super) fn unit_pods_alive(&self, st: &UnitState, job: Option<&JobRecord>) -> bool {
        self.pods.unit_alive(&st.rec, st.pod_group.as_deref(), job)
    }

    /// Unit `k` (`st`), holding quota, is gone from the API: if pods it
    /// paid for still run, it keeps its quota until they are gone. True if
    /// it lingers.
    pub(super) fn linger(&mut self, k: &Key, st: &UnitState) -> bool {
        let job = super::unit_job(&self.jobs, &st.rec);
        if !self.unit_pods_alive(st, job) {
            return false;
        }
        let mut job_uids: Vec<String> = st.rec.job_uids().map(|u| u.to_string()).collect();
        job_uids.extend(job.map(|j| j.uid.to_string()));
        let group = job
            .and_then(group_of)
            .or_else(|| st.pod_group.as_deref().cloned());
        tracing::info!(unit = %k, "unit gone while pods it paid for run: its quota is kept until they are gone");
        self.pods.linger(k.clone(), job_uids, group);
        true
    }

    /// Frees the quota of deleted units whose pods are all gone now.
    fn release_lingering(&mut self) {
        for unit in self.pods.lingering_done() {
            // A unit of that name may have been created since: it is
            // another unit, the core holds it under its own record.
            if !self.units.contains_key(&unit) {
                tracing::info!(%unit, "the pods of a deleted unit's job are gone: its quota is free");
                self.core.remove_unit(&unit);
                self.request_cycle();
            }
        }
    }
}

/// The pod group of `job`, keyed for the controller's indexes.
pub(super) fn group_of(job: &JobRecord) -> Option<PodGroup> {
    job.pod_group
        .as_deref()
        .map(|(label, value)| (job.namespace.to_string(), *label, value.clone()))
}
