//! `quotas`: the quota tree as the scheduler counts it now — min, max,
//! used, borrowed, lent per quota, the fair-share weight where a parent
//! shares fairly, units pending and admitted, and a usage bar on a
//! terminal. Amounts are those of `--resource` (every resource with
//! `-o wide`).

use std::collections::BTreeMap;

use koord_queue_visibility::types::QuotaUsageList;
use serde::{Serialize, Serializer};

use crate::connect::Cluster;
use crate::error::CliError;
use crate::read;
use crate::render::table::Table;
use crate::render::text::{amount, amounts, bar};
use crate::render::{Human, Render};
use crate::tree::{tree, tree_order};

/// The answer: the visibility API's list, in tree order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// The quotas, each parent before its children.
    pub list: QuotaUsageList,
    /// The resource the table and the bars show.
    pub resource: String,
}

impl Serialize for Quotas {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.list.serialize(s)
    }
}

/// Reads the quotas: every quota, or those serving `namespace`. The note
/// says what was shown instead of what was asked.
pub async fn run(
    cluster: &Cluster,
    namespace: Option<&str>,
    resource: String,
) -> Result<(Quotas, Option<String>), CliError> {
    if !read::visibility_served(&cluster.client).await {
        let list = read::quotas_from_crds(cluster).await?;
        let note = "note: the visibility API (visibility.koord-queue.io) is not served; showing the ElasticQuotas: used as Koordinator records it, no borrowed or lent".to_string();
        return Ok((Quotas { list, resource }, Some(note)));
    }
    let (list, note) = match namespace {
        Some(ns) => (read::quotas(cluster, Some(ns)).await?, None),
        None => match read::quotas(cluster, None).await {
            Ok(list) => (list, None),
            // A tenant: the quotas serving its namespace are what it may see.
            Err(e) if e.is_forbidden() => {
                let list = read::quotas(cluster, Some(&cluster.namespace)).await?;
                let note = format!(
                    "note: showing the quotas serving namespace {} (every quota needs list on quotausages.visibility.koord-queue.io cluster-wide)",
                    cluster.namespace
                );
                (list, Some(note))
            }
            Err(e) => return Err(e),
        },
    };
    let list = QuotaUsageList::new(tree_order(list.items));
    Ok((Quotas { list, resource }, note))
}

impl Render for Quotas {
    fn human(&self, how: &Human) -> String {
        if self.list.items.is_empty() {
            return String::new();
        }
        let r = self.resource.as_str();
        let weights = self
            .list
            .items
            .iter()
            .any(|q| q.fair_share_weight.is_some());
        let mut headers = vec!["name".to_string()];
        let figures = ["min", "max", "used", "borrowed", "lent"];
        if how.wide {
            headers.extend(figures.iter().map(|f| f.to_string()));
            headers.push("effective min".into());
        } else {
            headers.extend(figures.iter().map(|f| format!("{f}({r})")));
        }
        if weights {
            headers.push("weight".into());
        }
        headers.extend(["pending".into(), "admitted".into()]);
        if how.bars {
            headers.push(format!("usage({r})"));
        }
        let mut t = Table::new(&headers);
        for (q, prefix) in tree(&self.list.items) {
            let cell =
                |m: &BTreeMap<String, String>| if how.wide { amounts(m) } else { amount(m, r) };
            let mut row = vec![
                format!("{prefix}{}", q.metadata.name),
                cell(&q.min),
                cell(&q.max),
                cell(&q.used),
                cell(&q.borrowed),
                cell(&q.lent),
            ];
            if how.wide {
                row.push(amounts(&q.effective_min));
            }
            if weights {
                row.push(q.fair_share_weight.clone().unwrap_or_else(|| "-".into()));
            }
            row.push(q.pending.to_string());
            row.push(q.admitted.to_string());
            if how.bars {
                row.push(bar(
                    r,
                    q.used.get(r).map(String::as_str),
                    q.max.get(r).map(String::as_str),
                ));
            }
            t.row(row);
        }
        t.render()
    }

    fn names(&self) -> Vec<String> {
        self.list
            .items
            .iter()
            .map(|q| format!("elasticquota.scheduling.sigs.k8s.io/{}", q.metadata.name))
            .collect()
    }

    fn empty_note(&self) -> Option<String> {
        Some("No quotas.".into())
    }
}
