//! The dashboard's pictures as inline SVG text: the reliability of the next
//! 24 hours by job length, and the week of availability as a heat map.
//!
//! Both take plain numbers and labels and return a bounded string: inputs
//! past the caps are cut, values outside 0..=1 or not finite are left out,
//! and every label goes through [`escape`] (labels can come from hosts and
//! histories, which are not trusted). No I/O, no clock.

use std::fmt::Write as _;

/// Most curves one chart draws.
pub const MAX_CURVES: usize = 8;
/// Most points of one curve.
pub const MAX_POINTS: usize = 500;
/// Longest label, in characters, before it is cut.
pub const MAX_LABEL: usize = 80;

/// HTML/XML text with `& < > " '` escaped, safe in element text and in
/// quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A label cut to [`MAX_LABEL`] characters, then escaped.
fn label(text: &str) -> String {
    let cut: String = text.chars().take(MAX_LABEL).collect();
    escape(&cut)
}

/// One line of the reliability chart: a job length and its TR by start time.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub label: String,
    /// (hours from now, TR); `None` where there is no prediction.
    pub points: Vec<(f64, Option<f64>)>,
}

/// Line colours, one per curve (colour-blind safe, Okabe–Ito).
const COLOURS: [&str; MAX_CURVES] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

const W: f64 = 720.0;
const H: f64 = 320.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// TR (0..1) against the start of the job over `hours` hours, one line per
/// job length; a point without a prediction breaks its line.
pub fn reliability_chart(curves: &[Curve], hours: f64) -> String {
    let hours = if hours.is_finite() && hours > 0.0 {
        hours.min(24.0 * 366.0)
    } else {
        24.0
    };
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |h: f64| LEFT + pw * (h / hours);
    let y = |tr: f64| TOP + ph * (1.0 - tr);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="temporal reliability by start time and job length" class="chart">"#
    );
    // Axes and grid: TR every 0.25, time every 3 hours.
    for i in 0..=4 {
        let v = f64::from(i) * 0.25;
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{x2:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx:.1}" y="{ty:.1}" font-size="11" text-anchor="end">{v:.2}</text>"##,
            yy = y(v),
            x2 = LEFT + pw,
            tx = LEFT - 6.0,
            ty = y(v) + 4.0,
        );
    }
    let step = (hours / 8.0).ceil().max(1.0);
    let mut h = 0.0;
    while h <= hours + 1e-9 {
        let _ = write!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{yb:.1}" stroke="#eee"/><text x="{xx:.1}" y="{ty:.1}" font-size="11" text-anchor="middle">+{h}h</text>"##,
            xx = x(h),
            yb = TOP + ph,
            ty = TOP + ph + 16.0,
        );
        h += step;
    }
    let _ = write!(
        s,
        r#"<text x="{cx:.1}" y="{by:.1}" font-size="12" text-anchor="middle">job starts in (hours from now)</text>"#,
        cx = LEFT + pw / 2.0,
        by = H - 4.0,
    );
    for (i, curve) in curves.iter().take(MAX_CURVES).enumerate() {
        let colour = COLOURS[i];
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(hx, tr) in curve.points.iter().take(MAX_POINTS) {
            let point = tr
                .filter(|t| t.is_finite())
                .filter(|_| hx.is_finite() && (0.0..=hours).contains(&hx))
                .map(|t| (x(hx), y(t.clamp(0.0, 1.0))));
            match point {
                Some(p) => runs.last_mut().map(|r| r.push(p)).unwrap_or(()),
                None => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| !r.is_empty()) {
            let pts: Vec<String> = run.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = write!(
                s,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            for (a, b) in run {
                let _ = write!(
                    s,
                    r#"<circle cx="{a:.1}" cy="{b:.1}" r="2.5" fill="{colour}"/>"#
                );
            }
        }
        let ly = TOP + 14.0 + 18.0 * i as f64;
        let lx = W - RIGHT + 12.0;
        let _ = write!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{lx2:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="3"/><text x="{tx:.1}" y="{ty:.1}" font-size="12">{}</text>"#,
            label(&curve.label),
            lx2 = lx + 18.0,
            tx = lx + 24.0,
            ty = ly + 4.0,
        );
    }
    s.push_str("</svg>");
    s
}

/// Availability by weekday (rows, Monday first) and hour (columns).
#[derive(Debug, Clone, PartialEq)]
pub struct WeekGrid {
    /// Fraction of the time available (0..1) and the number of looks behind
    /// it; `None` where the history has nothing.
    pub cells: [[Option<(f64, u32)>; 24]; 7],
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// The week as a 7×24 heat map: dark green is always available, white
/// never, grey no data; each cell's title gives the figure.
pub fn week_heatmap(grid: &WeekGrid) -> String {
    const CELL: f64 = 24.0;
    const LX: f64 = 40.0;
    const TY: f64 = 20.0;
    let w = LX + CELL * 24.0 + 8.0;
    let h = TY + CELL * 7.0 + 8.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="availability by weekday and hour" class="heatmap">"#
    );
    for hour in (0..24).step_by(3) {
        let _ = write!(
            s,
            r#"<text x="{x:.1}" y="14" font-size="11" text-anchor="middle">{hour:02}</text>"#,
            x = LX + CELL * f64::from(hour) + CELL / 2.0
        );
    }
    for (d, row) in grid.cells.iter().enumerate() {
        let y = TY + CELL * d as f64;
        let _ = write!(
            s,
            r#"<text x="{tx}" y="{ty:.1}" font-size="12" text-anchor="end">{}</text>"#,
            DAYS[d],
            tx = LX - 6.0,
            ty = y + CELL / 2.0 + 4.0
        );
        for (hour, cell) in row.iter().enumerate() {
            let x = LX + CELL * hour as f64;
            let (fill, title) = match cell {
                Some((f, n)) if f.is_finite() => {
                    let f = f.clamp(0.0, 1.0);
                    (
                        shade(f),
                        format!(
                            "{} {hour:02}:00–{hour:02}:59: available {:.0} % ({n} looks)",
                            DAYS[d],
                            f * 100.0
                        ),
                    )
                }
                _ => (
                    "#d0d0d0".to_string(),
                    format!("{} {hour:02}:00: no history", DAYS[d]),
                ),
            };
            let _ = write!(
                s,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{cw:.1}" height="{cw:.1}" fill="{fill}" stroke="#fff"><title>{}</title></rect>"##,
                escape(&title),
                cw = CELL - 1.0,
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// White (0) to dark green (1).
fn shade(f: f64) -> String {
    let mix = |lo: f64, hi: f64| (lo + (hi - lo) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(255.0, 0.0),
        mix(255.0, 109.0),
        mix(255.0, 44.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_leaves_no_markup() {
        let hostile = r#"<script>alert("x")</script>&'"#;
        let e = escape(hostile);
        assert_eq!(
            e,
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        assert!(!escape("a\u{0}b\u{1b}[31m").contains('\u{1b}'));
    }

    #[test]
    fn a_hostile_curve_label_is_escaped_and_cut() {
        let curves = vec![Curve {
            label: format!("<img src=x onerror=alert(1)>{}", "x".repeat(1000)),
            points: vec![(0.0, Some(0.9)), (2.0, Some(0.8))],
        }];
        let svg = reliability_chart(&curves, 24.0);
        assert!(!svg.contains("<img"), "{svg}");
        assert!(svg.contains("&lt;img"));
        assert!(svg.len() < 6000, "{}", svg.len());
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn the_chart_is_bounded_whatever_it_is_given() {
        let curve = Curve {
            label: "1 h".into(),
            points: (0..100_000)
                .map(|i| (f64::from(i) * 0.0001, Some(0.5)))
                .collect(),
        };
        let curves = vec![curve; 50];
        let svg = reliability_chart(&curves, 24.0);
        assert_eq!(svg.matches("<polyline").count(), MAX_CURVES);
        assert!(svg.matches("<circle").count() <= MAX_CURVES * MAX_POINTS);
        assert!(svg.len() < 1_000_000, "{}", svg.len());
    }

    #[test]
    fn missing_and_wild_values_break_the_line_instead_of_drawing_it() {
        let curves = vec![Curve {
            label: "4 h".into(),
            points: vec![
                (0.0, Some(0.9)),
                (2.0, Some(0.8)),
                (4.0, None),
                (6.0, Some(f64::NAN)),
                (8.0, Some(7.0)),
                (10.0, Some(-3.0)),
                (f64::INFINITY, Some(0.5)),
            ],
        }];
        let svg = reliability_chart(&curves, 24.0);
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        // Clamped into the plot: no y above the top margin or below the axis.
        for cy in svg.split("cy=\"").skip(1) {
            let v: f64 = cy.split('"').next().unwrap().parse().unwrap();
            assert!((TOP..=H - BOTTOM).contains(&v), "{v}");
        }
    }

    #[test]
    fn the_heatmap_has_a_cell_per_hour_of_the_week_with_its_figure() {
        let mut grid = WeekGrid {
            cells: [[None; 24]; 7],
        };
        grid.cells[0][9] = Some((0.25, 12));
        grid.cells[6][23] = Some((f64::NAN, 1));
        let svg = week_heatmap(&grid);
        assert_eq!(svg.matches("<rect").count(), 7 * 24);
        assert!(
            svg.contains("Mon 09:00–09:59: available 25 % (12 looks)"),
            "{svg}"
        );
        assert!(svg.contains("Sun 23:00: no history"));
        assert_eq!(shade(0.0), "#ffffff");
        assert_eq!(shade(1.0), "#006d2c");
    }
}
