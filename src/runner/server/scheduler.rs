//! The model's thread: up to `parallel` slots, each with its own [`Session`], decoded together
//! in one [`Model::forward`] per step. Requests join and leave between steps; prompts are
//! fed in chunks from a per-step budget, so a long prompt never stalls the others' decoding.
//!
//! Batching never changes an output: every sequence's logits are those it would get alone
//! (see `Model::forward`), each request samples with its own [`Sampler`] (through the
//! [`TokenStep`] every decoding loop shares), and chunked prompt
//! evaluation gives the same K/V and recurrent state as a single pass.
//!
//! The choices of one request (`n`) share its prompt's evaluation: while the first choice
//! evaluates the prompt, the others wait in free slots; once it is done they get copies of its
//! session (K/V and recurrent state, exactly what they would have computed) and sample their
//! first tokens from its logits. Choices that found no free slot are admitted later like any
//! job, and share with another of their request's choices still evaluating the prompt, if any.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::metrics::Metrics;
use super::prompt_cache::PromptCache;
use super::text::TextStream;
use crate::runner::Tokenizer;
use crate::runner::constrain::Constraint;
use crate::runner::model::{Exec, Logits, Model, Seq, Session};
use crate::runner::sample::{Sampler, SamplerConfig, TokenMask, log_softmax_top};
use crate::runner::speculative::{LookupConfig, lookup_draft};
use crate::runner::step::{StepError, Stop, TokenStep, check_draft};

/// Why a completion ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, the end of the context, or a shutdown that could not wait for the end.
    Length,
}

impl Finish {
    /// The OpenAI `finish_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// The log-probabilities of one sampled token, from the model's distribution (the softmax of
/// its logits before bias, penalties and temperature).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token.
    pub id: u32,
    /// Its log-probability (`<= 0`).
    pub logprob: f32,
    /// The most likely tokens and theirs, most likely first.
    pub top: Vec<(u32, f32)>,
    /// Characters of completion text before this token's (OpenAI's `text_offset`).
    pub offset: usize,
}

/// What the scheduler tells the request's handler.
#[derive(Debug)]
pub enum Event {
    /// The log-probabilities of the next sampled token (when the job asks for them), sent
    /// before any text that token brings; an end-of-generation token has none.
    Logprob(TokenLogprob),
    /// The next piece of completion text (never empty).
    Text(String),
    /// The completion ended.
    Done {
        /// Why.
        finish: Finish,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Of those, tokens the slot already held.
        cached_tokens: usize,
        /// Tokens sampled (an end-of-generation token included).
        completion_tokens: usize,
        /// Their ids.
        tokens: Vec<u32>,
    },
    /// The model failed (the request ends; the server goes on).
    Error(String),
}

/// One completion to run.
pub struct Job {
    /// Prompt tokens (at least one, fewer than the context).
    pub prompt: Vec<u32>,
    /// Most tokens to sample (at least one; cut to what the context leaves).
    pub max_tokens: usize,
    /// Sampling settings, seed included.
    pub sampler: SamplerConfig,
    /// Stop strings.
    pub stop: Vec<String>,
    /// `Some(k)`: send an [`Event::Logprob`] per token, with `k` alternatives.
    pub logprobs: Option<usize>,
    /// The grammar the output must follow (its mask applied before sampling).
    pub constraint: Option<Constraint>,
    /// Where the events go; a closed channel cancels the job.
    pub events: UnboundedSender<Event>,
    /// The request's further choices: the same prompt (and limits), their own sampler and
    /// events; they share this job's prompt evaluation.
    pub siblings: Vec<Job>,
    /// Test hook: the first step that feeds this job panics (see [`PANIC_HOOK_ENV`]).
    pub inject_panic: bool,
    /// Control tokens whose text the output shows all the same (tool-call markers).
    pub rendered: Arc<[u32]>,
}

/// The environment variable that, set to `1` when the server starts, lets a request with
/// `"t2p_test_panic": true` make the scheduler step that feeds it panic: how the tests check
/// that a fault fails only that step's requests and the server goes on.
pub const PANIC_HOOK_ENV: &str = "T2P_SERVE_TEST_PANIC";

/// Consecutive panicking steps after which the model thread is taken for broken (a panic that
/// left shared state unusable makes every later step panic too): it stops, `/health` says 503.
const MAX_CONSECUTIVE_PANICS: u32 = 8;

/// Sets `model_down` when the scheduler thread ends, however it ends (a panic outside the
/// guarded steps included).
struct DownOnExit<'a>(&'a Metrics);

impl Drop for DownOnExit<'_> {
    fn drop(&mut self) {
        self.0.model_down.store(1, Relaxed);
    }
}

/// The text of a caught panic's payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}

/// Settings of the scheduler.
#[derive(Clone, Copy, Debug)]
pub struct SchedulerConfig {
    /// Slots (sequences decoded together).
    pub parallel: usize,
    /// Context of each slot, in tokens.
    pub n_ctx: usize,
    /// Most prompt tokens evaluated in one step, over all slots.
    pub prefill_budget: usize,
    /// Most KV-cache positions over all slots (at least `n_ctx`): a request is admitted when
    /// the positions it can reach (prompt + `max_tokens`) fit beside what the busy slots may
    /// reach and the idle slots hold (idle sessions are dropped, oldest first, to make room);
    /// otherwise it waits.
    pub kv_budget: usize,
    /// Prompt-lookup drafting (`--draft lookup`): a decoding slot feeds the tokens its
    /// history predicts after its sampled one, and keeps those its sampler then draws.
    /// Attention-only models only (a recurrent state cannot drop rejected tokens).
    pub draft: Option<LookupConfig>,
    /// `--slot-prompt-similarity`: a free slot is reused for a prompt when it would keep at
    /// least this fraction of the tokens it holds; otherwise the prompt goes to an empty or
    /// the least recently used slot (so a new conversation, or a client's one-shot title
    /// request, does not evict another conversation's cache). 0: the longest prefix wins.
    pub slot_similarity: f32,
    /// `--cache-ram`, in bytes: the sessions of conversations that lose their slot are kept
    /// in RAM ([`PromptCache`]) up to this size and restored into a slot when a prompt shares
    /// a longer usable prefix with one than with any slot (0: off).
    pub cache_ram: usize,
}

/// A request being served by a slot.
struct Active<'t> {
    job: Job,
    sampler: Sampler,
    text: TextStream<'t>,
    /// Prompt tokens in the session so far.
    fed: usize,
    cached: usize,
    /// Prompt then sampled tokens (for the penalties and the drafter), and the masked logits.
    step: TokenStep,
    /// `max_tokens` cut to the context.
    limit: usize,
    /// The last sampled token, evaluated in the next step.
    pending: Option<u32>,
    /// The request this job is a choice of (the admission order of its first choice), when
    /// it has several.
    group: Option<u64>,
    /// Waiting for a choice of its group to finish evaluating the prompt (then forked).
    waiting: bool,
    /// Hybrid models: where the prompt's last message starts (its last message-start token),
    /// at which the slot keeps a copy of its session ([`Slot::mark`]) on the way through.
    boundary: Option<usize>,
}

/// How sampling ended a job.
enum Ended {
    /// A finish reason.
    Finished(Finish),
    /// The grammar failed (the job ends with this error).
    Failed(String),
}

impl Active<'_> {
    /// Tokens sampled so far.
    fn generated(&self) -> usize {
        self.step.generated().len()
    }

    /// KV positions this job can reach: its prompt and every token it may sample.
    fn reach(&self) -> usize {
        self.job.prompt.len() + self.limit
    }

    /// Whether this job is evaluating its own prompt now.
    fn in_prefill(&self) -> bool {
        !self.waiting && self.pending.is_none() && self.fed < self.job.prompt.len()
    }
}

/// A slot: its session (made on first use), the tokens the session holds, and its request.
struct Slot<'t> {
    session: Option<Session>,
    held: Vec<u32>,
    /// Hybrid models: a copy of the session at the last message boundary of the latest prompt
    /// (the tokens it holds, the session): the next turn of that conversation extends those
    /// tokens, so it resumes there (a recurrent state cannot be cut back to a prefix).
    mark: Option<(Vec<u32>, Session)>,
    active: Option<Active<'t>>,
    /// Admission order, for the prefill budget (oldest first).
    since: u64,
}

impl Slot<'_> {
    /// KV positions this slot counts against the budget: what its session holds, and for a
    /// busy slot what its request can reach; plus a hybrid's boundary copy, the one it holds
    /// or the one its request will take on the way (which replaces it).
    fn charge(&self) -> usize {
        let held = self.session.as_ref().map_or(0, |s| s.cache.positions());
        let live = self.active.as_ref().map_or(held, |a| held.max(a.reach()));
        let to_mark = self.active.as_ref().and_then(|a| a.boundary).unwrap_or(0);
        live + self.marked().max(to_mark)
    }

    /// KV positions of the live session once a job reaching `need` positions runs in it.
    fn live_need(&self, need: usize) -> usize {
        self.session
            .as_ref()
            .map_or(0, |s| s.cache.positions())
            .max(need)
    }

    /// KV positions of the boundary copy.
    fn marked(&self) -> usize {
        self.mark.as_ref().map_or(0, |(_, s)| s.cache.positions())
    }
}

/// How many leading tokens of `prompt` a session holding `held` can keep. Attention-only
/// sessions keep the common prefix; a recurrent state cannot be rewound, so a hybrid keeps
/// everything or nothing. At least one prompt token is always evaluated (its logits are the
/// first distribution sampled).
pub fn reusable_prefix(held: &[u32], prompt: &[u32], recurrent: bool) -> usize {
    let common = held
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count()
        .min(prompt.len().saturating_sub(1));
    if recurrent && common < held.len() {
        0
    } else {
        common
    }
}

/// Runs jobs from `rx` until it closes and no slot is busy. Once `cut` is set, every job ends
/// (with [`Finish::Length`]) before its next step: a shutdown that cannot wait any longer.
pub fn run(
    model: &Model,
    exec: &Exec,
    tok: &Tokenizer,
    cfg: SchedulerConfig,
    rx: Receiver<Job>,
    metrics: Arc<Metrics>,
    cut: Arc<AtomicBool>,
) {
    metrics.slots.store(cfg.parallel as u64, Relaxed);
    let _down = DownOnExit(&metrics);
    let mut panics_in_a_row = 0u32;
    let cfg = SchedulerConfig {
        draft: cfg.draft.filter(|_| !model.is_hybrid()),
        ..cfg
    };
    let mut slots: Vec<Slot> = (0..cfg.parallel)
        .map(|_| Slot {
            session: None,
            held: Vec::new(),
            mark: None,
            active: None,
            since: 0,
        })
        .collect();
    let mut admitted = 0u64;
    let mut open = true;
    let mut cache = PromptCache::new(cfg.cache_ram, !model.is_hybrid());
    // Choices of admitted requests still to place (before anything new from the queue).
    let mut backlog: VecDeque<(Job, Option<u64>)> = VecDeque::new();
    loop {
        let busy = slots.iter().any(|s| s.active.is_some());
        if !busy && backlog.is_empty() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(job) => {
                    metrics.queue_depth.fetch_sub(1, Relaxed);
                    backlog.push_back((job, None));
                }
                Err(_) => return,
            }
        }
        while slots.iter().any(|s| s.active.is_none()) {
            let Some((job, group)) = next_job(&mut backlog, &rx, &mut open, &metrics) else {
                break;
            };
            admitted += 1;
            let a = Admission {
                job,
                group,
                order: admitted,
            };
            let mut kept = Kept {
                cache: &mut cache,
                metrics: &metrics,
            };
            let placed = admit(model, tok, cfg, &mut slots, a, &mut backlog, &mut kept);
            metrics.cache_entries.store(cache.len() as u64, Relaxed);
            metrics.cache_bytes.store(cache.bytes() as u64, Relaxed);
            if let Err(a) = placed {
                // Not enough KV budget until a busy slot finishes: first in line, it waits.
                metrics.kv_waits.fetch_add(1, Relaxed);
                backlog.push_front((a.job, a.group));
                break;
            }
        }
        if cut.load(Relaxed) {
            for s in slots.iter_mut() {
                if let Some(a) = s.active.take() {
                    finish_job(&metrics, a, Finish::Length);
                }
            }
            continue;
        }
        // A panic (an `expect` of the scheduler, the model code, the grammar engine) fails the
        // requests of this step only: their sessions are dropped (a pass that stopped midway
        // may have left them half-written) and the thread goes on with the next requests.
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            step(model, exec, tok, cfg, &mut slots, &metrics)
        }));
        match stepped {
            Ok(()) => panics_in_a_row = 0,
            Err(p) => {
                metrics.step_panics.fetch_add(1, Relaxed);
                panics_in_a_row += 1;
                let busy: Vec<usize> = (0..slots.len())
                    .filter(|&i| slots[i].active.is_some())
                    .collect();
                let msg = format!(
                    "the model failed while serving this request ({}); the server goes on",
                    panic_text(p.as_ref())
                );
                fail_batch(&busy, &mut slots, &metrics, &msg);
                if panics_in_a_row >= MAX_CONSECUTIVE_PANICS {
                    eprintln!(
                        "libt2p serve: {panics_in_a_row} steps in a row panicked; the model thread stops"
                    );
                    return;
                }
            }
        }
    }
}

/// The next job to place: the backlog's first, else one the queue holds now (without waiting);
/// `None` when neither has one. A closed queue clears `open`.
fn next_job(
    backlog: &mut VecDeque<(Job, Option<u64>)>,
    rx: &Receiver<Job>,
    open: &mut bool,
    metrics: &Metrics,
) -> Option<(Job, Option<u64>)> {
    if let Some(next) = backlog.pop_front() {
        return Some(next);
    }
    if !*open {
        return None;
    }
    match rx.try_recv() {
        Ok(job) => {
            metrics.queue_depth.fetch_sub(1, Relaxed);
            Some((job, None))
        }
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Disconnected) => {
            *open = false;
            None
        }
    }
}

/// A job to place, with the request it is a choice of and its admission order.
struct Admission {
    job: Job,
    group: Option<u64>,
    order: u64,
}

/// Puts a job into a free slot: to wait for a choice of its request that is evaluating the
/// prompt, or into the slot whose session already holds the longest usable prefix. Its
/// siblings go to `backlog`. A job whose KV positions do not fit the budget, even with every
/// other idle session dropped, is given back.
fn admit<'t>(
    model: &Model,
    tok: &'t Tokenizer,
    cfg: SchedulerConfig,
    slots: &mut [Slot<'t>],
    adm: Admission,
    backlog: &mut VecDeque<(Job, Option<u64>)>,
    kept: &mut Kept,
) -> Result<(), Box<Admission>> {
    let metrics = kept.metrics;
    let Admission {
        mut job,
        mut group,
        order,
    } = adm;
    if !job.siblings.is_empty() {
        group = Some(order);
        for s in std::mem::take(&mut job.siblings) {
            backlog.push_back((s, group));
        }
    }
    if job.events.is_closed() {
        metrics.requests_cancelled.fetch_add(1, Relaxed);
        return Ok(());
    }
    if let Some(why) = unfit(&job, cfg) {
        // The HTTP side checks this; a job that slips through fails alone.
        let _ = job.events.send(Event::Error(why));
        return Ok(());
    }
    let waits = group.is_some()
        && slots.iter().any(|s| {
            s.active
                .as_ref()
                .is_some_and(|a| a.group == group && a.in_prefill() && a.job.prompt == job.prompt)
        });
    let Some(c) = best_slot(slots, &job.prompt, model.is_hybrid(), cfg.slot_similarity) else {
        // `run` admits only while a slot is free; should that ever fail, the job fails alone.
        let _ = job.events.send(Event::Error("no free slot".into()));
        return Ok(());
    };
    let recurrent = model.is_hybrid();
    if !waits {
        swap_in(&mut slots[c], &job.prompt, recurrent, kept);
    } else if !slots[c].held.is_empty() {
        // A choice that waits for its sibling's prompt gets a copy of that session: what the
        // slot holds would be lost, so it goes to the cache first.
        kept.save(&mut slots[c]);
    }
    let limit = token_limit(&job, cfg);
    let need = job.prompt.len() + limit;
    if !make_room(slots, c, need, cfg.kv_budget, kept) {
        return Err(Box::new(Admission { job, group, order }));
    }
    // `--cache-ram 0` keeps no copy of any session, and a copy that does not fit the budget
    // beside the live sessions is not taken.
    let boundary = (recurrent && cfg.cache_ram > 0)
        .then(|| message_start(tok, &job.prompt))
        .flatten()
        .filter(|&b| {
            let others: usize = (0..slots.len())
                .filter(|&i| i != c)
                .map(|i| slots[i].charge())
                .sum();
            others + slots[c].live_need(need) + slots[c].marked().max(b) <= cfg.kv_budget
        });
    let slot = &mut slots[c];
    metrics.slots_busy.fetch_add(1, Relaxed);
    slot.since = order;
    slot.active = Some(Active {
        sampler: Sampler::new(job.sampler.clone()),
        text: TextStream::new(tok, &job.stop, job.rendered.clone()),
        fed: 0,
        cached: 0,
        step: TokenStep::new(&job.prompt),
        limit,
        pending: None,
        group,
        waiting: true,
        boundary,
        job,
    });
    if !waits {
        start_prefill(model, cfg, slot);
    }
    Ok(())
}

/// The most tokens `job` may generate: its `max_tokens`, within the context.
fn token_limit(job: &Job, cfg: SchedulerConfig) -> usize {
    job.max_tokens
        .min(cfg.n_ctx.saturating_sub(job.prompt.len()))
}

/// Why `job` can never run under `cfg`: a prompt that is empty or fills the context, no tokens
/// to generate, or more KV positions than the whole budget.
fn unfit(job: &Job, cfg: SchedulerConfig) -> Option<String> {
    if job.prompt.is_empty() || job.prompt.len() >= cfg.n_ctx || job.max_tokens == 0 {
        return Some(format!(
            "a prompt of {} tokens with max_tokens {} does not fit a context of {}",
            job.prompt.len(),
            job.max_tokens,
            cfg.n_ctx
        ));
    }
    let need = job.prompt.len() + token_limit(job, cfg);
    (need > cfg.kv_budget).then(|| {
        format!(
            "{need} KV positions do not fit the budget of {}",
            cfg.kv_budget
        )
    })
}

/// The free slot for `prompt`: among those that would keep at least `similarity` of the
/// tokens they hold (in the session they would keep them from: a hybrid's boundary copy holds
/// fewer than its live session), the one keeping the most (the longest idle among equals);
/// else an empty slot, else the least recently used one.
fn best_slot(slots: &[Slot], prompt: &[u32], recurrent: bool, similarity: f32) -> Option<usize> {
    let free = || (0..slots.len()).filter(|&i| slots[i].active.is_none());
    let kept = |i: usize| slot_keep(&slots[i], prompt, recurrent);
    free()
        .filter(|&i| {
            let (k, of) = slot_match(&slots[i], prompt, recurrent);
            k > 0 && k as f32 >= similarity * of as f32
        })
        .max_by_key(|&i| (kept(i), std::cmp::Reverse(slots[i].since)))
        .or_else(|| free().min_by_key(|&i| (!slots[i].held.is_empty(), slots[i].since)))
}

/// Whether slot `c` can take a job reaching `need` KV positions within `budget`, dropping the
/// sessions of idle slots (oldest first) until it can, and the slot's own boundary copy if
/// the job does not fit beside it; nothing is dropped when it cannot.
fn make_room(slots: &mut [Slot], c: usize, need: usize, budget: usize, kept: &mut Kept) -> bool {
    let live = slots[c].live_need(need);
    let others = |slots: &[Slot]| -> usize {
        (0..slots.len())
            .filter(|&i| i != c)
            .map(|i| slots[i].charge())
            .sum()
    };
    let mut idle: Vec<usize> = (0..slots.len())
        .filter(|&i| i != c && slots[i].active.is_none() && slots[i].session.is_some())
        .collect();
    let droppable: usize = idle.iter().map(|&i| slots[i].charge()).sum();
    let floor = others(slots) - droppable + live;
    if floor > budget {
        return false;
    }
    if floor + slots[c].marked() > budget {
        kept.save_mark(&mut slots[c]);
    }
    let mine = live + slots[c].marked();
    idle.sort_by_key(|&i| slots[i].since);
    for i in idle {
        if others(slots) + mine <= budget {
            break;
        }
        kept.save(&mut slots[i]);
        slots[i].session = None;
        slots[i].held.clear();
    }
    true
}

/// The prompt cache and the counters of its use, as admission sees them.
struct Kept<'a> {
    cache: &'a mut PromptCache<Session>,
    metrics: &'a Metrics,
}

impl Kept<'_> {
    /// Moves what an idle slot holds into the cache: its live session and for a hybrid its
    /// boundary copy; the slot is left empty.
    fn save(&mut self, slot: &mut Slot) {
        self.evict_live(slot, 0);
        self.save_mark(slot);
    }

    /// Moves a slot's live session into the cache (not a copy: a takeover would otherwise
    /// copy the whole conversation's K/V on the scheduler thread, which every slot waits
    /// for) and leaves in the slot a copy of its first `keep` positions only, the part the
    /// next prompt reuses. With `--cache-ram 0` the slot keeps its session (the next prompt
    /// truncates it).
    fn evict_live(&mut self, slot: &mut Slot, keep: usize) {
        if self.cache.limit() == 0 || slot.held.is_empty() {
            return;
        }
        let Some(session) = slot.session.take() else {
            return;
        };
        let keep = keep.min(slot.held.len());
        slot.session = (keep > 0).then(|| session.prefix(keep)).flatten();
        let tokens = slot.held.clone();
        slot.held
            .truncate(if slot.session.is_some() { keep } else { 0 });
        let s = session.into_snapshot();
        let bytes = s.size_bytes();
        self.cache.insert(tokens, s, bytes);
    }

    /// Moves a hybrid slot's boundary copy into the cache (or drops it with `--cache-ram 0`).
    fn save_mark(&mut self, slot: &mut Slot) {
        if let Some((tokens, s)) = slot.mark.take() {
            let bytes = s.size_bytes();
            self.cache.insert(tokens, s, bytes);
        }
    }
}

/// Before slot `slot` takes `prompt`: when an entry of the cache keeps more of it than the
/// slot can, the slot's contents go to the cache and the entry comes back in their place;
/// when the prompt would overwrite most of what the slot's live session holds (another
/// conversation, or a hybrid's next turn), that session goes to the cache all the same, and
/// a boundary copy the prompt does not resume from goes with it.
fn swap_in(slot: &mut Slot, prompt: &[u32], recurrent: bool, kept: &mut Kept) {
    if kept.cache.limit() == 0 {
        return;
    }
    let live = reusable_prefix(&slot.held, prompt, recurrent);
    let keep = slot_keep(slot, prompt, recurrent);
    let hit = kept
        .cache
        .best(|t| reusable_prefix(t, prompt, recurrent))
        .filter(|&(_, k)| k > keep)
        .map(|(i, _)| kept.cache.take(i));
    // An attention slot that keeps half of what it holds is the same conversation going on:
    // no copy of it is worth the bytes.
    if hit.is_some() || (live * 2 < slot.held.len() && !slot.held.is_empty()) {
        kept.evict_live(slot, if hit.is_some() { 0 } else { live });
    }
    if hit.is_some() || keep == live {
        kept.save_mark(slot);
    }
    if let Some((tokens, session)) = hit {
        kept.metrics.cache_hits.fetch_add(1, Relaxed);
        slot.session = Some(session);
        slot.held = tokens;
    }
}

/// How many leading tokens of `prompt` slot `slot` can keep: from its live session, or for a
/// hybrid from its boundary copy.
fn slot_keep(slot: &Slot, prompt: &[u32], recurrent: bool) -> usize {
    slot_match(slot, prompt, recurrent).0
}

/// [`slot_keep`], and how many tokens the session it keeps them from holds.
fn slot_match(slot: &Slot, prompt: &[u32], recurrent: bool) -> (usize, usize) {
    let live = reusable_prefix(&slot.held, prompt, recurrent);
    match &slot.mark {
        Some((t, _)) if reusable_prefix(t, prompt, recurrent) > live => {
            (reusable_prefix(t, prompt, recurrent), t.len())
        }
        _ => (live, slot.held.len()),
    }
}

/// Where the last message of a chat prompt starts: the position of its last message-start
/// token (ChatML's `<|im_start|>`, Llama 3's `<|start_header_id|>`), if past the first token.
fn message_start(tok: &Tokenizer, prompt: &[u32]) -> Option<usize> {
    let start = ["<|im_start|>", "<|start_header_id|>"]
        .iter()
        .find_map(|t| tok.token_id(t))?;
    prompt.iter().rposition(|&t| t == start).filter(|&b| b > 0)
}

/// Starts a slot's job on its own prompt, keeping the prefix its session can reuse.
fn start_prefill(model: &Model, cfg: SchedulerConfig, slot: &mut Slot) {
    let recurrent = model.is_hybrid();
    let a = slot.active.as_mut().expect("a job to start");
    let mut keep = reusable_prefix(&slot.held, &a.job.prompt, recurrent);
    if let Some((tokens, s)) = &slot.mark
        && reusable_prefix(tokens, &a.job.prompt, recurrent) > keep
    {
        keep = tokens.len();
        slot.session = Some(s.clone());
        slot.held.clone_from(tokens);
    }
    let session = slot
        .session
        .get_or_insert_with(|| model.new_session(cfg.n_ctx));
    session.truncate(keep);
    session.cache.cap_growth(a.reach());
    slot.held.truncate(keep);
    a.fed = keep;
    a.cached = keep;
    a.waiting = false;
}

/// Gives slot `to` a copy of slot `from`'s session, which has just evaluated the prompt of
/// `to`'s job: the K/V, recurrent state and logits that job would have computed itself.
fn fork(slots: &mut [Slot], from: usize, to: usize) {
    let src = slots[from]
        .session
        .clone()
        .expect("an evaluated slot has a session");
    let held = slots[from].held.clone();
    let dst = &mut slots[to];
    let session = dst.session.insert(src);
    dst.held = held;
    let a = dst.active.as_mut().expect("a waiting job");
    session.cache.cap_growth(a.reach());
    a.fed = a.job.prompt.len();
    a.cached = a.fed;
    a.waiting = false;
}

/// One batched forward pass over every busy slot, then sampling.
fn step(
    model: &Model,
    exec: &Exec,
    tok: &Tokenizer,
    cfg: SchedulerConfig,
    slots: &mut [Slot],
    metrics: &Metrics,
) {
    drop_cancelled(slots, metrics);
    adopt_orphans(model, cfg, slots);
    let feeds = plan_feeds(cfg, slots);
    if feeds.iter().all(|f| f.is_empty()) {
        return;
    }
    let injected = slots
        .iter()
        .zip(&feeds)
        .any(|(s, f)| !f.is_empty() && s.active.as_ref().is_some_and(|a| a.job.inject_panic));
    if injected {
        panic!("a panic injected by the test hook");
    }
    let t0 = Instant::now();
    let mut seqs: Vec<Seq> = Vec::new();
    let mut who = Vec::new();
    for (i, (s, f)) in slots.iter_mut().zip(&feeds).enumerate() {
        if f.is_empty() {
            continue;
        }
        let a = s.active.as_ref().expect("a fed slot is busy");
        let logits = match a.pending {
            // A decoding slot that drafted needs the logits of every position it fed.
            Some(_) if f.len() > 1 => Logits::All,
            Some(_) => Logits::Last,
            None if a.fed + f.len() < a.job.prompt.len() => Logits::None,
            None => Logits::Last,
        };
        seqs.push(Seq {
            session: s.session.as_mut().expect("an admitted slot has a session"),
            tokens: f,
            logits,
        });
        who.push(i);
    }
    let result = model.forward(exec, &mut seqs);
    drop(seqs);
    metrics.steps.fetch_add(1, Relaxed);
    let cols: usize = feeds.iter().map(Vec::len).sum();
    metrics.step_tokens.fetch_add(cols as u64, Relaxed);
    if let Err(e) = result {
        return fail_batch(&who, slots, metrics, &e.to_string());
    }
    let pass = Evaluated {
        who: &who,
        feeds: &feeds,
    };
    metrics.step_sampled(pass.sample(tok, slots, metrics));
    metrics
        .busy_nanos
        .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
    let kv: usize = slots
        .iter()
        .flat_map(|s| s.session.iter().chain(s.mark.as_ref().map(|(_, m)| m)))
        .map(|s| s.cache.size_bytes())
        .sum();
    metrics.kv_cache_bytes.store(kv as u64, Relaxed);
}

/// Cancelled requests leave first; their sessions stay valid for prefix reuse.
fn drop_cancelled(slots: &mut [Slot], metrics: &Metrics) {
    for s in slots.iter_mut() {
        if s.active.as_ref().is_some_and(|a| a.job.events.is_closed()) {
            let a = s.active.take().expect("active");
            metrics.requests_cancelled.fetch_add(1, Relaxed);
            metrics.slots_busy.fetch_sub(1, Relaxed);
            account_prompt(metrics, &a);
        }
    }
}

/// A waiting choice whose prompt nobody evaluates any more (that choice was cancelled or
/// failed) evaluates it itself.
fn adopt_orphans(model: &Model, cfg: SchedulerConfig, slots: &mut [Slot]) {
    for i in 0..slots.len() {
        let orphan = slots[i].active.as_ref().is_some_and(|a| {
            a.waiting
                && !slots.iter().any(|s| {
                    s.active.as_ref().is_some_and(|p| {
                        p.group == a.group && p.in_prefill() && p.job.prompt == a.job.prompt
                    })
                })
        });
        if orphan {
            start_prefill(model, cfg, &mut slots[i]);
        }
    }
}

/// What each slot evaluates this step: its pending token, or the next prompt chunk within the
/// step's prompt budget, oldest request first.
fn plan_feeds(cfg: SchedulerConfig, slots: &[Slot]) -> Vec<Vec<u32>> {
    let mut feeds: Vec<Vec<u32>> = vec![Vec::new(); slots.len()];
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|&i| slots[i].since);
    let mut budget = cfg.prefill_budget.max(1);
    for &i in &order {
        let Some(a) = &slots[i].active else { continue };
        if a.waiting {
            continue;
        }
        if let Some(id) = a.pending {
            feeds[i] = vec![id];
            if let Some(d) = &cfg.draft {
                // Never more than the request may still sample after `id`'s successor.
                let room = a.limit.saturating_sub(a.generated() + 1).min(d.max_draft);
                feeds[i].extend(lookup_draft(a.step.history(), d, room));
            }
        } else if a.fed < a.job.prompt.len() && budget > 0 {
            let mut n = (a.job.prompt.len() - a.fed).min(budget);
            if let Some(b) = a.boundary.filter(|&b| b > a.fed) {
                // A chunk ends at the boundary, where the slot copies its session.
                n = n.min(b - a.fed);
            }
            budget -= n;
            feeds[i] = a.job.prompt[a.fed..a.fed + n].to_vec();
        }
    }
    feeds
}

/// Fails the requests of a pass that failed and drops their sessions (a pass that failed
/// midway may have written part of a recurrent state); the server keeps serving.
fn fail_batch(who: &[usize], slots: &mut [Slot], metrics: &Metrics, error: &str) {
    for &i in who {
        let s = &mut slots[i];
        if let Some(a) = s.active.take() {
            metrics.slots_busy.fetch_sub(1, Relaxed);
            let _ = a.job.events.send(Event::Error(error.to_string()));
        }
        s.session = None;
        s.held.clear();
    }
}

/// A pass that ran: which slots it fed (`who`) and with what; their sessions hold the logits.
struct Evaluated<'a> {
    who: &'a [usize],
    feeds: &'a [Vec<u32>],
}

impl Evaluated<'_> {
    /// Samples every slot whose prompt is done, and every choice waiting on a prompt that just
    /// finished; returns how many were sampled.
    fn sample(&self, tok: &Tokenizer, slots: &mut [Slot], metrics: &Metrics) -> u64 {
        let mut sampled = 0;
        // Slots that just finished evaluating a shared prompt: (slot, group, prompt).
        let mut evaluated = Vec::new();
        for &i in self.who {
            let feed = &self.feeds[i];
            let s = &mut slots[i];
            let a = s.active.as_mut().expect("fed slots are busy");
            if a.pending.is_some() {
                sampled += decode(tok, s, feed, metrics);
                continue;
            }
            s.held.extend_from_slice(feed);
            a.fed += feed.len();
            metrics
                .prompt_tokens_evaluated
                .fetch_add(feed.len() as u64, Relaxed);
            if a.boundary == Some(a.fed) && a.fed < a.job.prompt.len() {
                let session = s.session.as_ref().expect("a fed slot has a session");
                s.mark = Some((s.held.clone(), session.snapshot()));
            }
            if a.fed < a.job.prompt.len() {
                continue; // more prompt to go
            }
            if a.group.is_some() {
                evaluated.push((i, a.group, a.job.prompt.clone()));
            }
            sampled += 1;
            sample_into(tok, &mut slots[i], metrics);
        }
        for (from, group, prompt) in evaluated {
            for to in 0..slots.len() {
                let waits = slots[to]
                    .active
                    .as_ref()
                    .is_some_and(|a| a.waiting && a.group == group && a.job.prompt == prompt);
                if waits {
                    fork(slots, from, to);
                    sampled += 1;
                    sample_into(tok, &mut slots[to], metrics);
                }
            }
        }
        sampled
    }
}

/// Samples a decoding slot that was fed `feed` (its pending token, then any drafted ones) from
/// its session's logits (one row per fed token): a drafted token is kept while it is the token
/// the sampler draws at its place ([`check_draft`]), so the output is the one plain decoding
/// gives. The rejected rest leaves the cache. Returns how many tokens were sampled.
fn decode(tok: &Tokenizer, s: &mut Slot, feed: &[u32], metrics: &Metrics) -> u64 {
    let Slot {
        session,
        held,
        active,
        ..
    } = s;
    let session = session.as_mut().expect("a fed slot has a session");
    let a = active.as_mut().expect("a sampled slot is busy");
    let logits = session.logits();
    let mut ended = None;
    let (accepted, _) = check_draft(logits, logits.len() / feed.len(), &feed[1..], |row| {
        a.pending = None;
        match sample_one(tok, a, row, metrics) {
            Some(end) => {
                ended = Some(end);
                None
            }
            None => a.pending,
        }
    });
    let kept = accepted + 1;
    metrics
        .draft_tokens
        .fetch_add(feed.len() as u64 - 1, Relaxed);
    metrics.draft_accepted.fetch_add(accepted as u64, Relaxed);
    held.extend_from_slice(&feed[..kept]);
    let base = session.len() - feed.len();
    session.truncate(base + kept);
    if let Some(end) = ended {
        end_job(active, end, metrics);
    }
    kept as u64
}

/// Samples the busy slot `s` from its session's logits, finishing its request when it is done.
fn sample_into(tok: &Tokenizer, s: &mut Slot, metrics: &Metrics) {
    let logits = s
        .session
        .as_ref()
        .expect("a sampled slot has a session")
        .logits();
    let a = s.active.as_mut().expect("a sampled slot is busy");
    if let Some(end) = sample_one(tok, a, logits, metrics) {
        end_job(&mut s.active, end, metrics);
    }
}

/// Ends the busy slot's request (`active`) as sampling decided.
fn end_job(active: &mut Option<Active>, end: Ended, metrics: &Metrics) {
    let a = active.take().expect("active");
    match end {
        Ended::Finished(finish) => finish_job(metrics, a, finish),
        Ended::Failed(e) => {
            metrics.slots_busy.fetch_sub(1, Relaxed);
            account_prompt(metrics, &a);
            let _ = a.job.events.send(Event::Error(e));
        }
    }
}

/// A grammar whose masking is timed for the metrics.
struct Timed<'a> {
    mask: &'a mut Constraint,
    metrics: &'a Metrics,
}

impl TokenMask for Timed<'_> {
    fn apply(&mut self, logits: &mut [f32]) -> Result<(), String> {
        let t0 = Instant::now();
        let masked = TokenMask::apply(self.mask, logits);
        let m = self.metrics;
        m.grammar_mask_nanos
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        m.grammar_masks.fetch_add(1, Relaxed);
        masked
    }

    fn accept(&mut self, id: u32) -> Result<(), String> {
        TokenMask::accept(self.mask, id)
    }

    fn is_finished(&self) -> bool {
        TokenMask::is_finished(self.mask)
    }
}

/// Samples the next token of `a` from `logits` and sends its text; says how the request
/// ended when it is done (as [`Decoder::generate`](crate::runner::generate::Decoder::generate)
/// decides it, and when its grammar is complete).
fn sample_one(tok: &Tokenizer, a: &mut Active, logits: &[f32], metrics: &Metrics) -> Option<Ended> {
    let mut timed = a
        .job
        .constraint
        .as_mut()
        .map(|mask| Timed { mask, metrics });
    let mask = timed.as_mut().map(|t| t as &mut dyn TokenMask);
    let drawn = a
        .step
        .draw(logits, &mut a.sampler, mask, |id| tok.is_eog(id));
    if !matches!(drawn, Err(StepError::Mask(_))) {
        metrics.completion_tokens.fetch_add(1, Relaxed);
    }
    let (id, stop) = match drawn {
        Ok(d) => (d.id, d.stop),
        Err(e) => return Some(Ended::Failed(format!("the grammar failed: {e}"))),
    };
    if stop == Some(Stop::EndOfGeneration) {
        return Some(Ended::Finished(Finish::Stop));
    }
    if let Some(k) = a.job.logprobs {
        let (logprob, top) = log_softmax_top(logits, id, k);
        let _ = a.job.events.send(Event::Logprob(TokenLogprob {
            id,
            logprob,
            top,
            offset: a.text.offset(),
        }));
    }
    let piece = a.text.push(id);
    send_text(a, piece);
    if a.text.stopped() || stop == Some(Stop::GrammarComplete) {
        return Some(Ended::Finished(Finish::Stop));
    }
    if a.generated() >= a.limit {
        return Some(Ended::Finished(Finish::Length));
    }
    a.pending = Some(id);
    None
}

fn send_text(a: &Active, piece: String) {
    if !piece.is_empty() {
        // A closed channel is noticed at the start of the next step.
        let _ = a.job.events.send(Event::Text(piece));
    }
}

fn account_prompt(metrics: &Metrics, a: &Active) {
    metrics
        .prompt_tokens
        .fetch_add(a.job.prompt.len() as u64, Relaxed);
    metrics
        .prompt_tokens_cached
        .fetch_add(a.cached as u64, Relaxed);
}

fn finish_job(metrics: &Metrics, mut a: Active, finish: Finish) {
    let tail = a.text.finish();
    send_text(&a, tail);
    // Counters first: a client reading /metrics after its answer sees its request counted.
    metrics.requests_finished.fetch_add(1, Relaxed);
    metrics.slots_busy.fetch_sub(1, Relaxed);
    account_prompt(metrics, &a);
    let _ = a.job.events.send(Event::Done {
        finish,
        prompt_tokens: a.job.prompt.len(),
        cached_tokens: a.cached,
        completion_tokens: a.generated(),
        tokens: a.step.generated().to_vec(),
    });
}

#[cfg(test)]
mod tests {
    use super::{Slot, best_slot, reusable_prefix};

    fn slot(held: &[u32], since: u64) -> Slot<'static> {
        Slot {
            session: None,
            held: held.to_vec(),
            mark: None,
            active: None,
            since,
        }
    }

    #[test]
    fn a_slot_is_reused_only_when_it_keeps_enough_of_what_it_holds() {
        // Slot 0 holds a long conversation, slot 1 a short one-shot, slot 2 is empty.
        let conv: Vec<u32> = (0..100).collect();
        let slots = [slot(&conv, 1), slot(&[0, 1, 2, 50, 51], 2), slot(&[], 0)];
        let mut next_turn = conv.clone();
        next_turn.extend([200, 201]);
        assert_eq!(best_slot(&slots, &next_turn, false, 0.5), Some(0));
        // A new request sharing only the template's first tokens leaves the conversation alone.
        let other = [0, 1, 2, 9, 9, 9];
        assert_eq!(best_slot(&slots, &other, false, 0.5), Some(1));
        assert_eq!(best_slot(&slots, &[7, 7], false, 0.5), Some(2));
        // Without an empty slot: the least recently used.
        let full = [slot(&conv, 5), slot(&[3, 3], 4)];
        assert_eq!(best_slot(&full, &[7, 7], false, 0.5), Some(1));
        // Similarity 0: the longest prefix, as before.
        assert_eq!(best_slot(&slots, &other, false, 0.0), Some(0));
    }

    #[test]
    fn prefix_reuse_keeps_one_prompt_token_and_never_rewinds_a_recurrent_state() {
        assert_eq!(reusable_prefix(&[1, 2, 3], &[1, 2, 4, 5], false), 2);
        assert_eq!(reusable_prefix(&[1, 2, 3], &[1, 2, 3], false), 2);
        assert_eq!(reusable_prefix(&[1, 2, 3], &[1, 2, 4, 5], true), 0);
        assert_eq!(reusable_prefix(&[1, 2, 3], &[1, 2, 3, 4], true), 3);
        assert_eq!(reusable_prefix(&[1, 2, 3], &[1, 2, 3], true), 0);
        assert_eq!(reusable_prefix(&[], &[7], true), 0);
    }
}
