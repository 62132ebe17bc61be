//! The fair-sharing runs' results: the JSON, the SVG plot of the shares
//! over time (one panel per run) and the summary for the terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::plan::FairnessConfig;
use super::run::RunRecord;
use super::shares::{self, Figures};
use crate::plot::{self, Line, Panel};

/// Goal: each child's share within this of its target (5 points).
pub const SHARE_GOAL: f64 = 0.05;
/// Goal: the parent's utilization at least this.
pub const UTILIZATION_GOAL: f64 = 0.95;

const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

fn mode(fair: bool) -> &'static str {
    if fair { "on" } else { "off" }
}

/// The steady window of a run: from the end of the warm-up to the end of
/// the submissions (after that the backlogs drain).
pub fn steady_window(config: &FairnessConfig, record: &RunRecord) -> (f64, f64) {
    (config.warmup.as_secs_f64(), record.submitted_until)
}

/// The figures of a run's steady window.
pub fn figures(config: &FairnessConfig, record: &RunRecord) -> Figures {
    let (from, to) = steady_window(config, record);
    let mins: Vec<f64> = config
        .children
        .iter()
        .map(|c| f64::from(c.min_cpu))
        .collect();
    let weights: Vec<f64> = config.children.iter().map(|c| c.weight).collect();
    shares::figures(
        shares::window(&record.samples, from, to),
        &mins,
        &weights,
        &config.target_shares(),
        f64::from(config.parent_cpu),
    )
}

/// The goals of a run, checked; `every_tenant_waiting_throughout` says the
/// run measured what it should (every child wanted more than it got).
pub fn goals(config: &FairnessConfig, figures: &Figures, record: &RunRecord) -> Value {
    json!({
        "every_tenant_waiting_throughout": figures.samples > 0 && min_waiting(config, record).iter().all(|w| *w > 0),
        "shares_within_5_points_of_target": figures.samples > 0 && figures.max_deviation <= SHARE_GOAL,
        "utilization_at_least_95_percent": figures.utilization >= UTILIZATION_GOAL,
        "no_quota_violations": record.running_violations == 0 && record.unit_violations == 0,
        "every_job_finished": record.drained,
    })
}

/// Whether a run measured what it should: every job finished, no quota
/// exceeded, and every tenant waiting with more than it ran throughout the
/// window. The list of what failed.
pub fn failures(config: &FairnessConfig, record: &RunRecord) -> Vec<String> {
    let name = format!("fair sharing {}", mode(record.fair_sharing));
    let mut out = Vec::new();
    if record.running_violations > 0 || record.unit_violations > 0 {
        out.push(format!(
            "{name}: quota violations: {} by running jobs, {} by QueueUnits",
            record.running_violations, record.unit_violations
        ));
    }
    if !record.drained {
        out.push(format!(
            "{name}: not every job finished within {:?} of the end of the submissions ({} of {}, units succeeded {})",
            config.drain,
            record.finished.iter().sum::<usize>(),
            record.created.iter().sum::<usize>(),
            record.units_succeeded
        ));
    }
    for (c, exhausted) in config.children.iter().zip(&record.plan_exhausted) {
        if *exhausted {
            out.push(format!("{name}: {} ran out of planned jobs", c.name));
        }
    }
    if figures(config, record).samples == 0 {
        out.push(format!("{name}: no sample in the steady window"));
    }
    out
}

fn min_waiting(config: &FairnessConfig, record: &RunRecord) -> Vec<usize> {
    let (from, to) = steady_window(config, record);
    let window = shares::window(&record.samples, from, to);
    (0..config.children.len())
        .map(|c| {
            window
                .iter()
                .map(|s| s.waiting.get(c).copied().unwrap_or(0))
                .min()
                .unwrap_or(0)
        })
        .collect()
}

/// The JSON of one run.
pub fn run_json(config: &FairnessConfig, record: &RunRecord) -> Value {
    let f = figures(config, record);
    let (from, to) = steady_window(config, record);
    let targets = config.target_shares();
    let waiting = min_waiting(config, record);
    let borrowable = f64::from(config.borrowable_cpu());
    let siblings: Vec<Value> = config
        .children
        .iter()
        .enumerate()
        .map(|(k, c)| {
            json!({
                "name": c.name,
                "weight": c.weight,
                "min_cpu": c.min_cpu,
                "target_share": targets[k],
                "share_of_borrowed": round(f.shares[k], 4),
                "weighted_share": round(f.shares[k] / c.weight, 4),
                "mean_running_cpu": round(f.mean_used_cpu[k], 2),
                "mean_borrowed_cpu": round(f.mean_borrowed_cpu[k], 2),
                "mean_borrowed_of_borrowable": round(f.mean_borrowed_cpu[k] / borrowable, 4),
                "jobs_created": record.created.get(k),
                "jobs_finished": record.finished.get(k),
                "jobs_finished_in_window": record.finished_in_window.get(k),
                "sent_back_after_release": record.sent_back.get(k),
                "min_waiting_jobs_in_window": waiting.get(k),
                "ran_out_of_planned_jobs": record.plan_exhausted.get(k),
            })
        })
        .collect();
    let window_jobs: usize = record.finished_in_window.iter().sum();
    let mut running: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut waiting_series: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (k, c) in config.children.iter().enumerate() {
        running.insert(
            c.name.clone(),
            record
                .samples
                .iter()
                .map(|s| s.used_m.get(k).copied().unwrap_or(0) as f64 / 1000.0)
                .collect(),
        );
        waiting_series.insert(
            c.name.clone(),
            record
                .samples
                .iter()
                .map(|s| s.waiting.get(k).copied().unwrap_or(0))
                .collect(),
        );
    }
    json!({
        "fair_sharing": mode(record.fair_sharing),
        "load_average_at_start": record.load_before,
        "steady_window_s": [round(from, 1), round(to, 1)],
        "samples_in_window": f.samples,
        "siblings": siblings,
        "jain_index_of_weighted_shares": f.jain_weighted.map(|j| round(j, 4)),
        "utilization_of_parent": round(f.utilization, 4),
        "max_share_deviation_points": round(f.max_deviation * 100.0, 2),
        "jobs_created": record.created.iter().sum::<usize>(),
        "jobs_finished": record.finished.iter().sum::<usize>(),
        "jobs_finished_in_window": window_jobs,
        "throughput_in_window_jobs_per_s": if to > from { round(window_jobs as f64 / (to - from), 2) } else { 0.0 },
        "units_succeeded": record.units_succeeded,
        "wall_seconds": round(record.wall_seconds, 1),
        "quota_violations": {
            "running_jobs": record.running_violations,
            "queue_units_beyond_finished_jobs": record.unit_violations,
            "examples": record.violation_examples.iter().take(20).collect::<Vec<_>>(),
        },
        "unit_phase_entries": record.phase_entries,
        "scheduler_metrics": record.scheduler_metrics,
        "runtime_write_errors": { "count": record.runtime_errors.0, "last": record.runtime_errors.1 },
        "goals": goals(config, &f, record),
        "samples": {
            "every_ms": u64::try_from(config.sample_every.as_millis()).unwrap_or(0),
            "t_s": record.samples.iter().map(|s| round(s.t, 2)).collect::<Vec<_>>(),
            "running_cpu": running,
            "waiting_jobs": waiting_series,
        },
    })
}

/// The settings for the JSON: the scenario's, its derived figures.
pub fn config_json(config: &FairnessConfig) -> Value {
    let mut v = serde_json::to_value(config).unwrap_or(Value::Null);
    v["parent"] = json!(super::plan::PARENT);
    v["children_max_cpu"] = json!(crate::shape::LEAF_MAX_CPU);
    v["borrowable_cpu"] = json!(config.borrowable_cpu());
    v["target_shares"] = json!(config.target_shares());
    v["jobs_planned_per_child"] = json!(config.jobs_per_child());
    v
}

/// The plot: per run, each child's share of the borrowed CPU over a moving
/// window, the targets, the parent's utilization and the steady window.
pub fn svg(config: &FairnessConfig, records: &[RunRecord]) -> String {
    let mins: Vec<f64> = config
        .children
        .iter()
        .map(|c| f64::from(c.min_cpu))
        .collect();
    let x_max = records
        .iter()
        .map(|r| r.submitted_until)
        .fold(0.0f64, f64::max);
    let targets = config.target_shares();
    let span = config.plot_window.as_secs_f64();
    let panels: Vec<Panel> = records
        .iter()
        .map(|r| {
            let f = figures(config, r);
            let over = shares::shares_over_time(&r.samples, &mins, span);
            let mut lines: Vec<Line> = config
                .children
                .iter()
                .enumerate()
                .map(|(k, c)| Line {
                    label: format!("{} (w {}) {:.1} %", c.name, c.weight, f.shares[k] * 100.0),
                    color: COLORS[k % COLORS.len()],
                    points: over.iter().map(|(t, s)| (*t, s[k] * 100.0)).collect(),
                    dashed: false,
                })
                .collect();
            // One target line per distinct target.
            let mut seen: Vec<f64> = Vec::new();
            for t in &targets {
                if seen.iter().any(|s| (s - t).abs() < 1e-9) {
                    continue;
                }
                seen.push(*t);
                lines.push(Line {
                    label: format!("target {:.0} %", t * 100.0),
                    color: "#555",
                    points: vec![(0.0, t * 100.0), (x_max, t * 100.0)],
                    dashed: true,
                });
            }
            lines.push(Line {
                label: format!("parent used {:.1} %", f.utilization * 100.0),
                color: "#aaa",
                points: r
                    .samples
                    .iter()
                    .map(|s| {
                        let used: i64 = s.used_m.iter().sum();
                        (
                            s.t,
                            used as f64 / 10.0 / f64::from(config.parent_cpu.max(1)),
                        )
                    })
                    .collect(),
                dashed: false,
            });
            let (from, to) = steady_window(config, r);
            lines.push(Line {
                label: "steady window".into(),
                color: "#bbb",
                points: vec![(from, 0.0), (from, 100.0), (to, 100.0), (to, 0.0)],
                dashed: true,
            });
            Panel {
                title: format!(
                    "fair sharing {}: share of the borrowed CPU ({:.0} s moving window); Jain {}",
                    mode(r.fair_sharing),
                    span,
                    f.jain_weighted
                        .map(|j| format!("{j:.3}"))
                        .unwrap_or_else(|| "n/a".into())
                ),
                y_label: "% of borrowed CPU".into(),
                lines,
            }
        })
        .collect();
    let weights: Vec<String> = config
        .children
        .iter()
        .map(|c| c.weight.to_string())
        .collect();
    let subtitle = format!(
        "parent max {} CPU, {} children (min {} CPU each, {} borrowable), weights {}; jobs {}–{} CPU × {}–{} s, {} waiting per tenant",
        config.parent_cpu,
        config.children.len(),
        config.children.first().map_or(0, |c| c.min_cpu),
        config.borrowable_cpu(),
        weights.join(":"),
        config.job_cpu.0,
        config.job_cpu.1,
        config.runtime_min.as_secs(),
        config.runtime_max.as_secs(),
        config.backlog
    );
    plot::render(
        "Koord-Queue: weighted fair sharing of borrowed capacity",
        &subtitle,
        &panels,
        x_max,
    )
}

/// The summary for the terminal.
pub fn text(config: &FairnessConfig, records: &[RunRecord]) -> String {
    let mut out = String::new();
    for r in records {
        let f = figures(config, r);
        let (from, to) = steady_window(config, r);
        let _ = writeln!(
            out,
            "fair sharing {}: window {from:.0}–{to:.0} s ({} samples)",
            mode(r.fair_sharing),
            f.samples
        );
        for (k, c) in config.children.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:<8} weight {:<3} share of borrowed {:>5.1} % (target {:>4.1} %), running {:>5.1} CPU, finished {}",
                c.name,
                c.weight,
                f.shares[k] * 100.0,
                config.target_shares()[k] * 100.0,
                f.mean_used_cpu[k],
                r.finished.get(k).copied().unwrap_or(0),
            );
        }
        let _ = writeln!(
            out,
            "  Jain (weighted) {}, max deviation {:.1} points, utilization {:.1} %, jobs finished {}, quota violations {} + {}",
            f.jain_weighted
                .map(|j| format!("{j:.3}"))
                .unwrap_or_else(|| "n/a".into()),
            f.max_deviation * 100.0,
            f.utilization * 100.0,
            r.finished.iter().sum::<usize>(),
            r.running_violations,
            r.unit_violations
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::shares::Sample;

    fn record(fair: bool, cpu: [f64; 3]) -> RunRecord {
        let samples = (0..=300)
            .map(|k| {
                let t = k as f64 * 0.5;
                // Warm-up: one child alone.
                let used = if t < 30.0 { [110.0, 5.0, 5.0] } else { cpu };
                Sample {
                    t,
                    used_m: used.iter().map(|c| (c * 1000.0) as i64).collect(),
                    waiting: vec![20; 3],
                }
            })
            .collect();
        RunRecord {
            fair_sharing: fair,
            load_before: Some([0.5, 0.5, 0.5]),
            samples,
            submitted_until: 120.0,
            wall_seconds: 130.0,
            created: vec![400; 3],
            finished: vec![400; 3],
            finished_in_window: vec![300; 3],
            sent_back: vec![0; 3],
            plan_exhausted: vec![false; 3],
            units_succeeded: 1200,
            drained: true,
            running_violations: 0,
            unit_violations: 0,
            violation_examples: Vec::new(),
            phase_entries: BTreeMap::new(),
            scheduler_metrics: BTreeMap::new(),
            runtime_errors: (0, None),
        }
    }

    #[test]
    fn a_fair_run_meets_its_goals_and_the_warm_up_does_not_count() {
        let config = FairnessConfig::default();
        let r = record(true, [32.5, 32.5, 55.0]);
        let f = figures(&config, &r);
        // 30 … 120 s every 0.5 s.
        assert_eq!(f.samples, 181);
        assert!(f.max_deviation < 1e-9, "{:?}", f.shares);
        let v = run_json(&config, &r);
        assert_eq!(v["goals"]["shares_within_5_points_of_target"], true);
        assert_eq!(v["goals"]["utilization_at_least_95_percent"], true);
        assert_eq!(v["goals"]["every_tenant_waiting_throughout"], true);
        assert_eq!(v["jain_index_of_weighted_shares"], 1.0);
        assert_eq!(v["siblings"][2]["share_of_borrowed"], 0.5);
        assert_eq!(v["siblings"][0]["min_waiting_jobs_in_window"], 20);
        assert_eq!(v["samples"]["t_s"].as_array().map(Vec::len), Some(301));
        assert!(failures(&config, &r).is_empty());
    }

    #[test]
    fn an_unfair_run_misses_the_share_goal_and_a_violation_fails() {
        let config = FairnessConfig::default();
        let mut r = record(false, [100.0, 10.0, 10.0]);
        // One sample in the window without a waiting job of fair-b.
        r.samples[100].waiting[1] = 0;
        let v = run_json(&config, &r);
        assert_eq!(v["goals"]["every_tenant_waiting_throughout"], false);
        assert_eq!(v["goals"]["shares_within_5_points_of_target"], false);
        assert_eq!(v["max_share_deviation_points"], 75.0);
        assert!(failures(&config, &r).is_empty(), "unfair is a result");
        r.unit_violations = 1;
        r.plan_exhausted[1] = true;
        assert_eq!(failures(&config, &r).len(), 2);
    }

    #[test]
    fn the_plot_has_a_panel_per_run() {
        let config = FairnessConfig::default();
        let svg = svg(
            &config,
            &[
                record(false, [100.0, 10.0, 10.0]),
                record(true, [32.5, 32.5, 55.0]),
            ],
        );
        assert!(svg.contains("fair sharing off: share"));
        assert!(svg.contains("fair sharing on: share"));
        assert_eq!(svg.matches(">target 25 %<").count(), 2);
        assert_eq!(svg.matches(">target 50 %<").count(), 2);
        // 3 children + 2 targets + utilization + window, per panel.
        assert_eq!(svg.matches("<polyline").count(), 14);
    }
}
