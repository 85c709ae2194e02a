//! One vLLM pod, request by request: continuous batching with a per-step token budget, a KV cache
//! that fills by pages and binds (the newest request is preempted and recomputed when it is
//! full), and a prefix cache in the KV cache's free pages whose hits skip part of the prefill.
//!
//! The pod runs scheduler steps one after another while it has work, as vLLM's engine loop does.
//! A step costs a fixed part (reading the weights), a part per running sequence and per cached
//! token (attention), and a part per prefill token, so time to first token and time per output
//! token both rise with load, and a long prompt delays everyone's next token. The caller moves
//! time in ticks; a pod's steps keep their own clock across them.

use std::collections::{BTreeMap, VecDeque};

use crate::lab::exported::Exported;
use crate::lab::workload::Prefix;

/// What one pod of the fleet is: a model on a GPU, as vLLM serves it with its defaults.
///
/// Every constant comes from a published figure or from arithmetic on published figures, named
/// where it is set ([`PodProfile::L4_LLAMA_8B`], [`PodProfile::L40S_LLAMA_8B`]). The model is
/// Llama-3.1-8B-Instruct in bf16: 8.03 billion parameters, so 16.06 GB of weights to read every
/// decode step and ≈16.06 GFLOP (two per parameter) to prefill a token; 32 layers × 8 KV heads ×
/// 128 dimensions × (K, V) × 2 bytes = 128 KiB of KV cache per token (its `config.json`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodProfile {
    /// The card and model, as the report names them (`--profile` takes it).
    pub name: &'static str,
    /// KV-cache capacity in tokens (a whole number of pages), shared by the running requests and
    /// the prefix cache (vLLM's automatic prefix caching keeps freed pages until they are needed).
    pub kv_tokens: u32,
    /// Tokens per KV page (vLLM's block size).
    pub page: u32,
    /// Sequences a step runs at most (`--max-num-seqs`).
    pub max_seqs: usize,
    /// Tokens a step schedules at most, decode and prefill together (`--max-num-batched-tokens`).
    pub step_tokens: u32,
    /// Seconds every step costs (reading the weights).
    pub step_base: f64,
    /// Seconds a step costs per running sequence.
    pub per_seq: f64,
    /// Seconds a step costs per thousand tokens held in the KV cache (attention reads).
    pub per_kilo_kv: f64,
    /// Seconds per prefill token.
    pub per_prefill_token: f64,
    /// Seconds of a pod's start-up spent Running but not Ready: loading the weights, compiling
    /// and capturing CUDA graphs. The rest of the start-up (scheduling, a node, the image) is
    /// spent Pending.
    pub model_load: f64,
}

/// Bytes of weights of Llama-3.1-8B in bf16 (8.03e9 parameters × 2 bytes).
const LLAMA_8B_WEIGHTS: f64 = 16.06e9;
/// FLOPs to prefill one token of Llama-3.1-8B (2 per parameter).
const LLAMA_8B_FLOP_PER_TOKEN: f64 = 2.0 * 8.03e9;
/// Bytes of KV cache per token of Llama-3.1-8B in bf16 (32 × 8 × 128 × 2 × 2).
const LLAMA_8B_KV_BYTES: f64 = 131_072.0;
/// Share of its peak memory bandwidth a decode step's reads achieve (memory-bound kernels
/// typically reach 80–90% of the datasheet figure).
const BANDWIDTH_EFFICIENCY: f64 = 0.85;
/// Share of its dense bf16 peak a prefill achieves (model FLOPs utilisation of chunked prefill
/// at 2,048-token chunks; 40–50% is what serving engines report).
const PREFILL_MFU: f64 = 0.45;
/// Memory vLLM keeps besides weights and KV cache: the activations of its profiling run at
/// `--max-num-batched-tokens`, CUDA graphs and the non-torch allocations (an estimate; vLLM prints
/// the KV-cache size it derived at start-up, which a user should read off their own pods).
const RUNTIME_RESERVE_GIB: f64 = 2.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A GPU as its datasheet and `nvidia-smi` describe it.
struct Card {
    name: &'static str,
    /// Memory visible to CUDA, GiB.
    visible_gib: f64,
    /// Peak memory bandwidth, bytes/s.
    bandwidth: f64,
    /// Dense bf16 peak, FLOP/s.
    bf16: f64,
    /// Seconds to load the weights, compile and capture CUDA graphs (an estimate).
    model_load: f64,
}

/// Llama-3.1-8B-Instruct in bf16 on one `card`, served by vLLM with its defaults for a card under
/// 70 GiB (`EngineArgs.get_batch_defaults` in vllm/engine/arg_utils.py: 2,048 batched tokens and
/// 256 sequences for the OpenAI server; `--gpu-memory-utilization 0.9`; 16-token pages).
const fn llama_8b_on(card: Card) -> PodProfile {
    // What vLLM's memory profile leaves for the KV cache, in whole pages.
    let kv_bytes = (card.visible_gib * 0.9 - LLAMA_8B_WEIGHTS / GIB - RUNTIME_RESERVE_GIB) * GIB;
    let pages = (kv_bytes / LLAMA_8B_KV_BYTES / 16.0) as u32;
    let read = card.bandwidth * BANDWIDTH_EFFICIENCY;
    PodProfile {
        name: card.name,
        kv_tokens: pages * 16,
        page: 16,
        max_seqs: 256,
        step_tokens: 2048,
        // Every step reads the weights.
        step_base: LLAMA_8B_WEIGHTS / read,
        // Sampling and scheduling per sequence (host side; an estimate).
        per_seq: 0.0003,
        // Attention reads 128 KiB per cached token.
        per_kilo_kv: 1000.0 * LLAMA_8B_KV_BYTES / read,
        per_prefill_token: LLAMA_8B_FLOP_PER_TOKEN / (card.bf16 * PREFILL_MFU),
        model_load: card.model_load,
    }
}

impl PodProfile {
    /// One NVIDIA L4: 24 GB GDDR6 at 300 GB/s, 121 TFLOPS dense bf16 (NVIDIA's L4 datasheet),
    /// 22.49 GiB visible to CUDA. (22.49 × 0.9 − 14.96 − 2.0) GiB of KV cache ≈ 26.9k tokens; a
    /// step reads the weights in ≈63 ms (a lone stream at ≈16 tokens/s), 1,000 cached tokens in
    /// ≈0.51 ms; a prefill token costs ≈0.29 ms (≈3.4k prefill tokens/s).
    pub const L4_LLAMA_8B: PodProfile = llama_8b_on(Card {
        name: "L4 / Llama-3.1-8B",
        visible_gib: 22.49,
        bandwidth: 300e9,
        bf16: 121e12,
        model_load: 60.0,
    });

    /// One NVIDIA L40S: 48 GB GDDR6 at 864 GB/s, 362 TFLOPS dense bf16 (NVIDIA's L40S
    /// datasheet), 44.99 GiB visible to CUDA: ≈193k KV tokens, a step ≈22 ms, a prefill token
    /// ≈0.10 ms. The larger card, to show a result does not hang on one calibration.
    pub const L40S_LLAMA_8B: PodProfile = llama_8b_on(Card {
        name: "L40S / Llama-3.1-8B",
        visible_gib: 44.99,
        bandwidth: 864e9,
        bf16: 362e12,
        model_load: 45.0,
    });

    pub const ALL: [PodProfile; 2] = [Self::L4_LLAMA_8B, Self::L40S_LLAMA_8B];

    /// The profile whose card (`l4`, `l40s`) or full name is `name`.
    pub fn parse(name: &str) -> Option<PodProfile> {
        Self::ALL.into_iter().find(|p| {
            p.name.eq_ignore_ascii_case(name)
                || p.name
                    .split(' ')
                    .next()
                    .is_some_and(|card| card.eq_ignore_ascii_case(name))
        })
    }
}

impl Default for PodProfile {
    fn default() -> Self {
        Self::L4_LLAMA_8B
    }
}

impl std::fmt::Display for PodProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} KV tokens in {}-token pages (the prefix cache lives in them), at most {} \
             sequences and {} tokens a step; a step costs {:.1} ms + {} ms per sequence + {:.2} \
             ms per 1,000 cached tokens + {:.3} ms per prefill token; {} s of its start-up loading \
             the model",
            self.name,
            self.kv_tokens,
            self.page,
            self.max_seqs,
            self.step_tokens,
            self.step_base * 1000.0,
            self.per_seq * 1000.0,
            self.per_kilo_kv * 1000.0,
            self.per_prefill_token * 1000.0,
            self.model_load
        )
    }
}

/// A request on a pod.
#[derive(Debug, Clone, Copy)]
struct Seq {
    /// Index of the request in the workload.
    request: usize,
    arrived: f64,
    prompt: u32,
    /// The prefix this request brings and caches once its prefill is done.
    prefix: Option<Prefix>,
    /// Prefill tokens still to compute.
    prefill_left: u32,
    /// Output tokens still to produce (the first comes with the prefill).
    output_left: u32,
    output: u32,
    /// Tokens it holds in the KV cache.
    kv: u32,
    first_token: Option<f64>,
    /// Scheduled once already (its queue time is observed at the first time only).
    scheduled: bool,
}

impl Seq {
    fn pages(&self, page: u32) -> u32 {
        self.kv.div_ceil(page.max(1))
    }
}

/// What happened to a request on a pod during a tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// Its first token, at this time.
    FirstToken { request: usize, at: f64 },
    /// Its last token, at this time; with the time per output token.
    Finished {
        request: usize,
        at: f64,
        tpot: Option<f64>,
    },
}

/// A waiting request, before the pod has given it a slot.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub request: usize,
    /// When the request reaches this pod (its latency histograms count from here).
    pub arrived: f64,
    pub prompt: u32,
    pub output: u32,
    pub prefix: Option<Prefix>,
}

#[derive(Debug, Clone)]
pub struct Engine {
    profile: PodProfile,
    waiting: VecDeque<Seq>,
    /// Admitted, in admission order (the newest is preempted first).
    running: Vec<Seq>,
    kv_pages: u32,
    /// Prefix id -> (tokens, last used): least recently used goes first.
    prefixes: BTreeMap<u32, (u32, f64)>,
    /// Prefix id -> running requests that bring it: a prefix they hold is in their pages.
    held: BTreeMap<u32, u32>,
    /// Tokens of the cached prefixes no running request holds: what the free pages must keep.
    idle_prefix_tokens: u32,
    /// Prefix-cache hit tokens, decayed with a 5-minute time constant: how warm the pod is
    /// (what `rate(vllm:prefix_cache_hits_total[5m])` would show).
    warmth: f64,
    /// Prefixes whose prefill completed in the current step, cached at its end.
    pending_prefixes: Vec<Prefix>,
    /// When the step in progress ends (the pod's own clock).
    clock: f64,
    /// The warmth's decay per tick, for the last tick length seen.
    decay: (f64, f64),
    pub preemptions: u64,
    /// The histograms and counters the pod exports.
    exported: Exported,
}

/// The decay constant of [`Engine::warmth`].
const WARMTH_SECONDS: f64 = 300.0;

impl Engine {
    pub fn new(profile: PodProfile) -> Self {
        Self {
            profile,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_pages: 0,
            prefixes: BTreeMap::new(),
            held: BTreeMap::new(),
            idle_prefix_tokens: 0,
            warmth: 0.0,
            pending_prefixes: Vec::new(),
            clock: 0.0,
            decay: (0.0, 1.0),
            preemptions: 0,
            exported: Exported::default(),
        }
    }

    /// The latency histograms and token counters the pod has exported so far.
    pub fn exported(&self) -> &Exported {
        &self.exported
    }

    /// Requests running (admitted, prefilling or decoding): `vllm:num_requests_running`.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Requests queued on the pod: `vllm:num_requests_waiting`.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// `vllm:kv_cache_usage_perc`, 0 to 1.
    pub fn kv_usage(&self) -> f64 {
        f64::from(self.kv_pages * self.profile.page) / f64::from(self.profile.kv_tokens.max(1))
    }

    pub fn warmth(&self) -> f64 {
        self.warmth
    }

    /// Whether the pod holds `prefix` in its prefix cache.
    pub fn has_prefix(&self, id: u32) -> bool {
        self.prefixes.contains_key(&id)
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Queues a request on this pod.
    pub fn push(&mut self, a: Arrival) {
        self.waiting.push_back(Seq {
            request: a.request,
            arrived: a.arrived,
            prompt: a.prompt,
            prefix: a.prefix,
            prefill_left: a.prompt,
            output_left: a.output.max(1),
            output: a.output.max(1),
            kv: 0,
            first_token: None,
            scheduled: false,
        });
    }

    /// Empties the pod: the requests it held, running or waiting (lost if the pod goes now).
    pub fn drain_all(&mut self) -> Vec<usize> {
        let all = self
            .running
            .drain(..)
            .chain(self.waiting.drain(..))
            .map(|s| s.request)
            .collect();
        self.kv_pages = 0;
        self.held.clear();
        self.idle_prefix_tokens = self.prefixes.values().map(|(tokens, _)| tokens).sum();
        all
    }

    /// Runs the pod's scheduler steps that start before `now + dt`; appends what happened to
    /// `events`. A step that starts inside the tick and ends after it carries over.
    pub fn tick(&mut self, now: f64, dt: f64, events: &mut Vec<Event>) {
        if self.decay.0 != dt {
            self.decay = (dt, (-dt / WARMTH_SECONDS).exp());
        }
        self.warmth *= self.decay.1;
        // Idle time passes without steps.
        self.clock = self.clock.max(now);
        let end = now + dt;
        while self.clock < end {
            self.admit(self.clock);
            if self.running.is_empty() {
                // Nothing to run until the next request arrives.
                match self.waiting.front() {
                    Some(next) if next.arrived > self.clock && next.arrived < end => {
                        self.clock = next.arrived;
                    }
                    _ => {
                        self.clock = end;
                        return;
                    }
                }
                continue;
            }
            self.step(end, events);
        }
    }

    /// Scheduler steps: one token for every decoding sequence per step, and a chunk of prefill
    /// (first come, first served) with what is left of the step's token budget. A step with
    /// prefill runs alone; identical decode-only steps are run together up to the next thing that
    /// changes them (a request finishing or arriving, the cache filling, the tick's end).
    fn step(&mut self, end: f64, events: &mut Vec<Event>) {
        let p = self.profile;
        let decoding = self.running.iter().filter(|s| s.prefill_left == 0).count();
        let mut budget = p.step_tokens.saturating_sub(decoding as u32);
        let mut chunk = 0;
        let mut prefilled = Vec::new();
        for (i, seq) in self.running.iter_mut().enumerate() {
            if seq.prefill_left == 0 {
                continue;
            }
            if budget == 0 {
                break;
            }
            let take = seq.prefill_left.min(budget);
            seq.prefill_left -= take;
            seq.kv += take;
            budget -= take;
            chunk += take;
            if seq.prefill_left == 0 {
                prefilled.push(i);
            }
        }
        let kv_kilo = f64::from(self.kv_pages * p.page) / 1000.0;
        let duration = p.step_base
            + p.per_seq * self.running.len() as f64
            + p.per_kilo_kv * kv_kilo
            + p.per_prefill_token * f64::from(chunk);
        let steps = if chunk > 0 {
            1
        } else {
            self.decode_only_steps(end, duration)
        };
        let at = self.clock + duration * f64::from(steps);
        let mut done = Vec::new();
        let mut decoded = 0_u64;
        for (i, seq) in self.running.iter_mut().enumerate() {
            let fresh = prefilled.contains(&i);
            if fresh {
                // A preempted request being recomputed had its first token long ago.
                if seq.first_token.is_some() {
                    continue;
                }
                seq.first_token = Some(at);
                events.push(Event::FirstToken {
                    request: seq.request,
                    at,
                });
                self.exported.ttft.observe_n(at - seq.arrived, 1);
                self.exported.prompt_tokens += u64::from(seq.prompt);
                self.exported.generation_tokens += 1;
                if let Some(prefix) = seq.prefix {
                    self.pending_prefixes.push(prefix);
                }
                seq.output_left = seq.output_left.saturating_sub(1);
            } else if seq.prefill_left > 0 {
                continue;
            } else {
                // Each of these tokens came one step after the one before it.
                decoded += u64::from(steps.min(seq.output_left));
                seq.output_left = seq.output_left.saturating_sub(steps);
                seq.kv += steps;
            }
            if seq.output_left == 0 {
                let first = seq.first_token.unwrap_or(at);
                let tpot = (seq.output > 1).then(|| (at - first) / f64::from(seq.output - 1));
                if let Some(tpot) = tpot {
                    self.exported.tpot.observe_n(tpot, 1);
                }
                events.push(Event::Finished {
                    request: seq.request,
                    at,
                    tpot,
                });
                done.push(i);
            }
        }
        // One observation per token, all of the step's length.
        self.exported.itl.observe_n(duration, decoded);
        self.exported.generation_tokens += decoded;
        for i in done.into_iter().rev() {
            let seq = self.running.remove(i);
            self.release(seq.prefix);
        }
        for prefix in std::mem::take(&mut self.pending_prefixes) {
            self.remember(prefix, at);
        }
        self.kv_pages = self.running.iter().map(|s| s.pages(p.page)).sum();
        self.clock = at;
        self.preempt_overflow();
        self.evict_prefixes();
    }

    /// How many identical decode-only steps of `duration` can run before something changes.
    fn decode_only_steps(&self, end: f64, duration: f64) -> u32 {
        let steps_until = |t: f64| ((t - self.clock) / duration).ceil().max(1.0) as u32;
        let mut steps = steps_until(end);
        if let Some(first) = self.running.iter().map(|s| s.output_left).min() {
            steps = steps.min(first.max(1));
        }
        // A request still to arrive may join the batch then; one that already waits for room
        // only gets it when a request finishes (counted above).
        if let Some(next) = self.waiting.front().filter(|n| n.arrived > self.clock) {
            steps = steps.min(steps_until(next.arrived));
        }
        // Every step adds a token per sequence: stop before the cache overflows its pages.
        let p = self.profile;
        let free = (p.kv_tokens / p.page.max(1)).saturating_sub(self.kv_pages) * p.page;
        let per_step = u32::try_from(self.running.len()).unwrap_or(u32::MAX).max(1);
        steps.min((free / per_step).max(1))
    }

    /// Gives waiting requests a slot while the batch and the KV cache have room for their prompt.
    fn admit(&mut self, now: f64) {
        let p = self.profile;
        let capacity = p.kv_tokens / p.page.max(1);
        while let Some(seq) = self.waiting.front() {
            if seq.arrived > now {
                return;
            }
            let pages = (seq.prompt + 1).div_ceil(p.page.max(1));
            let fits = self.running.len() < p.max_seqs && self.kv_pages + pages <= capacity;
            if !fits {
                return;
            }
            let Some(mut seq) = self.waiting.pop_front() else {
                return;
            };
            // A prefix already cached skips its part of the prefill; only a fresh prompt (not a
            // preempted one being recomputed) counts as a hit.
            if let Some(Prefix { id, tokens }) = seq.prefix
                && seq.first_token.is_none()
                && let Some(entry) = self.prefixes.get_mut(&id)
            {
                entry.1 = now;
                let hit = tokens.min(seq.prompt.saturating_sub(1));
                seq.prefill_left -= hit;
                seq.kv += hit;
                self.warmth += f64::from(hit);
            }
            if !seq.scheduled {
                seq.scheduled = true;
                self.exported.queue.observe_n(now - seq.arrived, 1);
            }
            self.kv_pages += pages;
            self.hold(seq.prefix);
            self.running.push(seq);
            self.evict_prefixes();
        }
    }

    /// While the cache holds more than it has, the newest request gives its pages back and
    /// waits to be recomputed from the start (vLLM's recompute preemption).
    fn preempt_overflow(&mut self) {
        let capacity = self.profile.kv_tokens / self.profile.page.max(1);
        while self.kv_pages > capacity && self.running.len() > 1 {
            let Some(mut seq) = self.running.pop() else {
                return;
            };
            self.release(seq.prefix);
            self.kv_pages -= seq.pages(self.profile.page).min(self.kv_pages);
            let done = seq.output - seq.output_left;
            seq.prefill_left = seq.prompt + done;
            seq.kv = 0;
            self.waiting.push_front(seq);
            self.preemptions += 1;
        }
    }

    fn remember(&mut self, Prefix { id, tokens }: Prefix, now: f64) {
        if let Some(entry) = self.prefixes.get_mut(&id) {
            entry.1 = now;
            return;
        }
        self.prefixes.insert(id, (tokens, now));
        if !self.held.contains_key(&id) {
            self.idle_prefix_tokens += tokens;
        }
    }

    /// A running request brings `prefix`: its cached pages are in use, not idle.
    fn hold(&mut self, prefix: Option<Prefix>) {
        let Some(Prefix { id, .. }) = prefix else {
            return;
        };
        let holders = self.held.entry(id).or_insert(0);
        *holders += 1;
        if *holders == 1
            && let Some((tokens, _)) = self.prefixes.get(&id)
        {
            self.idle_prefix_tokens -= tokens;
        }
    }

    /// A running request that brought `prefix` finished or gave its pages back.
    fn release(&mut self, prefix: Option<Prefix>) {
        let Some(Prefix { id, .. }) = prefix else {
            return;
        };
        let Some(holders) = self.held.get_mut(&id) else {
            return;
        };
        *holders -= 1;
        if *holders == 0 {
            self.held.remove(&id);
            if let Some((tokens, _)) = self.prefixes.get(&id) {
                self.idle_prefix_tokens += tokens;
            }
        }
    }

    /// The prefix cache lives in the KV pool, as vLLM's automatic prefix caching does: a prefix
    /// no running request holds keeps its pages only while they are free, and when the running
    /// requests need them the least recently used prefix goes first. So a busy pod loses its
    /// cached prefixes exactly when it is busy.
    fn evict_prefixes(&mut self) {
        let p = self.profile;
        let free = p.kv_tokens.saturating_sub(self.kv_pages * p.page);
        while self.idle_prefix_tokens > free {
            // The least recently used; the lowest id among equals, so a run is repeatable.
            let Some(oldest) = self
                .prefixes
                .iter()
                .filter(|(id, _)| !self.held.contains_key(id))
                .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
                .map(|(id, _)| *id)
            else {
                return;
            };
            if let Some((tokens, _)) = self.prefixes.remove(&oldest) {
                self.idle_prefix_tokens -= tokens;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: f64 = 0.05;

    fn arrival(request: usize, at: f64, prompt: u32, output: u32) -> Arrival {
        Arrival {
            request,
            arrived: at,
            prompt,
            output,
            prefix: None,
        }
    }

    /// Runs until every request finished; returns (first token, finish) per request.
    fn serve(engine: &mut Engine, from: f64) -> Vec<(usize, f64, f64)> {
        let mut events = Vec::new();
        let mut t = from;
        while !engine.is_idle() && t < from + 3600.0 {
            engine.tick(t, DT, &mut events);
            t += DT;
        }
        let mut out = Vec::new();
        for e in &events {
            if let Event::Finished { request, at, .. } = e {
                let first = events
                    .iter()
                    .find_map(|f| match f {
                        Event::FirstToken { request: r, at } if r == request => Some(*at),
                        _ => None,
                    })
                    .unwrap_or(*at);
                out.push((*request, first, *at));
            }
        }
        out
    }

    #[test]
    fn a_lone_request_streams_at_the_single_sequence_speed() {
        let p = PodProfile::L4_LLAMA_8B;
        let mut e = Engine::new(p);
        e.push(arrival(0, 0.0, 1000, 200));
        let done = serve(&mut e, 0.0);
        let (_, first, end) = done[0];
        // 1,000 prefill tokens at ≈0.29 ms in one step that also reads the weights (≈63 ms).
        assert!(first > 0.33 && first < 0.38, "{first}");
        // An L4 reads the 16 GB of weights ≈16 times a second.
        let tpot = (end - first) / 199.0;
        assert!(tpot > 0.062 && tpot < 0.066, "{tpot}");
    }

    /// The larger card decodes a lone stream ≈2.9× faster (its bandwidth) and holds ≈7× the KV
    /// cache (its memory less the same weights).
    #[test]
    fn the_larger_card_is_faster_and_holds_more() {
        let tpot = |p: PodProfile| {
            let mut e = Engine::new(p);
            e.push(arrival(0, 0.0, 100, 101));
            let (_, first, end) = serve(&mut e, 0.0)[0];
            (end - first) / 100.0
        };
        let (l4, l40s) = (PodProfile::L4_LLAMA_8B, PodProfile::L40S_LLAMA_8B);
        let speedup = tpot(l4) / tpot(l40s);
        assert!(speedup > 2.7 && speedup < 3.0, "{speedup}");
        assert_eq!(l4.kv_tokens, 26_896);
        assert_eq!(l40s.kv_tokens, 192_784);
        assert_eq!(PodProfile::parse("l40s"), Some(l40s));
        assert_eq!(PodProfile::parse("L4 / Llama-3.1-8B"), Some(l4));
        assert_eq!(PodProfile::parse("h100"), None);
    }

    #[test]
    fn ttft_and_tpot_rise_with_the_batch() {
        let latency = |n: usize| {
            let mut e = Engine::new(PodProfile::default());
            for i in 0..n {
                e.push(arrival(i, 0.0, 500, 100));
            }
            let done = serve(&mut e, 0.0);
            let worst_first = done.iter().map(|d| d.1).fold(0.0, f64::max);
            let tpot = done.iter().map(|d| (d.2 - d.1) / 99.0).sum::<f64>() / n as f64;
            (worst_first, tpot)
        };
        let (f1, t1) = latency(1);
        let (f16, t16) = latency(16);
        let (f48, t48) = latency(48);
        assert!(f1 < f16 && f16 < f48, "{f1} {f16} {f48}");
        assert!(t1 < t16 && t16 < t48, "{t1} {t16} {t48}");
    }

    /// `vllm:request_time_per_output_token_seconds` is observed once per finished request of
    /// more than one token, at the TPOT the request was judged on.
    #[test]
    fn each_finished_request_exports_its_time_per_output_token() {
        let mut e = Engine::new(PodProfile::default());
        // A stream that shares its decode with a long prefill (a stall), one alone, one of a
        // single token (no TPOT).
        e.push(arrival(0, 0.0, 200, 13));
        e.push(arrival(1, 0.2, 4000, 2));
        e.push(arrival(2, 0.2, 100, 1));
        let mut events = Vec::new();
        let mut t = 0.0;
        while !e.is_idle() && t < 60.0 {
            e.tick(t, DT, &mut events);
            t += DT;
        }
        let judged: Vec<f64> = events
            .iter()
            .filter_map(|ev| match ev {
                Event::Finished { tpot, .. } => *tpot,
                _ => None,
            })
            .collect();
        assert_eq!(judged.len(), 2);
        assert_eq!(e.exported.tpot.count(), 2);
        let slow = judged.iter().filter(|x| **x > 0.1).count() as u64;
        assert!(
            slow >= 1,
            "the stalled stream misses a 100 ms TPOT: {judged:?}"
        );
        let cumulative = e.exported.tpot.cumulative();
        let within = cumulative
            .iter()
            .find(|(le, _)| *le == 0.1)
            .map(|(_, c)| *c);
        assert_eq!(within, Some(2 - slow));
    }

    #[test]
    fn a_full_kv_cache_queues_and_preempts() {
        let profile = PodProfile::default();
        let mut e = Engine::new(profile);
        // 40 requests of 1,000 + 600 tokens need 64k tokens: more than twice the cache.
        for i in 0..40 {
            e.push(arrival(i, 0.0, 1000, 600));
        }
        let mut events = Vec::new();
        e.tick(0.0, DT, &mut events);
        assert!(e.waiting() > 0, "the prompts alone do not all fit");
        assert!(e.kv_usage() <= 1.0);
        let done = serve(&mut e, DT);
        assert_eq!(done.len(), 40, "every request finishes in the end");
        assert!(e.preemptions > 0, "the outputs outgrew the cache");
    }

    /// The prefix cache is the KV pool's free pages: a request that needs them evicts a
    /// cached prefix, and the next request with that prefix prefills it again.
    #[test]
    fn a_busy_pod_loses_its_cached_prefixes() {
        let small = PodProfile {
            kv_tokens: 4096,
            ..PodProfile::default()
        };
        let with_prefix = |request: usize, at: f64| Arrival {
            prefix: Some(Prefix {
                id: 7,
                tokens: 2000,
            }),
            ..arrival(request, at, 2500, 2)
        };
        let has_prefix_after = |between: Option<Arrival>| {
            let mut e = Engine::new(small);
            e.push(with_prefix(0, 0.0));
            serve(&mut e, 0.0);
            assert!(e.has_prefix(7), "cached once its prefill is done");
            if let Some(b) = between {
                e.push(b);
                serve(&mut e, 10.0);
            }
            e.has_prefix(7)
        };
        // 1,000 tokens fit beside the 2,000 cached; 3,000 do not.
        assert!(has_prefix_after(Some(arrival(1, 10.0, 1000, 2))));
        assert!(!has_prefix_after(Some(arrival(1, 10.0, 3000, 2))));
    }

    #[test]
    fn a_prefix_hit_lowers_time_to_first_token() {
        let first_token = |warm: bool| {
            let mut e = Engine::new(PodProfile::default());
            let mut a = arrival(0, 0.0, 3000, 2);
            a.prefix = Some(Prefix {
                id: 7,
                tokens: 2500,
            });
            e.push(a);
            serve(&mut e, 0.0);
            if !warm {
                e = Engine::new(PodProfile::default());
            }
            let mut b = arrival(1, 100.0, 3000, 2);
            b.prefix = Some(Prefix {
                id: 7,
                tokens: 2500,
            });
            e.push(b);
            let done = serve(&mut e, 100.0);
            done[0].1 - 100.0
        };
        let cold = first_token(false);
        let warm = first_token(true);
        assert!(warm < cold / 2.0, "warm {warm} cold {cold}");
    }
}
