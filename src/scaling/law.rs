//! The control law, whole: the one place that orders its stages. The controller and the lab's
//! operator entrant both call [`law`], so the lab measures exactly the law that ships, with scale
//! to zero, the fallback and a pause included.
//!
//! The stages, in order:
//! 1. the decision from the signal ([`decide`]), or under scale-to-zero [`decide_with_zero`];
//! 2. the signal's health, counted with or without a fallback (status says how long the signal
//!    has been gone), and the fallback when the spec has one;
//! 3. a pause, which takes the write but leaves the windows recording what the signal said.

use super::decision::decide;
use super::fallback::{FallbackRules, SignalHealth, health, with_fallback};
use super::pause::paused;
use super::recommend::SkipReason;
use super::types::{Decision, Input, Pause};
use super::zero::{ZeroMemory, ZeroRules, decide_with_zero};

/// What the spec and its annotations make of the law beyond the ratio: each stage that applies.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stages {
    pub zero: Option<ZeroRules>,
    pub fallback: Option<FallbackRules>,
    pub pause: Option<Pause>,
}

/// What the law remembers between syncs besides [`Input::memory`] (kept in status, so a restart
/// keeps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stored {
    /// The scale-to-zero timers.
    pub zero: ZeroMemory,
    /// Consecutive syncs without a usable signal before this one.
    pub syncs_without_signal: u32,
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
}

/// The law applied to one sync's `input`. `activation` is the activation query's reading, under
/// scaleToZero (none without it: the stage does not apply).
pub fn law(
    input: &Input,
    stages: &Stages,
    activation: Option<Result<f64, SkipReason>>,
    stored: Stored,
) -> Step {
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
    }
}
