//! Fair sharing against its targets: under each fair-sharing parent, each
//! child's part of what the children borrow beyond their mins while at
//! least two of them borrow (contention: when weights decide), against its
//! weight's part among those borrowing. Over a whole run every job runs in
//! the end, so totals alone would show each team's demand, not its share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::display;
use crate::cluster::Cluster;
use crate::engine::UsageSeries;

/// A fair-sharing parent's children.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FairShareGroup {
    /// The parent.
    pub parent: String,
    /// Its children.
    pub children: Vec<FairShare>,
}

/// A child's share of what its siblings borrowed, against its weight's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FairShare {
    /// The child quota.
    pub quota: String,
    /// Its weight.
    pub weight: f64,
    /// Its weight over all the siblings' weights.
    pub target: f64,
    /// Per resource: its mean part of what the borrowing siblings borrowed,
    /// over the time it borrowed with at least one other.
    pub actual: BTreeMap<String, f64>,
    /// Per resource: its weight over the borrowing siblings' weights, over
    /// the same time — what `actual` should be.
    pub target_contended: BTreeMap<String, f64>,
    /// Per resource: the part of the run it borrowed with another.
    pub contended: BTreeMap<String, f64>,
    /// Per resource: mean borrowed beyond its min over the run.
    pub mean_borrowed: BTreeMap<String, f64>,
}

#[derive(Default)]
struct Acc {
    actual: f64,
    target: f64,
    buckets: usize,
}

/// The shares of every fair-sharing parent's children (`series` node `i + 1`
/// is quota `i` of the cluster).
pub(super) fn shares(
    cluster: &Cluster,
    resources: &[String],
    series: Option<&UsageSeries>,
) -> Vec<FairShareGroup> {
    let Some(series) = series else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for parent in cluster.quotas.iter().filter(|q| q.fair_sharing) {
        let children: Vec<(usize, &koord_queue_core::QuotaDef)> = cluster
            .quotas
            .iter()
            .enumerate()
            .filter(|(_, q)| q.parent.as_deref() == Some(parent.name.as_str()))
            .collect();
        let all_weights: f64 = children.iter().map(|(_, q)| q.weight_milli as f64).sum();
        // Per child and resource.
        let mut acc: Vec<Vec<Acc>> = children
            .iter()
            .map(|_| resources.iter().map(|_| Acc::default()).collect())
            .collect();
        for (k, _) in resources.iter().enumerate() {
            for b in 0..series.buckets {
                // What each child borrowed in bucket b (its mean beyond its min).
                let borrowed: Vec<f64> = children
                    .iter()
                    .map(|(i, _)| {
                        series.nodes.get(i + 1).map_or(0.0, |n| {
                            let mean = n.mean.get(b).and_then(|row| row.get(k)).copied();
                            let min = n.min_effective.get(k).copied().unwrap_or(0) as f64;
                            (mean.unwrap_or(0.0) - min).max(0.0)
                        })
                    })
                    .collect();
                let active: Vec<usize> = (0..children.len())
                    .filter(|c| borrowed[*c] > 1e-9)
                    .collect();
                if active.len() < 2 {
                    continue;
                }
                let total: f64 = active.iter().map(|c| borrowed[*c]).sum();
                let weights: f64 = active
                    .iter()
                    .map(|c| children[*c].1.weight_milli as f64)
                    .sum();
                for c in active {
                    let a = &mut acc[c][k];
                    a.actual += borrowed[c] / total;
                    a.target += children[c].1.weight_milli as f64 / weights;
                    a.buckets += 1;
                }
            }
        }
        let per_resource = |c: usize, f: &dyn Fn(&Acc) -> f64| -> BTreeMap<String, f64> {
            resources
                .iter()
                .zip(&acc[c])
                .filter(|(_, a)| a.buckets > 0)
                .map(|(r, a)| (r.clone(), f(a)))
                .collect()
        };
        let children = children
            .iter()
            .enumerate()
            .map(|(c, (i, q))| FairShare {
                quota: q.name.clone(),
                weight: q.weight_milli as f64 / 1000.0,
                target: if all_weights > 0.0 {
                    q.weight_milli as f64 / all_weights
                } else {
                    0.0
                },
                actual: per_resource(c, &|a| a.actual / a.buckets as f64),
                target_contended: per_resource(c, &|a| a.target / a.buckets as f64),
                contended: per_resource(c, &|a| a.buckets as f64 / series.buckets as f64),
                mean_borrowed: series
                    .nodes
                    .get(i + 1)
                    .map(|n| {
                        resources
                            .iter()
                            .zip(&n.borrowed)
                            .map(|(r, v)| (r.clone(), display(r, *v)))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        out.push(FairShareGroup {
            parent: parent.name.clone(),
            children,
        });
    }
    out
}
