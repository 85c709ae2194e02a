//! A real Prometheus (Debian's package) scraping an exporter whose values the test sets.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{Router, extract::State, routing::get};

/// Serves `/metrics` with whatever series the test last set.
#[derive(Clone, Default)]
pub struct Exporter {
    series: Arc<Mutex<BTreeMap<String, String>>>,
    pub addr: Option<SocketAddr>,
}

impl Exporter {
    pub async fn start() -> Self {
        let mut exporter = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        exporter.addr = Some(listener.local_addr().unwrap());
        let app = Router::new()
            .route("/metrics", get(render))
            .with_state(exporter.series.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        exporter
    }

    /// Sets one series, e.g. `set("llm_load{test=\"a\"}", 2.0)`.
    pub fn set(&self, series: &str, value: f64) {
        self.series
            .lock()
            .unwrap()
            .insert(series.to_owned(), format_value(value));
    }

    /// Removes a series: Prometheus marks it stale and queries see an empty vector.
    pub fn remove(&self, series: &str) {
        self.series.lock().unwrap().remove(series);
    }
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

async fn render(State(series): State<Arc<Mutex<BTreeMap<String, String>>>>) -> String {
    let series = series.lock().unwrap();
    let mut out = String::new();
    for (name, value) in series.iter() {
        out.push_str(&format!("{name} {value}\n"));
    }
    out
}

/// One plain-HTTP job named `test` scraping `targets`.
fn static_job(targets: &[std::net::SocketAddr]) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "  - job_name: test\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    )
}

/// A Prometheus server on a free loopback port, stopped when dropped.
pub struct Prometheus {
    child: Child,
    pub url: String,
    dir: PathBuf,
    /// A client that can reach it (for a secured server: trusting its CA, with a client
    /// certificate and credentials).
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus scraping `exporter` every second and waits until it is ready.
    pub async fn start(exporter: &Exporter) -> Self {
        Self::scraping(&[exporter.addr.unwrap()]).await
    }

    /// Starts Prometheus scraping `targets` every second and waits until it is ready.
    pub async fn scraping(targets: &[std::net::SocketAddr]) -> Self {
        Self::launch(&static_job(targets), None, &[]).await
    }

    /// [`Prometheus::scraping`], evaluating the rules of `rule_files` every second.
    pub async fn scraping_with_rules(
        targets: &[std::net::SocketAddr],
        rule_files: &[std::path::PathBuf],
    ) -> Self {
        Self::launch(&static_job(targets), None, rule_files).await
    }

    /// Starts Prometheus with these `scrape_configs` entries (YAML list items, indented by
    /// two spaces), scraping every second.
    pub async fn with_scrape_configs(scrape_configs: &str) -> Self {
        Self::launch(scrape_configs, None, &[]).await
    }

    /// [`Prometheus::with_scrape_configs`] on the upstream Prometheus that
    /// `tests/cluster/build.sh prometheus` builds: Debian's is built without Kubernetes service
    /// discovery.
    pub async fn upstream_with_scrape_configs(scrape_configs: &str) -> Self {
        let binary = super::repo_root().join("target/cluster/bin/prometheus");
        assert!(
            binary.exists(),
            "{} is missing: run tests/cluster/build.sh prometheus (make test does)",
            binary.display()
        );
        Self::launch_binary(binary, scrape_configs, None, &[]).await
    }

    /// Starts Prometheus scraping `exporter` behind `web_config` (the `--web.config.file`
    /// contents: TLS, client certificates, basic auth), reached by the tests through `http` at
    /// https://localhost.
    pub async fn secured(exporter: &Exporter, web_config: &str, http: reqwest::Client) -> Self {
        Self::launch(
            &static_job(&[exporter.addr.unwrap()]),
            Some((web_config, http)),
            &[],
        )
        .await
    }

    async fn launch(
        scrape_configs: &str,
        web: Option<(&str, reqwest::Client)>,
        rule_files: &[std::path::PathBuf],
    ) -> Self {
        Self::launch_binary(which_prometheus(), scrape_configs, web, rule_files).await
    }

    async fn launch_binary(
        binary: PathBuf,
        scrape_configs: &str,
        web: Option<(&str, reqwest::Client)>,
        rule_files: &[std::path::PathBuf],
    ) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("llmscaler-prom-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let rules: String = rule_files
            .iter()
            .map(|f| format!("  - {}\n", f.display()))
            .collect();
        let rules = match rules.is_empty() {
            true => String::new(),
            false => format!("rule_files:\n{rules}"),
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rules}scrape_configs:\n{scrape_configs}"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let mut command = Command::new(binary);
        let (scheme, http) = match web {
            Some((web_config, http)) => {
                std::fs::write(dir.join("web.yml"), web_config).unwrap();
                command.arg(format!(
                    "--web.config.file={}",
                    dir.join("web.yml").display()
                ));
                ("https://localhost", http)
            }
            None => ("http://127.0.0.1", reqwest::Client::new()),
        };
        let child = command
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--query.lookback-delta=5s")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus ({e}); `make test` installs Debian's prometheus package"));
        let prometheus = Self {
            child,
            url: format!("{scheme}:{port}"),
            dir,
            http,
        };
        let http = prometheus.http.clone();
        let ready = format!("{}/-/ready", prometheus.url);
        super::eventually(
            "Prometheus to be ready",
            Duration::from_secs(60),
            || async {
                let r = http.get(&ready).send().await.ok()?;
                r.status().is_success().then_some(())
            },
        )
        .await;
        prometheus
    }

    /// The JSON answer of an instant query, if Prometheus gave one.
    pub async fn instant(&self, query: &str) -> Option<serde_json::Value> {
        let url = format!("{}/api/v1/query", self.url);
        self.http
            .get(&url)
            .query(&[("query", query)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    }

    /// Waits until `query` evaluates to `want` (Prometheus has scraped the latest values).
    pub async fn wait_for_value(&self, query: &str, want: f64) {
        super::eventually(
            &format!("{query} == {want} in Prometheus"),
            Duration::from_secs(30),
            || async {
                let body = self.instant(query).await?;
                let value = body
                    .pointer("/data/result/0/value/1")?
                    .as_str()?
                    .parse::<f64>()
                    .ok()?;
                (value == want || (value.is_nan() && want.is_nan())).then_some(())
            },
        )
        .await;
    }

    /// Waits until `query` returns an empty vector.
    pub async fn wait_for_empty(&self, query: &str) {
        super::eventually(
            &format!("{query} to be empty"),
            Duration::from_secs(30),
            || async {
                let body = self.instant(query).await?;
                body.pointer("/data/result")?
                    .as_array()?
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
    }

    /// Stops the server (to test a Prometheus that is down).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn which_prometheus() -> PathBuf {
    for candidate in ["/usr/bin/prometheus", "/usr/local/bin/prometheus"] {
        if std::path::Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!("prometheus is not installed; `make test` installs Debian's prometheus package")
}
