//! The generation of each scaler this replica last looked at: a watch event that brings the same
//! generation again (a status write, a relabel) asks for no look. Kept by uid, so a scaler
//! deleted and created again under its name is new; and forgotten when another replica comes to
//! lead a scaler (see `shards`), so that the list that brings it back when its shard is won here
//! again brings it as new. (kube's generation predicate can forget nothing.)

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::api::LLMScaler;

#[derive(Default)]
pub struct Generations(Mutex<HashMap<String, i64>>);

impl Generations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `scaler` asks for a look: new here, or its spec changed since the last look (and
    /// recorded). An object without uid or generation always does.
    pub fn changed(&self, scaler: &LLMScaler) -> bool {
        let (Some(uid), Some(generation)) = (&scaler.metadata.uid, scaler.metadata.generation)
        else {
            return true;
        };
        let mut seen = self.lock();
        match seen.get_mut(uid) {
            Some(last) if *last == generation => false,
            Some(last) => {
                *last = generation;
                true
            }
            None => {
                seen.insert(uid.clone(), generation);
                true
            }
        }
    }

    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// Keeps only the uids `keep` says to.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|uid, _| keep(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaler(uid: &str, generation: i64) -> LLMScaler {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.modelsphere.dev/v1alpha1", "kind": "LLMScaler",
            "metadata": { "name": "s", "namespace": "ns", "uid": uid, "generation": generation },
            "spec": {
                "targetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "d" },
                "serverAddress": "http://prometheus:9090", "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{ "name": "load", "query": "q", "target": "1" }]
            }
        }))
        .expect("a valid scaler")
    }

    #[test]
    fn a_look_is_asked_for_what_is_new_or_changed_or_forgotten() {
        let seen = Generations::default();
        assert!(seen.changed(&scaler("u-1", 1)));
        assert!(!seen.changed(&scaler("u-1", 1)), "a status write");
        assert!(seen.changed(&scaler("u-1", 2)), "a spec change");
        assert!(!seen.changed(&scaler("u-1", 2)));
        assert!(
            seen.changed(&scaler("u-2", 2)),
            "created again under its name"
        );
        seen.forget("u-1");
        assert!(
            seen.changed(&scaler("u-1", 2)),
            "led elsewhere, then here again"
        );
        seen.retain(|uid| uid == "u-1");
        assert!(
            seen.changed(&scaler("u-2", 2)),
            "deleted while nothing watched"
        );
        let mut bare = scaler("u-3", 1);
        bare.metadata.generation = None;
        assert!(seen.changed(&bare) && seen.changed(&bare));
    }
}
