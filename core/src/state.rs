//! The cluster state the plugins read (filters) and change (reserve): the
//! quota tree with its usage and capacity, the namespaces' ResourceQuotas,
//! and the resource names.

use std::sync::Arc;

use super::ids::{Interner, ResId};
use super::namespaces::NamespaceQuotas;
use super::quota_tree::{Capacity, QuotaTree};
use super::reason::Blocker;

/// Everything a filter checks and a reserve accounts.
#[derive(Clone, Debug)]
pub struct ClusterState {
    pub(crate) resources: Interner<ResId>,
    pub(crate) quotas: QuotaTree,
    pub(crate) namespaces: NamespaceQuotas,
}

impl ClusterState {
    pub(crate) fn new() -> Self {
        Self {
            resources: Interner::default(),
            quotas: QuotaTree::new(Capacity::Unknown),
            namespaces: NamespaceQuotas::default(),
        }
    }

    /// Resource names.
    pub fn resources(&self) -> &Interner<ResId> {
        &self.resources
    }

    /// The name of resource `id`.
    pub fn resource_name(&self, id: ResId) -> &Arc<str> {
        self.resources.name(id)
    }

    /// The quota tree.
    pub fn quotas(&self) -> &QuotaTree {
        &self.quotas
    }

    /// The quota tree, to account usage.
    pub fn quotas_mut(&mut self) -> &mut QuotaTree {
        &mut self.quotas
    }

    /// The namespaces' ResourceQuotas.
    pub fn namespaces(&self) -> &NamespaceQuotas {
        &self.namespaces
    }

    /// The namespaces' ResourceQuotas, to account reservations.
    pub fn namespaces_mut(&mut self) -> &mut NamespaceQuotas {
        &mut self.namespaces
    }

    /// Room left under a limit now: a unit needing `n` of it passes that
    /// limit exactly when `n <= headroom`.
    pub fn headroom(&self, blocker: Blocker) -> i64 {
        match blocker {
            Blocker::QuotaMax(q, k) => self.quotas.max_headroom(q, k),
            Blocker::Capacity(k) => self.quotas.capacity_headroom(k),
            Blocker::Namespace(ns, k) => self.namespaces.headroom(ns, k),
            Blocker::Reclaim(scope, k) => self.quotas.reclaim_headroom(scope, k),
        }
    }
}
