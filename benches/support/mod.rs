//! What the benchmarks share: the local control plane's client and readings of a process.

pub mod prometheus;

use std::time::Duration;

pub fn kubeconfig_path() -> std::path::PathBuf {
    std::env::var_os("KUBECONFIG").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/cluster/kubeconfig"),
        std::path::PathBuf::from,
    )
}

/// The local control plane (`make bench` starts it).
pub async fn cluster_client() -> kube::Client {
    let path = kubeconfig_path();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (make cluster-up)", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// User + system CPU time of a process so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz = 100; // USER_HZ on Linux
    Duration::from_millis(ticks * 1000 / hz)
}

/// A field of /proc/PID/status in KiB (VmRSS: resident now, VmHWM: the peak so far).
#[allow(dead_code)] // not every benchmark reads memory
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} missing from /proc/{pid}/status"))
}

/// Stops the benchmark with a message instead of a panic's backtrace: the cluster is not in the
/// state it needs, and the message says what to do.
pub fn give_up(message: &str) -> ! {
    eprintln!("bench: {message}");
    std::process::exit(2)
}

/// The namespace `name`, created if missing and otherwise reused as it is. Benchmarks never
/// delete their namespaces: on the minimal control plane no kube-controller-manager ever
/// finishes a deletion, and the next run would find the namespace stuck terminating.
#[allow(dead_code)] // not every benchmark needs a namespace
pub async fn ensure_namespace(client: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": name } })).unwrap();
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => return,
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => give_up(&format!("cannot create namespace {name}: {e}")),
    }
    let existing = namespaces
        .get(name)
        .await
        .unwrap_or_else(|e| give_up(&format!("cannot read namespace {name}: {e}")));
    if existing.metadata.deletion_timestamp.is_some() {
        give_up(&format!(
            "namespace {name} is being deleted (an older run deleted it) and, without \
             kube-controller-manager, that never finishes: start from a fresh control plane with \
             `make cluster-down`, then `make bench`"
        ));
    }
}

/// The samples of `metric` in a Prometheus text exposition: each series' labels and value. Label
/// values holding commas or escaped quotes are not expected in the counters read here.
#[allow(dead_code)] // not every benchmark reads an exposition
pub fn samples(text: &str, metric: &str) -> Vec<(std::collections::BTreeMap<String, String>, f64)> {
    let prefix = format!("{metric}{{");
    text.lines()
        .filter_map(|line| {
            let (labels, value) = line.strip_prefix(&prefix)?.rsplit_once("} ")?;
            let labels = labels
                .split(',')
                .filter_map(|kv| {
                    let (name, value) = kv.split_once("=\"")?;
                    Some((name.to_owned(), value.trim_end_matches('"').to_owned()))
                })
                .collect();
            Some((labels, value.trim().parse::<f64>().ok()?))
        })
        .collect()
}
