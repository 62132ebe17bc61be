//! A job's pods, as far as the queue cares: how many are bound (strict
//! dequeue), and whether any still runs. Quota is freed when the pods are
//! gone, not when the job says it is done or its object is deleted: a pod
//! runs out its grace period after its job goes, and a RayJob's cluster
//! may outlive the job's success. A pod is alive until it is Succeeded,
//! Failed or deleted.

use super::*;

/// A unit deleted while pods of its job still ran: it keeps its quota in
/// the core until they are gone.
#[derive(Debug)]
pub(super) struct Lingering {
    unit: Key,
    owner_uid: String,
    /// The job's pod group, if it has one: namespace, label, value.
    group: Option<PodGroup>,
}

/// A pod group: namespace, label, value (see `JobAdapter::pod_group`).
pub(super) type PodGroup = (String, &'static str, String);

impl Controller {
    pub(super) fn on_pod(&mut self, change: Change<Box<PodRecord>>) {
        let (pod, was_alive) = match change {
            Change::Applied(pod) => {
                let pods = self.pods.entry(pod.owner_uid.clone()).or_default();
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
        // The units of the pod's job (its owner, or the job of its group).
        let mut units: Vec<Key> = Vec::new();
        if let Some(job) = self
            .jobs_by_uid
            .get(&pod.owner_uid)
            .and_then(|k| self.jobs.get(k))
        {
            units.push(job.unit.clone());
        }
        if let Some(job) = group
            .as_ref()
            .and_then(|g| self.jobs_by_group.get(g))
            .and_then(|k| self.jobs.get(k))
        {
            units.push(job.unit.clone());
        }
        for unit in units {
            let Some(st) = self.units.get(&unit) else {
                continue;
            };
            // Strict dequeue counts bound pods; a finished job waits for
            // its pods to be gone before its quota is freed.
            let strict = st.rec.phase == Some(QueueUnitPhase::SchedReady);
            if strict || (was_alive != pod.alive && st.rec.holds_quota()) {
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

    /// Whether a pod of `job` (its own, or of its group) still runs.
    pub(super) fn pods_alive(&self, job: &JobRecord) -> bool {
        pods_alive(&self.pods, &self.pod_groups, job)
    }

    /// Unit `k` (`rec`), holding quota, is deleted: if pods of its job
    /// still run, it keeps its quota until they are gone. True if it lingers.
    pub(super) fn linger(&mut self, k: &Key, rec: &UnitRecord) -> bool {
        let Some(owner_uid) = rec.owner_uid.clone() else {
            return false;
        };
        let job = self
            .jobs_by_uid
            .get(&owner_uid)
            .and_then(|jk| self.jobs.get(jk));
        let group = job.and_then(group_of);
        let alive = self
            .pods
            .get(&owner_uid)
            .is_some_and(|pods| pods.values().any(|p| p.alive))
            || group
                .as_ref()
                .is_some_and(|g| self.pod_groups.contains_key(g));
        if !alive {
            return false;
        }
        tracing::info!(unit = %k, "unit deleted while its job's pods run: its quota is kept until they are gone");
        self.lingering.push(Lingering {
            unit: k.clone(),
            owner_uid,
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
                !self
                    .pods
                    .get(&l.owner_uid)
                    .is_some_and(|pods| pods.values().any(|p| p.alive))
                    && !l
                        .group
                        .as_ref()
                        .is_some_and(|g| self.pod_groups.contains_key(g))
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
fn group_of(job: &JobRecord) -> Option<PodGroup> {
    job.pod_group
        .as_ref()
        .map(|(label, value)| (job.namespace.to_string(), *label, value.clone()))
}

/// Whether a pod of `job` (its own, or of its group) still runs, given the
/// pods by owner uid and the running pods per group.
pub(super) fn pods_alive(
    pods: &HashMap<String, HashMap<String, PodRecord>>,
    groups: &HashMap<PodGroup, usize>,
    job: &JobRecord,
) -> bool {
    pods.get(&job.uid)
        .is_some_and(|pods| pods.values().any(|p| p.alive))
        || group_of(job).is_some_and(|g| groups.contains_key(&g))
}
