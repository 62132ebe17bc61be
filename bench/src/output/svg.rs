//! The benchmark's SVG plot of a run: jobs per class over time, the
//! root's held CPU, the saturated run against the floor.

use crate::phase::{PhaseKind, PhaseResult};
use crate::plot::{self, Line, Panel};
use crate::report;
use crate::shape::Shape;

/// The plot: per class, jobs pending / running / finished over time in the
/// baseline run; the root's held CPU; the saturated run against the floor.
pub fn svg(shape: &Shape, results: &[PhaseResult], subtitle: &str) -> String {
    let x_max = results
        .iter()
        .map(|r| r.wall_seconds)
        .fold(1.0f64, f64::max);
    let mut panels = Vec::new();
    if let Some(run) = results.iter().find(|r| r.kind == PhaseKind::Run) {
        for (c, class) in shape.classes.iter().enumerate() {
            let s = report::series(shape, &run.timelines, Some(c), run.wall_seconds, 600);
            let pick = |f: fn(&report::Counts) -> i64| -> Vec<(f64, f64)> {
                s.iter().map(|(t, k)| (*t, f(k) as f64)).collect()
            };
            panels.push(Panel {
                title: format!(
                    "{} jobs ({} CPU, priority {}, every {} ms per queue, run {} ms)",
                    class.name,
                    class.cpu,
                    class.priority,
                    class.interval.as_millis(),
                    class.runtime.as_millis()
                ),
                y_label: "jobs".into(),
                lines: vec![
                    Line {
                        label: "pending".into(),
                        color: "#d62728",
                        points: pick(|k| k.pending),
                        dashed: false,
                    },
                    Line {
                        label: "released".into(),
                        color: "#1f77b4",
                        points: pick(|k| k.running),
                        dashed: false,
                    },
                    Line {
                        label: "finished".into(),
                        color: "#2ca02c",
                        points: pick(|k| k.finished),
                        dashed: false,
                    },
                ],
            });
        }
        let step = |usage: &crate::quota::Usage| {
            // Step line of the root's CPU.
            let mut points = Vec::new();
            let mut last = 0.0;
            for (t, v) in &usage.root_timeline {
                points.push((*t, last));
                last = *v as f64 / 1000.0;
                points.push((*t, last));
            }
            points.push((run.wall_seconds, last));
            thin(points, 4000)
        };
        let mut lines = Vec::new();
        if let Some(usage) = &run.unit_usage {
            lines.push(Line {
                label: "held (units)".into(),
                color: "#9467bd",
                points: step(usage),
                dashed: false,
            });
        }
        if let Some(usage) = &run.running_usage {
            lines.push(Line {
                label: "running jobs".into(),
                color: "#ff7f0e",
                points: step(usage),
                dashed: false,
            });
        }
        if !lines.is_empty() {
            lines.push(Line {
                label: "capacity".into(),
                color: "#555",
                points: vec![
                    (0.0, f64::from(shape.root_cpu)),
                    (run.wall_seconds, f64::from(shape.root_cpu)),
                ],
                dashed: true,
            });
            panels.push(Panel {
                title: "CPU at the root: held per QueueUnit status / used by running (released, unfinished) jobs".into(),
                y_label: "CPU".into(),
                lines,
            });
        }
    }
    let mut lines = Vec::new();
    for (kind, label, color) in [
        (PhaseKind::Saturated, "koord-queue", "#1f77b4"),
        (PhaseKind::Floor, "floor", "#555"),
    ] {
        if let Some(r) = results.iter().find(|r| r.kind == kind) {
            let s = report::series(shape, &r.timelines, None, r.wall_seconds, 400);
            lines.push(Line {
                label: format!("{label} ({:.0}/s)", r.throughput()),
                color,
                points: s.iter().map(|(t, k)| (*t, k.finished as f64)).collect(),
                dashed: kind == PhaseKind::Floor,
            });
        }
    }
    if !lines.is_empty() {
        panels.push(Panel {
            title: "Jobs finished: saturated run vs the API server floor (same API work per job)"
                .into(),
            y_label: "jobs".into(),
            lines,
        });
    }
    plot::render(
        &format!(
            "koord-queue end-to-end benchmark, {} jobs",
            shape.jobs.len()
        ),
        subtitle,
        &panels,
        x_max,
    )
}

/// Keeps at most about `max` points (every k-th).
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max {
        return points;
    }
    let step = points.len().div_ceil(max);
    let last = points.last().copied();
    let mut out: Vec<(f64, f64)> = points.into_iter().step_by(step).collect();
    out.extend(last);
    out
}
