//! An operator's hand on the fleet: a scaler paused by annotation still measures and recommends
//! (status and the external metrics API keep showing what it would do), but the replica count is
//! the pause's. The stabilization windows go on recording what the signal recommends, as if the
//! scaler were still in charge, so removing the pause resumes from what the signal said during
//! it: a fleet frozen through an hour of low demand is not held another window on a
//! recommendation from before the pause, and a fleet pinned low through high demand returns to
//! what the demand asks for. The pause's own writes are the operator's hand, not the control
//! law's, and are not counted by the rate policies (as the HPA does not count a manual scale).

use super::types::{Decision, HoldReason, Memory, Pause, Reason, TargetState};

/// `decision` under `pause`: the write is the pause's; the windows and the demand samples are the
/// decision's (the signal's history goes on), the rate policies' changes are those from before
/// this sync (`before`): neither the pause's write nor the one the decision would have made
/// happened as a step of the control law.
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
            changes: before.changes.clone(),
            ..decision.memory
        },
        ..decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaling::{Entry, Input, decide, fixture};

    /// `spec` replicas, all Ready, a per-replica `value` against a target of 1, a 300 s
    /// scale-down window.
    fn input(value: f64, spec: i32, memory: Memory, now: i64) -> Input {
        fixture::input()
            .value(Some(value))
            .replicas(spec, spec)
            .scale_down_window(300)
            .memory(memory)
            .at(now)
            .build()
    }

    fn window_of(replicas: i32) -> Memory {
        Memory {
            down: vec![Entry {
                at: fixture::time(0),
                replicas,
            }],
            ..Memory::default()
        }
    }

    #[test]
    fn pinned_writes_the_pin_and_the_window_goes_on() {
        // The signal asks for 8; pinned at 3, also below the window's 6 and past no bound.
        let i = input(2.0, 4, window_of(6), 60);
        let free = decide(&i);
        let d = paused(free.clone(), Pause::Pinned(3), &i.target, &i.memory);
        assert_eq!((d.desired, d.write), (3, Some(3)));
        assert_eq!(d.recommendation, Some(8), "what it would do is still shown");
        assert_eq!(
            d.reasons,
            vec![Reason::Held(HoldReason::Paused(Pause::Pinned(3)))]
        );
        assert_eq!(
            d.memory.down, free.memory.down,
            "the window records the signal"
        );
        assert_eq!(
            d.memory.changes, i.memory.changes,
            "no step of the control law was taken"
        );
        // Already at the pin: nothing to write.
        let i = input(2.0, 3, window_of(6), 60);
        assert_eq!(
            paused(decide(&i), Pause::Pinned(3), &i.target, &i.memory).write,
            None
        );
    }

    #[test]
    fn frozen_writes_nothing() {
        let i = input(2.0, 4, window_of(6), 60);
        let d = paused(decide(&i), Pause::Frozen, &i.target, &i.memory);
        assert_eq!((d.desired, d.write), (4, None));
    }

    /// Syncs every 15 s from `from` to `to` under `pause` on a signal of `value` per replica;
    /// returns the memory after them.
    fn run(pause: Pause, value: f64, spec: i32, memory: Memory, from: i64, to: i64) -> Memory {
        (from..to).step_by(15).fold(memory, |memory, now| {
            let i = input(value, spec, memory, now);
            paused(decide(&i), pause, &i.target, &i.memory).memory
        })
    }

    #[test]
    fn resuming_follows_what_the_signal_said_during_the_pause() {
        // Frozen at 6 through an hour at a third of a replica's load each (2 replicas' worth):
        // resuming scales down at once, not one window later on a recommendation from before.
        let memory = run(Pause::Frozen, 1.0 / 3.0, 6, window_of(6), 15, 3_600);
        let d = decide(&input(1.0 / 3.0, 6, memory, 3_600));
        assert_eq!(d.write, Some(2), "{:?}", d.reasons);

        // Frozen at 6 for a minute of the same: the window holds what was recommended before the
        // pause and during it, as if the scaler had never stopped.
        let memory = run(Pause::Frozen, 1.0 / 3.0, 6, window_of(6), 15, 60);
        let d = decide(&input(1.0 / 3.0, 6, memory, 60));
        assert_eq!((d.desired, d.write), (6, None), "{:?}", d.reasons);

        // Pinned at 2 through high demand (3 per replica: 6 replicas' worth): resuming follows
        // the demand.
        let memory = run(Pause::Pinned(2), 3.0, 2, Memory::default(), 0, 600);
        let d = decide(&input(3.0, 2, memory, 600));
        assert_eq!(d.write, Some(6), "{:?}", d.reasons);
    }
}
