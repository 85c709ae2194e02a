//! The scaling decision, as pure functions of (spec, observed state, history, now).
//!
//! Every number of the algorithm lives here and nowhere else: the HPA ratio, the look-ahead by one
//! start-up delay, the tolerance, the clamp, stabilization windows, rate policies, the step cap,
//! the rollout and settle guards, and the start-up delay learned from the target's pods. Nothing in this module performs
//! I/O or reads a clock; the controller observes, calls [`law`] (the stages in order: [`decide`]
//! or scale to zero, the signal's health and the fallback, a pause), and acts on the
//! [`Decision`]. The lab's operator entrant calls the same [`law`].

mod behavior;
mod capacity;
mod curve;
mod decision;
mod fallback;
#[cfg(test)]
pub(crate) mod fixture;
mod forecast;
mod law;
mod objective;
mod pause;
mod recommend;
mod recurring;
mod stabilization;
mod startup;
mod step;
mod types;
mod unreadable;
mod victims;
mod zero;

pub use behavior::{Behavior, Change, MAX_CHANGES, PolicyKind, RatePolicy, Rules, Select};
pub use capacity::{
    Capacity, CapacityRules, Evidence, HistogramError, Kept, Lesson, Share,
    learn as learn_capacity, share_above,
};
pub use curve::LoadCurve;
pub use decision::decide;
pub use fallback::{FallbackRules, SignalHealth, health as signal_health, with_fallback};
pub use forecast::Sample;
pub use law::{Stages, Step, Stored, law};
pub use objective::{
    DOWN_PACE, Latency, Learnt, OBJECTIVE_METRIC, ObjectiveReading, ObjectiveRules, SPARE_SHARE,
    WINDOW_SECONDS, late_share, learn_objective, missed as objective_missed,
    settled as objective_settled,
};
pub use pause::paused;
pub use recommend::{SkipReason, TargetType, ratio_recommendation};
pub use recurring::{
    BINS as RECURRING_BINS, Profile, Recurrence, Running, position as recurring_position, record,
};
pub use stabilization::{Entry, MAX_HISTORY};
pub use startup::{
    Learned, MAX_STARTUP_SECONDS, effective as effective_startup, learn as learn_startup,
};
pub use step::cap_scale_down;
pub use types::{
    AwakeWait, Bounds, Decision, DeferReason, Direction, DownShare, HoldReason, Input, LimitReason,
    Memory, MetricOutcome, MetricReading, Pause, PlanReason, Reason, Rising, Rollout, Signal,
    TargetState, ZeroReason,
};
pub use unreadable::{NegativeCount, Unreadable};
pub use victims::{
    Candidate, LabelValues, Ranking, WarmthError, pick, victim_costs, warmth_by_pod,
};
pub use zero::{ZeroMemory, ZeroPhase, ZeroRules, decide_with_zero, phase as zero_phase};
