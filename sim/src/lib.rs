//! A vLLM fleet in miniature, realistic enough to judge an autoscaler by.
//!
//! `trace` says how many requests arrive when; `fleet` routes them to pods that each have a
//! KV-cache capacity and a token throughput, queues what does not fit, makes new pods useful only
//! after a start-up delay and loses the cache and in-flight requests of a pod that goes away;
//! `exposition` renders what each pod would export under vLLM's own metric names.
//!
//! Everything here is pure and deterministic: time only moves when the caller steps it.

pub mod exposition;
pub mod fleet;
pub mod lab;
pub mod live;
pub mod plot;
pub mod trace;
