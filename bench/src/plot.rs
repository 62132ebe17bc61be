//! A small SVG line chart: stacked panels sharing the time axis.

use std::fmt::Write as _;

/// One line.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// CSS color.
    pub color: &'static str,
    /// Points (x = seconds).
    pub points: Vec<(f64, f64)>,
    /// Dashed.
    pub dashed: bool,
}

/// One panel.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Unit of the y axis.
    pub y_label: String,
    /// Lines.
    pub lines: Vec<Line>,
}

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 170.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 60.0;
const GAP: f64 = 50.0;

/// A "nice" step for about `target` ticks over `range`.
fn nice_step(range: f64, target: f64) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    let m = raw / magnitude;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// A tick label: no spurious decimals.
fn tick(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else {
        let decimals = (-step.log10()).ceil().max(0.0) as usize;
        format!("{v:.decimals$}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders `panels` under `title` with a shared x axis from 0 to `x_max` seconds.
pub fn render(title: &str, subtitle: &str, panels: &[Panel], x_max: f64) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let height = TOP + panels.len() as f64 * (PANEL_HEIGHT + GAP) + 20.0;
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    let x_step = nice_step(x_max, 10.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="22" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="40" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    for (p, panel) in panels.iter().enumerate() {
        let top = TOP + p as f64 * (PANEL_HEIGHT + GAP) + 10.0;
        let bottom = top + PANEL_HEIGHT;
        let y_max = panel
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|(_, y)| *y))
            .fold(0.0f64, f64::max)
            .max(1.0);
        let y_step = nice_step(y_max, 4.0);
        let y_top = (y_max / y_step).ceil() * y_step;
        let x = |v: f64| LEFT + plot_w * v / x_max;
        let y = |v: f64| bottom - PANEL_HEIGHT * v / y_top;
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#,
            top - 6.0,
            escape(&panel.title)
        );
        // Grid and y ticks.
        let mut v = 0.0;
        while v <= y_top + y_step * 0.01 {
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end" fill="#333">{}</text>"##,
                LEFT + plot_w,
                y(v),
                y(v),
                LEFT - 6.0,
                y(v) + 4.0,
                tick(v, y_step)
            );
            v += y_step;
        }
        // x ticks.
        let mut t = 0.0;
        while t <= x_max + x_step * 0.01 {
            let _ = writeln!(
                svg,
                r##"<line x1="{:.1}" x2="{:.1}" y1="{bottom}" y2="{}" stroke="#999"/><text x="{:.1}" y="{}" text-anchor="middle" fill="#333">{}</text>"##,
                x(t),
                x(t),
                bottom + 4.0,
                x(t),
                bottom + 17.0,
                tick(t, x_step)
            );
            t += x_step;
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_HEIGHT}" fill="none" stroke="#999"/>"##
        );
        let _ = writeln!(
            svg,
            r##"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle" fill="#333">{}</text>"##,
            top + PANEL_HEIGHT / 2.0,
            escape(&panel.y_label)
        );
        for (k, line) in panel.lines.iter().enumerate() {
            let mut points = String::new();
            for (px, py) in &line.points {
                let _ = write!(points, "{:.1},{:.1} ", x(*px), y(*py));
            }
            let dash = if line.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.6"{dash} points="{}"/>"#,
                line.color,
                points.trim_end()
            );
            let ly = top + 14.0 + k as f64 * 18.0;
            let lx = LEFT + plot_w + 12.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 22.0,
                line.color,
                lx + 28.0,
                ly + 4.0,
                escape(&line.label)
            );
        }
        if p + 1 == panels.len() {
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{}" text-anchor="middle" fill="#333">seconds since the first create</text>"##,
                LEFT + plot_w / 2.0,
                bottom + 34.0
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_looking_svg() {
        let svg = render(
            "t <1>",
            "s",
            &[Panel {
                title: "p".into(),
                y_label: "jobs".into(),
                lines: vec![Line {
                    label: "pending".into(),
                    color: "#d62728",
                    points: vec![(0.0, 0.0), (5.0, 10.0)],
                    dashed: false,
                }],
            }],
            5.0,
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("t &lt;1&gt;"));
        assert!(svg.contains("<polyline"));
        assert_eq!(nice_step(100.0, 10.0), 10.0);
        assert_eq!(nice_step(351.0, 10.0), 50.0);
    }
}
