//! Inline SVG charts and HTML escaping for the reports: a line chart over
//! time and a horizontal bar; no script, no external asset.

use std::fmt::Write as _;

/// Colors of series, in order.
pub const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// Text safe inside HTML.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A line of a chart: its label, color and points `(x, y)`.
#[derive(Debug)]
pub struct Line<'a> {
    /// Label in the legend.
    pub label: String,
    /// Stroke color.
    pub color: &'a str,
    /// Dashed (a limit, not a measure).
    pub dashed: bool,
    /// Points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// A line chart `w`×`h` px, x in seconds, y from 0 to the largest value.
pub fn line_chart(title: &str, y_label: &str, lines: &[Line<'_>], w: f64, h: f64) -> String {
    // The title on the first line, the legend on the second, above the plot.
    let (left, right, top, bottom) = (48.0, 10.0, 36.0, 34.0);
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.05;
    let px = |x: f64| left + x / x_max * (w - left - right);
    let py = |y: f64| top + (1.0 - y / y_max) * (h - top - bottom);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11"><text x="{left}" y="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#999"/><line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#999"/>"##,
        b = h - bottom,
        r = w - right
    );
    for i in 0..=4 {
        let y = y_max / 1.05 * f64::from(i) / 4.0;
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end" fill="#555">{}</text>"##,
            left - 4.0,
            py(y) + 4.0,
            short(y)
        );
    }
    for i in 0..=4 {
        let x = x_max * f64::from(i) / 4.0;
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
            px(x),
            h - bottom + 14.0,
            short(x)
        );
    }
    let _ = write!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">seconds · {}</text>"##,
        (left + w - right) / 2.0,
        h - 4.0,
        esc(y_label)
    );
    for (i, line) in lines.iter().enumerate() {
        let mut pts = String::new();
        for (x, y) in &line.points {
            let _ = write!(pts, "{:.1},{:.1} ", px(*x), py(*y));
        }
        let dash = if line.dashed {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5"{dash} points="{}"/>"#,
            line.color,
            pts.trim_end()
        );
        let lx = left + (i as f64) * 130.0;
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="22" width="10" height="3" fill="{}"/><text x="{}" y="27">{}</text>"#,
            line.color,
            lx + 14.0,
            esc(&line.label)
        );
    }
    s.push_str("</svg>");
    s
}

/// A horizontal bar of `fraction` (0..1) with a mark at `target`.
pub fn bar(fraction: f64, target: Option<f64>, color: &str) -> String {
    let w = 160.0;
    let f = fraction.clamp(0.0, 1.0) * w;
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="12"><rect width="{w}" height="12" fill="#eee"/><rect width="{f:.1}" height="12" fill="{color}"/>"##
    );
    if let Some(t) = target {
        let x = t.clamp(0.0, 1.0) * w;
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="0" x2="{x:.1}" y2="12" stroke="#000" stroke-width="2"/>"##
        );
    }
    s.push_str("</svg>");
    s
}

/// A number in few characters.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::{Line, esc, line_chart, short};

    #[test]
    fn charts_are_inline_svg_with_escaped_text() {
        let svg = line_chart(
            "a<b",
            "cores",
            &[Line {
                label: "x&y".into(),
                color: "#000",
                dashed: false,
                points: vec![(0.0, 1.0), (2.0, 3.0)],
            }],
            300.0,
            120.0,
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("a&lt;b") && svg.contains("x&amp;y"));
        assert_eq!(esc("\"'"), "&quot;&#39;");
        assert_eq!(short(12_345.0), "12k");
        assert_eq!(short(0.5), "0.50");
    }
}
