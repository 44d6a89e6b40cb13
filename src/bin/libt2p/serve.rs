//! `libt2p serve`: the OpenAI-compatible HTTP server (see `t2p::runner::server`).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use t2p::matmul::ActQuant;
use t2p::runner::server::reasoning::ReasoningFormat;
use t2p::runner::server::{Limits, ServerConfig, parse_duration, serve};
use t2p::runner::speculative::LookupConfig;

use crate::run::{CacheType, ModelArgs, parse_act};

/// Options of `libt2p serve` (the model options of `run`, with a batch size fit for serving).
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model file.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// Threads (default: all CPUs).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Context size of each slot in tokens (default: the model's trained context; the KV
    /// cache grows as a slot fills it, and --kv-budget bounds all slots together).
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Most prompt tokens per forward pass, over all slots: long prompts are fed in chunks of
    /// this size between the other requests' decode steps.
    #[arg(short = 'b', long = "batch-size", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Activation quantization for the ternary matmuls (as `libt2p run --act`).
    #[arg(long = "act", default_value = "q8_0", value_parser = parse_act)]
    act: ActQuant,
    /// KV cache element type (as `libt2p run --cache-type`).
    #[arg(long = "cache-type", value_enum, default_value_t = CacheType::F16)]
    cache_type: CacheType,
    /// Read the T2P matrices of a converted model (`libt2p convert`) into memory of their own
    /// instead of using them where the mapped file lies.
    #[arg(long = "no-mmap")]
    no_mmap: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port (0: any free port; the bound address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Requests decoded together in one batched forward pass (each slot has its own context of
    /// --ctx-size tokens).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    parallel: u64,
    /// KV-cache positions over all slots (default: --parallel x --ctx-size; at least one
    /// context). A request is admitted when its prompt + max_tokens fit beside what the
    /// running requests may reach and the idle slots still hold (those are dropped to make
    /// room); otherwise it waits. Bounds the KV memory to this many positions (a hybrid
    /// slot's copy at a message boundary included).
    #[arg(long = "kv-budget", value_parser = clap::value_parser!(u64).range(1..))]
    kv_budget: Option<u64>,
    /// Speculative decoding in every slot: `lookup` drafts the tokens that followed the
    /// latest earlier occurrence of the text's suffix and verifies them inside the batch
    /// (output unchanged, whatever the sampling); `none` is off. Attention-only models.
    #[arg(long, default_value = "none", value_parser = ["none", "lookup"])]
    draft: String,
    /// Most tokens drafted at once per slot.
    #[arg(long = "draft-max", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    draft_max: u64,
    /// Requests that may wait for a free slot; past that the server answers 503.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    queue: u64,
    /// Require `Authorization: Bearer KEY` on the /v1 endpoints (and /tokenize, /detokenize,
    /// /props).
    #[arg(long)]
    api_key: Option<String>,
    /// Longest wait for a request's head, from its first byte (from the connection opening,
    /// for the first request): `500ms`, `10s`, `1m`, or seconds.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    timeout_header: Duration,
    /// Longest wait for a request's body, from its head (408 past it).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    timeout_body: Duration,
    /// How long an idle connection is kept open between requests (0: close after each).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    keep_alive: Duration,
    /// Most connections open at once; more get a 503 and are closed.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// On SIGINT/SIGTERM, how long in-flight requests may still run; then they end with
    /// finish_reason "length" (a second signal ends them at once).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    shutdown_timeout: Duration,
    /// Where the `<think>` reasoning of thinking models goes: `deepseek` puts it in
    /// `reasoning_content` (as llama-server), `none` leaves it in the content.
    #[arg(long = "reasoning-format", default_value = "deepseek", value_parser = ["deepseek", "none"])]
    reasoning_format: String,
    /// Let web pages of this origin call the server (CORS; `*`: any origin). Default: off,
    /// browsers refuse cross-origin calls.
    #[arg(long = "cors-origin")]
    cors_origin: Option<String>,
    /// Serve the chat page at / (the default; the API key, if any, guards the API it calls,
    /// not the page).
    #[arg(long, overrides_with = "no_webui")]
    webui: bool,
    /// Do not serve the chat page (/ answers 404).
    #[arg(long = "no-webui", overrides_with = "webui")]
    no_webui: bool,
    /// A free slot takes a prompt when it would keep at least this fraction of the tokens its
    /// cache holds; else the prompt goes to an empty or the least recently used slot, so one
    /// conversation does not evict another's cache (0: the longest common prefix wins).
    #[arg(long = "slot-prompt-similarity", default_value_t = 0.5, value_parser = similarity)]
    slot_prompt_similarity: f32,
    /// MiB of RAM for the sessions of conversations that lost their slot: a later turn of one
    /// gets its cache back instead of evaluating its history again (0: off).
    #[arg(long = "cache-ram", default_value_t = 8192)]
    cache_ram: u64,
}

fn similarity(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err("must be a number from 0 to 1".into()),
    }
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be more than 0".into()),
        d => Ok(d),
    }
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let margs = ModelArgs {
        model: args.model.clone(),
        threads: args.threads,
        ctx_size: args.ctx_size,
        batch: args.batch as usize,
        act: args.act,
        cache_type: args.cache_type,
        no_mmap: args.no_mmap,
    };
    let (loaded, load_secs) = margs.load(false)?;
    let exec = margs.exec();
    // Unlike `run`, no 4096 cap: a slot's KV cache is allocated as it fills, so a long
    // context costs nothing until a request uses it.
    let n_ctx = args
        .ctx_size
        .unwrap_or_else(|| loaded.model.n_ctx_train().max(1));
    let model_name = args
        .model
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let cfg = ServerConfig {
        addr: SocketAddr::new(args.host, args.port),
        parallel: args.parallel as usize,
        n_ctx,
        prefill_budget: margs.batch,
        kv_budget: args.kv_budget.map(|n| n as usize),
        draft: (args.draft == "lookup").then(|| LookupConfig {
            max_draft: args.draft_max as usize,
            adaptive: false,
            ..LookupConfig::default()
        }),
        queue: args.queue as usize,
        api_key: args.api_key.clone(),
        model_name,
        model_path: args.model.display().to_string(),
        limits: Limits {
            header_timeout: args.timeout_header,
            body_timeout: args.timeout_body,
            keep_alive: args.keep_alive,
            max_connections: args.max_connections as usize,
            shutdown_timeout: args.shutdown_timeout,
        },
        reasoning_format: ReasoningFormat::parse(&args.reasoning_format)?,
        cors_origin: args.cors_origin.clone(),
        webui: !args.no_webui,
        slot_similarity: args.slot_prompt_similarity,
        cache_ram: usize::try_from(args.cache_ram.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
    };
    eprintln!(
        "libt2p serve: {} loaded in {load_secs:.2} s | {} slots of {n_ctx} tokens, KV budget {} | queue {} | threads {} | kernels {}",
        cfg.model_name,
        cfg.parallel,
        t2p::runner::server::kv_budget(&cfg),
        cfg.queue,
        exec.pool.threads(),
        exec.kern.isa()
    );
    serve(loaded, exec, cfg, |addr| {
        eprintln!("libt2p serve: listening on http://{addr}");
        let _ = std::io::stderr().flush();
    })?;
    eprintln!("libt2p serve: stopped");
    Ok(ExitCode::SUCCESS)
}
