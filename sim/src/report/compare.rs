//! Two configurations on one trace: both reports and, for every group and
//! figure, the difference — notable ones flagged so that the HTML report
//! highlights them.

use serde::{Deserialize, Serialize};

use super::{Group, Report};

/// Relative change from which a time difference is notable…
const NOTABLE_RELATIVE: f64 = 0.10;
/// …when it is also at least this many seconds.
const NOTABLE_SECONDS: f64 = 1.0;

/// A report with the name of its configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Named {
    /// The configuration (its file).
    pub name: String,
    /// Its report.
    pub report: Report,
}

/// Both runs and their differences.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The first configuration.
    pub a: Named,
    /// The second.
    pub b: Named,
    /// Every figure of every group, A against B.
    pub differences: Vec<Difference>,
}

/// One figure in both runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// `total`, `class`, `queue` or `quota`.
    pub scope: String,
    /// The group's name (empty for the total).
    pub name: String,
    /// The figure: `mean`, `p50`, `p90`, `p99` (seconds to release),
    /// `never_released`, `sent_back`.
    pub figure: String,
    /// Its value with A.
    pub a: f64,
    /// Its value with B.
    pub b: f64,
    /// `(b - a) / a` (0 when both are 0; 1 when only B has any).
    pub change: f64,
    /// Whether the difference is large enough to point out.
    pub notable: bool,
}

fn difference(scope: &str, name: &str, figure: &str, a: f64, b: f64, seconds: bool) -> Difference {
    let change = if a == 0.0 {
        if b == 0.0 { 0.0 } else { 1.0 }
    } else {
        (b - a) / a
    };
    let notable = if seconds {
        change.abs() >= NOTABLE_RELATIVE && (b - a).abs() >= NOTABLE_SECONDS
    } else {
        a != b
    };
    Difference {
        scope: scope.to_string(),
        name: name.to_string(),
        figure: figure.to_string(),
        a,
        b,
        change,
        notable,
    }
}

fn group_differences(scope: &str, a: &[Group], b: &[Group], out: &mut Vec<Difference>) {
    let empty = Group::default();
    let mut names: Vec<&str> = a.iter().chain(b).map(|g| g.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let ga = a.iter().find(|g| g.name == name).unwrap_or(&empty);
        let gb = b.iter().find(|g| g.name == name).unwrap_or(&empty);
        let (ta, tb) = (&ga.time_to_release, &gb.time_to_release);
        for (figure, va, vb) in [
            ("mean", ta.mean, tb.mean),
            ("p50", ta.p50, tb.p50),
            ("p90", ta.p90, tb.p90),
            ("p99", ta.p99, tb.p99),
        ] {
            out.push(difference(scope, name, figure, va, vb, true));
        }
        out.push(difference(
            scope,
            name,
            "never_released",
            ga.never_released as f64,
            gb.never_released as f64,
            false,
        ));
        let sent = |g: &Group| (g.reclaimed + g.preempted + g.fair_share_reclaimed) as f64;
        out.push(difference(
            scope,
            name,
            "sent_back",
            sent(ga),
            sent(gb),
            false,
        ));
    }
}

/// Compares report `a` (of configuration `a_name`) with `b`.
pub fn compare(a_name: &str, a: Report, b_name: &str, b: Report) -> Comparison {
    let mut differences = Vec::new();
    let total = |r: &Report| Group {
        name: String::new(),
        jobs: r.summary.jobs,
        released: r.summary.released,
        never_released: r.summary.never_released,
        time_to_release: r.summary.time_to_release.clone(),
        observed_time_to_release: None,
        reclaimed: r.summary.reclaimed,
        preempted: r.summary.preempted,
        fair_share_reclaimed: r.summary.fair_share_reclaimed,
    };
    group_differences("total", &[total(&a)], &[total(&b)], &mut differences);
    group_differences("class", &a.by_class, &b.by_class, &mut differences);
    group_differences("queue", &a.by_queue, &b.by_queue, &mut differences);
    group_differences("quota", &a.by_quota, &b.by_quota, &mut differences);
    Comparison {
        a: Named {
            name: a_name.to_string(),
            report: a,
        },
        b: Named {
            name: b_name.to_string(),
            report: b,
        },
        differences,
    }
}

#[cfg(test)]
mod tests {
    use super::{compare, difference};
    use crate::report::{Dist, Group, Report};

    #[test]
    fn notable_differences_are_flagged() {
        assert!(difference("class", "x", "mean", 10.0, 20.0, true).notable);
        // 50 % of half a second is not worth pointing at.
        assert!(!difference("class", "x", "mean", 0.5, 0.75, true).notable);
        assert!(!difference("class", "x", "never_released", 2.0, 2.0, false).notable);
        let group = |mean| Group {
            name: "q".into(),
            jobs: 1,
            released: 1,
            time_to_release: Dist {
                count: 1,
                mean,
                ..Dist::default()
            },
            ..Group::default()
        };
        let (mut a, mut b) = (Report::default(), Report::default());
        a.by_queue = vec![group(4.0)];
        b.by_queue = vec![group(2.0)];
        let c = compare("A", a, "B", b);
        let d = c
            .differences
            .iter()
            .find(|d| d.scope == "queue" && d.figure == "mean")
            .map(|d| (d.a, d.b, d.change, d.notable));
        assert_eq!(d, Some((4.0, 2.0, -0.5, true)));
    }
}
