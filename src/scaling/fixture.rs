//! Test fixtures: an [`Input`] with one per-replica metric, built step by step, so each test
//! states only what it is about.

use k8s_openapi::jiff::Timestamp;

use super::{
    Behavior, Bounds, Input, Memory, MetricReading, Signal, SkipReason, TargetState, TargetType,
};

/// A reader's reason that says `text`.
pub fn unreadable(text: &str) -> super::Unreadable {
    super::Unreadable::new(std::io::Error::other(text.to_owned()))
}

/// `seconds` after the instant the tests count from (a fixed one, so runs repeat exactly).
pub fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// One `Value` metric `q` with target 1 reading `value` (1.0 by default), one replica asked for
/// and Ready, bounds 1..10, no windows or policies, no look-ahead, at the epoch.
pub struct InputBuilder(Input);

pub fn input() -> InputBuilder {
    InputBuilder(Input {
        signal: Signal::Ratio(vec![MetricReading {
            name: "q".into(),
            value: Ok(1.0),
            target: 1.0,
            kind: TargetType::Value,
        }]),
        target: TargetState {
            spec_replicas: 1,
            ready_replicas: 1,
            rollout: None,
        },
        bounds: Bounds { min: 1, max: 10 },
        behavior: Behavior::scale_down(0, 0),
        startup_seconds: None,
        memory: Memory::default(),
        now: Timestamp::UNIX_EPOCH,
        down_waits: None,
        admitted: None,
        down_share: None,
    })
}

impl InputBuilder {
    /// The metric's reading; `None` is a query that returned nothing.
    pub fn value(mut self, value: Option<f64>) -> Self {
        if let Signal::Ratio(readings) = &mut self.0.signal {
            readings[0].value =
                value.ok_or_else(|| SkipReason::Unavailable(unreadable("no series")));
        }
        self
    }

    pub fn replicas(mut self, spec: i32, ready: i32) -> Self {
        self.0.target.spec_replicas = spec;
        self.0.target.ready_replicas = ready;
        self
    }

    pub fn bounds(mut self, min: i32, max: i32) -> Self {
        self.0.bounds = Bounds { min, max };
        self
    }

    pub fn scale_down_window(mut self, seconds: i32) -> Self {
        self.0.behavior = Behavior::scale_down(seconds, 0);
        self
    }

    pub fn memory(mut self, memory: Memory) -> Self {
        self.0.memory = memory;
        self
    }

    /// `seconds` after the epoch.
    pub fn at(mut self, seconds: i64) -> Self {
        self.0.now = time(seconds);
        self
    }

    pub fn build(self) -> Input {
        self.0
    }
}

/// `seconds` after the epoch.
pub fn time(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}
