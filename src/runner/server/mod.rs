//! `libt2p serve`: an OpenAI-compatible HTTP server with continuous batching.
//!
//! The model runs on one dedicated thread ([`scheduler`]): up to `parallel` requests decode
//! together, one [`Model::forward_batch`](crate::runner::model::Model::forward_batch) per step,
//! joining and leaving between steps. The HTTP side ([`routes`], axum on tokio) parses and
//! tokenizes requests, queues them (bounded: a full queue answers 503) and turns the
//! scheduler's events into JSON or server-sent events. Batching never changes an output: at
//! temperature 0 a request gets the tokens `libt2p run --temp 0` gives, alone or not.

pub mod api;
pub mod metrics;
pub mod routes;
pub mod scheduler;
pub mod text;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use metrics::Metrics;
use routes::AppState;
use scheduler::SchedulerConfig;

use crate::runner::chat::ChatTemplate;
use crate::runner::model::{Exec, Loaded};

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
    /// Requests that may wait for a slot before the server answers 503.
    pub queue: usize,
    /// Required `Authorization: Bearer` key of the `/v1` endpoints.
    pub api_key: Option<String>,
    /// The model name responses carry.
    pub model_name: String,
}

/// Serves `loaded` with `exec` until Ctrl-C / SIGTERM; `on_listen` sees the bound address.
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
    let tokenizer = Arc::new(tokenizer);
    let metrics = Arc::new(Metrics::default());
    let (jobs, rx) = std::sync::mpsc::sync_channel(cfg.queue);
    let sched_cfg = SchedulerConfig {
        parallel: cfg.parallel.max(1),
        n_ctx: cfg.n_ctx,
        prefill_budget: cfg.prefill_budget.max(1),
    };
    let state = Arc::new(AppState {
        jobs,
        metrics: metrics.clone(),
        tokenizer: tokenizer.clone(),
        template,
        model_name: cfg.model_name.clone(),
        n_ctx: cfg.n_ctx,
        n_vocab: model.n_vocab(),
        api_key: cfg.api_key.clone(),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        next_id: AtomicU64::new(0),
    });
    let worker = std::thread::Builder::new()
        .name("t2p-scheduler".into())
        .spawn(move || scheduler::run(&model, &exec, &tokenizer, sched_cfg, rx, metrics))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.addr).await?;
        on_listen(listener.local_addr()?);
        axum::serve(listener, routes::router(state))
            .with_graceful_shutdown(shutdown())
            .await
    })?;
    // The router (and with it the queue's sender) is gone: the scheduler ends its last steps.
    drop(rt);
    worker.join().map_err(|_| "the scheduler thread panicked")?;
    Ok(())
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
