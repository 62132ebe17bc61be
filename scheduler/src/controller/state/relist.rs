//! What a relist tells: a watch that was away (a 410 Gone after etcd
//! compacted, an API server restart) lists its kind again, and every record
//! of that kind the list did not find was deleted meanwhile. Each goes the
//! way of a deletion seen live, so quota is freed once — by the same path —
//! and nothing is freed twice.

use super::Controller;
use crate::controller::metrics::SourceLabels;
use crate::controller::sources::{Change, Listed};

/// Of `present`, the keys `listed` does not hold.
fn not_listed(
    present: impl Iterator<Item = (String, String)>,
    listed: &Listed,
) -> Vec<(String, String)> {
    present.filter(|k| !listed.contains(k)).collect()
}

impl Controller {
    fn count_relist(&self, source: &str, dropped: usize) {
        let labels = SourceLabels {
            source: source.to_string(),
        };
        self.metrics.watch_relists.get_or_create(&labels).inc();
        self.metrics
            .relist_dropped
            .get_or_create(&labels)
            .inc_by(u64::try_from(dropped).unwrap_or(u64::MAX));
        tracing::info!(
            source,
            dropped,
            "relist complete; records of objects deleted meanwhile dropped"
        );
    }

    pub(super) fn units_relisted(&mut self, listed: &Listed) {
        let gone = not_listed(
            self.units
                .values()
                .map(|st| (st.rec.namespace.to_string(), st.rec.name().to_string())),
            listed,
        );
        self.count_relist("queueunits", gone.len());
        for (ns, name) in gone {
            self.on_unit(Change::Deleted(ns, name));
        }
    }

    pub(super) fn jobs_relisted(&mut self, kind: &'static str, listed: &Listed) {
        // A pod group's record is no object: its members are listed.
        let members = if kind == koord_queue_api::jobs::pod::POD_KIND.kind {
            self.groups.member_pods()
        } else {
            Vec::new()
        };
        let gone = not_listed(
            self.jobs
                .values()
                .filter(|j| j.adapter.kind().kind == kind && !j.is_group())
                .map(|j| (j.namespace.to_string(), j.name.clone()))
                .chain(members),
            listed,
        );
        self.count_relist(kind, gone.len());
        for (ns, name) in gone {
            self.on_job(kind, Change::Deleted(ns, name));
        }
    }

    pub(super) fn quotas_relisted(&mut self, listed: &Listed) {
        let gone = not_listed(self.quota_names.keys(), listed);
        self.count_relist("elasticquotas", gone.len());
        for (ns, name) in gone {
            self.on_quota(Change::Deleted(ns, name));
        }
    }

    pub(super) fn queues_relisted(&mut self, listed: &Listed) {
        let ns = &self.settings.namespace;
        let gone = not_listed(
            self.queues.keys().map(|name| (ns.clone(), name.clone())),
            listed,
        );
        self.count_relist("queues", gone.len());
        for (ns, name) in gone {
            self.on_queue(Change::Deleted(ns, name));
        }
    }

    pub(super) fn nodes_relisted(&mut self, listed: &Listed) {
        let gone = not_listed(
            self.nodes.keys().map(|name| (String::new(), name.clone())),
            listed,
        );
        self.count_relist("nodes", gone.len());
        for (ns, name) in gone {
            self.on_node(Change::Deleted(ns, name));
        }
    }

    pub(super) fn namespace_quotas_relisted(&mut self, listed: &Listed) {
        let gone = not_listed(
            self.namespace_quotas
                .iter()
                .flat_map(|(ns, quotas)| quotas.keys().map(move |name| (ns.clone(), name.clone()))),
            listed,
        );
        self.count_relist("resourcequotas", gone.len());
        for (ns, name) in gone {
            self.on_namespace_quota(Change::Deleted(ns, name));
        }
    }

    pub(super) fn pods_relisted(&mut self, listed: &Listed) {
        let gone = not_listed(self.pods.names(), listed);
        self.count_relist("pods", gone.len());
        for (ns, name) in gone {
            self.on_pod(Change::Deleted(ns, name));
        }
    }
}
