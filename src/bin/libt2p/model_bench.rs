//! `libt2p bench -m FILE`: prompt processing and generation speed of a model, like llama-bench
//! (`pp` = one forward pass over a prompt of N tokens, `tg` = N single-token forward passes),
//! plus the price of verifying a draft: a forward pass over B tokens / a 1-token decode.
//!
//! tg is also given as a % of the memory ceiling: tok/s times the bytes one decoded token
//! moves (every weight once, the recurrent state of hybrid models read and written once, the
//! KV cache read up to the token's position) over the read bandwidth measured in the same run.

use std::process::ExitCode;
use std::time::Instant;

use t2p::bandwidth::BandwidthProbe;
use t2p::runner::model::{Exec, Loaded, Logits, Phase, Session, Traffic as PhaseTraffic};
use t2p::runner::sample::argmax;

use crate::run::ModelArgs;

/// Options of the model benchmark.
#[derive(clap::Args, Clone)]
pub struct ModelBenchArgs {
    /// Prompt tokens for the pp test (0: skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens for the tg test (0: skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Repetitions (the median is reported).
    #[arg(short = 'r', long, default_value_t = 3)]
    pub reps: usize,
    /// Tokens of context already in the cache before each pp and tg test (llama-bench's `-d`):
    /// the tg ceiling then counts the KV rows every token reads at that depth.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    pub n_depth: usize,
    /// Batch widths whose forward-pass time is compared with a 1-token decode (verification cost).
    #[arg(long, value_delimiter = ',', default_value = "2,3,4,8")]
    pub verify_batches: Vec<usize>,
    /// Also print where the time of a pp and a tg run goes (matmuls, activation quantization,
    /// attention, norms/RoPE/activations, LM head, sampling, pool waits).
    #[arg(long)]
    pub profile: bool,
}

/// Memory traffic of one decoded token, in bytes.
struct Traffic {
    /// Every weight read once (`Model::bytes_per_token`).
    weights: f64,
    /// The recurrent state (conv + DeltaNet `S` of every recurrent layer), read and written
    /// once per token: after a token's ~GBs of weights it is never still in cache.
    state: f64,
    /// K and V of every attention layer read up to the token's position, averaged over the
    /// positions of the tg run (`n_gen` tokens after a prompt of [`tg_prompt`] tokens: token
    /// `i` reads `prompt + i + 1` rows).
    kv: f64,
}

impl Traffic {
    fn of(loaded: &Loaded, n_gen: usize, depth: usize) -> Traffic {
        let s = loaded.model.new_session(1);
        let state = s.recurrent.as_ref().map_or(0, |r| 2 * r.state_bytes());
        let kv_per_pos = s.cache.bytes_per_position() as f64;
        Traffic {
            weights: loaded.model.bytes_per_token() as f64,
            state: state as f64,
            kv: kv_per_pos * (tg_prompt(depth) as f64 + (n_gen as f64 + 1.0) / 2.0),
        }
    }

    fn total(&self) -> f64 {
        self.weights + self.state + self.kv
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The prompt a tg run decodes after: the depth's tokens, or one token.
fn tg_prompt(depth: usize) -> usize {
    depth.max(1)
}

/// The label of a test at a depth, as llama-bench prints it (`tg64 @ d4096`).
fn label(test: &str, n: usize, depth: usize) -> String {
    match depth {
        0 => format!("{test}{n}"),
        d => format!("{test}{n} @ d{d}"),
    }
}

fn tokens(loaded: &Loaded, n: usize) -> Vec<u32> {
    let nv = loaded.model.n_vocab() as u32;
    (0..n as u32).map(|i| (i * 7919 + 13) % nv).collect()
}

/// A session with room for `n_ctx` positions reserved before anything is timed, as
/// llama-bench allocates its context first. Otherwise the cache would double in the middle of
/// a timed run: after a 4096-token depth, the first decoded token copied all 470 MB of a 1.7B's
/// KV rows to their new place, 8 % of a `tg32 @ d4096`.
fn session(loaded: &Loaded, n_ctx: usize) -> Session {
    let mut s = loaded.model.new_session(n_ctx);
    s.cache.reserve(n_ctx);
    s
}

/// Seconds of one forward pass over `n` tokens after `ctx` tokens of context, with `rows`:
/// the last position's logits (a prompt, as llama-bench's pp), or every position's (what
/// verifying drafted tokens, or a server step over that many sequences, needs: the LM head
/// runs over every column).
fn time_forward(
    loaded: &Loaded,
    exec: &Exec,
    ctx: usize,
    n: usize,
    rows: Logits,
) -> Result<f64, Box<dyn std::error::Error>> {
    let m = &loaded.model;
    let mut s = session(loaded, ctx + n + 1);
    if ctx > 0 {
        m.forward_one(exec, &mut s, &tokens(loaded, ctx), Logits::Last)?;
    }
    let t = Instant::now();
    m.forward_one(exec, &mut s, &tokens(loaded, n), rows)?;
    Ok(t.elapsed().as_secs_f64())
}

pub fn run(
    model: &ModelArgs,
    args: &ModelBenchArgs,
    json: bool,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (loaded, load_secs) = model.load(json)?;
    let exec = model.exec();
    let traffic = Traffic::of(&loaded, args.n_gen, args.n_depth);
    let m = Measured::take(&loaded, &exec, args, traffic.total())?;
    let report = Report {
        model,
        exec: &exec,
        load_secs,
        traffic: &traffic,
        m: &m,
    };
    if json {
        report.print_json();
    } else {
        report.print_text();
    }
    if args.profile {
        profile(&loaded, &exec, args, m.ceiling, json)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What `bench -m` measured: pp / tg rates, the ceiling read around the tg runs, and the
/// verification prices.
struct Measured {
    /// `(test, tokens, tok/s)`.
    results: Vec<(&'static str, usize, f64)>,
    /// Tokens of context before each test.
    depth: usize,
    /// Median of the ceiling readings, GB/s.
    ceiling: f64,
    /// Their range.
    lowest: f64,
    highest: f64,
    /// `(batch, forward over batch / 1-token forward)`.
    ratios: Vec<(usize, f64)>,
    /// The ceiling in tok/s: `ceiling / bytes per token`.
    tg_ceiling: f64,
}

impl Measured {
    fn take(
        loaded: &Loaded,
        exec: &Exec,
        args: &ModelBenchArgs,
        bytes: f64,
    ) -> Result<Measured, Box<dyn std::error::Error>> {
        let reps = args.reps.max(1);
        let mut results = Vec::new();
        if args.n_prompt > 0 {
            time_forward(loaded, exec, 0, args.n_prompt.min(64), Logits::Last)?; // warm-up
            let d = args.n_depth;
            let t = median(
                (0..reps)
                    .map(|_| time_forward(loaded, exec, d, args.n_prompt, Logits::Last))
                    .collect::<Result<_, _>>()?,
            );
            results.push(("pp", args.n_prompt, args.n_prompt as f64 / t));
        }
        // The ceiling is read right before and right after the tg runs (5 reps each; the median of
        // the 10 is the ceiling, their range is printed): on a shared machine the bandwidth drifts,
        // and one reading minutes away from the decode can be far off.
        let probe = BandwidthProbe::new(&exec.pool, BandwidthProbe::default_bytes());
        let mut readings = Vec::new();
        let read_ceiling = |readings: &mut Vec<f64>| {
            for _ in 0..5 {
                readings.push(probe.measure(&exec.pool, 1).median_gbps);
            }
        };
        read_ceiling(&mut readings);
        if args.n_gen > 0 {
            time_decode(loaded, exec, 0, args.n_gen.min(8))?; // warm-up
            let t = median(
                (0..reps)
                    .map(|_| time_decode(loaded, exec, args.n_depth, args.n_gen))
                    .collect::<Result<_, _>>()?,
            );
            results.push(("tg", args.n_gen, args.n_gen as f64 / t));
        }
        read_ceiling(&mut readings);
        drop(probe);
        let (lowest, highest) = (
            readings.iter().copied().fold(f64::INFINITY, f64::min),
            readings.iter().copied().fold(0.0, f64::max),
        );
        let ceiling = median(readings);
        // Verification price: forward over B tokens with all their logits (after 64 tokens of
        // context) / 1 token.
        let mut ratios = Vec::new();
        if !args.verify_batches.is_empty() {
            let one = median(
                (0..reps + 2)
                    .map(|_| time_forward(loaded, exec, 64, 1, Logits::All))
                    .collect::<Result<_, _>>()?,
            );
            for &b in &args.verify_batches {
                let tb = median(
                    (0..reps + 2)
                        .map(|_| time_forward(loaded, exec, 64, b, Logits::All))
                        .collect::<Result<_, _>>()?,
                );
                ratios.push((b, tb / one));
            }
        }
        Ok(Measured {
            results,
            depth: args.n_depth,
            ceiling,
            lowest,
            highest,
            ratios,
            tg_ceiling: ceiling * 1e9 / bytes,
        })
    }
}

/// Seconds to decode `n_gen` tokens one at a time after a prompt of [`tg_prompt`]`(depth)`
/// tokens (not timed).
fn time_decode(
    loaded: &Loaded,
    exec: &Exec,
    depth: usize,
    n_gen: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let prompt = tg_prompt(depth);
    let mut s = session(loaded, prompt + n_gen + 1);
    let toks = if depth == 0 {
        vec![1]
    } else {
        tokens(loaded, prompt)
    };
    loaded
        .model
        .forward_one(exec, &mut s, &toks, Logits::Last)?;
    let t = Instant::now();
    for i in 0..n_gen {
        let id = (i as u32 * 31 + 7) % loaded.model.n_vocab() as u32;
        loaded
            .model
            .forward_one(exec, &mut s, &[id], Logits::Last)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The printed form of a [`Measured`].
struct Report<'a> {
    model: &'a ModelArgs,
    exec: &'a Exec,
    load_secs: f64,
    traffic: &'a Traffic,
    m: &'a Measured,
}

impl Report<'_> {
    fn print_json(&self) {
        let Report { model, exec, m, .. } = self;
        let (results, ratios, bytes) = (&m.results, &m.ratios, self.traffic.total());
        let (ceiling, lowest, highest, tg_ceiling) = (m.ceiling, m.lowest, m.highest, m.tg_ceiling);
        let (load_secs, traffic) = (self.load_secs, self.traffic);
        let res: Vec<_> = results
            .iter()
            .map(|(k, n, tps)| serde_json::json!({ "test": label(k, *n, m.depth), "tokens": n, "depth": m.depth, "tps": tps }))
            .collect();
        let rat: Vec<_> = ratios
            .iter()
            .map(|(b, r)| serde_json::json!({ "batch": b, "time_vs_1": r }))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "model": model.model.display().to_string(),
                "threads": exec.pool.threads(),
                "isa": exec.kern.isa().name(),
                "load_s": load_secs,
                "weights_bytes_per_token": traffic.weights,
                "state_bytes_per_token": traffic.state,
                "kv_bytes_per_token": traffic.kv,
                "bytes_per_token": bytes,
                "ceiling_gbps": ceiling,
                "ceiling_range_gbps": [lowest, highest],
                "tg_ceiling_tps": tg_ceiling,
                "results": res,
                "verify": rat,
            })
        );
    }

    fn print_text(&self) {
        let Report { model, exec, m, .. } = self;
        let (results, ratios, bytes) = (&m.results, &m.ratios, self.traffic.total());
        let (ceiling, lowest, highest, tg_ceiling) = (m.ceiling, m.lowest, m.highest, m.tg_ceiling);
        let traffic = self.traffic;
        println!(
            "model: {} | threads {} | kernels {}",
            model.model.display(),
            exec.pool.threads(),
            exec.kern.isa()
        );
        println!(
            "bytes per token {:.1} MB = weights {:.1} MB + recurrent state read+write {:.1} MB \
             + KV cache {:.1} MB (mean over the tg positions)",
            bytes / 1e6,
            traffic.weights / 1e6,
            traffic.state / 1e6,
            traffic.kv / 1e6
        );
        println!(
            "memory ceiling {ceiling:.2} GB/s (median of 10 reads around the tg runs, range \
             {lowest:.1}-{highest:.1}) -> at most {tg_ceiling:.2} tok/s"
        );
        println!("| test | t/s | % of ceiling |");
        println!("|---|---|---|");
        for (k, n, tps) in results.iter() {
            let pct = if *k == "tg" {
                format!("{:.1}%", 100.0 * tps / tg_ceiling)
            } else {
                "-".into()
            };
            println!("| {} | {tps:.2} | {pct} |", label(k, *n, m.depth));
        }
        for (b, r) in ratios.iter() {
            println!("forward over {b} tokens = {r:.2} x a 1-token decode");
        }
    }
}

/// One profiled run: its label, tokens (the divisor of "per token"), the phase shares, the
/// traffic of the matmul phases and the pool calls it made.
struct ProfiledRun {
    test: String,
    tokens: usize,
    shares: Vec<(&'static str, f64, f64)>,
    traffic: Vec<(Phase, PhaseTraffic)>,
    pool_calls: u64,
    pool_wait: f64,
}

/// The phases whose matmul steps stream weights.
const MATMUL_PHASES: [Phase; 3] = [Phase::Matmul, Phase::LmHead, Phase::DenseMatmul];

/// Runs `f` with the forward pass's phase timers on and collects what they saw.
fn profiled(
    exec: &Exec,
    test: String,
    tokens: usize,
    f: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<ProfiledRun, Box<dyn std::error::Error>> {
    exec.profile.reset();
    exec.profile.enable(true);
    let calls = exec.pool.calls();
    let r = f();
    exec.profile.enable(false);
    r?;
    Ok(ProfiledRun {
        test,
        tokens,
        shares: shares(exec),
        traffic: MATMUL_PHASES
            .iter()
            .map(|&ph| (ph, exec.profile.traffic(ph)))
            .collect(),
        pool_calls: exec.pool.calls() - calls,
        pool_wait: exec.profile.seconds(Phase::PoolWait),
    })
}

/// Nanoseconds of one empty pool call (every thread wakes, runs nothing, and the caller waits
/// for all): the fixed price of a parallel step, median of 5 rounds of 2000 calls.
fn pool_call_ns(exec: &Exec) -> f64 {
    let n = exec.pool.threads();
    let round = || {
        let t = Instant::now();
        for _ in 0..2000 {
            exec.pool.run(n, |i| {
                std::hint::black_box(i);
            });
        }
        t.elapsed().as_nanos() as f64 / 2000.0
    };
    round(); // warm-up
    median((0..5).map(|_| round()).collect())
}

/// Runs a pp and a tg pass with the forward pass's phase timers on and prints their shares,
/// the bandwidth of each matmul phase against `ceiling` (GB/s, measured in the same run) and
/// the pool calls per token.
fn profile(
    loaded: &Loaded,
    exec: &Exec,
    args: &ModelBenchArgs,
    ceiling: f64,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let m = &loaded.model;
    let mut runs = Vec::new();
    let depth = args.n_depth;
    if args.n_prompt > 0 {
        let mut s = session(loaded, depth + args.n_prompt);
        if depth > 0 {
            m.forward_one(exec, &mut s, &tokens(loaded, depth), Logits::Last)?;
        }
        let toks = tokens(loaded, args.n_prompt);
        runs.push(profiled(
            exec,
            label("pp", args.n_prompt, depth),
            args.n_prompt,
            || {
                let logits = m.forward_one(exec, &mut s, &toks, Logits::Last)?;
                let _t = exec.profile.time(Phase::Sampling);
                std::hint::black_box(argmax(logits));
                Ok(())
            },
        )?);
    }
    if args.n_gen > 0 {
        let prompt = tg_prompt(depth);
        let mut s = session(loaded, prompt + args.n_gen);
        let toks = if depth == 0 {
            vec![1]
        } else {
            tokens(loaded, prompt)
        };
        m.forward_one(exec, &mut s, &toks, Logits::Last)?;
        runs.push(profiled(
            exec,
            label("tg", args.n_gen, depth),
            args.n_gen,
            || {
                let mut next = 1;
                for _ in 0..args.n_gen {
                    let logits = m.forward_one(exec, &mut s, &[next], Logits::Last)?;
                    let _t = exec.profile.time(Phase::Sampling);
                    next = argmax(logits);
                }
                Ok(())
            },
        )?);
    }
    let call_ns = pool_call_ns(exec);
    let pct = |gbps: f64| {
        if ceiling > 0.0 {
            100.0 * gbps / ceiling
        } else {
            0.0
        }
    };
    if json {
        let v: Vec<_> = runs
            .iter()
            .map(|r| {
                let phases: serde_json::Map<_, _> = r
                    .shares
                    .iter()
                    .map(|(name, secs, _)| (name.to_string(), serde_json::json!(secs)))
                    .collect();
                let traffic: serde_json::Map<_, _> = r
                    .traffic
                    .iter()
                    .map(|(ph, t)| {
                        let v = serde_json::json!({
                            "bytes": t.bytes,
                            "seconds": t.seconds,
                            "steps": t.steps,
                            "gbps": t.gbps(),
                            "pct_of_ceiling": pct(t.gbps()),
                        });
                        (ph.name().to_string(), v)
                    })
                    .collect();
                serde_json::json!({
                    "test": r.test,
                    "tokens": r.tokens,
                    "seconds": phases,
                    "matmul_traffic": traffic,
                    "pool_calls": r.pool_calls,
                    "pool_wait_s": r.pool_wait,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "profile": v,
                "ceiling_gbps": ceiling,
                "threads": exec.pool.threads(),
                "empty_pool_call_ns": call_ns,
            })
        );
        return Ok(());
    }
    for r in &runs {
        println!(
            "profile of {} (wall time per phase, % of forward passes + sampling):",
            r.test
        );
        println!("| phase | ms | share |");
        println!("|---|---|---|");
        for (name, secs, share) in &r.shares {
            println!("| {name} | {:.2} | {:.1}% |", secs * 1e3, 100.0 * share);
        }
        println!(
            "weights streamed by the matmul phases of {} (wall time of their steps, waits \
             included; ceiling {ceiling:.2} GB/s from this run):",
            r.test
        );
        println!("| phase | MB per token | steps per token | GB/s | % of ceiling |");
        println!("|---|---|---|---|---|");
        let per_tok = |x: f64| x / r.tokens.max(1) as f64;
        for (ph, t) in r.traffic.iter().filter(|(_, t)| t.steps > 0) {
            println!(
                "| {} | {:.1} | {:.1} | {:.2} | {:.1}% |",
                ph.name(),
                per_tok(t.bytes as f64) / 1e6,
                per_tok(t.steps as f64),
                t.gbps(),
                pct(t.gbps())
            );
        }
        let steps: u64 = r.traffic.iter().map(|(_, t)| t.steps).sum();
        let calls = per_tok(r.pool_calls as f64);
        println!(
            "pool: {calls:.1} calls per token ({} threads), an empty call costs {:.2} us \
             (-> {:.3} ms per token of fixed call cost); matmul steps wait {:.2} us each on \
             average ({:.2} ms per token)",
            exec.pool.threads(),
            call_ns * 1e-3,
            calls * call_ns * 1e-6,
            if steps > 0 {
                r.pool_wait / steps as f64 * 1e6
            } else {
                0.0
            },
            per_tok(r.pool_wait) * 1e3,
        );
    }
    Ok(())
}

/// `(phase, seconds, share)` of the profile, with what no phase covers as "other" and the
/// total of forward passes and sampling last.
fn shares(exec: &Exec) -> Vec<(&'static str, f64, f64)> {
    let p = &exec.profile;
    let total = p.seconds(Phase::Forward) + p.seconds(Phase::Sampling);
    let parts: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|&ph| ph != Phase::Forward)
        .collect();
    let covered: f64 = parts.iter().map(|&ph| p.seconds(ph)).sum();
    let share = |s: f64| if total > 0.0 { s / total } else { 0.0 };
    let mut out: Vec<_> = parts
        .iter()
        .map(|&ph| (ph.name(), p.seconds(ph), share(p.seconds(ph))))
        .collect();
    let other = (total - covered).max(0.0);
    out.push(("other (untimed)", other, share(other)));
    out.push(("total", total, share(total)));
    out
}
