//! The scaling decision, as pure functions of (spec, observed state, history, now).
//!
//! Every number of the algorithm lives here and nowhere else: the HPA ratio, the clamp, scale-down
//! stabilization, the step cap, the rollout and settle guards. Nothing in this module performs
//! I/O or reads a clock; the controller observes, calls [`decide`], and acts on the [`Decision`].

mod decision;
mod recommend;
mod stabilization;
mod step;
mod victims;

pub use decision::{
    Bounds, DECISION_METRIC, Decision, DeferReason, HoldReason, Input, LimitReason, MetricOutcome,
    MetricReading, Reason, ScaleDownPolicy, Signal, TargetState, decide,
};
pub use recommend::{SkipReason, ratio_recommendation};
pub use stabilization::{Entry, MAX_HISTORY, record, stabilized};
pub use step::cap_scale_down;
pub use victims::{Candidate, Ranking, pick, victim_costs};
