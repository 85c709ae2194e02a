//! The fleet as Prometheus scrapes it: vLLM 0.33's metric families (names, types, help texts,
//! labels, buckets), one engine per pod, each series also labelled the way a ServiceMonitor with
//! podTargetLabels would label it. sim/tests/vllm_exposition.rs holds this against a real vLLM
//! scrape.

use std::fmt::{Display, Write};

use crate::fleet::{Fleet, Histogram, PodView};

/// Labels every vLLM series carries besides `pod` and `engine`.
#[derive(Debug, Clone)]
pub struct Labels {
    pub namespace: String,
    pub app: String,
    /// vLLM's `model_name` label: the served model name.
    pub model_name: String,
}

/// vLLM creates a `request_success_total` child for each of these up front, so a fresh engine
/// already shows them at 0; in vLLM's order (`vllm/v1/engine/__init__.py`, `FinishReason`).
const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];

/// One pod's value of a family without labels of its own.
type PodValue = fn(&PodView<'_>) -> String;
/// One pod's histogram of a family.
type PodHistogram = for<'a> fn(&PodView<'a>) -> &'a Histogram;

/// The Prometheus text exposition of every pod, plus the fleet's own pending count.
pub fn render(fleet: &Fleet, labels: &Labels) -> String {
    let mut out = Out::default();
    let pods: Vec<_> = fleet.pods().collect();
    let pod_labels: Vec<PodLabels> = pods.iter().map(|p| PodLabels::new(p, labels)).collect();
    // Gauges and counters with no labels of their own, in vLLM's registration order.
    let plain: [(&str, &str, &str, PodValue); 5] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            |p| p.running.to_string(),
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            |p| p.waiting.to_string(),
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            |p| p.kv_usage.to_string(),
        ),
        // prometheus_client's text format names a counter's HELP/TYPE after its `_total`
        // sample, so Prometheus finds metadata for the series it stores.
        (
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            |p| p.counters.prompt_tokens.to_string(),
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            |p| p.counters.generation_tokens.to_string(),
        ),
    ];
    for (name, kind, help, value) in plain {
        out.family(name, kind, help);
        for (p, l) in pods.iter().zip(&pod_labels) {
            out.sample(name, &l.with(&[]), value(p));
        }
    }
    out.family(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
    );
    for (p, l) in pods.iter().zip(&pod_labels) {
        for reason in FINISHED_REASONS {
            // Simulated requests only end by producing all their tokens.
            let value = if reason == "stop" {
                p.counters.finished
            } else {
                0
            };
            out.sample(
                "vllm:request_success_total",
                &l.with(&[("finished_reason", reason)]),
                value,
            );
        }
    }
    let histograms: [(&str, &str, PodHistogram); 4] = [
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |p| &p.counters.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |p| &p.counters.itl,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            |p| &p.counters.e2e,
        ),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            |p| &p.counters.queue,
        ),
    ];
    for (name, help, of) in histograms {
        out.family(name, "histogram", help);
        for (p, l) in pods.iter().zip(&pod_labels) {
            out.histogram(name, l, of(p));
        }
    }
    out.family(
        "llmsim:pending_requests",
        "gauge",
        "Requests that arrived while no pod could take them (the gateway's queue).",
    );
    out.sample(
        "llmsim:pending_requests",
        &format!(
            "namespace=\"{}\",app=\"{}\"",
            escape(&labels.namespace),
            escape(&labels.app)
        ),
        fleet.pending(),
    );
    out.text
}

#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl Display) {
        let _ = writeln!(self.text, "{name}{{{labels}}} {value}");
    }

    /// Buckets, then `_count`, then `_sum`, in prometheus_client's order.
    fn histogram(&mut self, name: &str, labels: &PodLabels, h: &Histogram) {
        let bucket = format!("{name}_bucket");
        for (le, count) in h.bounds.iter().zip(&h.buckets) {
            self.sample(&bucket, &labels.with(&[("le", &bound(*le))]), count);
        }
        self.sample(&bucket, &labels.with(&[("le", "+Inf")]), h.count);
        self.sample(&format!("{name}_count"), &labels.with(&[]), h.count);
        self.sample(&format!("{name}_sum"), &labels.with(&[]), h.sum);
    }
}

/// One pod's labels, escaped once.
struct PodLabels {
    model_name: String,
    /// What the scrape adds: the simulator serves every pod from one endpoint, so it sets these
    /// itself, as a ServiceMonitor with podTargetLabels would store them.
    target: String,
}

impl PodLabels {
    fn new(pod: &PodView<'_>, labels: &Labels) -> Self {
        Self {
            model_name: escape(&labels.model_name),
            target: format!(
                "pod=\"{}\",namespace=\"{}\",app=\"{}\"",
                escape(pod.name),
                escape(&labels.namespace),
                escape(&labels.app)
            ),
        }
    }

    /// vLLM's own labels as prometheus_client writes them (sorted by name: `engine`, then the
    /// family's own, which all sort before `model_name`), then the target's. A pod is one
    /// engine, so `engine` is always "0".
    fn with(&self, own: &[(&str, &str)]) -> String {
        let mut text = String::from("engine=\"0\"");
        for (name, value) in own {
            let _ = write!(text, ",{name}=\"{}\"", escape(value));
        }
        let _ = write!(text, ",model_name=\"{}\",{}", self.model_name, self.target);
        text
    }
}

/// A bucket bound as prometheus_client writes it (Python's float repr: `1.0`, `0.025`), so a
/// selector on `le` written against vLLM matches the simulator too (Prometheus before 3.0 does
/// not normalise `le`).
fn bound(le: f64) -> String {
    if le.fract() == 0.0 {
        format!("{le:.1}")
    } else {
        le.to_string()
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fleet::FleetConfig;
    use crate::trace::Trace;

    fn rendered() -> String {
        let mut fleet = Fleet::new(FleetConfig {
            startup_delay: Duration::ZERO,
            ..FleetConfig::default()
        });
        fleet.set_pods(["vllm-a", "vllm-b"]);
        let trace = Trace::parse("0 20\n").unwrap();
        for _ in 0..50 {
            fleet.step(Duration::from_millis(100), &trace);
        }
        let labels = Labels {
            namespace: "ml".into(),
            app: "llama\"3".into(),
            model_name: "org/model".into(),
        };
        render(&fleet, &labels)
    }

    #[test]
    fn every_pod_has_every_vllm_series() {
        let text = rendered();
        for pod in ["vllm-a", "vllm-b"] {
            let target = format!("pod=\"{pod}\",namespace=\"ml\",app=\"llama\\\"3\"");
            let l = format!("engine=\"0\",model_name=\"org/model\",{target}");
            for series in [
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc",
                "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total",
                "vllm:time_to_first_token_seconds_count",
                "vllm:time_to_first_token_seconds_sum",
                "vllm:inter_token_latency_seconds_count",
                "vllm:e2e_request_latency_seconds_count",
                "vllm:request_queue_time_seconds_count",
            ] {
                assert!(
                    text.contains(&format!("{series}{{{l}}} ")),
                    "{series} for {pod}:\n{text}"
                );
            }
            for (histogram, last) in [
                ("time_to_first_token_seconds", "2560.0"),
                ("inter_token_latency_seconds", "80.0"),
                ("e2e_request_latency_seconds", "7680.0"),
                ("request_queue_time_seconds", "7680.0"),
            ] {
                for le in [last, "+Inf"] {
                    let series = format!(
                        "vllm:{histogram}_bucket{{engine=\"0\",le=\"{le}\",model_name=\"org/model\",{target}}} "
                    );
                    assert!(text.contains(&series), "{series}:\n{text}");
                }
            }
            assert!(text.contains(&format!(
                "vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"org/model\",{target}}} "
            )));
        }
        assert_eq!(
            text.matches("# TYPE vllm:time_to_first_token_seconds histogram")
                .count(),
            1
        );
        assert!(text.contains("# TYPE vllm:prompt_tokens_total counter"));
        assert!(text.contains("llmsim:pending_requests{namespace=\"ml\",app=\"llama\\\"3\"} 0"));
        // Every sample line parses as name{labels} value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn bounds_are_written_as_python_writes_floats() {
        assert_eq!(bound(1.0), "1.0");
        assert_eq!(bound(2560.0), "2560.0");
        assert_eq!(bound(0.001), "0.001");
        assert_eq!(bound(0.025), "0.025");
        assert_eq!(bound(7.5), "7.5");
    }
}
