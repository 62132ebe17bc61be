//! Inputs: every watch change, leadership change and tick turned into record and core updates.

use koord_queue_api::Resources;
use koord_queue_api::jobs::JobState;

use super::{CACHES_SYNCED, Controller, FIRST_CYCLE, Membership, UnitState, job_ref, queue_of};
use crate::controller::records::{
    JobKey, JobRecord, Key, NamespaceQuotaRecord, NodeRecord, QueueRecord, Uid, UnitRecord, key,
};
use crate::controller::sources::{Change, Input, SourceName};
use crate::controller::writes::Write;

impl Controller {
    pub(super) fn on_input(&mut self, input: Input) {
        self.visibility.changed();
        match input {
            Input::Unit(change) => self.on_unit(change),
            Input::Job(kind, change) => self.on_job(kind, change),
            Input::Quota(change) => self.on_quota(change),
            Input::Queue(change) => self.on_queue(change),
            Input::Node(change) => self.on_node(change),
            Input::NamespaceQuota(change) => self.on_namespace_quota(change),
            Input::Pod(change) => self.on_pod(change),
        }
    }

    pub(super) fn source_done(&mut self, source: SourceName) {
        if self.unsynced.remove(source) && self.unsynced.is_empty() {
            tracing::info!(
                units = self.units.len(),
                jobs = self.jobs.len(),
                "caches synced; held quota rebuilt from the API"
            );
            self.readiness.set(CACHES_SYNCED, true);
            self.recompute_capacity();
            let keys: Vec<Key> = self.units.keys().cloned().collect();
            for k in keys {
                self.reconcile(&k);
            }
            self.request_cycle();
        }
    }

    pub(super) fn on_unit(&mut self, change: Change<Box<UnitRecord>>) {
        match change {
            Change::Applied(mut rec) => {
                // One copy of the unit's key and of its job's key for the
                // map of units, the unit's record and the job's record (and
                // the map of jobs): see `job_applied` for the other order.
                if let Some((job_key, job)) = self.jobs.get_key_value(rec.job()) {
                    rec.share_job_key(job_key);
                    rec.share_key(&job.unit);
                }
                let k = rec.key();
                let uids = |r: &UnitRecord| -> Vec<Uid> { r.job_uids().cloned().collect() };
                let mut reindex = None;
                match self.units.get_mut(&k) {
                    Some(st) => {
                        if let (Some(expected), Some(rv)) = (st.expect_rv, rec.resource_version)
                            && rv < expected
                        {
                            return; // older than our own write
                        }
                        if st.expect_rv.take().is_some() {
                            self.writer.settled(&k);
                        }
                        let old = std::mem::replace(&mut st.rec, *rec);
                        st.unconfirmed = false;
                        if old.job_uids().ne(st.rec.job_uids()) {
                            reindex = Some((uids(&old), uids(&st.rec)));
                        }
                    }
                    None => {
                        reindex = Some((Vec::new(), uids(&rec)));
                        self.units.insert(k.clone(), Box::new(UnitState::new(*rec)));
                        self.repair.unit_appeared(self.now.at);
                    }
                }
                if let Some((old, new)) = reindex {
                    self.pods.index_unit(&k, &old, &new);
                }
                self.reconcile(&k);
            }
            Change::Deleted(ns, name) => {
                let k = key(&ns, &name);
                if let Some(st) = self.units.remove(&k) {
                    let old: Vec<Uid> = st.rec.job_uids().cloned().collect();
                    self.pods.index_unit(&k, &old, &[]);
                    // Its quota goes with its pods, not with the object.
                    if st.member != Membership::Absent && !self.linger(&k, &st) {
                        self.core.remove_unit(&k);
                        self.request_cycle();
                    }
                    self.on_unit_gone(&st);
                }
            }
            Change::Relisted(listed) => self.units_relisted(&listed),
            Change::Failing(why) => self.source_failing("queueunits", why),
            Change::Synced | Change::Absent => self.source_done("queueunits"),
        }
    }

    /// A unit was deleted: if its job still lives, it stays held (and is held
    /// again if it ran), and an Event says why (architecture §3 rule 3).
    pub(super) fn on_unit_gone(&mut self, st: &UnitState) {
        let Some(job) = super::unit_job(&self.jobs, &st.rec) else {
            return;
        };
        if job.is_group() && job.held {
            // A held group's unit is re-created from its members: the unit
            // of a group that finished, or restarted whole, is deleted so
            // that its next members queue again (see `decide.rs`).
            return;
        }
        self.repair.unit_gone(job.key());
        if job.deleting
            || matches!(job.state, JobState::Succeeded | JobState::Failed)
            || !self.leads()
        {
            return;
        }
        let job_ref = job_ref(job);
        if !job.held {
            self.writer.submit(Write::HoldJob {
                unit: st.rec.key(),
                job: job_ref.clone(),
            });
        }
        self.event(&job_ref, true, "QueueUnitDeleted", format!(
            "QueueUnit {} was deleted: the job stays held and is not queued. Delete and re-create the job to queue it again",
            st.rec.name()
        ));
    }

    pub(super) fn on_job(&mut self, kind: &'static str, change: Change<Box<JobRecord>>) {
        match change {
            Change::Applied(rec) => {
                let (job_key, rec) = if rec.is_member() {
                    // A member: its group's record changes.
                    match self.groups.apply(*rec) {
                        Some(group) => group,
                        None => return,
                    }
                } else {
                    (rec.key(), *rec)
                };
                self.job_applied(job_key, rec);
            }
            Change::Deleted(ns, name) => match self.groups.remove(&ns, &name) {
                Some((group_key, Some(group))) => self.job_applied(group_key, group),
                Some((group_key, None)) => self.job_deleted(&group_key),
                None => self.job_deleted(&JobKey::new(kind, &ns, &name)),
            },
            Change::Relisted(listed) => self.jobs_relisted(kind, &listed),
            Change::Failing(why) => self.job_kind_failing(kind, why),
            Change::Synced | Change::Absent => {
                self.job_kind_failing(kind, None);
                self.source_done(kind);
            }
        }
    }

    fn job_applied(&mut self, mut job_key: JobKey, mut rec: JobRecord) {
        // One copy of each key, whichever came first (see `on_unit`).
        if let Some((unit_key, st)) = self.units.get_key_value(&rec.unit) {
            rec.share_unit_key(unit_key);
            let unit_job = st.rec.job_key();
            if unit_job == job_key {
                job_key = unit_job;
            }
        }
        let unit = rec.unit.clone();
        self.index_job(&job_key, Some(&rec));
        self.jobs.insert(job_key, rec);
        if self.units.contains_key(&unit) {
            self.reconcile(&unit);
        }
    }

    fn job_deleted(&mut self, job_key: &JobKey) {
        self.repair.job_deleted(job_key);
        self.index_job(job_key, None);
        if let Some(rec) = self.jobs.remove(job_key) {
            let unit = rec.unit.clone();
            if self.units.contains_key(&unit) {
                self.reconcile(&unit);
            }
        }
    }

    pub(super) fn on_queue(&mut self, change: Change<Box<QueueRecord>>) {
        match change {
            Change::Applied(rec) => {
                self.core.upsert_queue(&rec.to_def());
                let drain = rec.stop.drains()
                    && self.queues.get(&rec.name).is_none_or(|q| !q.stop.drains());
                let name = rec.name.clone();
                self.queues.insert(rec.name.clone(), *rec);
                if drain {
                    self.drain_queue(&name);
                }
            }
            Change::Deleted(_, name) => {
                self.queues.remove(&name);
                self.core.remove_queue(&name);
            }
            Change::Relisted(listed) => return self.queues_relisted(&listed),
            Change::Failing(why) => return self.source_failing("queues", why),
            Change::Synced | Change::Absent => return self.source_done("queues"),
        }
        self.request_cycle();
    }

    /// A Queue just drained (`HoldAndDrain`): each of its units is looked
    /// at again, and those holding quota are sent back (`decide.rs`).
    fn drain_queue(&mut self, queue: &str) {
        let keys: Vec<Key> = self
            .units
            .iter()
            .filter(|(_, st)| queue_of(&st.rec) == queue)
            .map(|(k, _)| k.clone())
            .collect();
        tracing::info!(queue, units = keys.len(), "queue drained");
        for k in keys {
            self.reconcile(&k);
        }
    }

    pub(super) fn on_node(&mut self, change: Change<Box<NodeRecord>>) {
        match change {
            Change::Applied(rec) => {
                // Heartbeats arrive often; only allocatable/readiness changes matter.
                if self.nodes.get(&rec.name) == Some(&*rec) {
                    return;
                }
                self.nodes.insert(rec.name.clone(), *rec);
            }
            Change::Deleted(_, name) => {
                if self.nodes.remove(&name).is_none() {
                    return;
                }
            }
            Change::Relisted(listed) => return self.nodes_relisted(&listed),
            Change::Failing(why) => return self.source_failing("nodes", why),
            Change::Synced | Change::Absent => return self.source_done("nodes"),
        }
        if self.recompute_capacity() {
            self.request_cycle();
        }
    }

    pub(super) fn on_namespace_quota(&mut self, change: Change<Box<NamespaceQuotaRecord>>) {
        let namespace = match change {
            Change::Applied(rec) => {
                let ns = rec.namespace.clone();
                let quotas = self.namespace_quotas.entry(ns.clone()).or_default();
                if quotas.get(&rec.name) == Some(&*rec) {
                    return;
                }
                quotas.insert(rec.name.clone(), *rec);
                ns
            }
            Change::Deleted(ns, name) => {
                if let Some(quotas) = self.namespace_quotas.get_mut(&ns) {
                    quotas.remove(&name);
                }
                ns
            }
            Change::Relisted(listed) => return self.namespace_quotas_relisted(&listed),
            Change::Failing(why) => return self.source_failing("resourcequotas", why),
            Change::Synced | Change::Absent => return self.source_done("resourcequotas"),
        };
        // Several ResourceQuotas in one namespace must all admit the unit:
        // hand the core the tightest headroom (hard - used) per resource.
        let quotas = self
            .namespace_quotas
            .get(&namespace)
            .map(|q| q.values().collect::<Vec<_>>())
            .unwrap_or_default();
        if quotas.is_empty() {
            self.namespace_quotas.remove(&namespace);
            self.core.remove_namespace_quota(&namespace);
        } else {
            let mut headroom = Resources::new();
            for q in &quotas {
                for (resource, hard) in q.hard.iter() {
                    let room = hard.saturating_sub(q.used.get(resource));
                    let tightest = if headroom.contains(resource) {
                        headroom.get(resource).min(room)
                    } else {
                        room
                    };
                    headroom.set(resource, tightest);
                }
            }
            self.core
                .set_namespace_quota(&namespace, &headroom, &Resources::new());
        }
        self.request_cycle();
    }

    pub(super) fn on_leadership(&mut self, leads: bool) {
        self.visibility.changed();
        self.leading = leads;
        self.metrics.leader.set(i64::from(leads));
        if leads {
            tracing::info!("leading: scheduling and writing");
            self.ran_first_cycle = false;
            self.readiness.set(FIRST_CYCLE, false);
            self.core.mark_all_dirty();
            let keys: Vec<Key> = self.units.keys().cloned().collect();
            for k in keys {
                self.reconcile(&k);
            }
            self.request_cycle();
        } else {
            tracing::info!("standing by: no cycles, no writes");
            self.cycle_due = None;
            self.readiness.set(FIRST_CYCLE, true);
        }
    }
}
