//! The `LLMScaler` resource (autoscaling.modelsphere.dev/v1alpha1).
//!
//! The doc comments here become the schema descriptions that `kubectl explain` shows, so they are
//! written for the person filling in the YAML. Every admission rule lives next to the field it
//! guards; `validation.rs` holds the same rules for code paths that never pass admission.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of an LLMScaler: which workload to scale, where its signal comes from, and the
/// rails every recommendation has to stay within.
// Printer columns repeat `type_ = "integer"`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "autoscaling.modelsphere.dev",
    version = "v1alpha1",
    kind = "LLMScaler",
    plural = "llmscalers",
    singular = "llmscaler",
    namespaced,
    status = "LLMScalerStatus",
    derive = "PartialEq",
    doc = "LLMScaler drives the replica count of one LLM inference workload from token-serving signals (KV-cache use, queue depth) or from an external planner's decision.",
    shortname = "llms",
    category = "all",
    category = "autoscaling",
    printcolumn(
        name = "Reference",
        type_ = "string",
        json_path = ".spec.targetRef.name",
        description = "The workload scaled (its kind is in -o wide)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether the last sync read the target and its signal"
    ),
    printcolumn(
        name = "Value",
        type_ = "string",
        json_path = ".status.currentMetrics[0].value",
        description = "The first metric's value at the last sync (the decision under Custom)"
    ),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.metrics[0].target",
        description = "The first metric's per-replica target"
    ),
    printcolumn(
        name = "MinReplicas",
        type_ = "integer",
        json_path = ".spec.minReplicas",
        description = "Lower replica bound"
    ),
    printcolumn(
        name = "MaxReplicas",
        type_ = "integer",
        json_path = ".spec.maxReplicas",
        description = "Upper replica bound"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredReplicas",
        description = "Last recommendation after clamping and stabilization"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The target's spec.replicas after the last sync: the count written (pods may still be starting)"
    ),
    printcolumn(
        name = "ReadyReplicas",
        type_ = "integer",
        json_path = ".status.currentReplicas",
        description = "Ready replicas of the target at the last sync"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Kind",
        type_ = "string",
        json_path = ".spec.targetRef.kind",
        description = "Kind of the workload scaled",
        priority = 1
    ),
    printcolumn(
        name = "Metric",
        type_ = "string",
        json_path = ".status.currentMetrics[0].name",
        description = "The first metric's name",
        priority = 1
    ),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ScalingActive\")].reason",
        description = "Why the signal does or does not drive the count (ScalingActive)",
        priority = 1
    ),
    printcolumn(
        name = "Limited",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ScalingLimited\")].reason",
        description = "What bounds the count (ScalingLimited)",
        priority = 1
    ),
    printcolumn(
        name = "LastScale",
        type_ = "date",
        json_path = ".status.lastScaleTime",
        description = "When the operator last changed the replica count",
        priority = 1
    ),
    printcolumn(
        name = "TTFT",
        type_ = "string",
        json_path = ".spec.objective.ttftSeconds",
        description = "The objective's time to first token, in seconds",
        priority = 1
    ),
    printcolumn(
        name = "Objective",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ObjectiveMet\")].reason",
        description = "Whether the objective held over the last minute (ObjectiveMet)",
        priority = 1
    ),
    printcolumn(
        name = "Attained",
        type_ = "string",
        json_path = ".status.objective.attainment",
        description = "Percent of the last minute's requests that met the objective, at least",
        priority = 1
    ),
    printcolumn(
        name = "PerPod",
        type_ = "string",
        json_path = ".status.objective.requestsPerPod",
        description = "Requests in flight per pod the objective holds at, as learned",
        priority = 1
    )
)]
#[x_kube(
    validation = Rule::new("self.minReplicas <= self.maxReplicas")
        .message("minReplicas must not be greater than maxReplicas: lower minReplicas or raise maxReplicas")
        .field_path(".minReplicas"),
    validation = Rule::new("self.metricProvider != 'Prometheus' || has(self.objective) || (has(self.metrics) && size(self.metrics) > 0)")
        .message("metrics is required when metricProvider is Prometheus: add at least one entry with a query and a target, set an objective, or set metricProvider: Custom")
        .field_path(".metrics"),
    validation = Rule::new("!has(self.objective) || self.metricProvider == 'Prometheus'")
        .message("objective works with metricProvider Prometheus: the operator reads the pods' latency histograms from serverAddress")
        .field_path(".objective"),
    validation = Rule::new("self.metricProvider != 'Custom' || has(self.customProvider)")
        .message("customProvider is required when metricProvider is Custom: set customProvider.serviceId to the service whose decision should drive this target")
        .field_path(".customProvider"),
    validation = Rule::new("!has(self.serverTLS) || self.serverAddress.startsWith('https://')")
        .message("serverTLS needs an https:// serverAddress: a CA and a client certificate mean nothing over plain HTTP")
        .field_path(".serverTLS"),
    validation = Rule::new("!has(self.scaleToZero) || self.minReplicas == 0")
        .message("scaleToZero needs minReplicas: 0: set minReplicas to 0, or remove scaleToZero to keep a floor")
        .field_path(".scaleToZero"),
    validation = Rule::new("!has(self.scaleToZero) || self.metricProvider == 'Prometheus'")
        .message("scaleToZero works with metricProvider Prometheus: under Custom the decision server's own count (0 or more) wakes and stops the target")
        .field_path(".scaleToZero"),
    validation = Rule::new("!has(self.fallback) || self.fallback.replicas <= self.maxReplicas")
        .message("fallback.replicas must not be greater than maxReplicas: lower fallback.replicas or raise maxReplicas")
        .field_path(".fallback.replicas"),
    validation = Rule::new("!has(self.recurrence) || (self.metricProvider == 'Prometheus' && (has(self.objective) ? !has(self.metrics) || size(self.metrics) == 0 : has(self.metrics) && size(self.metrics) == 1))")
        .message("recurrence remembers the load of one signal: use it with an objective and no metrics, or with exactly one metric, under metricProvider Prometheus")
        .field_path(".recurrence"),
    validation = Rule::new("!has(self.metrics) || self.metrics.all(m, !has(m.name) || self.metrics.exists_one(o, has(o.name) && o.name == m.name))")
        .message("metrics[].name must be unique within the scaler: give each metric its own name")
        .field_path(".metrics"),
)]
#[serde(rename_all = "camelCase")]
pub struct LLMScalerSpec {
    /// The workload whose replica count this scaler drives. It is looked up in the scaler's own
    /// namespace.
    pub target_ref: TargetRef,

    /// Where the scaling signal comes from. Prometheus evaluates spec.metrics and applies the
    /// HPA ratio; Custom asks a decision server for an absolute replica count. The two are
    /// alternatives: there is no fallback from one to the other.
    #[serde(default)]
    pub metric_provider: MetricProvider,

    /// Settings for the decision server. Required when metricProvider is Custom; ignored
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_provider: Option<Box<CustomProvider>>,

    /// Base URL of the signal source. Under Prometheus, the server whose /api/v1/query endpoint
    /// answers the queries (e.g. http://prometheus-operated.monitoring.svc:9090). Under Custom,
    /// the decision server.
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''")
        .message("serverAddress must be an http:// or https:// URL with a host, e.g. http://prometheus-operated.monitoring.svc:9090"))]
    #[schemars(length(min = 1, max = 2048))]
    pub server_address: String,

    /// Extra HTTP headers sent with every request to serverAddress, e.g. Authorization for a
    /// secured Prometheus. Values are sent as written and never logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_headers: Option<BTreeMap<String, String>>,

    /// Headers whose values live in a Secret of the scaler's namespace, so credentials need not
    /// be written in the spec: every key of the Secret is sent as a header of that name. The
    /// operator needs get on that Secret; it re-reads it at most every 30 seconds. A header set
    /// both here and in serverHeaders is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_headers_from: Option<ServerHeadersFrom>,

    /// TLS to an https:// serverAddress beyond the system's roots: a private CA to trust and a
    /// client certificate to present, each from a Secret of the scaler's namespace (re-read at
    /// most every 30 seconds, so a rotation is picked up). The operator needs get on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "serverTLS")]
    pub server_tls: Option<Box<ServerTls>>,

    /// Credentials for serverAddress from a Secret of the scaler's namespace: basic auth (keys
    /// username and password) or a bearer token, sent as the Authorization header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_auth: Option<Box<ServerAuth>>,

    /// Fewest replicas the scaler will ever ask for. 0 allows scale-to-zero.
    #[schemars(range(min = 0))]
    pub min_replicas: i32,

    /// Most replicas the scaler will ever ask for. 0 together with minReplicas 0 pins the target
    /// at zero.
    #[schemars(range(min = 0))]
    pub max_replicas: i32,

    /// The signals that drive the replica count under the Prometheus provider. Each entry is a
    /// PromQL query and a per-replica target; the largest recommendation across entries wins.
    /// Required (non-empty) under Prometheus, unused under Custom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub metrics: Option<Vec<MetricSpec>>,

    /// The latency this scaler promises the model's users. With it the operator scales on the
    /// requests in flight per pod, against a per-pod capacity it learns from the pods' own
    /// latency histograms while the objective holds, so no per-replica target has to be guessed.
    /// Entries in metrics, if any, still apply with their own fixed targets (the largest
    /// recommendation wins), so they act as floors. Prometheus provider only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<Box<Objective>>,

    /// Seconds between two evaluations of the signal; also the pace of consecutive scale steps.
    #[serde(default = "default_sync_period_seconds")]
    #[schemars(range(min = 1))]
    pub sync_period_seconds: i32,

    /// Seconds before the next attempt when the target is missing or a sync failed; used instead
    /// of syncPeriodSeconds in those cases.
    #[serde(default = "default_retry_period_seconds")]
    #[schemars(range(min = 1))]
    pub retry_period_seconds: i32,

    /// How the fleet grows: a tolerance, a stabilization window and rate policies, as in an
    /// HPA's behavior.scaleUp. The defaults double the fleet or add 4 pods per 15 s, whichever
    /// is more, with no window.
    #[serde(default)]
    pub scale_up: ScaleUp,

    /// How the fleet shrinks: a tolerance, how long to wait before believing a lower signal,
    /// rate policies, how many replicas may go in one step, and which pods go first.
    #[serde(default)]
    pub scale_down: ScaleDown,

    /// Seconds a new pod of the target takes to become useful (scheduled, image pulled, model
    /// loaded, Ready). Scale-up is sized for the demand expected this far ahead. Leave it unset
    /// to use the delay learned from the target's own pods (status.startup); 0 turns the
    /// look-ahead off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub startup_seconds: Option<i32>,

    /// Opt-in: remember the load of each stretch of the day (96 of them, a quarter of an hour
    /// each) and start pods one start-up delay ahead of a rise that came at that time on each of
    /// the last `periods` days, sized at today's capacity, instead of after it shows. A morning
    /// ramp steeper than a start-up delay can carry is otherwise missed at its start every day.
    /// What was seen on fewer days, or never, is left to the measurement; the remembered load
    /// also holds a scale-down off until it passes. Needs one signal: an objective without
    /// metrics, or exactly one metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<Recurrence>,

    /// Scale to zero and wake up again on a signal that exists while no pod runs (a router's or
    /// a gateway's request rate). Requires minReplicas: 0 and the Prometheus provider. Without
    /// it, minReplicas: 0 still lets the metrics scale the target to zero, but a per-pod query has
    /// nothing to measure there and cannot wake it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero: Option<Box<ScaleToZero>>,

    /// Opt-in: after failureThreshold consecutive syncs without a usable signal (every query
    /// failed or empty, or the decision server unusable), run at least `replicas` until the
    /// first good reading. Without it a lost signal holds the fleet where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,

    /// Reserved for preemption support. Accepted and stored, but the controller does not act on
    /// it yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<Preemption>,
}

pub(crate) fn default_sync_period_seconds() -> i32 {
    15
}

pub(crate) fn default_retry_period_seconds() -> i32 {
    10
}

/// A Secret whose keys are header names and whose values are header values.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServerHeadersFrom {
    /// Name of a Secret in the scaler's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// TLS settings for serverAddress.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServerTls {
    /// PEM CA certificates to trust for serverAddress instead of the system's roots (a private
    /// CA, as a managed Prometheus, Thanos or Mimir often has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretKey>,

    /// A kubernetes.io/tls Secret whose tls.crt and tls.key are presented as the client
    /// certificate (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<SecretName>,
}

/// Credentials sent as the Authorization header: exactly one of basic and bearer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.basic) != has(self.bearer)")
    .message("serverAuth takes exactly one of basic and bearer"))]
#[serde(rename_all = "camelCase")]
pub struct ServerAuth {
    /// A Secret with keys username and password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<SecretName>,

    /// A Secret key holding a bearer token (key defaults to token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<SecretKey>,
}

/// A Secret of the scaler's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretName {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// One key of a Secret of the scaler's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,

    /// The key within it; the default is ca.crt for a CA and token for a bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}

/// Identifies the workload to scale. Any kind with spec.replicas and status.readyReplicas works;
/// the rollout guard and cache-aware victim selection apply to Deployments only.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// API group and version of the target, e.g. apps/v1 or leaderworkerset.x-k8s.io/v1.
    #[x_kube(validation = Rule::new("self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$')")
        .message("targetRef.apiVersion must be group/version, e.g. apps/v1 or leaderworkerset.x-k8s.io/v1 (just v1 for the core group)"))]
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,

    /// Kind of the target: Deployment, StatefulSet or LeaderWorkerSet.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,

    /// Name of the target in the scaler's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Source of the scaling signal.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricProvider {
    /// PromQL queries evaluated against serverAddress, combined with the HPA ratio.
    #[default]
    Prometheus,
    /// An absolute replica count read from a decision server.
    Custom,
}

/// One signal and the value each replica should carry.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("!self.target.endsWith('%')")
        .message("metrics[].target must be a plain number on the query's own scale, not a percentage: write \"0.8\" for a 0-1 ratio or \"80\" for a 0-100 series")
        .field_path(".target"),
    validation = Rule::new("self.target.endsWith('%') || self.target.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$')")
        .message("metrics[].target must be a finite positive decimal number such as \"0.8\", \"80\" or \"2.5\"")
        .field_path(".target"),
    validation = Rule::new("!self.target.matches('^[0.]+$')")
        .message("metrics[].target must be greater than zero: a target of 0 would ask for infinite replicas")
        .field_path(".target"),
)]
#[serde(rename_all = "camelCase")]
pub struct MetricSpec {
    /// Short identifier used in logs, events, status and the external metrics API. A DNS-1123
    /// label, unique within the scaler; decision, desired-replicas and metric-<number> are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
            .message("metrics[].name must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. kv-cache"),
        validation = Rule::new("!(self in ['decision', 'desired-replicas', 'objective']) && !self.matches('^metric-[0-9]+$')")
            .message("metrics[].name must not be decision, desired-replicas, objective or metric-<number>: the external metrics API gives those names to the decision, the recommendation, the objective's reading and unnamed metrics"),
    )]
    #[schemars(length(max = 63))]
    pub name: Option<String>,

    /// PromQL that returns exactly one aggregated, per-replica value, e.g.
    /// avg(avg by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="default", app="my-model"})).
    /// A result with more than one series is an error, not something to pick from: aggregate away
    /// every label that varies, and scope the query to this target's pods.
    #[schemars(length(min = 1))]
    pub query: String,

    /// The value each replica should carry, as a quoted decimal on the query's own scale: "0.8"
    /// against a 0-1 ratio, "80" against a 0-100 series. Must be positive; a % suffix is refused.
    #[schemars(length(max = 32))]
    pub target: String,

    /// What the query returns, as in an HPA's External metric target. Value (the default): a
    /// per-replica level such as avg(...), and replicas = ceil(readyReplicas × value / target).
    /// AverageValue: the fleet's total such as sum(...) or a router's queue, and replicas =
    /// ceil(value / target), so pods that are starting or draining cannot skew it.
    #[serde(default)]
    pub target_type: MetricTargetType,
}

/// How a metric's value becomes a replica count.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricTargetType {
    /// The query returns a per-replica level: replicas = ceil(readyReplicas × value / target).
    #[default]
    Value,
    /// The query returns the fleet's total: replicas = ceil(value / target).
    AverageValue,
}

/// Where and how to ask a decision server for a replica count.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CustomProvider {
    /// The service whose decision drives this target. Sent as the serviceId query parameter and
    /// matched against decisions[].serviceId in the reply.
    #[schemars(length(min = 1, max = 253))]
    pub service_id: String,

    /// Only accept a decision carrying this namespace. Needed only when the server reports the
    /// same serviceId in several namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Request path on serverAddress, e.g. /decisions or /v2/decisions (a missing leading slash
    /// is added).
    #[serde(default = "default_decision_path")]
    #[schemars(length(max = 1024))]
    pub path: String,
}

pub(crate) fn default_decision_path() -> String {
    "/decisions".to_owned()
}

/// Scale-up damping, in the words of an HPA's behavior.scaleUp.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUp {
    /// Look-back window in seconds: the fleet grows no further than the lowest recommendation
    /// seen within it, so a short spike does not add pods. 0 (the default) scales up at once.
    #[serde(default)]
    #[schemars(range(min = 0, max = 3600))]
    pub stabilization_window_seconds: i32,

    /// A rise of the demand by less than this fraction of the current replicas adds nothing, as a
    /// quoted decimal: "0.1" is 10%. Default "0.1", the HPA's.
    #[serde(default = "default_tolerance")]
    #[x_kube(validation = Rule::new("self.matches('^(0?[.][0-9]+|0)$')")
        .message("scaleUp.tolerance must be a quoted decimal fraction from 0 up to (not including) 1, e.g. \"0.1\" for 10%"))]
    #[schemars(length(max = 16))]
    pub tolerance: String,

    /// How several policies combine: Max (the default) allows the largest increase any policy
    /// allows, Min the smallest, Disabled forbids scaling up.
    #[serde(default)]
    pub select_policy: SelectPolicy,

    /// Rate limits: each allows at most value pods, or value percent of the replicas at the
    /// start of the period, per periodSeconds. Default: 100% and 4 pods per 15 s. An empty list
    /// means no limit.
    #[serde(default = "default_scale_up_policies")]
    #[schemars(length(max = 10))]
    pub policies: Vec<ScalingPolicy>,
}

impl Default for ScaleUp {
    fn default() -> Self {
        Self {
            stabilization_window_seconds: 0,
            tolerance: default_tolerance(),
            select_policy: SelectPolicy::Max,
            policies: default_scale_up_policies(),
        }
    }
}

pub(crate) fn default_tolerance() -> String {
    "0.1".to_owned()
}

pub(crate) fn default_scale_up_policies() -> Vec<ScalingPolicy> {
    vec![
        ScalingPolicy {
            type_: PolicyType::Percent,
            value: 100,
            period_seconds: 15,
        },
        ScalingPolicy {
            type_: PolicyType::Pods,
            value: 4,
            period_seconds: 15,
        },
    ]
}

pub(crate) fn default_scale_down_policies() -> Vec<ScalingPolicy> {
    vec![ScalingPolicy {
        type_: PolicyType::Percent,
        value: 100,
        period_seconds: 15,
    }]
}

pub(crate) fn default_scale_down_window() -> i32 {
    300
}

/// One rate limit: at most value pods, or value percent, per periodSeconds.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingPolicy {
    /// Pods counts replicas; Percent counts a percentage of the replicas at the start of the
    /// period.
    #[serde(rename = "type")]
    pub type_: PolicyType,

    /// How many pods, or what percentage, per period. At least 1.
    #[schemars(range(min = 1))]
    pub value: i32,

    /// The period in seconds, from 1 to 1800.
    #[schemars(range(min = 1, max = 1800))]
    pub period_seconds: i32,
}

/// What a scaling policy's value counts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyType {
    /// A number of pods.
    Pods,
    /// A percentage of the replicas at the start of the period.
    Percent,
}

/// How the policies of one direction combine.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SelectPolicy {
    /// The policy that allows the largest change.
    #[default]
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// Scale-down damping and cache-aware victim selection, in the words of an HPA's
/// behavior.scaleDown plus what only an LLM fleet needs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleDown {
    /// Look-back window in seconds: the fleet is held at the highest recommendation seen within
    /// it, so a short dip in the signal does not shrink the fleet. Default 300 (the HPA's); 0
    /// turns it off. Scale-up is never delayed by it.
    #[serde(default = "default_scale_down_window")]
    #[schemars(range(min = 0, max = 3600))]
    pub stabilization_window_seconds: i32,

    /// A fall of the demand by less than this fraction of the current replicas removes nothing,
    /// as a quoted decimal: "0.1" is 10%. Default "0.1", the HPA's.
    #[serde(default = "default_tolerance")]
    #[x_kube(validation = Rule::new("self.matches('^(0?[.][0-9]+|0)$')")
        .message("scaleDown.tolerance must be a quoted decimal fraction from 0 up to (not including) 1, e.g. \"0.1\" for 10%"))]
    #[schemars(length(max = 16))]
    pub tolerance: String,

    /// How several policies combine: Max (the default) allows the largest decrease any policy
    /// allows, Min the smallest, Disabled forbids scaling down.
    #[serde(default)]
    pub select_policy: SelectPolicy,

    /// Rate limits: each allows removing at most value pods, or value percent of the replicas
    /// at the start of the period, per periodSeconds. Default: 100% per 15 s. An empty list means
    /// no limit.
    #[serde(default = "default_scale_down_policies")]
    #[schemars(length(max = 10))]
    pub policies: Vec<ScalingPolicy>,

    /// Most replicas removed in one scale-down step; 0 means no limit. A collapsed signal then
    /// walks the fleet down one step per sync instead of dropping it to minReplicas at once
    /// (the same as a Pods policy whose period is one sync).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub max_step_replicas: i32,

    /// CacheAware marks the coldest pods with a low controller.kubernetes.io/pod-deletion-cost
    /// before lowering replicas, so warm KV caches survive; None leaves the choice to the
    /// workload controller.
    #[serde(default)]
    pub behavior: ScaleDownBehavior,

    /// PromQL returning one series per pod, each with a pod label, e.g.
    /// avg by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="default", app="my-model"}) * 100;
    /// the value becomes that pod's deletion cost and the lowest goes first. Empty means newest
    /// pod first. Used only with behavior CacheAware under the Prometheus provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_cost_query: Option<String>,
}

impl Default for ScaleDown {
    fn default() -> Self {
        Self {
            stabilization_window_seconds: default_scale_down_window(),
            tolerance: default_tolerance(),
            select_policy: SelectPolicy::Max,
            policies: default_scale_down_policies(),
            max_step_replicas: 0,
            behavior: ScaleDownBehavior::CacheAware,
            deletion_cost_query: None,
        }
    }
}

/// Which pods go first when the fleet shrinks.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScaleDownBehavior {
    /// Mark the coldest pods so the ReplicaSet deletes them first.
    #[default]
    CacheAware,
    /// Leave the deletion order to the workload controller.
    None,
}

/// Going to zero replicas and waking up again.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZero {
    /// PromQL returning one value that exists while the target has no pod, e.g. the requests the
    /// vLLM production-stack router received for the model:
    /// sum(increase(vllm:num_incoming_requests_total{model="my-model"}[2m])) or vector(0). Above
    /// activationThreshold it wakes the target from zero; at or below it for idleSeconds it lets
    /// the target go to zero. Append `or vector(0)` when the series exists only after a first
    /// request. A query that fails or returns nothing neither wakes nor puts to sleep.
    #[schemars(length(min = 1, max = 4096))]
    pub activation_query: String,

    /// The activation value above which the target wakes, as a quoted decimal: "0" (the
    /// default) wakes on any demand.
    #[serde(default = "default_activation_threshold")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$')")
        .message("scaleToZero.activationThreshold must be a quoted decimal number from 0, e.g. \"0\" or \"0.5\""))]
    #[schemars(length(max = 32))]
    pub activation_threshold: String,

    /// Seconds the activation value must stay at or below the threshold, without a break, before
    /// the target goes to zero. Default 300.
    #[serde(default = "default_idle_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub idle_seconds: i32,

    /// Seconds a target woken from zero stays awake at least, whatever the signal, so a cold
    /// start (image pull, model load) can finish and serve. Default 600.
    #[serde(default = "default_min_awake_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub min_awake_seconds: i32,
}

/// Demand that comes back at the same time each period.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Recurrence {
    /// Seconds in one period. Default 86400, a day whose stretches start at 00:00 UTC; 604800
    /// for traffic that repeats by the week (stretches of 1 h 45 min).
    #[serde(default = "default_period_seconds")]
    #[schemars(range(min = 3600, max = 604800))]
    pub period_seconds: i32,

    /// How many of the last periods must all have seen a rise at this time for pods to start
    /// ahead of it: the lowest of their loads is what the fleet is sized for. Default 1
    /// (yesterday); 2 or more ignore a rise a single unusual day saw, and start a day later.
    #[serde(default = "default_periods")]
    #[schemars(range(min = 1, max = 7))]
    pub periods: i32,
}

impl Default for Recurrence {
    fn default() -> Self {
        Self {
            period_seconds: default_period_seconds(),
            periods: default_periods(),
        }
    }
}

pub(crate) fn default_period_seconds() -> i32 {
    86_400
}

pub(crate) fn default_periods() -> i32 {
    1
}

/// The latency objective: budgets for the time to first token and the time per output token,
/// met by a share of requests.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Objective {
    /// PromQL label matchers that select this model's vLLM series and no other's, e.g.
    /// namespace="default", model_name="my-model". The operator composes every query of the
    /// objective from them (requests running and waiting, the queue-time and time-per-output-token
    /// histograms, the first tokens served a second), each series one serving engine.
    #[x_kube(validation = Rule::new(r#"self.matches(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\]|\\.)*"(\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\]|\\.)*")*\s*,?\s*$')"#)
        .message("objective.selector must be PromQL label matchers without braces, e.g. namespace=\"default\", model_name=\"my-model\""))]
    #[schemars(length(min = 1, max = 1024))]
    pub selector: String,

    /// Seconds to the first token a request may take, as a quoted decimal. Default "2". Half of
    /// it is what a request may spend queued (the rest is its prefill, which more pods do not
    /// shorten): that is the part the fleet's size controls.
    #[serde(default = "default_ttft_seconds")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$') && double(self) > 0.0 && double(self) <= 3600.0")
        .message("objective.ttftSeconds must be a quoted decimal above 0 and at most 3600, e.g. \"2\""))]
    #[schemars(length(max = 32))]
    pub ttft_seconds: String,

    /// Seconds per output token a request may take on average, as a quoted decimal. Default
    /// "0.1".
    #[serde(default = "default_tpot_seconds")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$') && double(self) > 0.0 && double(self) <= 60.0")
        .message("objective.tpotSeconds must be a quoted decimal above 0 and at most 60, e.g. \"0.1\""))]
    #[schemars(length(max = 32))]
    pub tpot_seconds: String,

    /// The share of requests, in percent, that must meet both budgets, as a quoted decimal from
    /// 50 up to (not including) 100. Default "99".
    #[serde(default = "default_percentile")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$') && double(self) >= 50.0 && double(self) < 100.0")
        .message("objective.percentile must be a quoted decimal from 50 up to (not including) 100, e.g. \"99\""))]
    #[schemars(length(max = 32))]
    pub percentile: String,

    /// Requests in flight per pod a fleet starts from before it has learned anything, as a
    /// quoted decimal. Default "4": conservative, so a fleet starts too large rather than too
    /// small; the first minute that meets the objective on enough requests (300 at 99%) lifts it
    /// at once to the load the pods carry, at most 1.5×, so the guess does not grow a fleet that
    /// already meets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+([.][0-9]*)?|[.][0-9]+)$') && double(self) >= 0.25 && double(self) <= 256.0")
        .message("objective.initialRequestsPerPod must be a quoted decimal from 0.25 to 256, e.g. \"4\""))]
    #[schemars(length(max = 32))]
    pub initial_requests_per_pod: Option<String>,

    /// PromQL returning the requests that wait in front of the engines, e.g. a router's or
    /// gateway's queue for this model (summed when it returns several series). They count as
    /// demand beside the engines' own running and waiting requests, and while no pod is Ready
    /// (waking from zero, or a fleet whose pods all restart) they are the demand: the fleet is
    /// sized for them at the learned capacity at once, instead of one pod and a whole start-up
    /// later. Append `or vector(0)` when the series exists only after a first request: a query
    /// that returns nothing is a missing signal, never zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub pending_query: Option<String>,
}

pub(crate) fn default_ttft_seconds() -> String {
    "2".to_owned()
}

pub(crate) fn default_tpot_seconds() -> String {
    "0.1".to_owned()
}

pub(crate) fn default_percentile() -> String {
    "99".to_owned()
}

pub(crate) fn default_activation_threshold() -> String {
    "0".to_owned()
}

pub(crate) fn default_idle_seconds() -> i32 {
    300
}

pub(crate) fn default_min_awake_seconds() -> i32 {
    600
}

/// The replicas to run at least when the signal has been lost for a while.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    /// Consecutive syncs without a usable signal before the fallback applies.
    #[schemars(range(min = 1, max = 1000))]
    pub failure_threshold: i32,

    /// The fewest replicas to run while it applies; a larger fleet is held, not shrunk. At most
    /// maxReplicas.
    #[schemars(range(min = 1))]
    pub replicas: i32,
}

/// Reserved: accepted by the API, not acted on by the controller.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// Reserved for future use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Reserved for future use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
}

/// What the controller observed and decided at its last sync.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LLMScalerStatus {
    /// Ready replicas of the target at the last sync: the figure the scaling ratio is computed
    /// from, not spec.replicas.
    #[serde(default)]
    pub current_replicas: i32,

    /// Last recommendation after clamping to the bounds and scale-down stabilization, before the
    /// step cap. While a step cap walks the fleet down this is the destination, not the count
    /// just written.
    #[serde(default)]
    pub desired_replicas: i32,

    /// The target's spec.replicas after the last sync: the count this sync wrote, or the one it
    /// found when it wrote nothing. During a scale-up it runs ahead of currentReplicas while the
    /// new pods start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Ready, ScalingActive, ScalingLimited and RolloutInProgress, each with the reason of the
    /// last sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The value each metric had at the last sync, or why it could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub current_metrics: Vec<MetricStatus>,

    /// When the controller last changed the target's replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,

    /// Recent recommendations kept for scale-down stabilization, so that a restart or a change of
    /// leader does not forget them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation_history: Option<RecommendationHistory>,

    /// How long the target's pods take from creation to Ready, learned from the pods themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<StartupStatus>,

    /// Where the target is in its sleep cycle, under scaleToZero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero: Option<Box<ScaleToZeroStatus>>,

    /// Consecutive syncs without a usable signal (what fallback.failureThreshold counts); absent
    /// while the signal is fine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syncs_without_signal: Option<i32>,

    /// What the operator has learned about the objective, under one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<Box<ObjectiveStatus>>,

    /// The load each stretch of the period carried, under spec.recurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<Box<RecurrenceStatus>>,
}

/// The load of each stretch of the period (the signal's total, e.g. requests in flight across
/// the fleet): the periods before, and this one so far. Values are space-separated, one per
/// stretch from the period's start, "-" where nothing was measured.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RecurrenceStatus {
    /// The uid of the target whose load this is: another target starts afresh.
    pub target_uid: String,

    /// The period's length the stretches were cut for; another spec.recurrence.periodSeconds
    /// starts afresh.
    pub period_seconds: i64,

    /// Which period `current` is: whole periods since the Unix epoch.
    pub period: i64,

    /// This period's finished stretches: each one's mean load and the syncs it was measured at,
    /// as `mean/syncs` (the stretch under way is kept by the operator's process and written
    /// when it is over).
    #[schemars(length(max = 4096))]
    pub current: String,

    /// The finished periods' mean load per stretch, the most recent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    pub before: Vec<String>,
}

/// The capacity learned for the objective, and how the objective fares.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectiveStatus {
    /// Requests in flight one pod carries while the objective holds, as learned so far: the
    /// per-pod target the fleet is sized with.
    pub requests_per_pod: String,
    /// The lowest requests per pod the objective was seen missed at since a pass above it, or
    /// the limit the load curve of the last hour puts the objective at once that is more than
    /// 1.2× the miss; the estimate probes no higher than just below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_at: Option<String>,
    /// True while the estimate is still the starting one (the spec's or the default): no miss,
    /// no lift and no minute of a settled fleet has judged it. The first minute that meets the
    /// objective on enough requests lifts it at once toward the load the pods carry (at most 1.5×).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untested: bool,
    /// The share of the last minute's requests, in percent, that met the objective as far as the
    /// histograms' buckets tell (at least this many); absent without requests or histograms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainment: Option<String>,
    /// The percent of the learned capacity the Ready pods have spare now, at the requests in
    /// flight per pod just read: negative while they carry more than it (a scale-up is due or
    /// on its way). Absent when the in-flight reading failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<String>,
    /// What the last sync learned, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lesson: Option<String>,
}

/// The sleep cycle of a target under scaleToZero.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZeroStatus {
    /// AtZero (no replica asked for), Waking (woken, no replica Ready yet) or Awake.
    pub phase: String,
    /// Since when the activation value has stayed at or below the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<Time>,
    /// When the scaler last woke the target from zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub woke_at: Option<Time>,
}

/// The start-up delay learned from the target's pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StartupStatus {
    /// Seconds from a pod's creation to its Ready condition, an exponentially weighted mean over
    /// the pods seen (each new pod weighs a quarter).
    pub observed_seconds: i32,
    /// How many pods the estimate has seen.
    pub samples: i32,
    /// The newest Ready transition counted, so no pod is counted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ready_time: Option<Time>,
}

/// The reading of one metric at the last sync.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricStatus {
    /// The metric's name, or metric-N (its position) when it has none.
    pub name: String,
    /// The measured value as a decimal string; absent when the metric could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The replicas this metric alone recommended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_replicas: Option<i32>,
    /// Why the metric could not be read, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When this reading was taken. A later sync that reads the same value leaves it alone, so
    /// an unchanged metric does not rewrite the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_at: Option<Time>,
}

/// Scale-down stabilization memory, tied to one incarnation of the scaler.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RecommendationHistory {
    /// metadata.uid of the scaler that recorded these entries; a recreated scaler with the same
    /// name starts afresh.
    pub uid: String,
    /// metadata.uid of the target the entries were recorded for: a target deleted and recreated
    /// under the same name starts afresh instead of inheriting its predecessor's hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_uid: Option<String>,
    /// Recommendations inside the scale-down stabilization window, oldest first.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub entries: Vec<Recommendation>,
    /// Recommendations inside the scale-up stabilization window, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub scale_up_entries: Vec<Recommendation>,
    /// Replica changes inside the longest rate-policy period, oldest first: replicas is positive
    /// for pods added, negative for pods removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub changes: Vec<Recommendation>,
}

/// One recorded recommendation.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Recommendation {
    /// When it was made.
    pub time: Time,
    /// The replica count recommended then.
    pub replicas: i32,
}
