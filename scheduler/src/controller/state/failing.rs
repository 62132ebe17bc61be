//! Sources whose API fails. One job kind whose list answers 403 or 500 (its
//! RBAC removed, a broken conversion webhook) must not stop the others: it
//! counts as synced, and until it works again its units are left exactly as
//! they are — their quota kept as their status says, nothing released,
//! nothing deleted as an orphan — because its jobs cannot be seen. Any
//! other source failing keeps the scheduler unready (it cannot schedule
//! without units, quotas, Queues or nodes); both are reported in the log,
//! `watch_failing` and `/readyz`.

use std::collections::HashSet;

use super::{Controller, Membership};
use crate::controller::metrics::SourceLabels;
use crate::controller::records::{Key, UnitRecord};
use crate::controller::sources::SourceName;

impl Controller {
    fn report_failing(&self, source: &str, why: Option<&str>) {
        let labels = SourceLabels {
            source: source.to_string(),
        };
        self.metrics
            .watch_failing
            .get_or_create(&labels)
            .set(i64::from(why.is_some()));
        self.readiness.degrade(
            source,
            why.map(|why| format!("its API fails ({why}); retrying with backoff")),
        );
    }

    /// A source other than a job kind fails (`Some`) or works again.
    pub(super) fn source_failing(&mut self, source: SourceName, why: Option<String>) {
        self.report_failing(source, why.as_deref());
    }

    /// Job kind `kind`'s API fails (`Some`) or works again (`None`).
    pub(super) fn job_kind_failing(&mut self, kind: &'static str, why: Option<String>) {
        match why {
            Some(why) => {
                tracing::warn!(
                    kind,
                    %why,
                    "jobs of this kind cannot be followed; their units are kept as they are until its API works"
                );
                self.report_failing(kind, Some(&why));
                self.failing_kinds.insert(kind);
                // The others are scheduled meanwhile.
                self.source_done(kind);
            }
            None => {
                if !self.failing_kinds.remove(kind) {
                    return;
                }
                self.report_failing(kind, None);
                tracing::info!(kind, "the kind's API works again");
                let keys: Vec<Key> = self
                    .units
                    .iter()
                    .filter(|(_, st)| &*st.rec.job_kind == kind)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in keys {
                    self.reconcile(&k);
                }
                self.request_cycle();
            }
        }
    }
}

/// Whether unit `rec`'s job kind cannot be seen now (`failing`: the kinds
/// whose API fails).
pub(super) fn kind_unseen(failing: &HashSet<&'static str>, rec: &UnitRecord) -> bool {
    !failing.is_empty() && failing.contains(&*rec.job_kind)
}

/// Where a unit belongs in the core when its job cannot be seen: holding
/// what its status says it holds, else nowhere (it is not released blind).
pub(super) fn membership_of_unit_alone(rec: &UnitRecord) -> Membership {
    // A deleting unit with the quota finalizer may still pay for pods: kept
    // until its job's pods can be seen again.
    if (!rec.deleting || rec.guarded) && rec.invalid.is_none() && rec.holds_quota() {
        Membership::Holding
    } else {
        Membership::Absent
    }
}
