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

use super::*;

/// A unit deleted while pods it paid for still ran, and which carried no
/// `records::QUOTA_FINALIZER` to keep its object until they are gone (released by
/// an earlier version, or the finalizer could not be written): it keeps
/// its quota in the core, in memory only, until they are gone.
#[derive(Debug)]
pub(super) struct Lingering {
    unit: Key,
    job_uids: Vec<String>,
    /// The job's pod group, if it has one: namespace, label, value.
    group: Option<PodGroup>,
}

/// A pod group: namespace, label, value (see `JobAdapter::pod_group`).
pub(super) type PodGroup = (String, &'static str, String);

impl Controller {
    pub(super) fn on_pod(&mut self, change: Change<Box<PodRecord>>) {
        let (pod, was_alive) = match change {
            Change::Applied(pod) => {
                let pods = self.pods.entry(pod.job_uid.clone()).or_default();
                let before = pods.get(&pod.name);
                if before == Some(&*pod) {
                    return;
                }
                let was_alive = before.is_some_and(|p| p.alive);
                pods.insert(pod.name.clone(), (*pod).clone());
                (*pod, was_alive)
            }
            Change::Deleted(ns, name) => {
                let Some(owner) = self
                    .pods
                    .iter()
                    .find(|(_, p)| p.get(&name).is_some_and(|p| p.namespace == ns))
                    .map(|(o, _)| o.clone())
                else {
                    return;
                };
                let Some(pods) = self.pods.get_mut(&owner) else {
                    return;
                };
                let Some(mut pod) = pods.remove(&name) else {
                    return;
                };
                if pods.is_empty() {
                    self.pods.remove(&owner);
                }
                let was_alive = pod.alive;
                pod.alive = false;
                (pod, was_alive)
            }
            Change::Relisted(listed) => return self.pods_relisted(&listed),
            Change::Failing(why) => return self.source_failing("pods", why),
            Change::Synced | Change::Absent => return self.source_done("pods"),
        };
        let group = pod
            .group
            .as_ref()
            .map(|(label, value)| (pod.namespace.clone(), *label, value.clone()));
        if was_alive != pod.alive {
            if let Some(group) = &group {
                let count = self.pod_groups.entry(group.clone()).or_default();
                if pod.alive {
                    *count += 1;
                } else {
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        self.pod_groups.remove(group);
                    }
                }
            }
            self.release_lingering();
        }
        // The units the pod runs for: its job's (found by the job, or by
        // the unit's own record of the job's uid once the job is gone), and
        // its group's job's.
        let mut units: Vec<Key> = Vec::new();
        if let Some(job) = self
            .jobs_by_uid
            .get(&pod.job_uid)
            .and_then(|k| self.jobs.get(k))
        {
            units.push(job.unit.clone());
        }
        if let Some(unit) = self.units_by_uid.get(&pod.job_uid) {
            units.push(unit.clone());
        }
        if let Some(job) = group
            .as_ref()
            .and_then(|g| self.jobs_by_group.get(g))
            .and_then(|k| self.jobs.get(k))
        {
            units.push(job.unit.clone());
        }
        units.sort();
        units.dedup();
        for unit in units {
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
        if let Some(old) = self.jobs.get(job_key) {
            self.jobs_by_uid.remove(&old.uid);
            if let Some(group) = group_of(old) {
                self.jobs_by_group.remove(&group);
            }
        }
        if let Some(job) = job {
            self.jobs_by_uid.insert(job.uid.clone(), job_key.clone());
            if let Some(group) = group_of(job) {
                self.jobs_by_group.insert(group, job_key.clone());
            }
        }
    }

    /// Keeps the units' index by their jobs' uids in step: unit `k` was
    /// found by `old` and is found by `new` now.
    pub(super) fn index_unit(&mut self, k: &Key, old: &[String], new: &[String]) {
        for uid in old {
            if self.units_by_uid.get(uid) == Some(k) {
                self.units_by_uid.remove(uid);
            }
        }
        for uid in new {
            self.units_by_uid.insert(uid.clone(), k.clone());
        }
    }

    /// Whether a pod that unit `st` paid for is alive (see
    /// [`unit_pods_alive`]).
    pub(super) fn unit_pods_alive(&self, st: &UnitState, job: Option<&JobRecord>) -> bool {
        unit_pods_alive(
            &self.pods,
            &self.pod_groups,
            &st.rec,
            st.pod_group.as_ref(),
            job,
        )
    }

    /// Unit `k` (`st`), holding quota, is gone from the API: if pods it
    /// paid for still run, it keeps its quota until they are gone. True if
    /// it lingers.
    pub(super) fn linger(&mut self, k: &Key, st: &UnitState) -> bool {
        let job = self
            .jobs
            .get(&st.rec.job_key())
            .filter(|j| j.unit_name == st.rec.name);
        if !self.unit_pods_alive(st, job) {
            return false;
        }
        let mut job_uids: Vec<String> = st.rec.job_uids().map(str::to_string).collect();
        job_uids.extend(job.map(|j| j.uid.clone()));
        let group = job.and_then(group_of).or_else(|| st.pod_group.clone());
        tracing::info!(unit = %k, "unit gone while pods it paid for run: its quota is kept until they are gone");
        self.lingering.push(Lingering {
            unit: k.clone(),
            job_uids,
            group,
        });
        true
    }

    /// Frees the quota of deleted units whose pods are all gone now.
    fn release_lingering(&mut self) {
        if self.lingering.is_empty() {
            return;
        }
        let (gone, still): (Vec<Lingering>, Vec<Lingering>) = std::mem::take(&mut self.lingering)
            .into_iter()
            .partition(|l| {
                !pods_alive(
                    &self.pods,
                    &self.pod_groups,
                    l.job_uids.iter().map(String::as_str),
                    l.group.as_ref(),
                )
            });
        self.lingering = still;
        for l in gone {
            // A unit of that name may have been created since: it is
            // another unit, the core holds it under its own record.
            if !self.units.contains_key(&l.unit) {
                tracing::info!(unit = %l.unit, "the pods of a deleted unit's job are gone: its quota is free");
                self.core.remove_unit(&l.unit);
                self.request_cycle();
            }
        }
    }
}

/// The pod group of `job`, keyed for the controller's indexes.
pub(super) fn group_of(job: &JobRecord) -> Option<PodGroup> {
    job.pod_group
        .as_ref()
        .map(|(label, value)| (job.namespace.to_string(), *label, value.clone()))
}

/// Whether a pod that unit `rec` paid for is alive: its job's (by the uids
/// the unit records, and by its job's uid when the job is seen) or its
/// job's pod group's (`remembered` once the job is gone).
pub(super) fn unit_pods_alive(
    pods: &HashMap<String, HashMap<String, PodRecord>>,
    groups: &HashMap<PodGroup, usize>,
    rec: &UnitRecord,
    remembered: Option<&PodGroup>,
    job: Option<&JobRecord>,
) -> bool {
    let group = job.and_then(group_of);
    pods_alive(
        pods,
        groups,
        rec.job_uids().chain(job.map(|j| j.uid.as_str())),
        group.as_ref().or(remembered),
    )
}

/// Whether a pod runs for one of `job_uids` or in `group`, given the pods
/// by job uid and the running pods per group.
pub(super) fn pods_alive<'a>(
    pods: &HashMap<String, HashMap<String, PodRecord>>,
    groups: &HashMap<PodGroup, usize>,
    mut job_uids: impl Iterator<Item = &'a str>,
    group: Option<&PodGroup>,
) -> bool {
    job_uids.any(|uid| {
        pods.get(uid)
            .is_some_and(|pods| pods.values().any(|p| p.alive))
    }) || group.is_some_and(|g| groups.contains_key(g))
}
