//! The SVG bar charts `gleaner simulate --svg DIR` writes (makespan, kills,
//! wasted CPU per policy): drawing only, from a finished report; it must
//! not know how the simulation runs.

use std::path::Path;

use anyhow::Context;

use super::SimulateReport;

/// Writes makespan.svg, kills.svg and wasted.svg into `dir`.
pub(super) fn write_svgs(dir: &Path, r: &SimulateReport) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let names: Vec<&str> = r.policies.iter().map(|p| p.label.as_str()).collect();
    let title = format!("{} hosts, {} tasks, seed {}", r.hosts, r.tasks, r.seed);
    let charts = [
        (
            "makespan.svg",
            "makespan (h)",
            r.policies
                .iter()
                .map(|p| vec![p.result.makespan_secs.unwrap_or(0.0) / 3600.0])
                .collect::<Vec<_>>(),
            vec!["makespan"],
        ),
        (
            "kills.svg",
            "kills per task",
            r.policies
                .iter()
                .map(|p| p.kills_per_task.to_vec())
                .collect(),
            vec!["S3", "S4", "S5"],
        ),
        (
            "wasted.svg",
            "wasted CPU (reference h)",
            r.policies
                .iter()
                .map(|p| vec![p.result.wasted_cpu_secs / 3600.0])
                .collect(),
            vec!["wasted"],
        ),
    ];
    for (file, label, values, series) in charts {
        let svg = bar_chart(&format!("{label}: {title}"), &names, &values, &series);
        let path = dir.join(file);
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Escapes text for SVG.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A horizontal stacked bar chart: one bar per name, `values[i]` stacked
/// in `series` order. Bounded: at most 64 bars, values clamped to finite.
pub(super) fn bar_chart(
    title: &str,
    names: &[&str],
    values: &[Vec<f64>],
    series: &[&str],
) -> String {
    const COLOURS: [&str; 3] = ["#4c78a8", "#f58518", "#e45756"];
    let n = names.len().min(64);
    let (left, top, bar_h, width) = (170.0, 40.0, 24.0, 420.0);
    let total = |v: &Vec<f64>| -> f64 {
        v.iter()
            .map(|x| if x.is_finite() { x.max(0.0) } else { 0.0 })
            .sum()
    };
    let max = values
        .iter()
        .take(n)
        .map(total)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let height = top + n as f64 * (bar_h + 8.0) + 40.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"10\" y=\"20\" font-size=\"14\">{t}</text>\n",
        w = left + width + 80.0,
        t = xml(title)
    );
    for (i, name) in names.iter().take(n).enumerate() {
        let y = top + i as f64 * (bar_h + 8.0);
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            left - 8.0,
            y + bar_h * 0.7,
            xml(name)
        ));
        let mut x = left;
        for (k, v) in values[i].iter().enumerate() {
            let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
            let w = v / max * width;
            out.push_str(&format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{}\"><title>{}: {v:.2}</title></rect>\n",
                COLOURS[k % COLOURS.len()],
                xml(series.get(k).copied().unwrap_or(""))
            ));
            x += w;
        }
        out.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\">{:.2}</text>\n",
            x + 6.0,
            y + bar_h * 0.7,
            total(&values[i])
        ));
    }
    if series.len() > 1 {
        let y = height - 14.0;
        for (k, s) in series.iter().enumerate() {
            let x = left + k as f64 * 70.0;
            out.push_str(&format!(
                "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{y}\">{}</text>\n",
                y - 10.0,
                COLOURS[k % COLOURS.len()],
                x + 16.0,
                xml(s)
            ));
        }
    }
    out.push_str("</svg>\n");
    out
}
