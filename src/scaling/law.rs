//! The control law, whole: the one place that orders its stages. The controller and the lab's
//! operator entrant both call [`law`], so the lab measures exactly the law that ships, with scale
//! to zero, the fallback and a pause included.
//!
//! The stages, in order:
//! 0. under an objective, the capacity learned from this sync's latency reading becomes the
//!    objective reading's target ([`learn_objective`]);
//! 1. the decision from the signal ([`decide`]), or under scale-to-zero [`decide_with_zero`];
//! 2. the signal's health, counted with or without a fallback (status says how long the signal
//!    has been gone), and the fallback when the spec has one;
//! 3. a pause, which takes the write but leaves the windows recording what the signal said.

use super::capacity::Capacity;
use super::curve::LoadCurve;
use super::decision::decide;
use super::fallback::{FallbackRules, SignalHealth, health, with_fallback};
use super::objective::{
    Learnt, ObjectiveReading, ObjectiveRules, apply, learn_objective, value as objective_value,
};
use super::pause::paused;
use super::recommend::SkipReason;
use super::types::{Decision, Input, Pause};
use super::zero::{ZeroMemory, ZeroRules, decide_with_zero};

/// What the spec and its annotations make of the law beyond the ratio: each stage that applies.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stages {
    /// Under an objective: how it is judged and learned.
    pub objective: Option<ObjectiveRules>,
    pub zero: Option<ZeroRules>,
    pub fallback: Option<FallbackRules>,
    pub pause: Option<Pause>,
}

/// What the law remembers between syncs besides [`Input::memory`]: the timers, the count and the
/// capacity are kept in status, so a restart keeps them; the load curve changes at every sync
/// and is kept in the process (a restart starts it afresh).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stored {
    /// The scale-to-zero timers.
    pub zero: ZeroMemory,
    /// Consecutive syncs without a usable signal before this one.
    pub syncs_without_signal: u32,
    /// The capacity learned for the objective (none: the prior).
    pub capacity: Option<Capacity>,
    /// The objective's load curve.
    pub curve: LoadCurve,
}

/// One step of the law: the decision and what to store for the next.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The decision; its `memory` is the windows, changes and samples to store.
    pub decision: Decision,
    /// The scale-to-zero timers after this sync, under scaleToZero.
    pub zero: Option<ZeroMemory>,
    /// Consecutive syncs without a usable signal, this one included.
    pub syncs_without_signal: u32,
    /// What the objective stage learned, under an objective.
    pub objective: Option<Learnt>,
}

/// The law applied to one sync's `input`. `activation` is the activation query's reading, under
/// scaleToZero (none without it: the stage does not apply); `objective` is the latency reading,
/// under an objective.
pub fn law(
    input: &Input,
    stages: &Stages,
    activation: Option<Result<f64, SkipReason>>,
    objective: Option<&ObjectiveReading>,
    stored: Stored,
) -> Step {
    let learnt = stages
        .objective
        .as_ref()
        .zip(objective)
        .map(|(rules, reading)| {
            learn_objective(
                stored.capacity,
                &stored.curve,
                reading,
                objective_value(&input.signal),
                &input.target,
                input.now,
                rules,
            )
        });
    let learnt_input = learnt
        .as_ref()
        .zip(stages.objective.as_ref())
        .map(|(l, rules)| apply(input, l, &rules.starting(stored.capacity)));
    let input = learnt_input.as_ref().unwrap_or(input);
    let activation_read = activation
        .as_ref()
        .map(|a| a.as_ref().is_ok_and(|v| v.is_finite()));
    let (decision, zero) = match (&stages.zero, activation) {
        (Some(rules), Some(activation)) => {
            let (decision, zero) = decide_with_zero(input, rules, activation, stored.zero);
            (decision, Some(zero))
        }
        _ => (decide(input), None),
    };
    let health = health(&decision, &input.target, activation_read);
    let (decision, syncs_without_signal) = match &stages.fallback {
        Some(rules) => with_fallback(decision, rules, health, stored.syncs_without_signal, input),
        None => {
            let syncs = match health {
                SignalHealth::Lost => stored.syncs_without_signal.saturating_add(1),
                SignalHealth::Usable | SignalHealth::NotExpected => 0,
            };
            (decision, syncs)
        }
    };
    let decision = match stages.pause {
        Some(pause) => paused(decision, pause, &input.target, &input.memory),
        None => decision,
    };
    Step {
        decision,
        zero,
        syncs_without_signal,
        objective: learnt,
    }
}
