//! Changes of the tree's shape: paths, children and subtree usage rebuilt
//! from each node's own usage, and the effective mins scaled down where the
//! children's mins exceed what their parent (or the capacity) can give.

use std::sync::Arc;

use koord_queue_model::ROOT_QUOTA_NAME;

use super::{Capacity, Figure, MinWarning, PathProblem, QuotaTree};
use crate::amounts::{Dense, UNLIMITED};
use crate::ids::{Id, Interner, QuotaId, ResId};

impl QuotaTree {
    /// Recomputes paths, children, subtree usage, effective mins and warnings.
    pub(super) fn rebuild(&mut self, res_names: &Interner<ResId>) {
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

    pub(super) fn compute_path(&self, id: QuotaId) -> Result<Box<[QuotaId]>, PathProblem> {
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
    pub(super) fn recompute_min_effective(&mut self, res_names: &Interner<ResId>) {
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
