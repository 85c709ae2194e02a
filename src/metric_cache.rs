//! The one in-process record of what each scaler last measured and decided.
//!
//! The controller writes it once per sync; the external metrics API and the operator's own
//! /metrics only read it, so every consumer sees exactly the numbers the controller acted on.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::jiff::Timestamp;

/// Identifies one LLMScaler.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScalerKey {
    pub namespace: String,
    pub name: String,
}

/// One metric as last measured.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedMetric {
    pub name: String,
    /// `None` when the last attempt could not produce a value.
    pub value: Option<f64>,
    pub measured_at: Timestamp,
    /// What this metric alone recommended at that sync.
    pub recommendation: Option<i32>,
    /// Why the value is missing, when it is.
    pub error: Option<String>,
}

/// A scaler's last sync.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalerSnapshot {
    /// metadata.uid, so a recreated scaler never inherits its predecessor's numbers.
    pub uid: String,
    pub metrics: Vec<CachedMetric>,
    pub current_replicas: i32,
    pub desired_replicas: i32,
    pub synced_at: Timestamp,
    /// The scaler's syncPeriodSeconds: how old a value may be before it is stale.
    pub sync_period_seconds: i32,
    /// For values another replica measured (read from the status it wrote): what tells whether
    /// they are still current. `None`: this replica measured them.
    pub vouched: Option<Vouch>,
}

/// Values read from the status the leader of the scaler's shard wrote. That leader rewrites a
/// value only when it changes, so its time says when it last changed, not when it was last
/// measured: the values are current for as long as that leader holds the shard, which is asked
/// when they are read (a replica that stops leading stops vouching at once, with no write).
#[derive(Clone)]
pub struct Vouch {
    /// The scaler's shard.
    pub shard: u32,
    /// Whether another replica holds `shard` now.
    pub held: Arc<dyn Fn(u32) -> bool + Send + Sync>,
}

impl Vouch {
    /// Whether the values are current now.
    pub fn holds(&self) -> bool {
        (self.held)(self.shard)
    }
}

impl std::fmt::Debug for Vouch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vouch").field("shard", &self.shard).finish()
    }
}

/// Two vouches are alike when they name the same shard (whoever is asked about it).
impl PartialEq for Vouch {
    fn eq(&self, other: &Self) -> bool {
        self.shard == other.shard
    }
}

#[derive(Debug, Clone, Default)]
pub struct MetricCache {
    inner: Arc<RwLock<BTreeMap<ScalerKey, ScalerSnapshot>>>,
}

impl MetricCache {
    pub fn update(&self, key: ScalerKey, snapshot: ScalerSnapshot) {
        // A panic elsewhere while holding the lock leaves plain data behind; keep serving it.
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(key, snapshot);
    }

    pub fn remove(&self, key: &ScalerKey) {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(key);
    }

    /// Keeps only the scalers `keep` says to.
    pub fn retain(&self, keep: impl Fn(&ScalerKey, &ScalerSnapshot) -> bool) {
        let mut map = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        map.retain(|k, v| keep(k, v));
    }

    pub fn get(&self, key: &ScalerKey) -> Option<ScalerSnapshot> {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        map.get(key).cloned()
    }

    /// Calls `visit` for every scaler of one namespace, in name order, without copying them:
    /// the external metrics API reads this on every request.
    pub fn visit_namespace(
        &self,
        namespace: &str,
        mut visit: impl FnMut(&ScalerKey, &ScalerSnapshot),
    ) {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let from = ScalerKey {
            namespace: namespace.to_owned(),
            name: String::new(),
        };
        for (key, snapshot) in map
            .range(from..)
            .take_while(|(k, _)| k.namespace == namespace)
        {
            visit(key, snapshot);
        }
    }

    /// Every scaler of one namespace, ordered by name.
    pub fn in_namespace(&self, namespace: &str) -> Vec<(ScalerKey, ScalerSnapshot)> {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .filter(|(k, _)| k.namespace == namespace)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Every scaler, ordered by namespace and name.
    pub fn all(&self) -> Vec<(ScalerKey, ScalerSnapshot)> {
        let map = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ScalerKey {
        ScalerKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn snapshot(uid: &str, value: f64) -> ScalerSnapshot {
        ScalerSnapshot {
            uid: uid.into(),
            metrics: vec![CachedMetric {
                name: "kv-cache".into(),
                value: Some(value),
                measured_at: Timestamp::UNIX_EPOCH,
                recommendation: Some(2),
                error: None,
            }],
            current_replicas: 1,
            desired_replicas: 2,
            synced_at: Timestamp::UNIX_EPOCH,
            sync_period_seconds: 15,
            vouched: None,
        }
    }

    #[test]
    fn writers_and_readers_share_one_view() {
        let cache = MetricCache::default();
        let reader = cache.clone();
        cache.update(key("a", "s1"), snapshot("u1", 0.5));
        cache.update(key("b", "s2"), snapshot("u2", 0.7));
        cache.update(key("a", "s0"), snapshot("u0", 0.1));
        assert_eq!(
            reader.get(&key("a", "s1")).unwrap().metrics[0].value,
            Some(0.5)
        );
        let names: Vec<_> = reader
            .in_namespace("a")
            .into_iter()
            .map(|(k, _)| k.name)
            .collect();
        assert_eq!(names, ["s0", "s1"]);
        cache.update(key("a", "s1"), snapshot("u1", 0.9));
        assert_eq!(
            reader.get(&key("a", "s1")).unwrap().metrics[0].value,
            Some(0.9)
        );
        cache.remove(&key("a", "s1"));
        assert!(reader.get(&key("a", "s1")).is_none());
        assert_eq!(reader.all().len(), 2);
    }
}
