//! An operator's hand on the fleet: a scaler paused by annotation still measures and recommends
//! (status and the external metrics API keep showing what it would do), but the replica count is
//! the pause's, and the memory of the control law stays as it was, so resuming picks up where
//! scaling left off.

use super::decision::{Decision, HoldReason, Memory, Reason, TargetState};

/// How a scaler is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Pinned at this count, whatever the signal, the bounds or a rollout say.
    Pinned(i32),
    /// Frozen at the count it has.
    Frozen,
}

/// `decision` under `pause`: the write is the pause's; the stabilization windows and the rate
/// policies' changes are those from before this sync (`before`), while the demand samples keep
/// being learned.
pub fn paused(decision: Decision, pause: Pause, target: &TargetState, before: &Memory) -> Decision {
    let current = target.spec_replicas;
    let (desired, write) = match pause {
        Pause::Pinned(replicas) => (replicas, (replicas != current).then_some(replicas)),
        Pause::Frozen => (current, None),
    };
    Decision {
        desired,
        write,
        reasons: vec![Reason::Held(HoldReason::Paused(pause))],
        memory: Memory {
            samples: decision.memory.samples,
            ..before.clone()
        },
        ..decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::{Entry, Input, decide, fixture};
    use k8s_openapi::jiff::Timestamp;

    fn input(value: f64, spec: i32) -> Input {
        fixture::input()
            .value(Some(value))
            .replicas(spec, spec)
            .scale_down_window(300)
            .memory(Memory {
                down: vec![Entry {
                    at: Timestamp::UNIX_EPOCH,
                    replicas: 6,
                }],
                ..Memory::default()
            })
            .at(60)
            .build()
    }

    #[test]
    fn pinned_writes_the_pin_and_keeps_the_history() {
        // The signal asks for 8; pinned at 3, also below the window's 6 and past no bound.
        let i = input(2.0, 4);
        let d = paused(decide(&i), Pause::Pinned(3), &i.target, &i.memory);
        assert_eq!((d.desired, d.write), (3, Some(3)));
        assert_eq!(d.recommendation, Some(8), "what it would do is still shown");
        assert_eq!(
            d.reasons,
            vec![Reason::Held(HoldReason::Paused(Pause::Pinned(3)))]
        );
        assert_eq!(
            d.memory.down, i.memory.down,
            "the window is as before the pause"
        );
        // Already at the pin: nothing to write.
        let i = input(2.0, 3);
        assert_eq!(
            paused(decide(&i), Pause::Pinned(3), &i.target, &i.memory).write,
            None
        );
    }

    #[test]
    fn frozen_writes_nothing() {
        let i = input(2.0, 4);
        let d = paused(decide(&i), Pause::Frozen, &i.target, &i.memory);
        assert_eq!((d.desired, d.write), (4, None));
        assert_eq!(d.memory.down, i.memory.down);
    }
}
