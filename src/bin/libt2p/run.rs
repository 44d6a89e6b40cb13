//! `libt2p run`: generate text from a prompt, streaming it as it comes.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use t2p::bandwidth::BandwidthProbe;
use t2p::matmul::ActQuant;
use t2p::runner::LoadOptions;
use t2p::runner::constrain::{Constraint, Grammar, GrammarCompiler};
use t2p::runner::generate::{Decoder, GenStats};
use t2p::runner::model::{Exec, Loaded, Model};
use t2p::runner::sample::{Sampler, SamplerConfig};
use t2p::runner::speculative::{DraftStats, LookupConfig};

/// Options shared by every command that loads a model.
#[derive(clap::Args, Clone)]
pub struct ModelArgs {
    /// The GGUF model file, or the name of a `synth` shape (e.g. `bonsai-1.7b`: its synthetic
    /// model is written once into the temporary directory).
    #[arg(short = 'm', long = "model")]
    pub model: PathBuf,
    /// Threads (default: all CPUs).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Context size in tokens (default: the model's, capped at 4096).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
    /// Prompt tokens per forward pass.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch: usize,
    /// Activation quantization for the ternary matmuls: q8_0 (a scale per 32 values, llama.cpp's
    /// numerics for pq2_0) or q8_K (a scale per 256, faster, noisier).
    #[arg(long = "act", default_value = "q8_0", value_parser = parse_act)]
    pub act: ActQuant,
    /// Element type of the KV cache: f16 (llama.cpp's default) or f32 (float references'
    /// numerics, e.g. BitNet's: attention then runs portable f32 loops).
    #[arg(long = "cache-type", value_enum, default_value_t = CacheType::F16)]
    pub cache_type: CacheType,
    /// Read the T2P matrices of a converted model (`libt2p convert`) into memory of their own
    /// instead of using them where the mapped file lies.
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
}

/// The KV cache's element type (`--cache-type`, as llama.cpp's `-ctk` / `-ctv` together).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheType {
    /// IEEE half K and V.
    #[default]
    F16,
    /// f32 K and V.
    F32,
}

/// Parses `--act`.
pub fn parse_act(s: &str) -> Result<ActQuant, String> {
    ActQuant::from_name(s).map_err(|e| e.to_string())
}

impl ModelArgs {
    /// Threads to use.
    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The kernels, thread pool and activation type these options ask for.
    pub fn exec(&self) -> Exec {
        Exec::new(self.threads()).with_act(self.act)
    }

    /// Loads the model, printing the load time on stderr.
    pub fn load(&self, quiet: bool) -> Result<(Loaded, f64), Box<dyn std::error::Error>> {
        let path = crate::shape_model::resolve(&self.model)?;
        let t = Instant::now();
        let opts = LoadOptions {
            progress: crate::progress::load_bar(quiet),
            // The model loads on the threads it will run on (`--threads 2`: two).
            threads: self.threads(),
            mmap: !self.no_mmap,
            ..Default::default()
        };
        let mut loaded = Model::load(&path, &opts)?;
        loaded.model.set_kv_f32(self.cache_type == CacheType::F32);
        let secs = t.elapsed().as_secs_f64();
        Ok((loaded, secs))
    }

    /// The context size for `loaded`.
    pub fn n_ctx(&self, loaded: &Loaded) -> usize {
        self.ctx_size
            .unwrap_or_else(|| loaded.model.n_ctx_train().min(4096))
    }
}

/// Sampling options.
#[derive(clap::Args, Clone)]
pub struct SampleArgs {
    /// Temperature (0: greedy).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Top-k (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the repetition penalty looks back on.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Random seed (same seed, same output).
    #[arg(short = 's', long, default_value_t = 0)]
    pub seed: u64,
    /// Constrain the output to a GBNF grammar (llama.cpp's; Lark when it starts with
    /// `%llguidance`).
    #[arg(long, conflicts_with_all = ["grammar_file", "json_schema"])]
    pub grammar: Option<String>,
    /// Read the grammar from a file.
    #[arg(long, conflicts_with = "json_schema")]
    pub grammar_file: Option<PathBuf>,
    /// Constrain the output to JSON valid under this schema (`{}`: any JSON object).
    #[arg(short = 'j', long)]
    pub json_schema: Option<String>,
}

impl SampleArgs {
    /// The grammar these options ask for, compiled for `tok`, or `None`.
    pub fn constraint(
        &self,
        tok: &t2p::runner::Tokenizer,
    ) -> Result<Option<Constraint>, Box<dyn std::error::Error>> {
        let text = match (&self.grammar, &self.grammar_file) {
            (Some(g), _) => Some(g.clone()),
            (None, Some(f)) => {
                Some(std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?)
            }
            (None, None) => None,
        };
        let grammar = match (text, &self.json_schema) {
            (Some(g), _) if g.trim_start().starts_with("%llguidance") => Grammar::Lark(g),
            (Some(g), _) => Grammar::Gbnf(g),
            (None, Some(schema)) => {
                let v: serde_json::Value = serde_json::from_str(schema)
                    .map_err(|e| format!("--json-schema is not JSON: {e}"))?;
                match v.as_object() {
                    Some(o) if o.is_empty() => Grammar::JsonObject,
                    _ => Grammar::JsonSchema(v),
                }
            }
            (None, None) => return Ok(None),
        };
        Ok(Some(GrammarCompiler::new(tok)?.compile(&grammar)?))
    }

    /// The sampler these options describe.
    pub fn sampler(&self) -> Sampler {
        Sampler::new(SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
            ..SamplerConfig::default()
        })
    }
}

/// The options of every command that generates text: the model and how to sample from it.
#[derive(clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
}

/// Options of `libt2p run`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    generate: GenerateArgs,
    /// The prompt.
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Do not add the BOS token even if the model asks for it.
    #[arg(long)]
    no_bos: bool,
    /// Print one JSON object (prompt ids, generated ids, text, timings) instead of streaming.
    #[arg(long)]
    json: bool,
    /// Skip the memory-bandwidth measurement at the end (no "% of ceiling").
    #[arg(long)]
    no_ceiling: bool,
    /// Speculative decoding: `lookup` drafts tokens from earlier context and verifies them in
    /// one batch (greedy only; same output as without). Off by default.
    #[arg(long, value_parser = ["none", "lookup"], default_value = "none")]
    draft: String,
    /// Most tokens drafted at once (3 keeps a verification within one 4-column tile).
    #[arg(long, default_value_t = 3)]
    draft_max: usize,
    /// Verify every draft the lookup finds, instead of drafting only while the measured
    /// acceptance and verification cost promise a gain (the default).
    #[arg(long)]
    draft_always: bool,
}

type BoxError = Box<dyn std::error::Error>;

pub fn run(args: Args) -> Result<ExitCode, BoxError> {
    let prompt = read_prompt(&args)?;
    let (loaded, load_secs) = args.generate.model.load(args.json)?;
    let exec = args.generate.model.exec();
    let n_ctx = args.generate.model.n_ctx(&loaded);
    let ids = prompt_ids(&args, &loaded, &prompt, n_ctx)?;
    let out = generate_streaming(&args, &loaded, &exec, &ids, n_ctx)?;
    let mem = Memory::measure(&args, loaded, &exec, &out.stats);
    if args.json {
        print_json(&args, &exec, &ids, &out, &mem, load_secs);
    } else {
        print_summary(&args, &exec, &out, &mem, load_secs);
    }
    Ok(ExitCode::SUCCESS)
}

/// The prompt of `-p`, or the contents of `-f`, or nothing.
fn read_prompt(args: &Args) -> Result<String, BoxError> {
    Ok(match (&args.prompt, &args.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?
        }
        (None, None) => String::new(),
    })
}

/// The prompt's tokens (BOS alone for an empty prompt), refused if they fill the context.
fn prompt_ids(
    args: &Args,
    loaded: &Loaded,
    prompt: &str,
    n_ctx: usize,
) -> Result<Vec<u32>, BoxError> {
    let tok = &loaded.tokenizer;
    let mut ids = tok.encode(prompt, !args.no_bos, true);
    if ids.is_empty() {
        ids.extend(tok.bos());
    }
    if ids.is_empty() {
        return Err("the prompt is empty and the model has no BOS token".into());
    }
    if ids.len() >= n_ctx {
        return Err(format!(
            "the prompt has {} tokens, more than the context of {n_ctx}",
            ids.len()
        )
        .into());
    }
    Ok(ids)
}

/// What a generation produced.
struct Generated {
    stats: GenStats,
    draft: Option<DraftStats>,
    /// Every generated id, end-of-generation included.
    ids: Vec<u32>,
    /// The text of the generated ids, `tail` included.
    text: Vec<u8>,
    /// The bytes the stream decoder held back until the end.
    tail: String,
}

/// Generates up to `-n` tokens after `ids` (plainly or with lookup drafts), streaming the
/// prompt and each piece to stdout unless `--json`.
fn generate_streaming(
    args: &Args,
    loaded: &Loaded,
    exec: &Exec,
    ids: &[u32],
    n_ctx: usize,
) -> Result<Generated, BoxError> {
    let tok = &loaded.tokenizer;
    let drafting = args.draft == "lookup";
    if drafting && args.generate.sample.temperature > 0.0 {
        return Err("--draft lookup needs greedy sampling (--temp 0)".into());
    }
    let mut constraint = args.generate.sample.constraint(tok)?;
    if drafting && constraint.is_some() {
        return Err("--draft lookup does not take a grammar".into());
    }
    let n = args.n_predict.min(n_ctx - ids.len());
    let mut session = loaded.model.new_session(n_ctx);
    let mut generated = Vec::new();
    let mut text = Vec::new();
    let mut stream = tok.stream_decoder(false);
    let stdout = std::io::stdout();
    if !args.json {
        let mut out = stdout.lock();
        out.write_all(&tok.decode(ids, false))?;
        out.flush()?;
    }
    let mut on_token = |id: u32| {
        generated.push(id);
        if !tok.is_eog(id) {
            let piece = stream.push(id);
            text.extend_from_slice(piece.as_bytes());
            if !args.json {
                let mut out = stdout.lock();
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
        }
        true
    };
    let mut decoder = Decoder::new(&loaded.model, exec, &mut session, args.generate.model.batch);
    let (stats, draft) = if drafting {
        let cfg = LookupConfig {
            max_draft: args.draft_max.max(1),
            adaptive: !args.draft_always,
            ..Default::default()
        };
        let (s, d) = decoder.generate_lookup(ids, n, &cfg, |id| tok.is_eog(id), &mut on_token)?;
        (s, Some(d))
    } else if let Some(c) = constraint.as_mut() {
        let eog = |id| tok.is_eog(id);
        let mut sampler = args.generate.sample.sampler();
        let s = decoder.generate_masked(ids, n, &mut sampler, c, eog, &mut on_token)?;
        (s, None)
    } else {
        let s = decoder.generate(
            ids,
            n,
            &mut args.generate.sample.sampler(),
            |id| tok.is_eog(id),
            &mut on_token,
        )?;
        (s, None)
    };
    let tail = stream.finish();
    text.extend_from_slice(tail.as_bytes());
    Ok(Generated {
        stats,
        draft,
        ids: generated,
        text,
        tail,
    })
}

/// Memory traffic of the generation: bytes per token, the rate they were read at, and that
/// rate against the measured ceiling (unless `--no-ceiling`).
struct Memory {
    weights_per_token: f64,
    state_per_token: f64,
    bytes_per_token: f64,
    gen_gbps: f64,
    ceiling: Option<f64>,
    pct: Option<f64>,
}

impl Memory {
    /// Takes the model to free it before the ceiling probe allocates its buffer, so the probe
    /// does not add to the run's peak memory.
    fn measure(args: &Args, loaded: Loaded, exec: &Exec, stats: &GenStats) -> Memory {
        let weights_per_token = loaded.model.bytes_per_token() as f64;
        // Hybrid models also read and write their recurrent state once per token (as `bench -m`
        // counts it; the KV cache read, small at these lengths, is left out here).
        let state_per_token = loaded
            .model
            .new_session(1)
            .recurrent
            .as_ref()
            .map_or(0, |r| 2 * r.state_bytes()) as f64;
        let bytes_per_token = weights_per_token + state_per_token;
        drop(loaded);
        let ceiling = (!args.no_ceiling).then(|| {
            let probe = BandwidthProbe::new(&exec.pool, BandwidthProbe::default_bytes());
            probe.measure(&exec.pool, 3).median_gbps
        });
        let gen_gbps = stats.gen_tps() * bytes_per_token / 1e9;
        Memory {
            weights_per_token,
            state_per_token,
            bytes_per_token,
            gen_gbps,
            ceiling,
            pct: ceiling.map(|c| 100.0 * gen_gbps / c),
        }
    }
}

/// `--json`: one object with the ids, the text and every timing.
fn print_json(
    args: &Args,
    exec: &Exec,
    ids: &[u32],
    out: &Generated,
    mem: &Memory,
    load_secs: f64,
) {
    let (stats, generated, text) = (&out.stats, &out.ids, &out.text);
    let Memory { ceiling, pct, .. } = *mem;
    let (weights_per_token, state_per_token) = (mem.weights_per_token, mem.state_per_token);
    let (bytes_per_token, gen_gbps) = (mem.bytes_per_token, mem.gen_gbps);
    let draft = out.draft;
    let obj = serde_json::json!({
        "prompt_ids": ids,
        "ids": generated,
        "text": String::from_utf8_lossy(text),
        "timings": {
            "load_s": load_secs,
            "prompt_tokens": stats.prompt_tokens,
            "prompt_s": stats.prompt_secs,
            "prompt_tps": stats.prompt_tps(),
            "gen_tokens": stats.gen_tokens,
            "gen_s": stats.gen_secs,
            "gen_tps": stats.gen_tps(),
            "weights_bytes_per_token": weights_per_token,
            "state_bytes_per_token": state_per_token,
            "bytes_per_token": bytes_per_token,
            "gen_gbps": gen_gbps,
            "ceiling_gbps": ceiling,
            "pct_of_ceiling": pct,
            "threads": exec.pool.threads(),
            "isa": exec.kern.isa().name(),
        },
        "draft": draft.map(|d| serde_json::json!({
            "kind": "lookup",
            "drafted": d.drafted,
            "accepted": d.accepted,
            "verifications": d.verifications,
            "acceptance": d.acceptance(),
            "adaptive": !args.draft_always,
            "plain_steps": d.plain_steps,
            "shadow_drafted": d.shadow_drafted,
            "shadow_accepted": d.shadow_accepted,
            "estimate": d.estimate.map(|e| serde_json::json!({
                "decode_s": e.decode_secs,
                "best_len": e.best_len,
                "verify_s": e.verify_secs,
                "acceptance": e.acceptance,
                "tokens_per_verify": e.tokens_per_verify,
                "gain": e.gain,
                "drafting_tps": e.drafting_tps(),
                "plain_tps": e.plain_tps(),
                "expected_tps": e.expected_tps,
            })),
        })),
    });
    println!("{obj}");
}

/// The streamed text's end, then the timings on stderr.
fn print_summary(args: &Args, exec: &Exec, out: &Generated, mem: &Memory, load_secs: f64) {
    let (stats, draft, tail) = (&out.stats, out.draft, &out.tail);
    let Memory {
        weights_per_token,
        state_per_token,
        bytes_per_token,
        gen_gbps,
        ceiling,
        pct,
    } = *mem;
    println!("{tail}");
    eprintln!();
    eprintln!(
        "load: {load_secs:.2} s | threads {} | kernels {}",
        exec.pool.threads(),
        exec.kern.isa()
    );
    eprintln!(
        "prompt: {} tokens in {:.3} s = {:.1} tok/s",
        stats.prompt_tokens,
        stats.prompt_secs,
        stats.prompt_tps()
    );
    eprintln!(
        "generation: {} tokens in {:.3} s = {:.2} tok/s",
        stats.gen_tokens,
        stats.gen_secs,
        stats.gen_tps()
    );
    if let Some(d) = draft {
        eprintln!(
            "drafting: {} of {} drafted tokens accepted ({:.0}%) in {} verifications, {} plain steps{}",
            d.accepted,
            d.drafted,
            100.0 * d.acceptance(),
            d.verifications,
            d.plain_steps,
            if args.draft_always {
                String::new()
            } else {
                format!(
                    " (declined drafts: {} of {} tokens would have been accepted)",
                    d.shadow_accepted, d.shadow_drafted
                )
            }
        );
        if let Some(e) = d.estimate {
            eprintln!(
                "drafting model: decode {:.2} ms, verify of {} {:.2} ms ({:.2}x), acceptance {:.2}: {:.2} tokens per verify, {:.2} tok/s drafting vs {:.2} plain (gain {:.2}x); expected for the steps taken {:.2} tok/s, measured {:.2} tok/s",
                1e3 * e.decode_secs,
                e.best_len,
                1e3 * e.verify_secs,
                e.verify_secs / e.decode_secs,
                e.acceptance,
                e.tokens_per_verify,
                e.drafting_tps(),
                e.plain_tps(),
                e.gain,
                e.expected_tps,
                stats.gen_tps()
            );
        }
    }
    match (ceiling, pct) {
        (Some(c), Some(p)) => eprintln!(
            "memory: {:.1} MB per token (weights {:.1} + recurrent state {:.1}), {gen_gbps:.2} GB/s = {p:.1}% of the measured ceiling {c:.2} GB/s",
            bytes_per_token / 1e6,
            weights_per_token / 1e6,
            state_per_token / 1e6
        ),
        _ => eprintln!(
            "memory: {:.1} MB per token (weights {:.1} + recurrent state {:.1}), {gen_gbps:.2} GB/s",
            bytes_per_token / 1e6,
            weights_per_token / 1e6,
            state_per_token / 1e6
        ),
    }
}
