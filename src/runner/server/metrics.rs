//! Counters shared by the HTTP side and the scheduler, rendered as Prometheus text.

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The window of the `tokens_per_second` gauge.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Server-wide counters (all monotonic except the gauges `queue_depth` and `slots_busy`).
#[derive(Default)]
pub struct Metrics {
    /// Completion requests accepted into the queue.
    pub requests: AtomicU64,
    /// Requests answered with a 4xx error.
    pub requests_invalid: AtomicU64,
    /// Requests refused with 503 because the queue was full.
    pub requests_rejected: AtomicU64,
    /// Requests whose client went away before the end (each of `n` choices counts).
    pub requests_cancelled: AtomicU64,
    /// Requests that ran to a finish reason (each of `n` choices counts).
    pub requests_finished: AtomicU64,
    /// Prompt tokens of finished or cancelled requests.
    pub prompt_tokens: AtomicU64,
    /// Of those, tokens a slot already held (prefix reuse).
    pub prompt_tokens_cached: AtomicU64,
    /// Prompt tokens run through the model (those no cache held).
    pub prompt_tokens_evaluated: AtomicU64,
    /// Sessions the prompt cache (`--cache-ram`) holds.
    pub cache_entries: AtomicU64,
    /// Bytes they hold.
    pub cache_bytes: AtomicU64,
    /// Prompts that got a session back from the prompt cache.
    pub cache_hits: AtomicU64,
    /// Tokens sampled.
    pub completion_tokens: AtomicU64,
    /// Batched forward passes run.
    pub steps: AtomicU64,
    /// Token columns over all those passes.
    pub step_tokens: AtomicU64,
    /// Nanoseconds spent in forward passes and sampling.
    pub busy_nanos: AtomicU64,
    /// Requests waiting for a slot.
    pub queue_depth: AtomicU64,
    /// Slots holding a request.
    pub slots_busy: AtomicU64,
    /// Slots in all.
    pub slots: AtomicU64,
    /// Connections open (under `--max-connections`).
    pub connections: AtomicU64,
    /// Connections answered 503 and closed because the cap was reached.
    pub connections_refused: AtomicU64,
    /// Connections closed because a request head or body was slower than its timeout.
    pub timeouts: AtomicU64,
    /// Bytes of KV cache the slots' sessions hold (after the latest step).
    pub kv_cache_bytes: AtomicU64,
    /// Admissions deferred because the KV budget was full.
    pub kv_waits: AtomicU64,
    /// Tokens drafted by prompt lookup and fed for verification.
    pub draft_tokens: AtomicU64,
    /// Of those, tokens the sampler then drew (kept).
    pub draft_accepted: AtomicU64,
    /// Grammar masks computed (one per token sampled under a grammar).
    pub grammar_masks: AtomicU64,
    /// Nanoseconds spent computing and applying them.
    pub grammar_mask_nanos: AtomicU64,
    /// Scheduler steps that panicked (their requests failed, the thread went on).
    pub step_panics: AtomicU64,
    /// 1 once the model thread cannot serve any more (it stopped, or kept panicking):
    /// `/health` answers 503.
    pub model_down: AtomicU64,
    /// (time, tokens sampled) of recent steps, for the rate gauge.
    recent: Mutex<VecDeque<(Instant, u64)>>,
}

impl Metrics {
    /// Records that a step sampled `n` tokens now, for the rate gauge (each token is counted in
    /// `completion_tokens` as it is sampled, before its text is sent).
    pub fn step_sampled(&self, n: u64) {
        let now = Instant::now();
        let mut r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        r.push_back((now, n));
        while r.front().is_some_and(|&(t, _)| now - t > RATE_WINDOW) {
            r.pop_front();
        }
    }

    /// Tokens sampled per second over the last 10 s (from the first step in that window).
    pub fn tokens_per_second(&self) -> f64 {
        let now = Instant::now();
        let r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let live: Vec<_> = r.iter().filter(|&&(t, _)| now - t <= RATE_WINDOW).collect();
        match live.first() {
            Some(&&(t0, _)) if live.len() > 1 => {
                let n: u64 = live[1..].iter().map(|&&(_, n)| n).sum();
                n as f64 / (now - t0).as_secs_f64().max(1e-3)
            }
            _ => 0.0,
        }
    }

    /// The Prometheus text exposition of every series (one table, `SERIES`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, kind, help, read) in SERIES {
            let v = read(self);
            let _ = writeln!(
                s,
                "# HELP t2p_{name} {help}\n# TYPE t2p_{name} {kind}\nt2p_{name} {v}"
            );
        }
        s
    }
}

/// A counter or gauge as a float.
fn g(a: &AtomicU64) -> f64 {
    a.load(Relaxed) as f64
}

/// A reader of one series.
type Read = fn(&Metrics) -> f64;

/// Every series `/metrics` exports: name (after `t2p_`), Prometheus type, help, value.
#[rustfmt::skip]
const SERIES: &[(&str, &str, &str, Read)] = &[
    ("requests_total", "counter", "Completion requests accepted.", |m| g(&m.requests)),
    ("requests_invalid_total", "counter", "Requests answered with a 4xx error.", |m| g(&m.requests_invalid)),
    ("requests_rejected_total", "counter", "Requests refused with 503 (queue full).", |m| g(&m.requests_rejected)),
    ("requests_cancelled_total", "counter", "Requests (each of n choices) whose client disconnected first.", |m| g(&m.requests_cancelled)),
    ("requests_finished_total", "counter", "Requests (each of n choices) that ran to a finish reason.", |m| g(&m.requests_finished)),
    ("prompt_tokens_total", "counter", "Prompt tokens of the requests run.", |m| g(&m.prompt_tokens)),
    ("prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache.", |m| g(&m.prompt_tokens_cached)),
    ("prompt_tokens_evaluated_total", "counter", "Prompt tokens evaluated (not taken from a cache).", |m| g(&m.prompt_tokens_evaluated)),
    ("prompt_cache_entries", "gauge", "Sessions kept in the RAM prompt cache (--cache-ram).", |m| g(&m.cache_entries)),
    ("prompt_cache_bytes", "gauge", "Bytes those sessions hold.", |m| g(&m.cache_bytes)),
    ("prompt_cache_hits_total", "counter", "Prompts that got a session back from the RAM prompt cache.", |m| g(&m.cache_hits)),
    ("completion_tokens_total", "counter", "Tokens generated.", |m| g(&m.completion_tokens)),
    ("steps_total", "counter", "Batched forward passes.", |m| g(&m.steps)),
    ("step_tokens_total", "counter", "Token columns over all forward passes.", |m| g(&m.step_tokens)),
    ("busy_seconds_total", "counter", "Seconds spent in forward passes and sampling.", |m| g(&m.busy_nanos) / 1e9),
    ("queue_depth", "gauge", "Requests waiting for a slot.", |m| g(&m.queue_depth)),
    ("slots_busy", "gauge", "Slots holding a request.", |m| g(&m.slots_busy)),
    ("slots", "gauge", "Slots (--parallel).", |m| g(&m.slots)),
    ("connections", "gauge", "Connections open.", |m| g(&m.connections)),
    ("connections_refused_total", "counter", "Connections refused with 503 (--max-connections reached).", |m| g(&m.connections_refused)),
    ("timeouts_total", "counter", "Connections closed for a request head or body slower than --timeout-header / --timeout-body.", |m| g(&m.timeouts)),
    ("kv_cache_bytes", "gauge", "Bytes of KV cache held by the slots.", |m| g(&m.kv_cache_bytes)),
    ("kv_waits_total", "counter", "Admissions deferred until the KV budget had room.", |m| g(&m.kv_waits)),
    ("draft_tokens_total", "counter", "Tokens drafted by prompt lookup (--draft lookup).", |m| g(&m.draft_tokens)),
    ("draft_accepted_total", "counter", "Drafted tokens kept (the sampler drew them).", |m| g(&m.draft_accepted)),
    ("grammar_masks_total", "counter", "Token masks computed for constrained output (one per token).", |m| g(&m.grammar_masks)),
    ("grammar_mask_seconds_total", "counter", "Seconds spent computing and applying them.", |m| g(&m.grammar_mask_nanos) / 1e9),
    ("step_panics_total", "counter", "Scheduler steps that panicked (their requests got a 500; the thread went on).", |m| g(&m.step_panics)),
    ("model_down", "gauge", "1 when the model thread can no longer serve (/health answers 503).", |m| g(&m.model_down)),
    ("tokens_per_second", "gauge", "Tokens generated per second over the last 10 s.", |m| m.tokens_per_second()),
];
