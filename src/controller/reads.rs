//! What a sync's queries leave in the operator's metrics: each [`Read`] of the one signal read
//! path (`signals::read`) is timed and, when it gave nothing usable, counted, under the name the
//! query serves (a metric's name, the activation query's, the decision's, the deletion-cost
//! query's); its value is handed on.

use crate::signals::http::Redacted;
use crate::signals::read::Read;
use crate::telemetry::metrics::Metrics;

/// Records `read` for `metric` of the scaler `namespace/scaler` and hands its value on.
pub(super) fn recorded<T>(
    metrics: &Metrics,
    namespace: &str,
    scaler: &str,
    metric: &str,
    read: Read<T>,
) -> Result<T, Redacted> {
    metrics.observe_query(namespace, scaler, metric, read.took, read.usable);
    read.value
}
