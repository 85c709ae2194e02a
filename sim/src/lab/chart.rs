//! The lab's pictures, drawn with plotters' SVG backend: a Pareto plot per (trace, start-up
//! delay) — replica-hours against SLO attainment, one point per policy and setting — and a
//! timeline per trace of one seed's load, queue and replicas under each policy, so a reader sees
//! why a policy misses. Legends sit beside the plot, never on the data.

use std::path::Path;

use plotters::prelude::*;
use thiserror::Error;

use crate::lab::run::Moment;

#[derive(Debug, Error)]
#[error("drawing {path}: {message}")]
pub struct ChartError {
    path: String,
    message: String,
}

/// One point of a Pareto plot.
#[derive(Debug, Clone)]
pub struct ParetoPoint {
    pub label: String,
    pub family: String,
    /// The family's default (filled) rather than a grid setting (hollow).
    pub default: bool,
    pub replica_hours: f64,
    /// Percent of requests within the SLO.
    pub attainment: f64,
}

/// One policy's timeline.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub label: String,
    pub family: String,
    pub moments: Vec<Moment>,
}

const FONT: &str = "sans-serif";

/// A colour per family, stable across pictures.
fn colour(family: &str) -> RGBColor {
    match family {
        "operator" => RGBColor(200, 30, 30),
        "oracle" => RGBColor(0, 0, 0),
        "HPA" => RGBColor(31, 119, 180),
        "KEDA" => RGBColor(44, 160, 44),
        "Knative KPA" => RGBColor(148, 103, 189),
        "AIBrix APA" => RGBColor(255, 127, 14),
        "AIBrix KPA" => RGBColor(140, 86, 75),
        "WVA" => RGBColor(23, 190, 207),
        _ => RGBColor(127, 127, 127),
    }
}

fn fail(path: &Path) -> impl Fn(String) -> ChartError + '_ {
    move |message| ChartError {
        path: path.display().to_string(),
        message,
    }
}

/// Replica-hours (x) against SLO attainment (y).
pub fn pareto(path: &Path, title: &str, points: &[ParetoPoint]) -> Result<(), ChartError> {
    let err = fail(path);
    // Tall enough for the legend's line per point (a grid of many settings), the plot on top.
    let height = (60 + 17 * points.len() as u32).max(720);
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let (left, legend) = root.split_horizontally(740);
    let (plot, _) = left.split_vertically(720);
    let finite = |v: f64| v.is_finite();
    let xs: Vec<f64> = points
        .iter()
        .map(|p| p.replica_hours)
        .filter(|v| finite(*v))
        .collect();
    let ys: Vec<f64> = points
        .iter()
        .map(|p| p.attainment)
        .filter(|v| finite(*v))
        .collect();
    let (x0, x1) = padded(&xs, 0.05);
    let (y0, y1) = padded(&ys, 0.08);
    let mut chart = ChartBuilder::on(&plot)
        .caption(title, (FONT, 18))
        .margin(12)
        .margin_top(24)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1.min(100.5))
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("replica-hours (GPU pods × hours, mean over seeds)")
        .y_desc("goodput: requests within the TTFT and TPOT objectives (%)")
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    // Points are numbered in the legend's order, so each hollow grid point can be told apart.
    let mut sorted: Vec<&ParetoPoint> = points.iter().collect();
    sorted.sort_by(|a, b| a.family.cmp(&b.family).then(b.default.cmp(&a.default)));
    for (n, p) in sorted.iter().enumerate() {
        let c = colour(&p.family);
        let style = if p.default {
            c.filled()
        } else {
            c.stroke_width(2)
        };
        let size = if p.family == "operator" { 7 } else { 5 };
        let tag = EmptyElement::at((p.replica_hours, p.attainment))
            + Circle::new((0, 0), size, style)
            + Text::new(
                format!("{}", n + 1),
                (6, -14),
                (FONT, 10).into_font().color(&c),
            );
        chart
            .draw_series(std::iter::once(tag))
            .map_err(|e| err(e.to_string()))?;
    }
    // Legend: one line per point, grouped by family, beside the plot.
    let mut y = 20;
    legend
        .draw(&Text::new(
            "filled: default, hollow: grid setting",
            (5, y),
            (FONT, 12),
        ))
        .map_err(|e| err(e.to_string()))?;
    y += 22;
    for (n, p) in sorted.iter().enumerate() {
        let c = colour(&p.family);
        let style = if p.default {
            c.filled()
        } else {
            c.stroke_width(2)
        };
        legend
            .draw(&Circle::new((12, y + 6), 5, style))
            .map_err(|e| err(e.to_string()))?;
        legend
            .draw(&Text::new(
                format!("{} {}", n + 1, p.label),
                (24, y),
                (FONT, 11),
            ))
            .map_err(|e| err(e.to_string()))?;
        y += 17;
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// Load, queue and replicas over one run, one line per policy in the lower two panels.
pub fn timeline(path: &Path, title: &str, lines: &[Timeline]) -> Result<(), ChartError> {
    let err = fail(path);
    let root = SVGBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let (body, legend) = root.split_horizontally(880);
    let title_area = body
        .titled(title, (FONT, 18))
        .map_err(|e| err(e.to_string()))?;
    let panels = title_area.split_evenly((3, 1));
    let end = lines
        .iter()
        .flat_map(|l| l.moments.last())
        .map(|m| m.at / 60.0)
        .fold(1.0, f64::max);
    // Load is the same for every policy: the first line's.
    let load: Vec<(f64, f64)> = lines
        .first()
        .map(|l| l.moments.iter().map(|m| (m.at / 60.0, m.load)).collect())
        .unwrap_or_default();
    let queued = |l: &Timeline| -> Vec<(f64, f64)> {
        l.moments
            .iter()
            .map(|m| (m.at / 60.0, f64::from(m.queued)))
            .collect()
    };
    let spec = |l: &Timeline| -> Vec<(f64, f64)> {
        l.moments
            .iter()
            .map(|m| (m.at / 60.0, f64::from(m.spec)))
            .collect()
    };
    let max_of = |series: &[(f64, f64)]| series.iter().map(|p| p.1).fold(1.0, f64::max);
    let panel = |area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
                 y_desc: &str,
                 series: Vec<(RGBColor, Vec<(f64, f64)>)>|
     -> Result<(), ChartError> {
        let top = series.iter().map(|(_, s)| max_of(s)).fold(1.0, f64::max) * 1.05;
        let mut chart = ChartBuilder::on(area)
            .margin(8)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..end, 0.0..top)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .y_desc(y_desc)
            .label_style((FONT, 12))
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (c, s) in series {
            chart
                .draw_series(LineSeries::new(s, c.stroke_width(2)))
                .map_err(|e| err(e.to_string()))?;
        }
        Ok(())
    };
    panel(
        &panels[0],
        "arrivals (requests/s)",
        vec![(RGBColor(90, 90, 90), load)],
    )?;
    panel(
        &panels[1],
        "queued requests",
        lines
            .iter()
            .map(|l| (colour(&l.family), queued(l)))
            .collect(),
    )?;
    panel(
        &panels[2],
        "replicas requested",
        lines.iter().map(|l| (colour(&l.family), spec(l))).collect(),
    )?;
    let mut y = 60;
    for l in lines {
        legend
            .draw(&PathElement::new(
                vec![(5, y + 6), (30, y + 6)],
                colour(&l.family).stroke_width(3),
            ))
            .map_err(|e| err(e.to_string()))?;
        legend
            .draw(&Text::new(l.label.clone(), (36, y), (FONT, 12)))
            .map_err(|e| err(e.to_string()))?;
        y += 20;
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// The range of `values` widened by `share` of its span on both sides.
fn padded(values: &[f64], share: f64) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let span = (hi - lo).max(1e-6);
    (lo - share * span, hi + share * span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_pictures_are_drawn_with_their_labels() {
        let dir = std::env::temp_dir().join(format!("lab-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let point = |label: &str, family: &str, default, x, y| ParetoPoint {
            label: label.into(),
            family: family.into(),
            default,
            replica_hours: x,
            attainment: y,
        };
        let path = dir.join("pareto.svg");
        pareto(
            &path,
            "conversation, 180 s start-up",
            &[
                point("llmscaleoperator", "operator", true, 10.0, 97.0),
                point("HPA (target 8)", "HPA", false, 14.0, 99.0),
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        // Numbered in the legend by family, so hollow grid points can be told apart.
        assert!(svg.contains("1 HPA (target 8)") && svg.contains("2 llmscaleoperator"));
        assert!(svg.contains("replica-hours"));
        let moment = |at, spec| Moment {
            at,
            load: 3.0,
            queued: 1,
            spec,
            ready: spec,
        };
        let path = dir.join("timeline.svg");
        timeline(
            &path,
            "step",
            &[Timeline {
                label: "HPA".into(),
                family: "HPA".into(),
                moments: vec![moment(0.0, 2), moment(60.0, 4)],
            }],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("replicas requested") && svg.contains("<polyline"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
