//! The elastic quota tree (architecture §4.4): nodes with min and max, the usage of
//! every subtree, the root capacity, and the effective (possibly scaled-down)
//! mins with the warnings that explain the scaling.
//!
//! Usage is kept incrementally: holding or freeing a unit touches only the
//! nodes on its path. Changing the shape of the tree (a quota added, removed
//! or moved) rebuilds paths and subtree usage from each node's own usage,
//! which is cheap next to the number of units.

use std::fmt;
use std::sync::Arc;

use koord_queue_model::ROOT_QUOTA_NAME;

use super::amounts::{Dense, ResVec, UNLIMITED, format_amount};
use super::ids::{Id, Interner, QuotaId, ResId};
use super::model::{QuotaDef, RootCapacity};
use super::reason::Blocker;

/// A limit a unit asks for more than even alone ([`QuotaTree::never_fits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beyond {
    /// The quota whose max it is, or `None` for the capacity.
    pub at: Option<QuotaId>,
    /// The resource.
    pub resource: ResId,
    /// The max or the capacity.
    pub limit: i64,
}

/// Why a quota's path to the root cannot be followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathProblem {
    /// The quota itself is not (or no longer) known.
    Undefined,
    /// A quota on the way names a parent that does not exist.
    MissingParent {
        /// The quota whose parent is missing.
        child: QuotaId,
        /// The missing parent.
        parent: QuotaId,
    },
    /// The parents form a cycle.
    Cycle,
}

/// The root capacity as the core knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// Not reported yet: nothing that is checked against it may be released.
    Unknown,
    /// No ceiling.
    Unlimited,
    /// A ceiling per resource (unnamed resources unlimited).
    Limited(Dense),
}

/// The children's mins of a quota add up to more than its own min, so they
/// are scaled down proportionally (architecture §4.4, validation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinWarning {
    /// The parent quota, or the root quota's name for the top level (whose
    /// "min" is the root capacity).
    pub quota: Arc<str>,
    /// The resource concerned.
    pub resource: Arc<str>,
    /// Sum of the children's mins.
    pub children_min: i64,
    /// The parent's (effective) min.
    pub min: i64,
}

impl fmt::Display for MinWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let res = &*self.resource;
        let sum = format_amount(res, self.children_min);
        let min = format_amount(res, self.min);
        if &*self.quota == ROOT_QUOTA_NAME {
            write!(
                f,
                "the top-level quotas guarantee {res} {sum} in total, more than the cluster capacity {min}; their mins are scaled down proportionally ({min}/{sum})"
            )
        } else {
            write!(
                f,
                "the child quotas of {} guarantee {res} {sum} in total, more than its min {min}; their mins are scaled down proportionally ({min}/{sum})",
                self.quota
            )
        }
    }
}

/// What an upsert changed, so the caller knows which waiting units to look at again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaChange {
    /// Nothing.
    None,
    /// Only min and/or max.
    Limits,
    /// The shape of the tree (a quota appeared or moved, or its inner-node flag changed).
    Structure,
}

/// One node of the tree.
#[derive(Clone, Debug)]
struct Node {
    defined: bool,
    parent: Option<QuotaId>,
    is_parent: bool,
    /// Its children share fairly (see `fair.rs`).
    fair: bool,
    /// Its weight among fair-sharing siblings, in thousandths (> 0).
    weight_milli: i64,
    min: Dense,
    max: Dense,
    min_eff: Dense,
    /// Usage of units charged to this very quota.
    direct_used: Dense,
    /// Usage of the whole subtree.
    used: Dense,
    /// Part of `direct_used` held by units being reclaimed.
    direct_reclaiming: Dense,
    /// Part of `used` held by units being reclaimed.
    reclaiming: Dense,
    /// Requests of guaranteed units charged to this very quota that wait
    /// for reclaimed resources (room they will take once it is freed).
    direct_promised: Dense,
    /// The same for the whole subtree.
    promised: Dense,
    /// Guaranteed units waiting for reclaim whose shortage is at this quota
    /// (per resource): borrowing under it is paused while non-zero.
    waiters: Dense,
    /// The quota itself, then its ancestors up to (not including) the root.
    path: Result<Box<[QuotaId]>, PathProblem>,
    children: Vec<QuotaId>,
}

impl Node {
    fn placeholder() -> Self {
        Self {
            defined: false,
            parent: None,
            is_parent: false,
            fair: false,
            weight_milli: crate::model::DEFAULT_WEIGHT_MILLI,
            min: Dense::zeros(),
            max: Dense::unlimited(),
            min_eff: Dense::zeros(),
            direct_used: Dense::zeros(),
            used: Dense::zeros(),
            direct_reclaiming: Dense::zeros(),
            reclaiming: Dense::zeros(),
            direct_promised: Dense::zeros(),
            promised: Dense::zeros(),
            waiters: Dense::zeros(),
            path: Err(PathProblem::Undefined),
            children: Vec::new(),
        }
    }
}

/// The quota tree with usage and capacity.
#[derive(Clone, Debug)]
pub struct QuotaTree {
    names: Interner<QuotaId>,
    nodes: Vec<Node>,
    root_children: Vec<QuotaId>,
    capacity: Capacity,
    root_used: Dense,
    root_reclaiming: Dense,
    root_promised: Dense,
    /// Guaranteed units waiting for reclaim whose shortage is the capacity.
    root_waiters: Dense,
    /// Sum of all waiter counts, so that the common case (nobody waits for
    /// reclaim) costs one comparison.
    total_waiters: i64,
    warnings: Vec<MinWarning>,
}

/// One of the per-quota usage figures kept along the quota paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Figure {
    /// What holding units hold.
    Used,
    /// What units being reclaimed hold (a part of `Used`).
    Reclaiming,
    /// What guaranteed units waiting for reclaimed resources will take.
    Promised,
}

impl Node {
    fn figure(&mut self, figure: Figure) -> (&mut Dense, &mut Dense) {
        match figure {
            Figure::Used => (&mut self.direct_used, &mut self.used),
            Figure::Reclaiming => (&mut self.direct_reclaiming, &mut self.reclaiming),
            Figure::Promised => (&mut self.direct_promised, &mut self.promised),
        }
    }
}

impl QuotaTree {
    /// An empty tree with the given capacity.
    pub fn new(capacity: Capacity) -> Self {
        Self {
            names: Interner::default(),
            nodes: Vec::new(),
            root_children: Vec::new(),
            capacity,
            root_used: Dense::zeros(),
            root_reclaiming: Dense::zeros(),
            root_promised: Dense::zeros(),
            root_waiters: Dense::zeros(),
            total_waiters: 0,
            warnings: Vec::new(),
        }
    }

    /// The id of quota `name`, creating an undefined placeholder if unknown
    /// (units may name a quota before the controller has seen it).
    pub fn intern(&mut self, name: &str) -> QuotaId {
        let id = self.names.intern(name);
        while self.nodes.len() <= id.index() {
            self.nodes.push(Node::placeholder());
        }
        id
    }

    /// The id of quota `name`, if it was ever named.
    pub fn id(&self, name: &str) -> Option<QuotaId> {
        self.names.get(name)
    }

    /// The name of quota `id`.
    pub fn name(&self, id: QuotaId) -> &Arc<str> {
        self.names.name(id)
    }

    fn node(&self, id: QuotaId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// Whether the controller has defined quota `id`.
    pub fn is_defined(&self, id: QuotaId) -> bool {
        self.node(id).is_some_and(|n| n.defined)
    }

    /// Whether quota `id` is an inner node.
    pub fn is_parent(&self, id: QuotaId) -> bool {
        self.node(id).is_some_and(|n| n.is_parent)
    }

    /// The quota and its ancestors (leaf first, root excluded), or why the
    /// path cannot be followed.
    pub fn path(&self, id: QuotaId) -> Result<&[QuotaId], PathProblem> {
        match self.node(id) {
            Some(n) => n.path.as_deref().map_err(|p| *p),
            None => Err(PathProblem::Undefined),
        }
    }

    /// Parent of `id` (`None`: the root).
    pub fn parent(&self, id: QuotaId) -> Option<QuotaId> {
        self.node(id).and_then(|n| n.parent)
    }

    /// Children of `id`, or of the root when `None`.
    pub fn children(&self, id: Option<QuotaId>) -> &[QuotaId] {
        match id {
            None => &self.root_children,
            Some(id) => self.node(id).map_or(&[], |n| &n.children),
        }
    }

    /// Usage of `id`'s subtree for `resource`.
    pub fn used(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| n.used.get(resource))
    }

    /// Max of `id` for `resource` ([`UNLIMITED`] when not named).
    pub fn max(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(UNLIMITED, |n| n.max.get(resource))
    }

    /// Effective min of `id` for `resource` (after proportional scaling).
    pub fn min_effective(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| n.min_eff.get(resource))
    }

    /// Usage of the whole cluster (every unit holding quota).
    pub fn root_used(&self, resource: ResId) -> i64 {
        self.root_used.get(resource)
    }

    /// The root capacity.
    pub fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    /// Capacity for `resource` ([`UNLIMITED`] unless limited), or `None` while unknown.
    pub fn capacity_of(&self, resource: ResId) -> Option<i64> {
        match &self.capacity {
            Capacity::Unknown => None,
            Capacity::Unlimited => Some(UNLIMITED),
            Capacity::Limited(c) => Some(c.get(resource)),
        }
    }

    /// Room left under quota `id`'s max for `resource`.
    pub fn max_headroom(&self, id: QuotaId, resource: ResId) -> i64 {
        let max = self.max(id, resource);
        if max == UNLIMITED {
            UNLIMITED
        } else {
            max.saturating_sub(self.used(id, resource))
        }
    }

    /// Room left under the capacity for `resource` (negative while unknown).
    pub fn capacity_headroom(&self, resource: ResId) -> i64 {
        match self.capacity_of(resource) {
            None => -1,
            Some(UNLIMITED) => UNLIMITED,
            Some(cap) => cap.saturating_sub(self.root_used(resource)),
        }
    }

    /// The first limit a unit charged to `leaf` asking for `request` cannot
    /// fit under even with nothing else running — a quota on its path (leaf
    /// first) whose max for a resource is below the request, or else the
    /// capacity as known now — with that limit. `None` when it fits alone
    /// (or its path cannot be followed: it waits for another reason).
    pub fn never_fits(&self, leaf: Option<QuotaId>, request: &ResVec) -> Option<Beyond> {
        let path = match leaf {
            Some(l) => self.path(l).ok()?,
            None => &[],
        };
        self.never_fits_on(path, request)
    }

    /// [`QuotaTree::never_fits`] for a unit whose path (leaf first) is
    /// `path`.
    pub fn never_fits_on(&self, path: &[QuotaId], request: &ResVec) -> Option<Beyond> {
        for &a in path {
            for (k, r) in request.iter() {
                let max = self.max(a, k);
                if max != UNLIMITED && r > max {
                    return Some(Beyond {
                        at: Some(a),
                        resource: k,
                        limit: max,
                    });
                }
            }
        }
        request.iter().find_map(|(k, r)| {
            let cap = self.capacity_of(k)?;
            (cap != UNLIMITED && r > cap).then_some(Beyond {
                at: None,
                resource: k,
                limit: cap,
            })
        })
    }

    /// The current limit `blocker` stands for: a quota's max or the
    /// capacity ([`UNLIMITED`] when none), `None` for other limits or while
    /// the capacity is unknown.
    pub fn limit_of(&self, blocker: Blocker) -> Option<i64> {
        match blocker {
            Blocker::QuotaMax(q, k) => Some(self.max(q, k)),
            Blocker::Capacity(k) => self.capacity_of(k),
            Blocker::Namespace(..) | Blocker::Reclaim(..) => None,
        }
    }

    /// Whether a unit charged to `leaf` with `request` stays within the
    /// leaf's effective min for every resource it asks for.
    pub fn is_guaranteed(&self, leaf: Option<QuotaId>, request: &ResVec) -> bool {
        let Some(node) = leaf.and_then(|l| self.node(l)).filter(|n| n.defined) else {
            return false;
        };
        has_min_for(node, request)
            && request
                .iter()
                .filter(|(k, _)| governs(node, *k))
                .all(|(k, r)| node.used.get(k).saturating_add(r) <= node.min_eff.get(k))
    }

    /// How much of `resource` the children of `at` (the root when `None`)
    /// other than those on `path` use beyond their effective min: what a
    /// reclaim could take back at that level.
    pub fn borrowed_by_others(
        &self,
        at: Option<QuotaId>,
        path: &[QuotaId],
        resource: ResId,
    ) -> i64 {
        self.children(at)
            .iter()
            .filter(|c| !path.contains(c))
            .filter_map(|c| self.node(*c))
            .map(|n| {
                n.used
                    .get(resource)
                    .saturating_sub(n.min_eff.get(resource))
                    .max(0)
            })
            .fold(0i64, i64::saturating_add)
    }

    /// The current min warnings.
    pub fn warnings(&self) -> &[MinWarning] {
        &self.warnings
    }

    /// Min, effective min, max and usage of a quota, as named resources.
    pub fn figures(&self, id: QuotaId, names: &Interner<ResId>) -> Option<QuotaFigures> {
        let n = self.node(id).filter(|n| n.defined)?;
        Some(QuotaFigures {
            min: n.min.to_resources(names),
            min_effective: n.min_eff.to_resources(names),
            max: n.max.to_resources(names),
            used: n.used.to_resources(names),
        })
    }

    /// Adds or replaces a quota.
    pub fn upsert(&mut self, def: &QuotaDef, res_names: &mut Interner<ResId>) -> QuotaChange {
        let id = self.intern(&def.name);
        let parent = def
            .parent
            .as_deref()
            .filter(|p| !p.is_empty() && *p != ROOT_QUOTA_NAME)
            .map(|p| self.intern(p));
        let min = Dense::amounts_from(&def.min, res_names);
        let max = Dense::limits_from(&def.max, res_names);
        let Some(node) = self.nodes.get_mut(id.index()) else {
            return QuotaChange::None;
        };
        let structure = !node.defined || node.parent != parent || node.is_parent != def.is_parent;
        let weight = def.weight_milli.max(1);
        let limits = node.min != min
            || node.max != max
            || node.fair != def.fair_sharing
            || node.weight_milli != weight;
        node.fair = def.fair_sharing;
        node.weight_milli = weight;
        node.defined = true;
        node.parent = parent;
        node.is_parent = def.is_parent;
        node.min = min;
        node.max = max;
        if structure {
            self.rebuild(res_names);
            QuotaChange::Structure
        } else if limits {
            self.recompute_min_effective(res_names);
            QuotaChange::Limits
        } else {
            QuotaChange::None
        }
    }

    /// Forgets quota `name`'s definition (its usage stays accounted to it and
    /// to the root). Returns whether it was defined.
    pub fn remove(&mut self, name: &str, res_names: &Interner<ResId>) -> bool {
        let Some(id) = self.names.get(name) else {
            return false;
        };
        let Some(node) = self.nodes.get_mut(id.index()) else {
            return false;
        };
        if !node.defined {
            return false;
        }
        node.defined = false;
        node.parent = None;
        node.is_parent = false;
        node.fair = false;
        node.weight_milli = crate::model::DEFAULT_WEIGHT_MILLI;
        node.min = Dense::zeros();
        node.max = Dense::unlimited();
        self.rebuild(res_names);
        true
    }

    /// Whether the capacity already is `capacity`.
    pub fn capacity_equals(
        &self,
        capacity: &RootCapacity,
        res_names: &mut Interner<ResId>,
    ) -> bool {
        match (capacity, &self.capacity) {
            (RootCapacity::Unlimited, Capacity::Unlimited) => true,
            (RootCapacity::Limited(r), Capacity::Limited(current)) => {
                *current == Dense::limits_from(r, res_names)
            }
            _ => false,
        }
    }

    /// Sets the root capacity. Returns whether the capacity was unknown before.
    pub fn set_capacity(
        &mut self,
        capacity: &RootCapacity,
        res_names: &mut Interner<ResId>,
    ) -> bool {
        let was_unknown = self.capacity == Capacity::Unknown;
        self.capacity = match capacity {
            RootCapacity::Unlimited => Capacity::Unlimited,
            RootCapacity::Limited(r) => Capacity::Limited(Dense::limits_from(r, res_names)),
        };
        self.recompute_min_effective(res_names);
        was_unknown
    }

    fn apply(&mut self, figure: Figure, quota: Option<QuotaId>, amount: &ResVec, add: bool) {
        let change = |d: &mut Dense| {
            if add { d.add(amount) } else { d.sub(amount) }
        };
        change(match figure {
            Figure::Used => &mut self.root_used,
            Figure::Reclaiming => &mut self.root_reclaiming,
            Figure::Promised => &mut self.root_promised,
        });
        let Some(q) = quota else {
            return;
        };
        let path: Vec<QuotaId> = match self.path(q) {
            Ok(p) => p.to_vec(),
            Err(_) => vec![q],
        };
        if let Some(n) = self.nodes.get_mut(q.index()) {
            change(n.figure(figure).0);
        }
        for a in path {
            if let Some(n) = self.nodes.get_mut(a.index()) {
                change(n.figure(figure).1);
            }
        }
    }

    /// Charges `amount` to `quota` (or to the root only when `None`).
    pub fn add_usage(&mut self, quota: Option<QuotaId>, amount: &ResVec) {
        self.apply(Figure::Used, quota, amount, true);
    }

    /// Takes `amount` back from `quota` (or from the root only when `None`).
    pub fn sub_usage(&mut self, quota: Option<QuotaId>, amount: &ResVec) {
        self.apply(Figure::Used, quota, amount, false);
    }
}

/// Min, effective min, max and usage of a quota (for metrics and status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaFigures {
    /// Min as defined.
    pub min: koord_queue_model::Resources,
    /// Min after proportional scaling.
    pub min_effective: koord_queue_model::Resources,
    /// Max (named resources only).
    pub max: koord_queue_model::Resources,
    /// Usage of the subtree.
    pub used: koord_queue_model::Resources,
}

/// Whether the quota guarantees any of what `request` asks for: a quota
/// without a min for the requested resources guarantees nothing.
fn has_min_for(node: &Node, request: &ResVec) -> bool {
    request.iter().any(|(k, r)| r > 0 && node.min.get(k) > 0)
}

/// Whether a quota governs `resource` at all: a resource named in neither
/// its min nor its max (e.g. the memory of a CPU-only quota) does not make
/// a unit borrow there.
fn governs(node: &Node, resource: ResId) -> bool {
    node.min.get(resource) != 0 || node.max.get(resource) != UNLIMITED
}

mod fair;
mod planning;
mod shape;

pub use fair::{SHARE_SCALE, Share};
