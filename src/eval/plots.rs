//! SVG charts of an evaluation: accuracy and Brier score against window
//! length per method (the papers' Fig. 5 and 7) and the reliability diagram.
//!
//! It draws what `report::EvalReport` holds and writes SVG files into a
//! directory it is given; it knows nothing about how the scores were made.

use crate::eval::report::EvalReport;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("cannot create {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot draw {path}: {what}")]
    Draw { path: PathBuf, what: String },
}

const SIZE: (u32, u32) = (900, 560);

/// Writes `accuracy.svg`, `brier.svg` and `reliability.svg` into `dir`
/// (created if missing) and returns their paths.
pub fn write_plots(report: &EvalReport, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let accuracy = dir.join("accuracy.svg");
    let brier = dir.join("brier.svg");
    let reliability = dir.join("reliability.svg");
    let draw_err = |path: &Path| {
        let path = path.to_path_buf();
        move |e: String| PlotError::Draw {
            path: path.clone(),
            what: e,
        }
    };
    by_length(
        report,
        &accuracy,
        "Mean accuracy of predicted TR",
        "accuracy (%)",
        |l| l.accuracy_mean.map(|a| a * 100.0),
    )
    .map_err(draw_err(&accuracy))?;
    by_length(
        report,
        &brier,
        "Brier score",
        "Brier score (lower is better)",
        |l| l.brier,
    )
    .map_err(draw_err(&brier))?;
    reliability_diagram(report, &reliability).map_err(draw_err(&reliability))?;
    Ok(vec![accuracy, brier, reliability])
}

/// The range of the values with a little room, or a unit range.
fn padded_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    let pad = ((hi - lo) * 0.08).max(1e-3);
    (lo - pad)..(hi + pad)
}

fn by_length(
    r: &EvalReport,
    path: &Path,
    title: &str,
    y_desc: &str,
    value: impl Fn(&crate::eval::summary::LengthSummary) -> Option<f64>,
) -> Result<(), String> {
    let series: Vec<(String, Vec<(f64, f64)>)> = r
        .scores
        .method_order
        .iter()
        .filter_map(|name| {
            let m = r.scores.methods.get(name)?;
            let points = m
                .by_length
                .iter()
                .filter_map(|(&len, l)| Some((len as f64 / 3600.0, value(l)?)))
                .collect();
            Some((name.clone(), points))
        })
        .collect();
    let xs = padded_range(r.config.lengths.iter().map(|&l| l as f64 / 3600.0));
    let ys = padded_range(series.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y)));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(xs, ys)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_desc("window length T (h)")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, points)) in series.iter().enumerate() {
        draw_method(&mut chart, i, name, points)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// One method's line with its points and its legend entry, in the
/// method's colour (its place in the report's order, the same on every chart).
fn draw_method(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    index: usize,
    name: &str,
    points: &[(f64, f64)],
) -> Result<(), String> {
    let color = Palette99::pick(index).to_rgba();
    chart
        .draw_series(LineSeries::new(points.to_vec(), color.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn reliability_diagram(r: &EvalReport, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (700, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Reliability diagram (all lengths)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0f64..1.0, 0.0f64..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_desc("predicted TR (bin mean)")
        .y_desc("observed survival")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 0.0), (1.0, 1.0)],
            BLACK.mix(0.4),
        ))
        .map_err(|e| e.to_string())?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    for (i, name) in r.scores.method_order.iter().enumerate() {
        let Some(m) = r.scores.methods.get(name) else {
            continue;
        };
        let points: Vec<(f64, f64)> = m
            .overall
            .reliability
            .iter()
            .filter_map(|b| Some((b.mean_prediction?, b.observed?)))
            .collect();
        draw_method(&mut chart, i, name, &points)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
