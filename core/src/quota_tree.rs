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
        let limits = node.min != min || node.max != max;
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

    /// Charges `amount` to `quota` (or to the root only when `None`).
    pub fn add_usage(&mut self, quota: Option<QuotaId>, amount: &ResVec) {
        self.apply(Figure::Used, quota, amount, true);
    }

    /// Takes `amount` back from `quota` (or from the root only when `None`).
    pub fn sub_usage(&mut self, quota: Option<QuotaId>, amount: &ResVec) {
        self.apply(Figure::Used, quota, amount, false);
    }

    /// Records that a unit charged to `quota` holding `amount` is being
    /// reclaimed (`add`), or no longer is.
    pub(crate) fn mark_reclaiming(&mut self, quota: Option<QuotaId>, amount: &ResVec, add: bool) {
        self.apply(Figure::Reclaiming, quota, amount, add);
    }

    /// Records that a guaranteed unit charged to `quota` asking for `amount`
    /// waits for reclaimed resources (`add`), or no longer does.
    pub(crate) fn mark_promised(&mut self, quota: Option<QuotaId>, amount: &ResVec, add: bool) {
        self.apply(Figure::Promised, quota, amount, add);
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

    /// Part of the usage of `id`'s subtree held by units being reclaimed.
    pub fn reclaiming(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| n.reclaiming.get(resource))
    }

    /// Usage of `id`'s subtree by units that are not being reclaimed: what
    /// it keeps once the reclaims in flight are done.
    pub fn kept(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| {
            n.used
                .get(resource)
                .saturating_sub(n.reclaiming.get(resource))
        })
    }

    /// Usage of `id`'s subtree once the reclaims in flight are done and the
    /// guaranteed units waiting for them are released.
    pub fn projected(&self, id: QuotaId, resource: ResId) -> i64 {
        self.node(id).map_or(0, |n| {
            n.used
                .get(resource)
                .saturating_sub(n.reclaiming.get(resource))
                .saturating_add(n.promised.get(resource))
        })
    }

    /// [`QuotaTree::kept`] for the whole cluster.
    pub fn root_kept(&self, resource: ResId) -> i64 {
        self.root_used
            .get(resource)
            .saturating_sub(self.root_reclaiming.get(resource))
    }

    /// [`QuotaTree::projected`] for the whole cluster.
    pub fn root_projected(&self, resource: ResId) -> i64 {
        self.root_used
            .get(resource)
            .saturating_sub(self.root_reclaiming.get(resource))
            .saturating_add(self.root_promised.get(resource))
    }

    /// Whether a unit charged to `leaf` with `request` stays within the
    /// leaf's effective min once the reclaims in flight are done and the
    /// units waiting for them are released.
    pub fn is_guaranteed_projected(&self, leaf: Option<QuotaId>, request: &ResVec) -> bool {
        let Some(l) = leaf.filter(|l| self.is_defined(*l)) else {
            return false;
        };
        let Some(node) = self.node(l) else {
            return false;
        };
        has_min_for(node, request)
            && request
                .iter()
                .filter(|(k, _)| governs(node, *k))
                .all(|(k, r)| self.projected(l, k).saturating_add(r) <= self.min_effective(l, k))
    }

    /// Whether quota `id` would use less than its effective min of some
    /// resource once the reclaims in flight are done: units judged to borrow
    /// there may be guaranteed now.
    pub fn has_room_under_min(&self, id: QuotaId) -> bool {
        self.node(id).is_some_and(|n| {
            n.min_eff.iter_set().any(|(k, min)| {
                n.used
                    .get(k)
                    .saturating_sub(n.reclaiming.get(k))
                    .saturating_add(n.promised.get(k))
                    < min
            })
        })
    }

    /// Whether quota `id` governs `resource`: names it in its min or its
    /// max. Usage of a resource a quota does not govern is neither
    /// guaranteed nor borrowed there.
    pub fn governs(&self, id: QuotaId, resource: ResId) -> bool {
        self.node(id).is_some_and(|n| governs(n, resource))
    }

    /// Whether units are charged to quota `id` itself (not only to its
    /// children).
    pub fn has_direct_usage(&self, id: QuotaId) -> bool {
        self.node(id)
            .is_some_and(|n| n.direct_used.iter_set().next().is_some())
    }

    /// Number of guaranteed units waiting for reclaim whose shortage of
    /// `resource` is at `scope` (the capacity when `None`).
    pub fn waiters(&self, scope: Option<QuotaId>, resource: ResId) -> i64 {
        match scope {
            None => self.root_waiters.get(resource),
            Some(q) => self.node(q).map_or(0, |n| n.waiters.get(resource)),
        }
    }

    /// Whether any guaranteed unit waits for reclaim.
    pub fn has_waiters(&self) -> bool {
        self.total_waiters > 0
    }

    /// Adds `delta` to the waiters of `resource` at `scope`. Returns whether
    /// the count dropped to zero (borrowing there may resume).
    pub(crate) fn add_waiters(
        &mut self,
        scope: Option<QuotaId>,
        resource: ResId,
        delta: i64,
    ) -> bool {
        let slot = match scope {
            None => &mut self.root_waiters,
            Some(q) => match self.nodes.get_mut(q.index()) {
                Some(n) => &mut n.waiters,
                None => return false,
            },
        };
        let before = slot.get(resource);
        let after = before.saturating_add(delta).max(0);
        slot.set(resource, after);
        self.total_waiters = self.total_waiters.saturating_add(after - before).max(0);
        before > 0 && after == 0
    }

    /// Room for borrowing at `scope` for `resource`: none while guaranteed
    /// units wait for reclaim there, otherwise unlimited.
    pub fn reclaim_headroom(&self, scope: Option<QuotaId>, resource: ResId) -> i64 {
        if self.waiters(scope, resource) > 0 {
            0
        } else {
            UNLIMITED
        }
    }

    /// Recomputes paths, children, subtree usage, effective mins and warnings.
    fn rebuild(&mut self, res_names: &Interner<ResId>) {
        let count = self.nodes.len();
        let mut paths = Vec::with_capacity(count);
        for index in 0..count {
            paths.push(self.compute_path(QuotaId::from_index(index)));
        }
        self.root_children.clear();
        for n in &mut self.nodes {
            n.children.clear();
        }
        for index in 0..count {
            let id = QuotaId::from_index(index);
            let n = &self.nodes[index];
            if !n.defined {
                continue;
            }
            match n.parent {
                None => self.root_children.push(id),
                Some(p) => {
                    if let Some(pn) = self.nodes.get_mut(p.index()) {
                        pn.children.push(id);
                    }
                }
            }
        }
        for (n, path) in self.nodes.iter_mut().zip(paths) {
            n.path = path;
            n.used.clear();
            n.reclaiming.clear();
            n.promised.clear();
        }
        for index in 0..count {
            let targets: Vec<QuotaId> = match &self.nodes[index].path {
                Ok(p) => p.to_vec(),
                Err(_) => vec![QuotaId::from_index(index)],
            };
            for figure in [Figure::Used, Figure::Reclaiming, Figure::Promised] {
                let direct = self.nodes[index].figure(figure).0.clone();
                for a in &targets {
                    if let Some(n) = self.nodes.get_mut(a.index()) {
                        n.figure(figure).1.add_dense(&direct);
                    }
                }
            }
        }
        self.recompute_min_effective(res_names);
    }

    fn compute_path(&self, id: QuotaId) -> Result<Box<[QuotaId]>, PathProblem> {
        let mut path = Vec::new();
        let mut cur = id;
        loop {
            let node = self.node(cur).filter(|n| n.defined);
            let Some(node) = node else {
                return Err(if cur == id {
                    PathProblem::Undefined
                } else {
                    PathProblem::MissingParent {
                        child: *path.last().unwrap_or(&id),
                        parent: cur,
                    }
                });
            };
            if path.len() > self.nodes.len() {
                return Err(PathProblem::Cycle);
            }
            path.push(cur);
            match node.parent {
                None => return Ok(path.into_boxed_slice()),
                Some(p) => cur = p,
            }
        }
    }

    /// Scales the children's mins top-down where they exceed their parent's
    /// (the root's "min" being the capacity), and records a warning for each
    /// parent and resource concerned.
    fn recompute_min_effective(&mut self, res_names: &Interner<ResId>) {
        self.warnings.clear();
        for n in &mut self.nodes {
            n.min_eff = n.min.clone();
        }
        let root_min = match &self.capacity {
            Capacity::Limited(c) => c.clone(),
            Capacity::Unknown | Capacity::Unlimited => Dense::unlimited(),
        };
        let root_name: Arc<str> = Arc::from(ROOT_QUOTA_NAME);
        let mut stack: Vec<(Option<QuotaId>, Dense)> = vec![(None, root_min)];
        while let Some((parent, parent_min)) = stack.pop() {
            let children = self.children(parent).to_vec();
            let slots = children
                .iter()
                .filter_map(|c| self.node(*c))
                .map(|n| n.min.slots())
                .max()
                .unwrap_or(0);
            for k in (0..slots).map(ResId::from_index) {
                let sum: i128 = children
                    .iter()
                    .filter_map(|c| self.node(*c))
                    .map(|n| i128::from(n.min.get(k)))
                    .sum();
                let pm = parent_min.get(k);
                if pm == UNLIMITED || sum <= i128::from(pm) {
                    continue;
                }
                self.warnings.push(MinWarning {
                    quota: match parent {
                        None => root_name.clone(),
                        Some(p) => self.names.name(p).clone(),
                    },
                    resource: res_names.name(k).clone(),
                    children_min: i64::try_from(sum).unwrap_or(i64::MAX),
                    min: pm,
                });
                for c in &children {
                    if let Some(n) = self.nodes.get_mut(c.index()) {
                        let scaled = i128::from(n.min.get(k)) * i128::from(pm) / sum;
                        n.min_eff.set(k, i64::try_from(scaled).unwrap_or(0));
                    }
                }
            }
            for c in children {
                if let Some(n) = self.node(c)
                    && n.path.is_ok()
                {
                    stack.push((Some(c), n.min_eff.clone()));
                }
            }
        }
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
