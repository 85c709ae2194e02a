//! What an autoscaling policy sees and says: one trait every peer and the operator implement.
//!
//! The lab drives each policy exactly as its controller would run in a cluster: every
//! [`Policy::period`] seconds it is shown the target (its requested replicas and its pods) and the
//! metrics its own pipeline scraped, and it answers the replica count to request. Nothing else
//! reaches it: not the true load, not the future (only the oracle is built with the workload).

use crate::lab::metrics::Scrapes;

/// The replica bounds a policy keeps to (minReplicas / maxReplicas or their peer's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: u32,
    pub max: u32,
}

impl Bounds {
    pub fn clamp(self, replicas: i64) -> u32 {
        let clamped = replicas.clamp(i64::from(self.min), i64::from(self.max));
        u32::try_from(clamped).unwrap_or(self.max)
    }
}

/// One pod of the target as the Kubernetes API shows it (never one that is terminating).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodState {
    /// Unique and increasing: a larger id was created later.
    pub id: u64,
    /// Seconds since the start of the run.
    pub created: f64,
    /// When the pod left Pending (scheduled on a node, its image pulled, its container started)
    /// and began loading its model, if it has.
    pub running_at: Option<f64>,
    /// When the pod became Ready (its model loaded), if it has.
    pub ready_at: Option<f64>,
}

impl PodState {
    pub fn is_ready(&self) -> bool {
        self.ready_at.is_some()
    }

    /// Phase Pending: waiting for a node, pulling its image.
    pub fn is_pending(&self) -> bool {
        self.running_at.is_none()
    }
}

/// What a policy is shown at one of its ticks.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// Seconds since the start of the run.
    pub now: f64,
    /// The replicas currently requested (the target's spec.replicas).
    pub spec: u32,
    /// The target's pods that are not terminating: starting ones (not Ready) and Ready ones.
    pub pods: &'a [PodState],
    /// What this policy's metric pipeline scraped so far.
    pub metrics: &'a Scrapes,
}

impl View<'_> {
    /// status.readyReplicas.
    pub fn ready(&self) -> u32 {
        u32::try_from(self.pods.iter().filter(|p| p.is_ready()).count()).unwrap_or(u32::MAX)
    }

    /// status.replicas: every pod that exists, starting or Ready.
    pub fn current(&self) -> u32 {
        u32::try_from(self.pods.len()).unwrap_or(u32::MAX)
    }
}

/// Which pods a scale-down removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victims {
    /// The ReplicaSet controller's own order: pods not yet Ready first, then the most recently
    /// Ready (what every peer gets, since none marks pods).
    ReplicaSet,
    /// Pods not yet Ready first (the ReplicaSet ranks readiness above deletion cost), then the
    /// Ready pods with the coldest cache, as the operator's deletion-cost marks make it.
    Coldest,
}

/// One autoscaling algorithm with its configuration.
pub trait Policy: Send {
    /// The name the report shows, with the setting when it is not the default.
    fn label(&self) -> String;
    /// Seconds between two decisions (the controller's sync period).
    fn period(&self) -> f64;
    /// Seconds between two scrapes of the metrics this policy reads.
    fn scrape_interval(&self) -> f64 {
        15.0
    }
    /// Which pods go on a scale-down.
    fn victims(&self) -> Victims {
        Victims::ReplicaSet
    }
    /// The replica count to request now.
    fn decide(&mut self, view: &View<'_>) -> u32;
}
