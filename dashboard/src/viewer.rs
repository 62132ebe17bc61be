//! Who reads, and how far they see: a user who may read the whole cluster
//! is answered from the cluster-wide lists; anyone else from the lists of
//! their namespaces (a ServiceAccount's own and those named at sign-in),
//! each read with their token, so RBAC still decides every one.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::reads::{self, ListPage, ReadError, Window};

/// A reader: the user's client and the namespaces they named.
#[derive(Clone)]
pub struct Viewer {
    /// Reads as the user.
    pub client: kube::Client,
    /// The user's namespaces, for when the cluster-wide lists are refused.
    pub namespaces: Vec<String>,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer")
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

/// What a list read gave: the items, and the parts the user may not see.
#[derive(Clone, Debug, Default)]
pub struct Seen<T> {
    /// What was read.
    pub value: T,
    /// Whether the cluster-wide list was read (else the namespaces').
    pub cluster_wide: bool,
    /// What was refused or failed, as a person reads it.
    pub problems: Vec<String>,
}

impl Viewer {
    /// The quotas the user may see: every quota, else those serving their
    /// namespaces (with their ancestors), parents first, each once.
    pub async fn quotas(&self) -> Result<Seen<Vec<Value>>, ReadError> {
        match reads::quotas(&self.client, None).await {
            Ok(all) => Ok(Seen {
                value: all,
                cluster_wide: true,
                problems: Vec::new(),
            }),
            Err(ReadError::Forbidden(_)) => {
                let mut seen: Seen<Vec<Value>> = Seen::default();
                let mut names = BTreeSet::new();
                for ns in &self.namespaces {
                    match reads::quotas(&self.client, Some(ns)).await {
                        Ok(items) => {
                            for q in items {
                                let name = q["metadata"]["name"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_string();
                                if names.insert(name) {
                                    seen.value.push(q);
                                }
                            }
                        }
                        Err(e) => seen.problems.push(format!("quotas of namespace {ns}: {e}")),
                    }
                }
                // Parents first, as the API orders each list.
                let depth = depths(&seen.value);
                seen.value.sort_by_key(|q| depth_of(&depth, q));
                Ok(seen)
            }
            Err(e) => Err(e),
        }
    }

    /// How many units wait where the user may look.
    pub async fn waiting(&self) -> Result<Seen<u64>, ReadError> {
        let one = Window {
            offset: 0,
            limit: 1,
        };
        let count = |p: &ListPage| p.items.len() as u64 + p.remaining;
        match reads::pending_in(&self.client, None, one).await {
            Ok(page) => Ok(Seen {
                value: count(&page),
                cluster_wide: true,
                problems: Vec::new(),
            }),
            Err(ReadError::Forbidden(_)) => {
                let mut seen: Seen<u64> = Seen::default();
                for ns in &self.namespaces {
                    match reads::pending_in(&self.client, Some(ns), one).await {
                        Ok(page) => seen.value += count(&page),
                        Err(e) => seen.problems.push(format!("waiting units of {ns}: {e}")),
                    }
                }
                Ok(seen)
            }
            Err(e) => Err(e),
        }
    }

    /// Every waiting unit of the user's namespaces (the cluster's when
    /// allowed) that `keep` keeps, in the API's order.
    pub async fn pending_where(
        &self,
        keep: impl Fn(&Value) -> bool,
    ) -> Result<Seen<Vec<Value>>, ReadError> {
        match reads::pending_in(&self.client, None, Window::default()).await {
            Ok(page) => Ok(Seen {
                value: page.items.into_iter().filter(|u| keep(u)).collect(),
                cluster_wide: true,
                problems: Vec::new(),
            }),
            Err(ReadError::Forbidden(_)) => {
                let mut seen: Seen<Vec<Value>> = Seen::default();
                for ns in &self.namespaces {
                    match reads::pending_in(&self.client, Some(ns), Window::default()).await {
                        Ok(page) => seen
                            .value
                            .extend(page.items.into_iter().filter(|u| keep(u))),
                        Err(e) => seen.problems.push(format!("waiting units of {ns}: {e}")),
                    }
                }
                Ok(seen)
            }
            Err(e) => Err(e),
        }
    }

    /// The QueueUnits of Queue `queue` that hold quota, of those the user
    /// may list (the cluster's, else their namespaces').
    pub async fn holding_in_queue(
        &self,
        queue: &str,
    ) -> Result<Seen<Vec<koord_queue_api::QueueUnit>>, ReadError> {
        match reads::holding_in_queue(&self.client, None, queue).await {
            Ok(all) => Ok(Seen {
                value: all,
                cluster_wide: true,
                problems: Vec::new(),
            }),
            Err(ReadError::Forbidden(_)) => {
                let mut seen: Seen<Vec<koord_queue_api::QueueUnit>> = Seen::default();
                for ns in &self.namespaces {
                    match reads::holding_in_queue(&self.client, Some(ns), queue).await {
                        Ok(items) => seen.value.extend(items),
                        Err(e) => seen.problems.push(format!("QueueUnits of {ns}: {e}")),
                    }
                }
                Ok(seen)
            }
            Err(e) => Err(e),
        }
    }
}

/// The name of a list item.
pub fn name_of(item: &Value) -> &str {
    item["metadata"]["name"].as_str().unwrap_or_default()
}

/// Each quota's depth (0 under the root), from the parents the items name.
pub fn depths(quotas: &[Value]) -> std::collections::HashMap<String, usize> {
    let parent: std::collections::HashMap<&str, &str> = quotas
        .iter()
        .filter_map(|q| Some((name_of(q), q["parent"].as_str()?)))
        .collect();
    quotas
        .iter()
        .map(|q| {
            let mut depth = 0;
            let mut at = name_of(q);
            // Bounded: a cycle cannot come from the scheduler, but a page
            // must not hang on one.
            while let Some(p) = parent.get(at) {
                depth += 1;
                at = p;
                if depth > quotas.len() {
                    break;
                }
            }
            (name_of(q).to_string(), depth)
        })
        .collect()
}

fn depth_of(depths: &std::collections::HashMap<String, usize>, q: &Value) -> usize {
    depths.get(name_of(q)).copied().unwrap_or(0)
}
