//! `libt2p serve`: an OpenAI-compatible HTTP server with continuous batching.
//!
//! The model runs on one dedicated thread ([`scheduler`]): up to `parallel` requests decode
//! together, one [`Model::forward`](crate::runner::model::Model::forward) per step,
//! joining and leaving between steps. The HTTP side ([`routes`], axum on tokio) parses and
//! tokenizes requests, queues them (bounded: a full queue answers 503) and turns the
//! scheduler's events into JSON or server-sent events ([`respond`]). Batching never changes an
//! output: at temperature 0 a request gets the tokens `libt2p run --temp 0` gives, alone or not.
//! [`conn`] owns the connections: their cap and timeouts, and the graceful shutdown.

pub mod api;
pub mod app;
pub mod auth;
pub mod conn;
pub mod cors;
pub mod metrics;
pub mod prompt_cache;
pub mod reasoning;
pub mod respond;
pub mod routes;
pub mod scheduler;
pub mod text;
pub mod tokens;
pub mod tool_format;
pub mod webui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::json;

use app::AppState;
use metrics::Metrics;
use scheduler::SchedulerConfig;

use crate::runner::chat::ChatTemplate;
use crate::runner::constrain::GrammarCompiler;
use crate::runner::model::{Exec, Loaded};
use crate::runner::sample::SamplerConfig;

pub use conn::{Limits, parse_duration};

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (port 0: any free port, printed at start-up).
    pub addr: SocketAddr,
    /// Slots decoded together.
    pub parallel: usize,
    /// Context of each slot, in tokens.
    pub n_ctx: usize,
    /// Most prompt tokens evaluated per step, over all slots.
    pub prefill_budget: usize,
    /// Prompt-lookup drafting in every slot (`None`: off).
    pub draft: Option<crate::runner::speculative::LookupConfig>,
    /// Most KV-cache positions over all slots (`None`: `parallel * n_ctx`, no bound beyond
    /// each slot's context; at least `n_ctx`).
    pub kv_budget: Option<usize>,
    /// Requests that may wait for a slot before the server answers 503.
    pub queue: usize,
    /// Required `Authorization: Bearer` key of the `/v1` endpoints.
    pub api_key: Option<String>,
    /// The model name responses carry.
    pub model_name: String,
    /// The model file, as `/props` reports it.
    pub model_path: String,
    /// Connection cap and timeouts, and the shutdown's grace period.
    pub limits: Limits,
    /// Where the reasoning of thinking models goes (`--reasoning-format`).
    pub reasoning_format: reasoning::ReasoningFormat,
    /// The origin web pages may call from (CORS; `*`: any), or `None`: no CORS headers.
    pub cors_origin: Option<String>,
    /// Serve the chat page at `/` ([`webui`]).
    pub webui: bool,
    /// `--slot-prompt-similarity` (see [`SchedulerConfig::slot_similarity`]).
    pub slot_similarity: f32,
    /// `--cache-ram` in bytes (see [`SchedulerConfig::cache_ram`]).
    pub cache_ram: usize,
}

/// The KV budget in positions: `--kv-budget`, at least one context, or every slot's context.
pub fn kv_budget(cfg: &ServerConfig) -> usize {
    cfg.kv_budget
        .unwrap_or(cfg.parallel.max(1) * cfg.n_ctx)
        .max(cfg.n_ctx)
}

/// Serves `loaded` with `exec` until SIGINT / SIGTERM; `on_listen` sees the bound address.
/// On the signal the server stops accepting, closes idle connections and lets in-flight
/// requests finish; past `limits.shutdown_timeout` (or on a second signal) it ends them
/// (`finish_reason: "length"`), then returns.
pub fn serve(
    loaded: Loaded,
    exec: Exec,
    cfg: ServerConfig,
    on_listen: impl FnOnce(SocketAddr),
) -> Result<(), Box<dyn std::error::Error>> {
    let Loaded {
        model,
        tokenizer,
        gguf,
    } = loaded;
    let template = ChatTemplate::from_gguf(&gguf, &tokenizer)?.map(Arc::new);
    let template_source = ChatTemplate::source(&gguf)?.unwrap_or_default().to_string();
    // A tokenizer with no end-of-generation token cannot end a grammar: such a model serves
    // without structured output (those requests get a 400 saying why).
    let grammars = GrammarCompiler::new(&tokenizer).map(Arc::new);
    let tokenizer = Arc::new(tokenizer);
    let metrics = Arc::new(Metrics::default());
    let conn_metrics = metrics.clone();
    let (jobs, rx) = std::sync::mpsc::sync_channel(cfg.queue);
    let sched_cfg = SchedulerConfig {
        parallel: cfg.parallel.max(1),
        n_ctx: cfg.n_ctx,
        prefill_budget: cfg.prefill_budget.max(1),
        kv_budget: kv_budget(&cfg),
        draft: cfg.draft,
        slot_similarity: cfg.slot_similarity,
        cache_ram: cfg.cache_ram,
    };
    let state = Arc::new(AppState {
        jobs,
        metrics: metrics.clone(),
        tokenizer: tokenizer.clone(),
        template,
        tool_format: tool_format::ToolFormat::detect(&template_source),
        markers: tool_format::ToolFormat::detect(&template_source).control_markers(&tokenizer),
        thinks: reasoning::template_thinks(&template_source),
        reasoning: cfg.reasoning_format,
        cors_origin: cfg.cors_origin.clone(),
        panic_hook: std::env::var(scheduler::PANIC_HOOK_ENV).is_ok_and(|v| v == "1"),
        grammars,
        model_name: cfg.model_name.clone(),
        n_ctx: cfg.n_ctx,
        n_vocab: model.n_vocab(),
        api_key: cfg.api_key.clone(),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        next_id: AtomicU64::new(0),
        body_timeout: cfg.limits.body_timeout,
        props: props(
            &cfg,
            &template_source,
            model.new_session(1).cache.bytes_per_position(),
        ),
    });
    let cut = Arc::new(AtomicBool::new(false));
    let sched_cut = cut.clone();
    let worker = std::thread::Builder::new()
        .name("t2p-scheduler".into())
        .spawn(move || {
            scheduler::run(&model, &exec, &tokenizer, sched_cfg, rx, metrics, sched_cut)
        })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(listen(
        cfg.addr,
        cfg.limits,
        cfg.webui,
        state,
        conn_metrics,
        cut,
        on_listen,
    ));
    // Whatever is still open is dropped with the runtime, and with it the last sender of the
    // queue: the scheduler ends (every job was cut, or finished) and the thread returns.
    drop(rt);
    worker.join().map_err(|_| "the scheduler thread panicked")?;
    result?;
    Ok(())
}

/// Binds `addr` and serves the routes until the signals end it: the first stops accepting and
/// lets in-flight requests finish, the second (or the shutdown timeout) calls `cut`.
async fn listen(
    addr: SocketAddr,
    limits: Limits,
    webui: bool,
    state: Arc<AppState>,
    conn_metrics: Arc<Metrics>,
    cut: Arc<AtomicBool>,
    on_listen: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    // Listen for the signals before anyone can connect: a signal that comes early is still a
    // shutdown, never the default (abrupt) exit.
    let mut signals = Signals::new()?;
    let (count_tx, count_rx) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        loop {
            signals.next().await;
            count_tx.send_modify(|n| *n += 1);
        }
    });
    let nth = |n: u32| {
        let mut rx = count_rx.clone();
        async move {
            let _ = rx.wait_for(|&seen| seen >= n).await;
        }
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    on_listen(listener.local_addr()?);
    let (first, second) = (nth(1), nth(2));
    conn::accept_loop(
        listener,
        webui::maybe_with_page(routes::router(state), webui),
        conn_metrics,
        limits,
        first,
        second,
        || cut.store(true, Ordering::Relaxed),
    )
    .await;
    Ok(())
}

/// `/props`: what llama-server reports that means something here.
fn props(cfg: &ServerConfig, template: &str, kv_bytes_per_position: usize) -> serde_json::Value {
    let d = SamplerConfig::default();
    json!({
        "model_path": cfg.model_path,
        "model_alias": cfg.model_name,
        "n_ctx": cfg.n_ctx,
        "total_slots": cfg.parallel.max(1),
        "kv_budget": kv_budget(cfg),
        "kv_bytes_per_position": kv_bytes_per_position,
        "chat_template": template,
        "tool_call_format": tool_format::ToolFormat::detect(template).name(),
        "reasoning_format": match cfg.reasoning_format {
            reasoning::ReasoningFormat::Deepseek => "deepseek",
            reasoning::ReasoningFormat::None => "none",
        },
        "default_generation_settings": {
            "n_ctx": cfg.n_ctx,
            "params": {
                "temperature": d.temperature,
                "top_k": d.top_k,
                "top_p": d.top_p,
                "min_p": d.min_p,
                "repeat_penalty": d.repeat_penalty,
                "repeat_last_n": d.repeat_last_n,
                "presence_penalty": d.presence_penalty,
                "frequency_penalty": d.frequency_penalty,
                // llama-server's "random" seed: each request without one draws its own.
                "seed": -1,
            },
        },
        "build_info": concat!("t2p ", env!("CARGO_PKG_VERSION")),
    })
}

/// SIGINT and SIGTERM, registered at once.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal of either kind.
    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {},
            _ = self.term.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
