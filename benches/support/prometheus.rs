//! A real Prometheus (Debian's package) for the benchmarks, scraping an exporter of one series
//! per model, and what it says about the queries it was sent: its own
//! `prometheus_http_requests_total{handler="/api/v1/query"}`, by status code.

#![allow(dead_code)] // not every benchmark uses every reading

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Serves `vllm:kv_cache_usage_perc{namespace="bench", app="model-<i>"}` for every model.
pub struct Exporter {
    pub addr: std::net::SocketAddr,
}

impl Exporter {
    pub async fn start(models: usize, value: f64) -> Self {
        let mut text = String::with_capacity(models * 70);
        for i in 0..models {
            text.push_str(&format!(
                "vllm:kv_cache_usage_perc{{namespace=\"bench\",app=\"model-{i}\"}} {value}\n"
            ));
        }
        Self::serving(text).await
    }

    /// Serves `text` (the exposition format) on /metrics.
    pub async fn serving(text: String) -> Self {
        let text = Arc::new(text);
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let text = text.clone();
                async move { (*text).clone() }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr }
    }
}

/// A Prometheus process on a free loopback port, with its defaults (notably
/// `--query.max-concurrency=20`), killed when dropped.
pub struct Prometheus {
    child: Child,
    pub url: String,
    http: reqwest::Client,
}

impl Prometheus {
    pub async fn scraping(target: std::net::SocketAddr) -> Self {
        let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or_else(|| {
                super::give_up("prometheus is not installed: run `make deps` (Debian's package)")
            });
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("target/bench/prometheus-{port}"));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 5s\nscrape_configs:\n  - job_name: models\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let prometheus = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !prometheus.ready().await {
            if Instant::now() > deadline {
                super::give_up(&format!(
                    "Prometheus did not become ready; see {}",
                    dir.join("prometheus.log").display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        prometheus
    }

    async fn ready(&self) -> bool {
        self.http
            .get(format!("{}/-/ready", self.url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until an instant query of `count(<metric>)` says `models`.
    pub async fn wait_for_series(&self, metric: &str, models: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let answer: Option<serde_json::Value> = async {
                self.http
                    .get(format!("{}/api/v1/query", self.url))
                    .query(&[("query", format!("count({metric})"))])
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()
            }
            .await;
            let count = answer
                .as_ref()
                .and_then(|a| a["data"]["result"][0]["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok());
            if count == Some(models as f64) {
                return;
            }
            if Instant::now() > deadline {
                super::give_up(&format!(
                    "Prometheus never had {models} series of {metric} (last answer {answer:?})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Instant queries answered so far, by HTTP status code, from Prometheus's own counters.
    pub async fn queries(&self) -> QueryCounts {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        QueryCounts::parse(&text)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `prometheus_http_requests_total{handler="/api/v1/query"}` by code.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryCounts(pub BTreeMap<String, f64>);

impl QueryCounts {
    pub fn parse(text: &str) -> Self {
        let mut by_code = BTreeMap::new();
        for (labels, value) in super::samples(text, "prometheus_http_requests_total") {
            if labels.get("handler").map(String::as_str) == Some("/api/v1/query") {
                let code = labels.get("code").cloned().unwrap_or_default();
                *by_code.entry(code).or_insert(0.0) += value;
            }
        }
        Self(by_code)
    }

    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }

    /// Answers that turned a query away: 503 (unavailable, timed out, cancelled) and 429.
    pub fn rejected(&self) -> f64 {
        self.0
            .iter()
            .filter(|(code, _)| code.as_str() == "503" || code.as_str() == "429")
            .map(|(_, n)| n)
            .sum()
    }

    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(code, n)| (code.clone(), n - before.0.get(code).copied().unwrap_or(0.0)))
                .collect(),
        )
    }
}

/// Prometheus's query counters read every `every` in the background, for the busiest second.
pub struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, f64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub fn start(prometheus: &Prometheus, every: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (url, http, into) = (
            prometheus.url.clone(),
            prometheus.http.clone(),
            samples.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                if let Ok(response) = http.get(format!("{url}/metrics")).send().await
                    && let Ok(text) = response.text().await
                {
                    let total = QueryCounts::parse(&text).total();
                    into.lock().unwrap().push((Instant::now(), total));
                }
                tokio::time::sleep(every).await;
            }
        });
        Self { samples, task }
    }

    /// The highest query rate over any `span` (queries per second), and the mean rate.
    pub fn stop(self, span: Duration) -> (f64, f64) {
        self.task.abort();
        let samples = self.samples.lock().unwrap().clone();
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            return (0.0, 0.0);
        };
        let mean = (last.1 - first.1) / last.0.duration_since(first.0).as_secs_f64().max(1e-9);
        let mut peak: f64 = 0.0;
        for (i, (at, total)) in samples.iter().enumerate() {
            if let Some((later_at, later_total)) = samples[i..]
                .iter()
                .find(|(t, _)| t.duration_since(*at) >= span)
            {
                let rate = (later_total - total) / later_at.duration_since(*at).as_secs_f64();
                peak = peak.max(rate);
            }
        }
        (peak, mean)
    }
}
