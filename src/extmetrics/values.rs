//! The ExternalMetricValueList for a request, read from the controller's cache only.
//!
//! Every LLMScaler publishes, labelled `llmscaler=<scaler>` and `metric=<name>`: each of its
//! metrics by name (`decision` under the Custom provider) and `desired-replicas`, its last
//! recommendation. A value that failed at the last sync, or is older than three sync periods,
//! is not published: the HPA must hold, not scale on a stale or made-up number. A value another
//! replica measured is as old as that replica's hold on the scaler's shard (see
//! [`Vouch`]): current while it leads, aging from its time once it stops.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::quantity::format_quantity;
use super::selector::LabelSelector;
use super::status_response::ApiError;
use crate::metric_cache::{MetricCache, ScalerSnapshot, Vouch};

/// Name of the metric carrying each scaler's recommendation.
pub use crate::names::DESIRED_REPLICAS;

const LIST_HEAD: &[u8] = br#"{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},"items":["#;
const LIST_TAIL: &[u8] = b"]}";

/// The JSON list for `GET .../namespaces/{namespace}/{metric}?labelSelector=...`.
///
/// Written straight into the response bytes while the cache is read: this runs on every HPA
/// poll, and building a JSON tree first cost more than the rest of the request.
pub fn metric_values(
    cache: &MetricCache,
    namespace: &str,
    metric: &str,
    selector: &LabelSelector,
    now: Timestamp,
) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::with_capacity(LIST_HEAD.len() + 256);
    out.extend_from_slice(LIST_HEAD);
    let mut items = 0usize;
    cache.visit_namespace(namespace, |key, snapshot| {
        let label = |name: &str| match name {
            "llmscaler" => Some(key.name.as_str()),
            "metric" => Some(metric),
            _ => None,
        };
        if !selector.matches_with(label) {
            return;
        }
        let Some(item) = item(snapshot, &key.name, metric, now) else {
            return;
        };
        if items > 0 {
            out.push(b',');
        }
        // Writing into a Vec cannot fail, and every field serializes.
        if serde_json::to_writer(&mut out, &item).is_ok() {
            items += 1;
        }
    });
    if items == 0 {
        return Err(ApiError::not_found(format!(
            "no current value of external metric {metric:?} in namespace {namespace:?} for this selector"
        )));
    }
    out.extend_from_slice(LIST_TAIL);
    Ok(out)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Item<'a> {
    metric_name: &'a str,
    metric_labels: Labels<'a>,
    #[serde(serialize_with = "rfc3339")]
    timestamp: Timestamp,
    window: i64,
    value: String,
}

#[derive(Serialize)]
struct Labels<'a> {
    llmscaler: &'a str,
    metric: &'a str,
}

fn rfc3339<S: serde::Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(at)
}

fn item<'a>(
    snapshot: &ScalerSnapshot,
    scaler: &'a str,
    metric: &'a str,
    now: Timestamp,
) -> Option<Item<'a>> {
    let period = i64::from(snapshot.sync_period_seconds.max(1));
    let (value, at) = if metric == DESIRED_REPLICAS {
        (f64::from(snapshot.desired_replicas), snapshot.synced_at)
    } else {
        let cached = snapshot.metrics.iter().find(|m| m.name == metric)?;
        (cached.value?, cached.measured_at)
    };
    // Another replica's values are as current as its hold on their shard.
    let at = if snapshot.vouched.as_ref().is_some_and(Vouch::holds) {
        now
    } else {
        at
    };
    if now.duration_since(at) > SignedDuration::from_secs(3 * period) {
        return None;
    }
    Some(Item {
        metric_name: metric,
        metric_labels: Labels {
            llmscaler: scaler,
            metric,
        },
        timestamp: at,
        window: period,
        value: format_quantity(value).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric_cache::{CachedMetric, ScalerKey};
    use crate::scaling::fixture::t;

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
                    vouched: None,
                },
            );
        }
        cache
    }

    fn all() -> LabelSelector {
        LabelSelector::default()
    }

    fn list(metric: &str, selector: &LabelSelector) -> serde_json::Value {
        serde_json::from_slice(&metric_values(&cache(), "ml", metric, selector, t(5)).unwrap())
            .unwrap()
    }

    #[test]
    fn publishes_each_scalers_value_with_labels() {
        let list = list("kv-cache", &all());
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 2, "the failed one is absent: {list}");
        assert_eq!(items[0]["metricLabels"]["llmscaler"], "cold");
        assert_eq!(items[0]["value"], "100m");
        assert_eq!(items[1]["value"], "850m");
        assert_eq!(items[1]["metricName"], "kv-cache");
        assert_eq!(items[1]["timestamp"], t(0).to_string());
        assert_eq!(items[1]["window"], 15);
        assert_eq!(items[1]["metricLabels"]["metric"], "kv-cache");
        assert_eq!(list["kind"], "ExternalMetricValueList");
        assert_eq!(list["apiVersion"], "external.metrics.k8s.io/v1beta1");
        assert_eq!(list["metadata"], serde_json::json!({}));
    }

    #[test]
    fn the_selector_picks_a_scaler() {
        let hot = LabelSelector::parse("llmscaler=hot").unwrap();
        let list = list("desired-replicas", &hot);
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

    #[test]
    fn another_replicas_values_are_current_while_it_holds_their_shard() {
        let held = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let cache = cache();
        let key = ScalerKey {
            namespace: "ml".into(),
            name: "hot".into(),
        };
        let mut theirs = cache.get(&key).unwrap();
        let asked = held.clone();
        theirs.vouched = Some(Vouch {
            shard: 3,
            held: std::sync::Arc::new(move |shard| {
                shard == 3 && asked.load(std::sync::atomic::Ordering::SeqCst)
            }),
        });
        cache.update(key, theirs);
        let hot = LabelSelector::parse("llmscaler=hot").unwrap();
        let late = t(3600);
        for metric in ["kv-cache", "desired-replicas"] {
            let list: serde_json::Value =
                serde_json::from_slice(&metric_values(&cache, "ml", metric, &hot, late).unwrap())
                    .unwrap();
            assert_eq!(list["items"][0]["timestamp"], late.to_string(), "{metric}");
        }
        // Its leader lets go of the shard: the values are as old as their time says.
        held.store(false, std::sync::atomic::Ordering::SeqCst);
        for metric in ["kv-cache", "desired-replicas"] {
            let err = metric_values(&cache, "ml", metric, &hot, late).unwrap_err();
            assert_eq!(err.reason, "NotFound", "{metric}");
        }
        assert!(metric_values(&cache, "ml", "kv-cache", &hot, t(45)).is_ok());
    }
}
