//! The fleet as Prometheus scrapes it: vLLM's metric names, one series per pod, labelled the way
//! a ServiceMonitor with podTargetLabels would label them.

use std::fmt::Write;

use crate::fleet::{Fleet, TTFT_BUCKETS};

/// Labels every series carries besides `pod`.
#[derive(Debug, Clone)]
pub struct Labels {
    pub namespace: String,
    pub app: String,
}

/// The Prometheus text exposition of every pod, plus the fleet's own pending count.
pub fn render(fleet: &Fleet, labels: &Labels) -> String {
    let mut out = String::with_capacity(4096);
    let pods: Vec<_> = fleet.pods().collect();
    let base = |pod: &str| {
        format!(
            "pod=\"{}\",namespace=\"{}\",app=\"{}\"",
            escape(pod),
            escape(&labels.namespace),
            escape(&labels.app)
        )
    };
    let mut family = |name: &str, kind: &str, help: &str, lines: Vec<String>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
    };
    family(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        pods.iter()
            .map(|p| {
                format!(
                    "vllm:num_requests_running{{{}}} {}",
                    base(p.name),
                    p.running
                )
            })
            .collect(),
    );
    family(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        pods.iter()
            .map(|p| {
                format!(
                    "vllm:num_requests_waiting{{{}}} {}",
                    base(p.name),
                    p.waiting
                )
            })
            .collect(),
    );
    family(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        pods.iter()
            .map(|p| {
                format!(
                    "vllm:kv_cache_usage_perc{{{}}} {}",
                    base(p.name),
                    p.kv_usage
                )
            })
            .collect(),
    );
    family(
        "vllm:prompt_tokens",
        "counter",
        "Number of prefill tokens processed.",
        pods.iter()
            .map(|p| {
                format!(
                    "vllm:prompt_tokens_total{{{}}} {}",
                    base(p.name),
                    p.counters.prompt_tokens
                )
            })
            .collect(),
    );
    family(
        "vllm:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        pods.iter()
            .map(|p| {
                format!(
                    "vllm:generation_tokens_total{{{}}} {}",
                    base(p.name),
                    p.counters.generation_tokens.floor()
                )
            })
            .collect(),
    );
    let mut ttft = Vec::new();
    for p in &pods {
        let labels = base(p.name);
        for (i, le) in TTFT_BUCKETS.iter().enumerate() {
            ttft.push(format!(
                "vllm:time_to_first_token_seconds_bucket{{{labels},le=\"{le}\"}} {}",
                p.counters.ttft_buckets[i]
            ));
        }
        ttft.push(format!(
            "vllm:time_to_first_token_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
            p.counters.ttft_buckets[TTFT_BUCKETS.len()]
        ));
        ttft.push(format!(
            "vllm:time_to_first_token_seconds_sum{{{labels}}} {}",
            p.counters.ttft_sum
        ));
        ttft.push(format!(
            "vllm:time_to_first_token_seconds_count{{{labels}}} {}",
            p.counters.ttft_count
        ));
    }
    family(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
        ttft,
    );
    family(
        "llmsim:pending_requests",
        "gauge",
        "Requests that arrived while no pod could take them (the gateway's queue).",
        vec![format!(
            "llmsim:pending_requests{{namespace=\"{}\",app=\"{}\"}} {}",
            escape(&labels.namespace),
            escape(&labels.app),
            fleet.pending()
        )],
    );
    out
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

    #[test]
    fn every_pod_has_every_vllm_series() {
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
        };
        let text = render(&fleet, &labels);
        for pod in ["vllm-a", "vllm-b"] {
            let l = format!("pod=\"{pod}\",namespace=\"ml\",app=\"llama\\\"3\"");
            for series in [
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc",
                "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total",
                "vllm:time_to_first_token_seconds_count",
                "vllm:time_to_first_token_seconds_sum",
            ] {
                assert!(
                    text.contains(&format!("{series}{{{l}}} ")),
                    "{series} for {pod}:\n{text}"
                );
            }
            assert!(text.contains(&format!(
                "vllm:time_to_first_token_seconds_bucket{{{l},le=\"+Inf\"}}"
            )));
        }
        assert_eq!(
            text.matches("# TYPE vllm:time_to_first_token_seconds histogram")
                .count(),
            1
        );
        assert!(text.contains("llmsim:pending_requests{namespace=\"ml\",app=\"llama\\\"3\"} 0"));
        // Every sample line parses as name{labels} value.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
