//! An SVG picture of a run: load and queue, replicas, KV-cache use, one panel each over time.

use std::fmt::Write;

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
}

const WIDTH: f64 = 900.0;
const PANEL: f64 = 170.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 40.0;

struct Series<'a> {
    label: &'a str,
    color: &'a str,
    values: Vec<(f64, f64)>,
}

/// The picture, or an empty-run note when there are no samples.
pub fn svg(samples: &[Sample], title: &str) -> String {
    let height = TOP + 3.0 * (PANEL + GAP);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="24" font-size="16">{}</text>"#,
        escape(title)
    );
    if samples.is_empty() {
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="{}">no samples</text>"#,
            TOP + 20.0
        );
        out.push_str("</svg>\n");
        return out;
    }
    let t_max = samples.iter().map(|s| s.t).fold(0.0, f64::max).max(1.0);
    let pick = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| f(s).map(|v| (s.t, v)))
            .collect()
    };
    let panels = [
        (
            "load (requests/s) and queue",
            vec![
                Series {
                    label: "load",
                    color: "#1f77b4",
                    values: pick(&|s| Some(s.load)),
                },
                Series {
                    label: "queued",
                    color: "#d62728",
                    values: pick(&|s| Some(s.queued)),
                },
            ],
        ),
        (
            "replicas",
            vec![
                Series {
                    label: "pods",
                    color: "#2ca02c",
                    values: pick(&|s| Some(s.pods)),
                },
                Series {
                    label: "spec.replicas",
                    color: "#9467bd",
                    values: pick(&|s| s.spec),
                },
                Series {
                    label: "desired",
                    color: "#ff7f0e",
                    values: pick(&|s| s.desired),
                },
            ],
        ),
        (
            "KV-cache use (%)",
            vec![Series {
                label: "kv",
                color: "#8c564b",
                values: pick(&|s| Some(s.kv * 100.0)),
            }],
        ),
    ];
    for (i, (name, series)) in panels.iter().enumerate() {
        let y0 = TOP + i as f64 * (PANEL + GAP);
        panel(&mut out, y0, name, series, t_max);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, y0: f64, name: &str, series: &[Series<'_>], t_max: f64) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let v_max = series
        .iter()
        .flat_map(|s| s.values.iter().map(|(_, v)| *v))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let x = |t: f64| LEFT + plot_w * t / t_max;
    let y = |v: f64| y0 + PANEL - PANEL * (v / v_max).clamp(0.0, 1.0);
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL}" fill="none" stroke="#999"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}">{}</text>"#,
        y0 - 6.0,
        escape(name)
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="end">{:.0}</text>"#,
        LEFT - 6.0,
        y0 + 10.0,
        v_max
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
        LEFT - 6.0,
        y0 + PANEL
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="end">{:.0} s</text>"#,
        WIDTH - RIGHT,
        y0 + PANEL + 14.0,
        t_max
    );
    let mut legend_x = LEFT + 200.0;
    for s in series {
        if s.values.is_empty() {
            continue;
        }
        let points: Vec<String> = s
            .values
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
            s.color,
            points.join(" ")
        );
        let _ = writeln!(
            out,
            r#"<text x="{legend_x}" y="{}" fill="{}">{}</text>"#,
            y0 - 6.0,
            s.color,
            escape(s.label)
        );
        legend_x += 110.0;
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_becomes_three_panels_of_lines() {
        let samples: Vec<Sample> = (0..100)
            .map(|i| Sample {
                t: f64::from(i),
                load: f64::from(i % 20),
                queued: 0.0,
                pods: f64::from(1 + i / 20),
                spec: Some(f64::from(1 + i / 20)),
                desired: (i > 10).then_some(f64::from(2 + i / 20)),
                kv: 0.5,
            })
            .collect();
        let picture = svg(&samples, "burst <test>");
        assert!(picture.starts_with("<svg"));
        assert!(picture.trim_end().ends_with("</svg>"));
        assert_eq!(picture.matches("<polyline").count(), 6);
        assert!(picture.contains("burst &lt;test&gt;"));
        assert!(!picture.contains("NaN"));
        assert!(svg(&[], "empty").contains("no samples"));
    }
}
