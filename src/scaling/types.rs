//! The shared vocabulary of the control law: what a sync is given ([`Input`]), what it decides
//! ([`Decision`]) and why ([`Reason`], with the pause's and scale-to-zero's reasons). Every stage
//! (`decision`, `zero`, `fallback`, `pause`, `law`) imports it; it imports none of them.

use k8s_openapi::jiff::Timestamp;

use super::behavior::{Behavior, Change, RatePolicy};
use super::forecast::Sample;
use super::recommend::{SkipReason, TargetType};
use super::recurring::Profile;
use super::stabilization::Entry;
use super::unreadable::Unreadable;

/// The replica bounds of the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub min: i32,
    pub max: i32,
}

/// What the target looks like right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetState {
    /// spec.replicas: the count this operator writes.
    pub spec_replicas: i32,
    /// status.readyReplicas: the serving capacity the ratio is computed from.
    pub ready_replicas: i32,
    /// Why the target is mid-rollout, if it is.
    pub rollout: Option<Rollout>,
}

/// Why a Deployment is mid-rollout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rollout {
    #[error(
        "the Deployment controller has not observed generation {generation} yet (observed {observed})"
    )]
    GenerationNotObserved { generation: i64, observed: i64 },
    #[error("{updated} of {spec} replicas run the current template")]
    NotUpdated { updated: i32, spec: i32 },
    #[error("{old} replicas of an older template are still running")]
    OldPodsRunning { old: i32 },
}

/// One metric's reading at this sync.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricReading {
    pub name: String,
    pub value: Result<f64, SkipReason>,
    pub target: f64,
    pub kind: TargetType,
}

/// Where the recommendation comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// Per-replica metrics and the HPA ratio; the largest recommendation wins.
    Ratio(Vec<MetricReading>),
    /// An absolute replica count (a decision server), or why there is none.
    Absolute(Result<i32, Unreadable>),
}

/// What earlier syncs left for this one: the recommendations inside each stabilization window,
/// the changes inside the rate policies' periods, and the recent demand the trend is fitted to.
/// Each is a pure function of the previous memory and the sync; the controller persists all but
/// `samples` and `admissions` in status (a restart refits the trends from the syncs after it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Memory {
    /// Recommendations inside the scale-down window.
    pub down: Vec<Entry>,
    /// Recommendations inside the scale-up window.
    pub up: Vec<Entry>,
    pub changes: Vec<Change>,
    pub samples: Vec<Sample>,
    /// The requests the pods admitted a second at each recent sync, under an objective (in
    /// [`Sample::need`]): the demand's own trend, which the fleet's size does not move.
    pub admissions: Vec<Sample>,
    /// The load each stretch of the period carried on the periods before (under a recurrence).
    pub recurring: Profile,
}

/// Everything one decision depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub signal: Signal,
    pub target: TargetState,
    pub bounds: Bounds,
    pub behavior: Behavior,
    /// Seconds a new pod takes to become useful (spec or learned); `None`: unknown, so nothing
    /// is looked ahead.
    pub startup_seconds: Option<f64>,
    pub memory: Memory,
    pub now: Timestamp,
    /// Why a scale-down waits under an objective: its latency signal cannot be read
    /// ([`DeferReason::LatencyUnread`]) or the load is still rising ([`DeferReason::LoadRising`]).
    pub down_waits: Option<DeferReason>,
    /// Requests the pods admitted a second over the objective's window (their first tokens),
    /// when it was read. With it, a rising trend in the requests in flight holds a scale-down
    /// off only while the admissions rise too: after a step down, each pod left batches more and
    /// each request runs longer, so the requests in flight climb while the demand stays flat.
    pub admitted: Option<f64>,
    /// Under an objective whose estimate has met a miss it still remembers: how a scale-down
    /// sizes the fleet above the need. `None`: a scale-down goes to the need.
    pub down_share: Option<DownShare>,
}

/// How a scale-down after a miss sizes the fleet above the need (the requests in flight over
/// the learned capacity): for the need over [`DownShare::share`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DownShare {
    /// Each pod filled to this share of its learned capacity, the rest kept spare
    /// ([`PlanReason::SpareKept`]).
    Spare(f64),
    /// A request runs this many times longer with each pod at its learned capacity than at the
    /// load the pods carry now, so after the step each pod runs that many times the requests
    /// counting them says ([`PlanReason::LongerAtCapacity`]).
    Longer(f64),
}

impl DownShare {
    /// The share of a pod's learned capacity the need is counted against.
    pub fn share(self) -> f64 {
        match self {
            DownShare::Spare(share) => share,
            DownShare::Longer(ratio) => 1.0 / ratio,
        }
    }
}

/// What one metric contributed.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricOutcome {
    pub name: String,
    pub value: Option<f64>,
    pub recommendation: Result<i32, SkipReason>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HoldReason {
    /// Every metric was skipped: the fleet stays where it is.
    NoUsableMetric,
    /// The decision server gave no usable count.
    SignalUnavailable(Unreadable),
    /// Paused by annotation: the replica count is the pause's.
    Paused(Pause),
    /// No usable signal for `syncs` consecutive syncs: the fleet runs at no fewer than `floor`.
    Fallback { syncs: u32, floor: i32 },
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeferReason {
    /// The target is mid-rollout; both directions wait.
    Rollout(Rollout),
    /// A scale-down waits until every requested replica is ready.
    NotSettled { ready: i32, spec: i32 },
    /// A scale-down waits until the objective's latency histograms can be read again.
    LatencyUnread(Unreadable),
    /// A scale-down waits while the pods carry more requests than over the objective's window.
    LoadRising(Rising),
}

/// The pods carry more requests now than their mean over the objective's window: the load is
/// still rising, or a queue is building.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rising {
    /// Requests in flight per pod now, the waiting ones included.
    pub now: f64,
    /// Requests running per Ready pod, on average over the window.
    pub mean: f64,
}

/// A direction of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Up,
    Down,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LimitReason {
    ClampedToMin {
        recommended: i32,
        min: i32,
    },
    ClampedToMax {
        recommended: i32,
        max: i32,
    },
    /// Held by a stabilization window: a scale-down at the highest recommendation within the
    /// scale-down window, a scale-up at the lowest within the scale-up window.
    Stabilized {
        direction: Direction,
        recommended: i32,
        held_at: i32,
        window_seconds: i32,
    },
    /// This step removes at most `max_step` replicas on the way to `desired`.
    StepCapped {
        desired: i32,
        written: i32,
        max_step: i32,
    },
    /// A rate policy allows only `written` now on the way to `desired`.
    RateLimited {
        direction: Direction,
        desired: i32,
        written: i32,
        policy: RatePolicy,
    },
    /// The objective's pace allows only `written` now on the way to `desired`: a scale-down
    /// removes at most `pace` so that the load of each step is measured before the next.
    Paced {
        desired: i32,
        written: i32,
        pace: RatePolicy,
    },
    /// `selectPolicy: Disabled` forbids this direction.
    DirectionDisabled {
        direction: Direction,
        desired: i32,
    },
    /// No usable signal, but the target ran outside the bounds (maxReplicas lowered,
    /// minReplicas raised): it is brought to the nearest bound, as the HPA does, since the bounds
    /// need no measurement.
    ToBounds {
        current: i32,
        bound: i32,
    },
}

/// What the start-up awareness changed.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanReason {
    /// Ready pods alone would have asked for more, but pods already starting cover it.
    StartingCounted { starting: i32 },
    /// Sized for the demand expected when new pods are Ready, above what was measured.
    LookedAhead {
        measured: i32,
        expected: i32,
        horizon_seconds: i32,
    },
    /// The measurement alone would scale down to `measured`, but the demand is rising beyond its
    /// noise, so the fleet stays at `kept`: a pod removed now would be asked for again before a
    /// new one could be Ready.
    RisingDemand { measured: i32, kept: i32 },
    /// The measurement alone would scale down to `measured`; the objective has been missed at
    /// a load it still remembers, so the fleet comes down only to `kept`, each pod left with a
    /// share of its learned capacity spare.
    SpareKept { measured: i32, kept: i32 },
    /// The measurement alone would scale down to `measured`; the objective has been missed at
    /// a load it still remembers, and a request runs `percent` % longer with each pod at its
    /// learned capacity than now (the load curve's line of request durations), so the fleet
    /// comes down only to `kept`, the count at which the requests running then fill the pods
    /// to their capacity and no further.
    LongerAtCapacity {
        measured: i32,
        kept: i32,
        percent: i32,
    },
    /// Sized for the need now grown by the rise the remembered periods saw between now and one
    /// start-up ahead, above what was measured: the rise they all saw is started before it shows.
    Recurring {
        measured: i32,
        expected: i32,
        horizon_seconds: i32,
    },
}

/// Why a sync did what it did; status conditions and events are rendered from these.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    Held(HoldReason),
    Deferred(DeferReason),
    Limited(LimitReason),
    Planned(PlanReason),
    /// What scale-to-zero did.
    Zero(ZeroReason),
}

/// The outcome of one sync: every number and every reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The recommendation before any rail (bounds, windows, rates); `None` when nothing could be
    /// measured.
    pub recommendation: Option<i32>,
    /// Destination after clamping and stabilization, before rate policies and the step cap
    /// (status.desiredReplicas).
    pub desired: i32,
    /// spec.replicas to write now; `None` leaves the target untouched.
    pub write: Option<i32>,
    pub reasons: Vec<Reason>,
    pub metrics: Vec<MetricOutcome>,
    /// What to remember for the next sync.
    pub memory: Memory,
}

impl Decision {
    /// Replicas removed by this sync's write (the pods to pick victims for).
    pub fn removed(&self, target: &TargetState) -> i32 {
        self.write
            .map_or(0, |w| target.spec_replicas.saturating_sub(w).max(0))
    }
}

/// How a scaler is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Pinned at this count, whatever the signal, the bounds or a rollout say.
    Pinned(i32),
    /// Frozen at the count it has.
    Frozen,
}

/// Why going to zero waits, although the metrics alone would allow it.
#[derive(Debug, Clone, PartialEq)]
pub enum AwakeWait {
    /// The activation value is above the threshold, or could not be read.
    Active {
        activation: Result<f64, SkipReason>,
        threshold: f64,
    },
    /// Idle, but not for long enough yet.
    Idle { for_seconds: i64, of: i64 },
    /// Woken too recently: a cold start is allowed to finish.
    MinAwake { for_seconds: i64, of: i64 },
}

/// What scale-to-zero did at this sync.
#[derive(Debug, Clone, PartialEq)]
pub enum ZeroReason {
    /// At zero, and nothing asks for a replica.
    AtZero {
        activation: Result<f64, SkipReason>,
        threshold: f64,
    },
    /// Woken from zero: the activation value is above the threshold, or the metrics asked for
    /// replicas (`activation` is then what the activation query said).
    Woke {
        activation: Result<f64, SkipReason>,
        threshold: f64,
    },
    /// Woken at `since`; no replica is Ready yet, so no per-pod metric can be read.
    Waking { since: Timestamp },
    /// The metrics recommend zero, but one replica stays.
    KeptAwake { recommended: i32, wait: AwakeWait },
    /// Gone to zero after `idle_seconds` without demand.
    WentToZero { idle_seconds: i64 },
}
