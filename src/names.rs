//! The names the operator puts into the cluster and serves, in one place: who it is (the field
//! managers that own what it writes, the events' reporter, the managed-by value on what it
//! creates), the annotations it reads, and the metric names the external metrics API reserves.
//! Changing one changes what existing clusters hold, so each is named once.

/// The operator's name: the events' reporting controller, the field manager that owns
/// `spec.replicas` of every target, and the managed-by / owner value on the Secrets and the
/// APIService it creates.
pub const OPERATOR: &str = "llmscaleoperator";

/// The field manager of `spec.replicas` on every target (server-side apply).
pub const FIELD_MANAGER: &str = OPERATOR;

/// The field manager of the deletion-cost marks on pods: not the one owning `spec.replicas`, so
/// removing a mark (an apply of nothing) takes away that annotation and nothing else.
pub const MARK_MANAGER: &str = "llmscaleoperator-victims";

/// The annotation that turns a scaler into an observer: it decides and reports, and writes
/// nothing.
pub const DRY_RUN_ANNOTATION: &str = "autoscaling.modelsphere.dev/dry-run";

/// Pins the target at this many replicas while it is set (`"N"`), whatever the signal says.
pub const PAUSED_REPLICAS_ANNOTATION: &str = "autoscaling.modelsphere.dev/paused-replicas";

/// Freezes the target at the replicas it has while it is `"true"`.
pub const PAUSED_ANNOTATION: &str = "autoscaling.modelsphere.dev/paused";

/// The external metric (and the decision's metric name) of a Custom-provider scaler.
pub const DECISION_METRIC: &str = "decision";

/// The `metric` label of the scale-to-zero activation query in the operator's query metrics (not
/// a DNS label, so no metrics[].name can take it).
pub const ACTIVATION_QUERY: &str = "scaleToZero.activationQuery";

/// The `metric` label of the deletion-cost query in the operator's query metrics (not a DNS
/// label either).
pub const DELETION_COST_QUERY: &str = "scaleDown.deletionCostQuery";

/// The reading (and external metric) of a scaler's objective: the requests in flight per pod the
/// operator composes from `objective.selector`, against the capacity it learned.
pub const OBJECTIVE_METRIC: &str = "objective";

/// The `metric` labels of the objective's latency queries in the operator's query metrics (not
/// DNS labels either): the queue-time and time-per-output-token histograms, the load, and the
/// requests admitted a second.
pub const OBJECTIVE_QUEUE_QUERY: &str = "objective.queueTime";
pub const OBJECTIVE_TPOT_QUERY: &str = "objective.timePerOutputToken";
pub const OBJECTIVE_LOAD_QUERY: &str = "objective.requestsRunning";
pub const OBJECTIVE_ADMITTED_QUERY: &str = "objective.requestsAdmitted";

/// The external metric that serves a scaler's recommendation.
pub const DESIRED_REPLICAS: &str = "desired-replicas";

/// The name an unnamed `metrics[index]` is recorded and served under.
pub fn unnamed_metric(index: usize) -> String {
    format!("metric-{index}")
}
