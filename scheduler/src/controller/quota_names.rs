//! ElasticQuota names are unique cluster-wide: Koordinator's parent label
//! and a job's quota label name quotas by name only. When two namespaces
//! hold a quota of the same name, the one that takes precedence (the oldest,
//! then the first namespace: [`koord_queue_api::elastic_quota::precedence`],
//! the rule the webhook maps jobs by) is the quota of that name; the others
//! are ignored — not merged — and reported once each. When the winner goes,
//! the next in line takes its place.

use std::collections::{HashMap, HashSet};

use super::records::QuotaRecord;

/// Every ElasticQuota seen, by name.
#[derive(Debug, Default)]
pub struct QuotaNames {
    by_name: HashMap<String, Vec<QuotaRecord>>,
    /// `(namespace, name)` of the shadowed quotas already reported.
    reported: HashSet<(String, String)>,
}

/// The state of one name after a change.
#[derive(Debug, PartialEq)]
pub struct Resolution {
    /// The quota of the name now (`None`: no quota has the name any more).
    pub winner: Option<QuotaRecord>,
    /// Quotas of the name that are ignored and were not reported before.
    pub newly_shadowed: Vec<QuotaRecord>,
}

impl QuotaNames {
    /// Records `quota` (created or updated).
    pub fn apply(&mut self, quota: QuotaRecord) -> Resolution {
        let name = quota.name.clone();
        let entries = self.by_name.entry(name.clone()).or_default();
        entries.retain(|q| q.namespace != quota.namespace);
        entries.push(quota);
        entries.sort_by(|a, b| a.precedence.cmp(&b.precedence));
        self.resolve(&name)
    }

    /// Forgets the quota `namespace/name`.
    pub fn delete(&mut self, namespace: &str, name: &str) -> Resolution {
        if let Some(entries) = self.by_name.get_mut(name) {
            entries.retain(|q| q.namespace != namespace);
            if entries.is_empty() {
                self.by_name.remove(name);
            }
        }
        self.reported
            .remove(&(namespace.to_string(), name.to_string()));
        self.resolve(name)
    }

    /// How many quotas are ignored because another holds their name.
    pub fn shadowed(&self) -> usize {
        self.by_name
            .values()
            .map(|entries| entries.len().saturating_sub(1))
            .sum()
    }

    /// Namespace and name of every quota recorded, shadowed ones included.
    pub fn keys(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.by_name
            .values()
            .flatten()
            .map(|q| (q.namespace.clone(), q.name.clone()))
    }

    /// The namespace of the quota that holds `name`.
    pub fn holder(&self, name: &str) -> Option<&str> {
        self.by_name
            .get(name)
            .and_then(|e| e.first())
            .map(|q| q.namespace.as_str())
    }

    fn resolve(&mut self, name: &str) -> Resolution {
        let Some(entries) = self.by_name.get(name) else {
            return Resolution {
                winner: None,
                newly_shadowed: Vec::new(),
            };
        };
        let winner = entries.first().cloned();
        if let Some(w) = &winner {
            // A quota that wins now is no longer "reported as shadowed".
            self.reported.remove(&(w.namespace.clone(), w.name.clone()));
        }
        let mut newly_shadowed = Vec::new();
        for q in entries.iter().skip(1) {
            if self.reported.insert((q.namespace.clone(), q.name.clone())) {
                newly_shadowed.push(q.clone());
            }
        }
        Resolution {
            winner,
            newly_shadowed,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use koord_queue_api::Resources;

    use super::{QuotaNames, Resolution};
    use crate::controller::records::QuotaRecord;

    fn quota(ns: &str, created: i64, max_cpu: i64) -> QuotaRecord {
        QuotaRecord {
            name: "q".into(),
            namespace: ns.into(),
            parent: "root".into(),
            is_parent: false,
            fair_sharing: false,
            weight_milli: 1000,
            min: Resources::new(),
            max: Resources::from_iter([("cpu".to_string(), max_cpu)]),
            policy: Default::default(),
            invalid: None,
            precedence: (created, ns.into()),
        }
    }

    fn winner_ns(r: &Resolution) -> Option<&str> {
        r.winner.as_ref().map(|w| w.namespace.as_str())
    }

    #[test]
    fn the_oldest_holds_the_name_and_the_others_are_reported_once() {
        let mut names = QuotaNames::default();
        let r = names.apply(quota("b", 20, 1));
        assert_eq!(winner_ns(&r), Some("b"));
        assert!(r.newly_shadowed.is_empty());
        // A newer one in another namespace is ignored and reported.
        let r = names.apply(quota("c", 30, 99));
        assert_eq!(winner_ns(&r), Some("b"));
        assert_eq!(r.newly_shadowed, vec![quota("c", 30, 99)]);
        assert_eq!(r.winner.as_ref().unwrap().max.get("cpu"), 1, "not merged");
        // Updating it reports nothing new.
        let r = names.apply(quota("c", 30, 98));
        assert!(r.newly_shadowed.is_empty());
        // An older one arriving later (relists come in any order) takes over.
        let r = names.apply(quota("a", 10, 5));
        assert_eq!(winner_ns(&r), Some("a"));
        assert_eq!(r.newly_shadowed, vec![quota("b", 20, 1)]);
        assert_eq!(names.shadowed(), 2);
        assert_eq!(names.holder("q"), Some("a"));
    }

    #[test]
    fn when_the_holder_goes_the_next_takes_its_place() {
        let mut names = QuotaNames::default();
        names.apply(quota("a", 10, 1));
        names.apply(quota("b", 20, 2));
        // Deleting the shadowed one changes nothing for the name.
        let r = names.delete("b", "q");
        assert_eq!(winner_ns(&r), Some("a"));
        names.apply(quota("b", 20, 2));
        let r = names.delete("a", "q");
        assert_eq!(winner_ns(&r), Some("b"));
        assert!(r.newly_shadowed.is_empty());
        assert_eq!(names.shadowed(), 0);
        let r = names.delete("b", "q");
        assert_eq!(r.winner, None);
        // Unknown deletes are harmless.
        assert_eq!(names.delete("x", "nope").winner, None);
    }

    #[test]
    fn ties_go_to_the_first_namespace() {
        let mut names = QuotaNames::default();
        names.apply(quota("z", 10, 1));
        let r = names.apply(quota("m", 10, 2));
        assert_eq!(winner_ns(&r), Some("m"));
    }
}
