//! ElasticQuotas and their Queues: the quota of each name into the core, one Queue per quota, the root capacity.

use k8s_openapi::api::core::v1::ObjectReference;
use koord_queue_api::keys;

use super::Controller;
use crate::controller::records::{QuotaRecord, queue_for_quota, root_capacity};
use crate::controller::sources::Change;
use crate::controller::writes::Write;
use crate::core::CapacitySource;

impl Controller {
    pub(super) fn on_quota(&mut self, change: Change<Box<QuotaRecord>>) {
        let resolution = match change {
            Change::Applied(rec) => self.quota_names.apply(*rec),
            Change::Deleted(namespace, name) => {
                let resolution = self.quota_names.delete(&namespace, &name);
                if resolution.winner.is_none() {
                    self.quotas.remove(&name);
                    self.core.remove_quota(&name);
                }
                resolution
            }
            Change::Relisted(listed) => return self.quotas_relisted(&listed),
            Change::Failing(why) => return self.source_failing("elasticquotas", why),
            Change::Synced | Change::Absent => return self.source_done("elasticquotas"),
        };
        for shadowed in &resolution.newly_shadowed {
            self.report_shadowed_quota(shadowed);
        }
        self.metrics
            .quota_name_conflicts
            .set(self.quota_names.shadowed() as i64);
        if let Some(winner) = resolution.winner
            && self.quotas.get(&winner.name) != Some(&winner)
        {
            self.apply_quota(winner);
        }
        self.recompute_capacity();
        self.request_cycle();
    }

    /// A quota ignored because an older one holds its name: a log line and
    /// an Event on it (the metric counts them).
    pub(super) fn report_shadowed_quota(&self, quota: &QuotaRecord) {
        let holder = self.quota_names.holder(&quota.name).unwrap_or("?");
        let note = format!(
            "ElasticQuota {}/{} is ignored: quota names are unique cluster-wide and {holder}/{} \
             is older; rename one of them",
            quota.namespace, quota.name, quota.name
        );
        tracing::warn!(quota = %quota.name, namespace = %quota.namespace, holder, "{note}");
        if self.leads() {
            self.writer.submit(Write::Event {
                regarding: ObjectReference {
                    api_version: Some("scheduling.sigs.k8s.io/v1alpha1".into()),
                    kind: Some("ElasticQuota".into()),
                    namespace: Some(quota.namespace.clone()),
                    name: Some(quota.name.clone()),
                    ..Default::default()
                },
                warning: true,
                reason: "QuotaNameTaken",
                note,
            });
        }
    }

    /// Makes `rec` the quota of its name: the core's tree follows it.
    pub(super) fn apply_quota(&mut self, rec: QuotaRecord) {
        if let Some(invalid) = &rec.invalid {
            tracing::warn!(quota = %rec.name, %invalid, "ElasticQuota ignored");
        } else if let Some(def) = rec.to_def()
            && let Err(error) = self.core.upsert_quota(&def)
        {
            tracing::warn!(quota = %rec.name, %error, "ElasticQuota ignored");
        }
        self.quotas.insert(rec.name.clone(), rec);
    }

    /// One Queue per ElasticQuota (except the root), with the policy of the
    /// quota's `koord-queue/queue-policy` label; deleted with the quota.
    pub(super) fn sync_queues_with_quotas(&mut self) {
        let mut writes = Vec::new();
        for quota in self.quotas.values() {
            if quota.name == keys::ROOT_QUOTA_NAME || self.visibility.queue_busy(&quota.name) {
                continue;
            }
            let existing = self.queues.get(&quota.name);
            let needed = match existing {
                None => true,
                Some(q) => {
                    q.managed_for.as_deref() == Some(quota.name.as_str())
                        && q.policy != quota.policy
                }
            };
            if needed {
                writes.push(Write::EnsureQueue {
                    name: quota.name.clone(),
                    queue: Box::new(queue_for_quota(quota, &self.settings.namespace)),
                    exists: existing.is_some(),
                });
            }
        }
        for queue in self.queues.values() {
            if let Some(quota) = &queue.managed_for
                && !self.quotas.contains_key(quota)
                && !self.visibility.queue_busy(&queue.name)
            {
                writes.push(Write::DeleteQueue {
                    name: queue.name.clone(),
                });
            }
        }
        for w in writes {
            if let Write::EnsureQueue { name, .. } | Write::DeleteQueue { name } = &w {
                self.visibility.queue_write_sent(name);
            }
            self.writer.submit(w);
        }
    }

    /// Root capacity for the `auto` source: the root quota's max, else the
    /// allocatable of Ready nodes. Returns whether it changed.
    pub(super) fn recompute_capacity(&mut self) -> bool {
        if self.core.capacity_source() != Some(&CapacitySource::Auto) || !self.synced() {
            return false;
        }
        let capacity = root_capacity(self.quotas.get(keys::ROOT_QUOTA_NAME), self.nodes.values());
        if self.capacity.as_ref() == Some(&capacity) {
            return false;
        }
        tracing::info!(?capacity, "root capacity");
        self.core.set_capacity(&capacity);
        self.capacity = Some(capacity);
        true
    }
}
