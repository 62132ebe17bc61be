//! Namespace ResourceQuotas as the `ResourceQuota` plugin sees them: the
//! hard limits and usage the controller reads from the API, plus what the
//! core has reserved for units it released whose pods do not exist yet (and
//! so are not in the ResourceQuota's `used`).

use koord_queue_model::Resources;

use super::amounts::{Dense, ResVec, UNLIMITED};
use super::ids::{Id, Interner, NsId, ResId};

/// Per-namespace figures.
#[derive(Clone, Debug)]
struct Entry {
    limited: bool,
    hard: Dense,
    used: Dense,
    reserved: Dense,
}

impl Entry {
    fn new() -> Self {
        Self {
            limited: false,
            hard: Dense::unlimited(),
            used: Dense::zeros(),
            reserved: Dense::zeros(),
        }
    }
}

/// The name under which a ResourceQuota entry limits what units request, or
/// `None` for entries a unit's request cannot be compared with (`limits.*`,
/// object counts).
fn request_name(quota_name: &str) -> Option<&str> {
    if quota_name.starts_with("limits.") || quota_name.starts_with("count/") {
        return None;
    }
    Some(quota_name.strip_prefix("requests.").unwrap_or(quota_name))
}

/// Namespaces and their ResourceQuota figures.
#[derive(Clone, Debug, Default)]
pub struct NamespaceQuotas {
    names: Interner<NsId>,
    entries: Vec<Entry>,
}

impl NamespaceQuotas {
    /// The id of namespace `name`.
    pub fn intern(&mut self, name: &str) -> NsId {
        let id = self.names.intern(name);
        while self.entries.len() <= id.index() {
            self.entries.push(Entry::new());
        }
        id
    }

    /// The id of namespace `name`, if it was ever named.
    pub fn id(&self, name: &str) -> Option<NsId> {
        self.names.get(name)
    }

    /// The name of namespace `id`.
    pub fn name(&self, id: NsId) -> &std::sync::Arc<str> {
        self.names.name(id)
    }

    /// Sets the namespace's hard limits and usage, as written in its
    /// ResourceQuota (`requests.cpu` and `cpu` both limit the `cpu` a unit
    /// requests; `limits.*` and `count/*` entries are ignored). When several
    /// ResourceQuotas apply, the controller passes, per resource, the one
    /// with the least room.
    pub fn set(
        &mut self,
        namespace: &str,
        hard: &Resources,
        used: &Resources,
        res: &mut Interner<ResId>,
    ) {
        let id = self.intern(namespace);
        let mut hard_d = Dense::unlimited();
        for (name, amount) in hard.iter() {
            if let Some(n) = request_name(name) {
                let k = res.intern(n);
                hard_d.set(k, hard_d.get(k).min(amount.max(0)));
            }
        }
        let mut used_d = Dense::zeros();
        for (name, amount) in used.iter() {
            if let Some(n) = request_name(name) {
                let k = res.intern(n);
                used_d.set(k, used_d.get(k).max(amount.max(0)));
            }
        }
        if let Some(e) = self.entries.get_mut(id.index()) {
            e.limited = true;
            e.hard = hard_d;
            e.used = used_d;
        }
    }

    /// Forgets the namespace's ResourceQuota (reservations stay).
    pub fn clear(&mut self, namespace: &str) -> Option<NsId> {
        let id = self.names.get(namespace)?;
        let e = self.entries.get_mut(id.index())?;
        e.limited = false;
        e.hard = Dense::unlimited();
        e.used = Dense::zeros();
        Some(id)
    }

    /// Hard limit of `resource` ([`UNLIMITED`] when none).
    pub fn hard(&self, ns: NsId, resource: ResId) -> i64 {
        self.entries
            .get(ns.index())
            .filter(|e| e.limited)
            .map_or(UNLIMITED, |e| e.hard.get(resource))
    }

    /// Usage reported by the ResourceQuota.
    pub fn used(&self, ns: NsId, resource: ResId) -> i64 {
        self.entries
            .get(ns.index())
            .map_or(0, |e| e.used.get(resource))
    }

    /// Reserved for released units whose pods do not exist yet.
    pub fn reserved(&self, ns: NsId, resource: ResId) -> i64 {
        self.entries
            .get(ns.index())
            .map_or(0, |e| e.reserved.get(resource))
    }

    /// Room left: hard − used − reserved ([`UNLIMITED`] without a limit).
    pub fn headroom(&self, ns: NsId, resource: ResId) -> i64 {
        let hard = self.hard(ns, resource);
        if hard == UNLIMITED {
            return UNLIMITED;
        }
        hard.saturating_sub(self.used(ns, resource))
            .saturating_sub(self.reserved(ns, resource))
    }

    /// Reserves `amount` in `ns`.
    pub fn add_reserved(&mut self, ns: NsId, amount: &ResVec) {
        if let Some(e) = self.entries.get_mut(ns.index()) {
            e.reserved.add(amount);
        }
    }

    /// Returns a reservation of `amount` in `ns`.
    pub fn sub_reserved(&mut self, ns: NsId, amount: &ResVec) {
        if let Some(e) = self.entries.get_mut(ns.index()) {
            e.reserved.sub(amount);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_quota_names_are_normalised() {
        let mut res = Interner::default();
        let mut ns = NamespaceQuotas::default();
        let hard: Resources = [
            ("requests.cpu".to_string(), 10_000),
            ("limits.cpu".to_string(), 1),
            ("count/jobs.batch".to_string(), 1),
            ("pods".to_string(), 5),
        ]
        .into_iter()
        .collect();
        let used: Resources = [("requests.cpu".to_string(), 4_000)].into_iter().collect();
        ns.set("team", &hard, &used, &mut res);
        let id = ns.id("team").unwrap();
        let cpu = res.get("cpu").unwrap();
        assert_eq!(ns.hard(id, cpu), 10_000);
        assert_eq!(ns.headroom(id, cpu), 6_000);
        ns.add_reserved(id, &ResVec::from_pairs([(cpu, 1_000)]));
        assert_eq!(ns.headroom(id, cpu), 5_000);
        assert_eq!(ns.hard(id, res.get("pods").unwrap()), 5);
        assert!(res.get("limits.cpu").is_none());
        ns.clear("team");
        assert_eq!(ns.headroom(id, cpu), UNLIMITED);
    }
}
