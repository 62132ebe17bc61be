//! The comparison (issue 22): Koord-Queue's `run` phase and the Kueue
//! phase of one benchmark run, the same measures for both, ours / Kueue's
//! ratios against the targets, and a side-by-side plot.

use serde_json::{Value, json};

use super::super::output;
use super::super::phase::{PhaseKind, PhaseResult};
use super::super::plot::{self, Line, Panel};
use super::super::report;
use super::super::shape::{CLASSES, Shape};

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// `a / b`, rounded; `None` when `b` is not positive.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(round(a / b, 3)),
        _ => None,
    }
}

/// The measures compared, from one phase's JSON (`output::phase_json`).
/// `queue_cpu_seconds` and `queue_peak_rss_mib` are the queue system's:
/// for Koord-Queue its webhook's and scheduler's processes (the sum of
/// their peaks, at most more than their peak together) or, when they ran
/// in the benchmark's process, their threads' CPU and the whole process's
/// RSS (an upper bound); for Kueue its manager process.
pub fn measures(phase: &Value, kind: PhaseKind) -> Value {
    let res = &phase["resources"];
    let jobs = phase["jobs"].as_f64().unwrap_or(0.0).max(1.0);
    let f = |v: &Value| v.as_f64();
    let (queue_cpu, queue_rss, rss_note) = if kind == PhaseKind::Kueue {
        (
            f(&res["kueue_cpu_seconds"]),
            f(&res["kueue_peak_rss_mib"]),
            "the Kueue manager process",
        )
    } else {
        let cpu = Some(
            f(&res["scheduler_cpu_seconds"]).unwrap_or(0.0)
                + f(&res["webhook_cpu_seconds"]).unwrap_or(0.0),
        );
        match (
            f(&res["scheduler_peak_rss_mib"]),
            f(&res["webhook_peak_rss_mib"]),
        ) {
            (Some(scheduler), Some(webhook)) => (
                cpu,
                Some(round(scheduler + webhook, 1)),
                "the webhook and the scheduler processes (sum of their peaks)",
            ),
            _ => (
                cpu,
                f(&res["process_peak_rss_mib"]),
                "the whole benchmark process (webhook + scheduler + job runtime + checkers): an upper bound",
            ),
        }
    };
    let apiserver_cpu = f(&res["kube_apiserver_cpu_seconds"]);
    let classes: serde_json::Map<String, Value> = CLASSES
        .iter()
        .map(|c| {
            let t = &phase["time_to_release"][c.name];
            (
                c.name.to_string(),
                json!({ "mean_s": t["mean_s"], "p50_s": t["p50_s"], "p99_s": t["p99_s"] }),
            )
        })
        .collect();
    let evictions = if kind == PhaseKind::Kueue {
        phase["unit_phase_entries"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.starts_with("Evicted:"))
                    .filter_map(|(_, v)| v.as_u64())
                    .sum::<u64>()
            })
            .unwrap_or(0)
    } else {
        phase["reclaims"]["units_entered_timeout_backoff"]
            .as_u64()
            .unwrap_or(0)
    };
    json!({
        "wall_seconds": phase["wall_seconds"],
        "throughput_jobs_per_s": phase["throughput_jobs_per_s"],
        "time_to_release": classes,
        "apiserver_requests_per_job": phase["api_requests"]["apiserver_per_job"],
        "apiserver_requests_by_kind": phase["api_requests"]["apiserver_by_kind"],
        "kube_apiserver_cpu_seconds": apiserver_cpu,
        "kube_apiserver_cpu_ms_per_job": apiserver_cpu.map(|s| round(1000.0 * s / jobs, 3)),
        "etcd_cpu_seconds": res["etcd_cpu_seconds"],
        "queue_system_cpu_seconds": queue_cpu.map(|s| round(s, 2)),
        "queue_system_peak_rss_mib": queue_rss,
        "queue_system_peak_rss_of": rss_note,
        "quota_violations": phase["quota_violations"],
        "quota_violations_by_check": phase["quota_violations_by_check"],
        "evictions": evictions,
        "jobs_suspended_again": phase["reclaims"]["jobs_suspended_again"],
        "kube_apiserver_peak_rss_mib": res["kube_apiserver_peak_rss_mib"],
    })
}

/// Ours / Kueue's for each compared figure, and the targets.
pub fn ratios(ours: &Value, kueue: &Value) -> Value {
    let r = |path: &[&str]| {
        let get = |v: &Value| path.iter().fold(v, |v, k| &v[*k]).as_f64();
        ratio(get(ours), get(kueue))
    };
    let wall = r(&["wall_seconds"]);
    let apiserver_cpu = r(&["kube_apiserver_cpu_ms_per_job"]);
    let rss = r(&["queue_system_peak_rss_mib"]);
    let classes: serde_json::Map<String, Value> = CLASSES
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                json!({
                    "mean": r(&["time_to_release", c.name, "mean_s"]),
                    "p50": r(&["time_to_release", c.name, "p50_s"]),
                    "p99": r(&["time_to_release", c.name, "p99_s"]),
                }),
            )
        })
        .collect();
    let met = |v: Option<f64>, target: f64| v.map(|v| v <= target);
    let class_means_met = CLASSES
        .iter()
        .all(|c| classes[c.name]["mean"].as_f64().is_some_and(|v| v <= 1.0));
    json!({
        "definition": "ours / Kueue's, measured in the same run on the same machine",
        "wall_seconds": wall,
        "throughput_jobs_per_s": r(&["throughput_jobs_per_s"]),
        "time_to_release": classes,
        "apiserver_requests_per_job": r(&["apiserver_requests_per_job"]),
        "kube_apiserver_cpu_per_job": apiserver_cpu,
        "etcd_cpu_seconds": r(&["etcd_cpu_seconds"]),
        "queue_system_cpu_seconds": r(&["queue_system_cpu_seconds"]),
        "queue_system_peak_rss": rss,
        "targets": {
            "wall_seconds_at_most_0.7": met(wall, 0.7),
            "kube_apiserver_cpu_per_job_at_most_0.6": met(apiserver_cpu, 0.6),
            "every_class_mean_time_to_release_at_most_1": class_means_met,
            "queue_system_peak_rss_at_most_0.5": met(rss, 0.5),
        },
    })
}

/// The comparison's JSON: both phases in full, the compared measures and
/// the ratios.
pub fn comparison_json(shape: &Shape, ours: &PhaseResult, kueue: &PhaseResult) -> Value {
    let (ours_phase, kueue_phase) = (
        output::phase_json(shape, ours),
        output::phase_json(shape, kueue),
    );
    let (mut a, mut b) = (
        measures(&ours_phase, ours.kind),
        measures(&kueue_phase, kueue.kind),
    );
    let finished = |r: &PhaseResult| r.timelines.iter().filter(|j| j.finished.is_some()).count();
    a["jobs_finished"] = json!(finished(ours));
    b["jobs_finished"] = json!(finished(kueue));
    json!({
        "ratios": ratios(&a, &b),
        "koord_queue": a,
        "kueue": b,
        "phases": { "run": ours_phase, "kueue": kueue_phase },
    })
}

/// The side-by-side plot: jobs finished over time, pending jobs per class,
/// and the CPU of running jobs at the root, each Koord-Queue against Kueue.
pub fn svg(shape: &Shape, ours: &PhaseResult, kueue: &PhaseResult, subtitle: &str) -> String {
    let x_max = ours.wall_seconds.max(kueue.wall_seconds).max(1.0);
    let systems = [
        (ours, "koord-queue", "#1f77b4", false),
        (kueue, "kueue", "#d62728", true),
    ];
    let mut panels = Vec::new();
    panels.push(Panel {
        title: "Jobs finished".into(),
        y_label: "jobs".into(),
        lines: systems
            .iter()
            .map(|(r, label, color, dashed)| {
                let s = report::series(shape, &r.timelines, None, r.wall_seconds, 500);
                Line {
                    label: format!("{label} ({:.1} s)", r.wall_seconds),
                    color,
                    points: s.iter().map(|(t, k)| (*t, k.finished as f64)).collect(),
                    dashed: *dashed,
                }
            })
            .collect(),
    });
    for (c, class) in CLASSES.iter().enumerate() {
        panels.push(Panel {
            title: format!(
                "{} jobs pending (created, not released): {} CPU, priority {}",
                class.name, class.cpu, class.priority
            ),
            y_label: "jobs".into(),
            lines: systems
                .iter()
                .map(|(r, label, color, dashed)| {
                    let s = report::series(shape, &r.timelines, Some(c), r.wall_seconds, 500);
                    Line {
                        label: (*label).to_string(),
                        color,
                        points: s.iter().map(|(t, k)| (*t, k.pending as f64)).collect(),
                        dashed: *dashed,
                    }
                })
                .collect(),
        });
    }
    let mut lines: Vec<Line> = systems
        .iter()
        .filter_map(|(r, label, color, dashed)| {
            let usage = r.running_usage.as_ref()?;
            let mut points = Vec::new();
            let mut last = 0.0;
            let step = usage.root_timeline.len().div_ceil(3000).max(1);
            for (t, v) in usage.root_timeline.iter().step_by(step) {
                points.push((*t, last));
                last = *v as f64 / 1000.0;
                points.push((*t, last));
            }
            Some(Line {
                label: (*label).to_string(),
                color,
                points,
                dashed: *dashed,
            })
        })
        .collect();
    lines.push(Line {
        label: "capacity".into(),
        color: "#555",
        points: vec![
            (0.0, f64::from(shape.root_cpu)),
            (x_max, f64::from(shape.root_cpu)),
        ],
        dashed: true,
    });
    panels.push(Panel {
        title: "CPU of running (released, unfinished) jobs at the root".into(),
        y_label: "CPU".into(),
        lines,
    });
    plot::render(
        &format!(
            "koord-queue vs Kueue {}, {} jobs, same machine and control plane",
            super::KUEUE_VERSION,
            shape.jobs.len()
        ),
        subtitle,
        &panels,
        x_max,
    )
}

/// The printed summary.
pub fn text(json: &Value) -> String {
    let (a, b, r) = (&json["koord_queue"], &json["kueue"], &json["ratios"]);
    let mut out = String::new();
    let row = |name: &str, x: &Value, y: &Value, q: &Value| {
        format!("  {name:<34} {x:>12} {y:>12} {q:>8}\n")
    };
    out.push_str(&format!(
        "  {:<34} {:>12} {:>12} {:>8}\n",
        "", "koord-queue", "kueue", "ratio"
    ));
    out.push_str(&row(
        "wall s",
        &a["wall_seconds"],
        &b["wall_seconds"],
        &r["wall_seconds"],
    ));
    for c in &CLASSES {
        out.push_str(&row(
            &format!("{} mean time to release s", c.name),
            &a["time_to_release"][c.name]["mean_s"],
            &b["time_to_release"][c.name]["mean_s"],
            &r["time_to_release"][c.name]["mean"],
        ));
    }
    out.push_str(&row(
        "apiserver requests / job",
        &a["apiserver_requests_per_job"],
        &b["apiserver_requests_per_job"],
        &r["apiserver_requests_per_job"],
    ));
    out.push_str(&row(
        "kube-apiserver CPU ms / job",
        &a["kube_apiserver_cpu_ms_per_job"],
        &b["kube_apiserver_cpu_ms_per_job"],
        &r["kube_apiserver_cpu_per_job"],
    ));
    out.push_str(&row(
        "queue system CPU s",
        &a["queue_system_cpu_seconds"],
        &b["queue_system_cpu_seconds"],
        &r["queue_system_cpu_seconds"],
    ));
    out.push_str(&row(
        "queue system peak RSS MiB",
        &a["queue_system_peak_rss_mib"],
        &b["queue_system_peak_rss_mib"],
        &r["queue_system_peak_rss"],
    ));
    out.push_str(&row(
        "quota violations",
        &a["quota_violations"],
        &b["quota_violations"],
        &Value::Null,
    ));
    out.push_str(&format!("  targets: {}\n", r["targets"]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(wall: f64, large_mean: f64, rss: f64) -> Value {
        let ttr = |m: f64| json!({ "count": 10, "mean_s": m, "p50_s": m, "p99_s": m });
        json!({
            "jobs": 100, "wall_seconds": wall, "throughput_jobs_per_s": 100.0 / wall,
            "time_to_release": { "small": ttr(2.0), "medium": ttr(1.0), "large": ttr(large_mean) },
            "api_requests": { "apiserver_per_job": 10.0 },
            "resources": { "kube_apiserver_cpu_seconds": 5.0, "scheduler_cpu_seconds": 1.0,
                "webhook_cpu_seconds": 0.5, "process_peak_rss_mib": rss,
                "kueue_cpu_seconds": 3.0, "kueue_peak_rss_mib": rss },
            "reclaims": { "units_entered_timeout_backoff": 2, "jobs_suspended_again": 2 },
            "unit_phase_entries": { "Evicted:Preempted": 3, "Admitted": 100 },
        })
    }

    #[test]
    fn ratios_and_targets() {
        let ours = measures(&phase(50.0, 1.0, 100.0), PhaseKind::Run);
        let kueue = measures(&phase(100.0, 2.0, 400.0), PhaseKind::Kueue);
        assert_eq!(ours["queue_system_cpu_seconds"], 1.5);
        assert_eq!(kueue["queue_system_cpu_seconds"], 3.0);
        assert_eq!(kueue["evictions"], 3);
        let r = ratios(&ours, &kueue);
        assert_eq!(r["wall_seconds"], 0.5);
        assert_eq!(r["time_to_release"]["large"]["mean"], 0.5);
        assert_eq!(r["queue_system_peak_rss"], 0.25);
        assert_eq!(r["targets"]["wall_seconds_at_most_0.7"], true);
        // Same apiserver CPU per job: 1.0 misses the 0.6 target.
        assert_eq!(r["kube_apiserver_cpu_per_job"], 1.0);
        assert_eq!(
            r["targets"]["kube_apiserver_cpu_per_job_at_most_0.6"],
            false
        );
        assert_eq!(
            r["targets"]["every_class_mean_time_to_release_at_most_1"],
            true
        );
    }

    #[test]
    fn component_processes_count_their_own_peaks_not_the_benchmarks() {
        let mut run = phase(50.0, 1.0, 300.0);
        run["resources"]["scheduler_peak_rss_mib"] = json!(40.0);
        run["resources"]["webhook_peak_rss_mib"] = json!(20.5);
        let ours = measures(&run, PhaseKind::Run);
        assert_eq!(ours["queue_system_peak_rss_mib"], 60.5);
        assert!(
            ours["queue_system_peak_rss_of"]
                .as_str()
                .is_some_and(|s| s.contains("processes")),
            "{ours}"
        );
        // In-process: the whole benchmark process's peak.
        let in_process = measures(&phase(50.0, 1.0, 300.0), PhaseKind::Run);
        assert_eq!(in_process["queue_system_peak_rss_mib"], 300.0);
    }
}
