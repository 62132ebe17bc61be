//! The visibility API's answers (architecture §4.8), read from the state the
//! controller decides on, between two inputs: a namespace's waiting units, a
//! Queue's backlog in the order the cycle serves it, the quotas' usage.
//!
//! A unit in line is read from the core (its place, its reason); a unit out
//! of line — sent back until its backoff ends, its admission checks pending,
//! not adopted yet — from its record, after those in line.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use koord_queue_api::Resources;
use koord_queue_api::queue_unit::QueueUnitPhase;
use koord_queue_core::WaitReason;
use koord_queue_core::amounts::format_amount;
use koord_queue_visibility::{
    Answer, Ask, ItemMeta, JobOf, Page, PendingUnit, Query, QuotaUsage, Reply, WaitReasonView,
    WaitType,
};

use super::{Controller, Membership, UnitState, queue_of};
use crate::controller::clock::wall_time;
use crate::controller::records::Key;
use crate::controller::records::QuotaRecord;
use crate::core::QueueCounts;
use crate::wait_view;

/// Quantities by resource, as the API writes them.
fn amounts(r: &Resources) -> BTreeMap<String, String> {
    r.iter()
        .map(|(k, v)| (k.to_string(), format_amount(k, v)))
        .collect()
}

fn rfc3339(ms: i64) -> String {
    wall_time(ms).to_string()
}

/// Whether a unit waits: not released, not finished, not being deleted.
fn waits(st: &UnitState) -> bool {
    !st.rec.deleting
        && st
            .rec
            .phase
            .is_none_or(|p| !p.is_released() && !p.is_finished())
}

/// The units of one listing in the order the API gives them: those in line
/// by queue and position, then those out of line, oldest first.
#[derive(Debug)]
struct Lines {
    in_line: Vec<(Key, usize)>,
    out_of_line: Vec<Key>,
}

/// The order of the last listing, kept for the pages that follow it while
/// nothing it depends on changes (the visibility gate's generation, bumped
/// by every input, write result, cycle and leadership change). Working the
/// order out walks every unit of the cluster; `kubectl get` asks for 500
/// at a time, and a 10,000-unit backlog made that 21 walks.
#[derive(Debug, Default)]
pub(super) struct LastListing(Option<(Ask, u64, Lines)>);

impl Controller {
    /// Answers a visibility query (a dropped asker is fine). Every answer
    /// but a history is a function of the state, stamped with its
    /// generation; an asker that holds the answer at the generation that
    /// still stands is told it is unchanged, and nothing is worked out.
    pub fn answer(&mut self, query: Query) {
        let Query {
            ask,
            page,
            known,
            reply,
        } = query;
        let generation = self.visibility.generation();
        let kept = !matches!(ask, Ask::History(_));
        let answer = match ask {
            _ if kept && known == Some(generation) => Answer::Unchanged,
            Ask::Quotas(namespace) => Answer::Quotas(self.quota_usage(namespace.as_deref())),
            Ask::History(namespace) => Answer::History(self.history_answer(namespace.as_deref())),
            Ask::Queue(ref name) if !self.queue_known(name) => Answer::NoSuchQueue,
            ask => {
                let fresh =
                    matches!(&self.listing.0, Some((a, g, _)) if *a == ask && *g == generation);
                if !fresh {
                    let lines = self.lines(&ask);
                    self.listing.0 = Some((ask, generation, lines));
                }
                match &self.listing.0 {
                    Some((_, _, lines)) => self.page_of(lines, page),
                    None => Answer::Units {
                        items: Vec::new(),
                        remaining: 0,
                    },
                }
            }
        };
        let _ = reply.send(Reply {
            answer,
            generation: kept.then_some(generation),
        });
    }

    /// Whether Queue `name` is known: the core serves or has heard of it,
    /// or a Queue or quota of that name exists.
    fn queue_known(&self, name: &str) -> bool {
        self.core.queue_counts(name).is_some()
            || self.queues.contains_key(name)
            || self.quotas.contains_key(name)
    }

    /// The order of a namespace's waiting units (every namespace's with
    /// `None`): by queue in serving order, in line by position, then those
    /// out of line; or of Queue `name`'s backlog.
    fn lines(&self, ask: &Ask) -> Lines {
        let mut in_line = Vec::new();
        let mut keep = |key: &str, position: usize| {
            if let Some((k, _)) = self.units.get_key_value(key) {
                in_line.push((k.clone(), position));
            }
        };
        match ask {
            Ask::Queue(name) => {
                for w in self.core.queue_waiting(name) {
                    keep(w.key, w.position);
                }
            }
            Ask::Namespace(namespace) => {
                let prefix = namespace.as_deref().map(|ns| format!("{ns}/"));
                for queue in self.core.queues() {
                    for w in self.core.queue_waiting(queue.name) {
                        if prefix.as_deref().is_none_or(|p| w.key.starts_with(p)) {
                            keep(w.key, w.position);
                        }
                    }
                }
            }
            Ask::Quotas(_) | Ask::History(_) => {}
        }
        let listed: HashSet<&str> = in_line.iter().map(|(k, _)| &**k).collect();
        let mut out: Vec<(&Key, &UnitState)> = self
            .units
            .iter()
            .filter(|(k, st)| {
                waits(st)
                    && match ask {
                        Ask::Queue(name) => queue_of(&st.rec) == name,
                        Ask::Namespace(ns) => {
                            ns.as_deref().is_none_or(|ns| &*st.rec.namespace == ns)
                        }
                        Ask::Quotas(_) | Ask::History(_) => false,
                    }
                    && !listed.contains(&***k)
            })
            .map(|(k, st)| (k, &**st))
            .collect();
        out.sort_by(|(_, a), (_, b)| {
            (a.rec.created_ms, &a.rec.namespace, a.rec.name()).cmp(&(
                b.rec.created_ms,
                &b.rec.namespace,
                b.rec.name(),
            ))
        });
        let out_of_line = out.into_iter().map(|(k, _)| k.clone()).collect();
        Lines {
            in_line,
            out_of_line,
        }
    }

    /// A page of `lines`: the in-line units followed by the out-of-line
    /// ones, rendered from the state as it is (the same as when the order
    /// was worked out: the generation has not moved).
    fn page_of(&self, lines: &Lines, page: Page) -> Answer {
        let total = lines.in_line.len() + lines.out_of_line.len();
        let start = page.offset.min(total);
        let end = page
            .limit
            .map_or(total, |l| start.saturating_add(l).min(total));
        let mut items = Vec::with_capacity(end - start);
        for i in start..end {
            let item = match i.checked_sub(lines.in_line.len()) {
                None => {
                    let (key, position) = &lines.in_line[i];
                    self.units
                        .get(key)
                        .map(|st| self.in_line(key, st, *position, self.core.reason(key)))
                }
                Some(j) => lines
                    .out_of_line
                    .get(j)
                    .and_then(|key| Some((key, self.units.get(key)?)))
                    .map(|(key, st)| self.out_of_line_item(key, st)),
            };
            items.extend(item);
        }
        Answer::Units {
            items,
            remaining: total - end,
        }
    }

    fn in_line(
        &self,
        key: &str,
        st: &UnitState,
        position: usize,
        reason: Option<&WaitReason>,
    ) -> PendingUnit {
        let published = st.rec.wait_reason.as_deref().and_then(WaitType::parse);
        let reason = match (reason, published) {
            (Some(r), _) => wait_view::view(r),
            // A standby runs no cycle: it gives the reason the leader
            // published in the unit's status.
            (None, Some(kind)) => wait_view::outside_the_core(
                kind,
                st.rec.message.as_deref().unwrap_or_default().to_string(),
                None,
            ),
            (None, None) => wait_view::outside_the_core(
                WaitType::NotYetSeen,
                "in line; no cycle has looked at it yet".into(),
                None,
            ),
        };
        let mut item = self.item(key, st, reason);
        item.position = u64::try_from(position).ok();
        item
    }

    fn out_of_line_item(&self, key: &str, st: &UnitState) -> PendingUnit {
        let rec = &st.rec;
        let message = rec.message.as_deref().unwrap_or_default().to_string();
        let reason = match rec.phase {
            // In the core, in a queue it does not serve: why, as it says.
            _ if st.member == Membership::Waiting
                && let Some(r) = self.core.reason(key) =>
            {
                wait_view::view(r)
            }
            Some(QueueUnitPhase::TimeoutBackoff | QueueUnitPhase::SchedFailed) => {
                wait_view::outside_the_core(
                    WaitType::Backoff,
                    message,
                    rec.requeue_at_ms.map(rfc3339),
                )
            }
            Some(QueueUnitPhase::Reserved) => {
                let pending: Vec<&str> = rec
                    .checks
                    .iter()
                    .filter(|c| c.state != koord_queue_api::queue_unit::CheckState::Ready)
                    .map(|c| c.name.as_str())
                    .collect();
                wait_view::outside_the_core(
                    WaitType::AdmissionChecks,
                    format!(
                        "quota reserved; waiting for admission checks: {}",
                        pending.join(", ")
                    ),
                    None,
                )
            }
            _ => wait_view::outside_the_core(
                WaitType::NotYetSeen,
                if rec.invalid.is_some() || !message.is_empty() {
                    rec.invalid.as_deref().map_or(message, str::to_string)
                } else {
                    "not adopted yet: its job has not been seen naming it".into()
                },
                None,
            ),
        };
        self.item(key, st, reason)
    }

    /// The item of unit `key`.
    fn item(&self, key: &str, st: &UnitState, reason: WaitReasonView) -> PendingUnit {
        let rec = &st.rec;
        let job = self.jobs.get(&rec.job_key()).map(|j| JobOf {
            api_version: j.adapter.kind().api_version(),
            kind: j.adapter.kind().kind.to_string(),
            name: j.name.clone(),
        });
        let created = rfc3339(rec.created_ms);
        PendingUnit {
            metadata: ItemMeta {
                name: rec.name().to_string(),
                namespace: Some(rec.namespace.to_string()),
                creation_timestamp: Some(created.clone()),
            },
            job,
            queue: queue_of(rec).to_string(),
            quota: rec.quota.as_deref().map(str::to_string),
            position: None,
            priority: rec.priority,
            requests: amounts(&rec.request),
            reason,
            waiting_since: Some(created),
            estimated_start: self.estimates.start_of(key).map(rfc3339),
        }
    }

    /// The quotas serving `namespace` (its own, and those its units are
    /// charged to) with their ancestors, or every quota; parents first.
    pub(super) fn quota_usage(&self, namespace: Option<&str>) -> Vec<QuotaUsage> {
        let mut names: BTreeSet<&str> = match namespace {
            None => self.quotas.keys().map(String::as_str).collect(),
            Some(ns) => self
                .quotas
                .values()
                .filter(|q| q.namespace == ns)
                .map(|q| q.name.as_str())
                .chain(
                    self.units
                        .values()
                        .filter(|st| &*st.rec.namespace == ns)
                        .filter_map(|st| st.rec.quota.as_deref()),
                )
                .filter(|n| self.quotas.contains_key(*n))
                .collect(),
        };
        // Ancestors, so a tenant sees which parent's max stops it.
        let mut todo: Vec<&str> = names.iter().copied().collect();
        while let Some(n) = todo.pop() {
            if let Some(parent) = self.quotas.get(n).map(|q| q.parent.as_str())
                && self.quotas.contains_key(parent)
                && names.insert(parent)
            {
                todo.push(parent);
            }
        }
        let mut ordered: Vec<(usize, &str)> = names
            .into_iter()
            .map(|n| (self.quota_depth(n), n))
            .collect();
        ordered.sort();
        let counts: HashMap<&str, QueueCounts> =
            self.core.queues().map(|q| (q.name, q.counts)).collect();
        ordered
            .into_iter()
            .filter_map(|(_, name)| {
                let q = self.quotas.get(name)?;
                Some(self.usage_of(q, counts.get(name).copied().unwrap_or_default()))
            })
            .collect()
    }

    /// What quota `q` holds, guarantees and lends, as the core counts it.
    fn usage_of(&self, q: &QuotaRecord, counts: QueueCounts) -> QuotaUsage {
        let zero = Resources::new();
        let figures = self.core.quota_figures(&q.name);
        let (min, effective_min, max, used) = match &figures {
            Some(f) => (&f.min, &f.min_effective, &f.max, &f.used),
            // A quota the core refused (unreadable, in a cycle): as
            // defined, holding nothing.
            None => (&q.min, &q.min, &q.max, &zero),
        };
        let (mut borrowed, mut lent) = (Resources::new(), Resources::new());
        // Only what the quota governs (names in its min or max): a quota
        // that sets neither for memory does not borrow the memory its units
        // use, it just does not count it.
        let names = |r: &Resources, resource| r.iter().any(|(n, _)| n == resource);
        for (resource, _) in used.iter().chain(effective_min.iter()) {
            if !names(min, resource) && !names(max, resource) {
                continue;
            }
            let over = used.get(resource) - effective_min.get(resource);
            if over > 0 {
                borrowed.set(resource, over);
            } else if over < 0 {
                lent.set(resource, -over);
            }
        }
        let parent = self.quotas.get(&q.parent);
        QuotaUsage {
            metadata: ItemMeta {
                name: q.name.clone(),
                namespace: Some(q.namespace.clone()),
                creation_timestamp: None,
            },
            parent: parent.map(|p| p.name.clone()),
            is_parent: q.is_parent,
            min: amounts(min),
            effective_min: amounts(effective_min),
            max: amounts(max),
            used: amounts(used),
            borrowed: amounts(&borrowed),
            lent: amounts(&lent),
            fair_share_weight: parent
                .is_some_and(|p| p.fair_sharing)
                .then(|| milli_text(q.weight_milli)),
            pending: counts.pending as u64,
            admitted: counts.admitted as u64,
        }
    }
}

impl Controller {
    /// How many quotas are on the path from quota `name` up to the root.
    pub(super) fn quota_depth(&self, name: &str) -> usize {
        let mut depth = 0usize;
        let mut at = name;
        while let Some(q) = self.quotas.get(at) {
            if depth > self.quotas.len() {
                break; // a cycle of parents: the core refuses it anyway
            }
            depth += 1;
            at = &q.parent;
        }
        depth
    }
}

/// A weight in thousandths as written in the annotation (`1`, `2.5`).
fn milli_text(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{}", milli as f64 / 1000.0)
    }
}
