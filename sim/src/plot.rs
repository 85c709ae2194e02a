//! The picture of a live run (`make demo`'s target/demo/run.svg), drawn with plotters' SVG
//! backend like the lab's: four panels over one time axis — the load; the queue and the SLO
//! misses; the replicas (pods, spec.replicas, the scaler's desired count) with each scale event marked; and
//! KV-cache use. Legends sit beside the panels, never on the data; the three replica lines are
//! drawn a few pixels apart, each with its own markers at staggered samples, so that equal
//! counts stay distinguishable.

use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

/// The fleet at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Simulated seconds.
    pub t: f64,
    /// Requests per second arriving.
    pub load: f64,
    pub queued: f64,
    /// Pods the fleet had (Ready in the cluster).
    pub pods: f64,
    /// spec.replicas of the Deployment, when known.
    pub spec: Option<f64>,
    /// The scaler's status.desiredReplicas, when known.
    pub desired: Option<f64>,
    /// Mean KV-cache use of the pods, 0 to 1.
    pub kv: f64,
    /// Requests that missed the TTFT SLO since the start of the run.
    pub slo_missed: u64,
}

#[derive(Debug, Error)]
#[error("drawing the run: {0}")]
pub struct PlotError(String);

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 1150;
/// Width of the legend column to the right of the panels.
const LEGEND: u32 = 190;
const FONT: &str = "sans-serif";

const LOAD: RGBColor = RGBColor(31, 119, 180);
const QUEUED: RGBColor = RGBColor(214, 39, 40);
const MISSED: RGBColor = RGBColor(0, 0, 0);
const PODS: RGBColor = RGBColor(44, 160, 44);
const SPEC: RGBColor = RGBColor(148, 103, 189);
const DESIRED: RGBColor = RGBColor(255, 127, 14);
const KV: RGBColor = RGBColor(140, 86, 75);
const UP: RGBColor = RGBColor(0, 110, 0);
const DOWN: RGBColor = RGBColor(190, 0, 0);

/// How far apart (in pixels, whatever the panel's scale) the three replica lines are drawn, so
/// that equal counts show as three parallel lines rather than one.
const SPREAD_PX: f64 = 4.0;

/// A scale event: spec.replicas changed at `t`, from `from` to `to`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleEvent {
    pub t: f64,
    pub from: f64,
    pub to: f64,
}

/// Every change of spec.replicas, in order.
pub fn scale_events(samples: &[Sample]) -> Vec<ScaleEvent> {
    samples
        .windows(2)
        .filter_map(|w| match (w[0].spec, w[1].spec) {
            (Some(from), Some(to)) if from != to => Some(ScaleEvent {
                t: w[1].t,
                from,
                to,
            }),
            _ => None,
        })
        .collect()
}

/// SLO misses in each sample's interval (since the previous sample), where there were any.
pub fn misses(samples: &[Sample]) -> Vec<(f64, f64)> {
    let mut before = 0;
    samples
        .iter()
        .filter_map(|s| {
            let new = s.slo_missed.saturating_sub(before);
            before = s.slo_missed;
            (new > 0).then_some((s.t, new as f64))
        })
        .collect()
}

/// The picture as SVG text, or a note when there are no samples.
pub fn svg(samples: &[Sample], title: &str) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let body = root.titled(title, (FONT, 20)).map_err(drawing)?;
        if samples.is_empty() {
            body.draw(&Text::new("no samples", (60, 40), (FONT, 14)))
                .map_err(drawing)?;
        } else {
            draw(&body, samples)?;
        }
        root.present().map_err(drawing)?;
    }
    Ok(out)
}

fn drawing<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

/// One line of a panel: its legend text, colour, points and marker.
struct Line {
    label: String,
    colour: RGBColor,
    points: Vec<(f64, f64)>,
    marker: Marker,
    /// Drawn this many pixels above its values (below when negative): apart from lines it may
    /// coincide with.
    offset_px: f64,
    /// Which of [`MARKER_PHASES`] the markers sit at, so that markers of coinciding lines are
    /// side by side rather than on top of one another.
    marker_phase: usize,
}

impl Line {
    fn new(label: impl Into<String>, colour: RGBColor, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            colour,
            points,
            marker: Marker::None,
            offset_px: 0.0,
            marker_phase: 0,
        }
    }

    fn marked(self, marker: Marker) -> Self {
        Self { marker, ..self }
    }

    /// Drawn `offset_px` apart, its markers at phase `marker_phase`.
    fn apart(self, offset_px: f64, marker_phase: usize) -> Self {
        Self {
            offset_px,
            marker_phase,
            ..self
        }
    }
}

#[derive(Clone, Copy)]
enum Marker {
    None,
    Circle,
    Square,
    Triangle,
    Cross,
}

fn draw(area: &DrawingArea<SVGBackend<'_>, Shift>, samples: &[Sample]) -> Result<(), PlotError> {
    let t_end = samples.iter().map(|s| s.t).fold(1.0, f64::max);
    let (plots, legends) = area.split_horizontally(WIDTH - LEGEND);
    let plot_rows = plots.split_evenly((4, 1));
    let legend_rows = legends.split_evenly((4, 1));
    let pick = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| f(s).map(|v| (s.t, v)))
            .filter(|(_, v)| v.is_finite())
            .collect()
    };
    let missed = misses(samples);
    let total_missed = samples.last().map_or(0, |s| s.slo_missed);

    let load_lines = vec![Line::new(
        "load (requests/s)",
        LOAD,
        pick(&|s| Some(s.load)),
    )];
    panel(
        &plot_rows[0],
        &legend_rows[0],
        "requests/s",
        t_end,
        &load_lines,
        &[],
        false,
    )?;

    // The queue, with the SLO misses of each interval marked where they happened.
    let queue_lines = vec![
        Line::new("queued requests", QUEUED, pick(&|s| Some(s.queued))),
        Line::new(
            format!("SLO misses ({total_missed} in all)"),
            MISSED,
            missed,
        )
        .marked(Marker::Cross),
    ];
    panel(
        &plot_rows[1],
        &legend_rows[1],
        "requests",
        t_end,
        &queue_lines,
        &[],
        false,
    )?;

    // Replicas: three lines a few pixels apart, each with its marker, the markers staggered;
    // scale events as triangles.
    let replica_lines = vec![
        Line::new("pods Ready", PODS, pick(&|s| Some(s.pods)))
            .marked(Marker::Circle)
            .apart(-SPREAD_PX, 0),
        Line::new("spec.replicas", SPEC, pick(&|s| s.spec))
            .marked(Marker::Square)
            .apart(0.0, 1),
        Line::new("desired (status)", DESIRED, pick(&|s| s.desired))
            .marked(Marker::Triangle)
            .apart(SPREAD_PX, 2),
    ];
    panel(
        &plot_rows[2],
        &legend_rows[2],
        "replicas",
        t_end,
        &replica_lines,
        &scale_events(samples),
        true,
    )?;

    let kv_lines = vec![Line::new(
        "KV-cache use (mean %)",
        KV,
        pick(&|s| Some(s.kv * 100.0)),
    )];
    panel(
        &plot_rows[3],
        &legend_rows[3],
        "KV-cache use (%)",
        t_end,
        &kv_lines,
        &[],
        false,
    )
}

/// Roughly this many markers per line, however many samples there are.
const MARKERS_PER_LINE: usize = 40;

/// Lines whose markers are staggered share the interval between markers in this many phases.
const MARKER_PHASES: usize = 3;

fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    legend: &DrawingArea<SVGBackend<'_>, Shift>,
    y_desc: &str,
    t_end: f64,
    lines: &[Line],
    events: &[ScaleEvent],
    integer_ticks: bool,
) -> Result<(), PlotError> {
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .chain(events.iter().map(|e| e.to.max(e.from)))
        .fold(1.0, f64::max);
    let top = if integer_ticks {
        top.ceil() + 1.0
    } else {
        top * 1.1
    };
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_end, 0.0..top)
        .map_err(drawing)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc("time (s)")
        .y_desc(y_desc)
        .x_labels(12)
        .x_label_formatter(&|t| format!("{t:.0}"))
        .label_style((FONT, 12));
    // Replica counts are whole: one tick per count (a few hundred at most here), labelled as
    // integers; other panels get plotters' round numbers.
    let whole = |v: &f64| {
        if (v - v.round()).abs() < 1e-6 {
            format!("{v:.0}")
        } else {
            String::new()
        }
    };
    let round = |v: &f64| format!("{v:.0}");
    let tenths = |v: &f64| format!("{v:.1}");
    if integer_ticks {
        mesh.y_labels((top as usize + 1).min(12))
            .y_label_formatter(&whole);
    } else if top >= 10.0 {
        mesh.y_label_formatter(&round);
    } else {
        mesh.y_label_formatter(&tenths);
    }
    mesh.draw().map_err(drawing)?;

    // Values per pixel on the y axis, to draw lines a fixed number of pixels apart.
    let rows = chart.plotting_area().get_pixel_range().1;
    let per_px = top / f64::from((rows.end - rows.start).max(1));
    for line in lines {
        let shift = line.offset_px * per_px;
        let points: Vec<(f64, f64)> = line.points.iter().map(|&(t, v)| (t, v + shift)).collect();
        if !matches!(line.marker, Marker::Cross) {
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    line.colour.stroke_width(2),
                ))
                .map_err(drawing)?;
        }
        let every = (points.len() / MARKERS_PER_LINE).max(1);
        let phase = line.marker_phase % MARKER_PHASES * every / MARKER_PHASES;
        let marked = points.iter().copied().enumerate().filter_map(|(i, p)| {
            (matches!(line.marker, Marker::Cross) || i % every == phase).then_some(p)
        });
        let colour = line.colour;
        match line.marker {
            Marker::None => {}
            Marker::Circle => {
                chart
                    .draw_series(marked.map(|p| Circle::new(p, 3, colour.filled())))
                    .map_err(drawing)?;
            }
            Marker::Square => {
                chart
                    .draw_series(marked.map(|p| {
                        EmptyElement::at(p) + Rectangle::new([(-3, -3), (3, 3)], colour.filled())
                    }))
                    .map_err(drawing)?;
            }
            Marker::Triangle => {
                chart
                    .draw_series(marked.map(|p| TriangleMarker::new(p, 4, colour.filled())))
                    .map_err(drawing)?;
            }
            Marker::Cross => {
                chart
                    .draw_series(marked.map(|p| Cross::new(p, 4, colour.stroke_width(2))))
                    .map_err(drawing)?;
            }
        }
    }
    // A scale event: a thin vertical rule and a triangle pointing the way the count went.
    for event in events {
        let colour = if event.to > event.from { UP } else { DOWN };
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(event.t, 0.0), (event.t, top)],
                colour.mix(0.25).stroke_width(1),
            )))
            .map_err(drawing)?;
        let tip: Vec<(i32, i32)> = if event.to > event.from {
            vec![(-6, 5), (6, 5), (0, -6)]
        } else {
            vec![(-6, -5), (6, -5), (0, 6)]
        };
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((event.t, event.to)) + Polygon::new(tip, colour.filled()),
            ))
            .map_err(drawing)?;
    }

    // The legend, in its own column: a sample of each line and its label.
    let mut y = 30;
    for line in lines {
        let style = line.colour.stroke_width(2);
        if !matches!(line.marker, Marker::Cross) {
            legend
                .draw(&PathElement::new(vec![(6, y + 7), (34, y + 7)], style))
                .map_err(drawing)?;
        }
        let at = (20, y + 7);
        match line.marker {
            Marker::None => {}
            Marker::Circle => legend
                .draw(&Circle::new(at, 3, line.colour.filled()))
                .map_err(drawing)?,
            Marker::Square => legend
                .draw(&Rectangle::new(
                    [(at.0 - 3, at.1 - 3), (at.0 + 3, at.1 + 3)],
                    line.colour.filled(),
                ))
                .map_err(drawing)?,
            Marker::Triangle => legend
                .draw(&TriangleMarker::new(at, 4, line.colour.filled()))
                .map_err(drawing)?,
            Marker::Cross => legend
                .draw(&Cross::new(at, 4, line.colour.stroke_width(2)))
                .map_err(drawing)?,
        }
        legend
            .draw(&Text::new(line.label.clone(), (40, y), (FONT, 12)))
            .map_err(drawing)?;
        y += 22;
    }
    if !events.is_empty() {
        for (tip, colour, label) in [
            (
                vec![(14, y + 12), (26, y + 12), (20, y + 1)],
                UP,
                "scale-up",
            ),
            (
                vec![(14, y + 24), (26, y + 24), (20, y + 35)],
                DOWN,
                "scale-down",
            ),
        ] {
            legend
                .draw(&Polygon::new(tip.clone(), colour.filled()))
                .map_err(drawing)?;
            let text_y = tip[0].1 - if colour == UP { 10 } else { 0 };
            legend
                .draw(&Text::new(label, (40, text_y), (FONT, 12)))
                .map_err(drawing)?;
        }
        y += 44;
        let ups = events.iter().filter(|e| e.to > e.from).count();
        legend
            .draw(&Text::new(
                format!("{ups} up, {} down", events.len() - ups),
                (6, y),
                (FONT, 12),
            ))
            .map_err(drawing)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Vec<Sample> {
        (0u32..300)
            .map(|i| {
                let step = f64::from(1 + i / 60);
                Sample {
                    t: f64::from(i) * 2.0,
                    load: f64::from(i % 40),
                    queued: f64::from((i % 50).saturating_sub(40)),
                    pods: step,
                    spec: Some(step),
                    desired: (i > 10).then_some(step),
                    kv: 0.5,
                    slo_missed: u64::from(i / 100),
                }
            })
            .collect()
    }

    #[test]
    fn scale_events_are_the_changes_of_spec_replicas() {
        let events = scale_events(&run());
        assert_eq!(events.len(), 4);
        assert!(events.iter().all(|e| e.to == e.from + 1.0));
        assert_eq!(events[0].t, 120.0);
    }

    /// The points of the polylines drawn in `colour` (`#RRGGBB`), in pixels.
    fn polylines(picture: &str, colour: &str) -> Vec<Vec<(f64, f64)>> {
        picture
            .split("<polyline")
            .skip(1)
            .filter(|l| l.split("/>").next().unwrap().contains(colour))
            .map(|l| {
                let points = l
                    .split("points=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                points
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    /// The x of each marker element `tag` (`circle` or `rect`) drawn in `colour`.
    fn marker_xs(picture: &str, tag: &str, colour: &str) -> Vec<i64> {
        let at = if tag == "circle" { "cx=\"" } else { "x=\"" };
        picture
            .split(&format!("<{tag} "))
            .skip(1)
            .filter(|e| e.split("/>").next().unwrap().contains(colour))
            .map(|e| e.split(at).nth(1).unwrap().split('"').next().unwrap())
            .map(|x| x.parse::<f64>().unwrap() as i64)
            // Not the legend's sample marker, beside the panels.
            .filter(|x| *x < i64::from(WIDTH - LEGEND))
            .collect()
    }

    #[test]
    fn equal_replica_lines_stay_apart_and_their_markers_do_not_cover_one_another() {
        // In run() the pods, spec.replicas and desired counts are equal throughout.
        let picture = svg(&run(), "equal").unwrap();
        let colour = |c: RGBColor| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
        let last_y = |c: RGBColor| {
            // The longest: the legend's sample line has the same colour.
            let lines = polylines(&picture, &colour(c));
            let line = lines.iter().max_by_key(|l| l.len()).unwrap();
            assert!(line.len() > 100, "the line of {}", colour(c));
            line.last().unwrap().1
        };
        let (pods, spec, desired) = (last_y(PODS), last_y(SPEC), last_y(DESIRED));
        // SVG y grows downwards: desired above spec above pods, each a few pixels apart.
        assert!(spec - desired >= 3.0, "desired {desired} vs spec {spec}");
        assert!(pods - spec >= 3.0, "spec {spec} vs pods {pods}");
        let circles = marker_xs(&picture, "circle", &colour(PODS));
        let squares = marker_xs(&picture, "rect", &colour(SPEC));
        assert!(circles.len() >= 10 && squares.len() >= 10);
        let shared = circles
            .iter()
            .filter(|x| squares.iter().any(|s| (s + 3 - *x).abs() <= 1))
            .count();
        assert_eq!(shared, 0, "circles at {circles:?}, squares at {squares:?}");
    }

    #[test]
    fn misses_are_counted_per_interval() {
        assert_eq!(misses(&run()), vec![(200.0, 1.0), (400.0, 1.0)]);
    }

    #[test]
    fn a_run_becomes_four_panels_with_a_time_axis_markers_and_legends() {
        let picture = svg(&run(), "burst <test>").unwrap();
        assert!(picture.starts_with("<svg"), "{}", &picture[..80]);
        assert!(picture.trim_end().ends_with("</svg>"));
        assert!(
            picture.contains("burst &lt;test&gt;"),
            "the title is escaped"
        );
        for label in [
            "time (s)",
            "load (requests/s)",
            "SLO misses (2 in all)",
            "pods Ready",
            "spec.replicas",
            "desired (status)",
            "scale-up",
            "4 up, 0 down",
            "KV-cache use (mean %)",
        ] {
            assert!(picture.contains(label), "{label} missing");
        }
        // Time ticks: more than the two ends of the axis.
        let ticks = ["100", "200", "300", "400", "500"];
        assert!(
            ticks
                .iter()
                .all(|t| picture.contains(&format!(">\n{t}\n<"))),
            "time ticks"
        );
        // Replica ticks are whole numbers only.
        assert!(!picture.contains(">\n0.5\n<") && !picture.contains(">\n1.5\n<"));
        assert!(
            picture.contains(">\n6\n<"),
            "a whole tick at the top of the replica axis (5 replicas at most, and one above)"
        );
        assert!(!picture.contains("NaN"));
        assert!(svg(&[], "empty").unwrap().contains("no samples"));
    }
}
