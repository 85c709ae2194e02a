//! The ExternalMetricValueList for a request, read from the controller's cache only.
//!
//! Every LLMScaler publishes, labelled `llmscaler=<scaler>` and `metric=<name>`: each of its
//! metrics by name (`decision` under the Custom provider) and `desired-replicas`, its last
//! recommendation. A value that failed at the last sync, or is older than three sync periods,
//! is not published: the HPA must hold, not scale on a stale or made-up number.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::quantity::format_quantity;
use super::selector::LabelSelector;
use super::status::ApiError;
use crate::signals::cache::{MetricCache, ScalerSnapshot};

/// Name of the metric carrying each scaler's recommendation.
pub const DESIRED_REPLICAS: &str = "desired-replicas";

/// The list for `GET .../namespaces/{namespace}/{metric}?labelSelector=...`.
pub fn metric_values(
    cache: &MetricCache,
    namespace: &str,
    metric: &str,
    selector: &LabelSelector,
    now: Timestamp,
) -> Result<Value, ApiError> {
    let mut items = Vec::new();
    cache.visit_namespace(namespace, |key, snapshot| {
        let label = |name: &str| match name {
            "llmscaler" => Some(key.name.as_str()),
            "metric" => Some(metric),
            _ => None,
        };
        if !selector.matches_with(label) {
            return;
        }
        let labels = BTreeMap::from([
            ("llmscaler".to_owned(), key.name.clone()),
            ("metric".to_owned(), metric.to_owned()),
        ]);
        if let Some(item) = item(snapshot, metric, labels, now) {
            items.push(item);
        }
    });
    if items.is_empty() {
        return Err(ApiError::not_found(format!(
            "no current value of external metric {metric:?} in namespace {namespace:?} for this selector"
        )));
    }
    Ok(json!({
        "kind": "ExternalMetricValueList",
        "apiVersion": "external.metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": items,
    }))
}

fn item(
    snapshot: &ScalerSnapshot,
    metric: &str,
    labels: BTreeMap<String, String>,
    now: Timestamp,
) -> Option<Value> {
    let period = i64::from(snapshot.sync_period_seconds.max(1));
    let (value, at) = if metric == DESIRED_REPLICAS {
        (f64::from(snapshot.desired_replicas), snapshot.synced_at)
    } else {
        let cached = snapshot.metrics.iter().find(|m| m.name == metric)?;
        (cached.value?, cached.measured_at)
    };
    if now.duration_since(at) > SignedDuration::from_secs(3 * period) {
        return None;
    }
    Some(json!({
        "metricName": metric,
        "metricLabels": labels,
        "timestamp": at.to_string(),
        "window": period,
        "value": format_quantity(value).ok()?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::cache::{CachedMetric, ScalerKey};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn cache() -> MetricCache {
        let cache = MetricCache::default();
        let metric = |name: &str, value: Option<f64>| CachedMetric {
            name: name.into(),
            value,
            measured_at: t(0),
            recommendation: None,
            error: value.is_none().then(|| "empty vector".to_owned()),
        };
        for (name, kv) in [("hot", Some(0.85)), ("cold", Some(0.1)), ("broken", None)] {
            cache.update(
                ScalerKey {
                    namespace: "ml".into(),
                    name: name.into(),
                },
                ScalerSnapshot {
                    uid: name.into(),
                    metrics: vec![metric("kv-cache", kv)],
                    current_replicas: 2,
                    desired_replicas: 3,
                    synced_at: t(0),
                    sync_period_seconds: 15,
                },
            );
        }
        cache
    }

    fn all() -> LabelSelector {
        LabelSelector::default()
    }

    #[test]
    fn publishes_each_scalers_value_with_labels() {
        let list = metric_values(&cache(), "ml", "kv-cache", &all(), t(5)).unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 2, "the failed one is absent: {list}");
        assert_eq!(items[0]["metricLabels"]["llmscaler"], "cold");
        assert_eq!(items[0]["value"], "100m");
        assert_eq!(items[1]["value"], "850m");
        assert_eq!(items[1]["metricName"], "kv-cache");
        assert_eq!(items[1]["timestamp"], t(0).to_string());
        assert_eq!(items[1]["window"], 15);
        assert_eq!(list["kind"], "ExternalMetricValueList");
    }

    #[test]
    fn the_selector_picks_a_scaler() {
        let hot = LabelSelector::parse("llmscaler=hot").unwrap();
        let list = metric_values(&cache(), "ml", "desired-replicas", &hot, t(5)).unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        assert_eq!(list["items"][0]["value"], "3");
    }

    #[test]
    fn unknown_failed_stale_or_elsewhere_is_not_found() {
        let only_broken = LabelSelector::parse("llmscaler=broken").unwrap();
        for (ns, metric, selector, now) in [
            ("ml", "nope", all(), t(5)),
            ("ml", "kv-cache", only_broken, t(5)),
            ("ml", "kv-cache", all(), t(46)),
            ("other", "kv-cache", all(), t(5)),
        ] {
            let err = metric_values(&cache(), ns, metric, &selector, now).unwrap_err();
            assert_eq!(err.reason, "NotFound", "{ns} {metric}");
        }
        // Exactly three periods old is still current.
        assert!(metric_values(&cache(), "ml", "kv-cache", &all(), t(45)).is_ok());
    }
}
