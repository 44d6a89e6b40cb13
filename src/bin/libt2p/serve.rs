//! `libt2p serve`: the OpenAI-compatible HTTP server (see `t2p::runner::server`).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use t2p::runner::server::{ServerConfig, serve};

use crate::run::ModelArgs;

/// Options of `libt2p serve`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
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
    /// Requests that may wait for a free slot; past that the server answers 503.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    queue: u64,
    /// Most prompt tokens evaluated in one step (over all slots), so that long prompts are
    /// fed in chunks between the other requests' decode steps.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    prefill_chunk: u64,
    /// Require `Authorization: Bearer KEY` on the /v1 endpoints.
    #[arg(long)]
    api_key: Option<String>,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (loaded, load_secs) = args.model.load(false)?;
    let exec = args.model.exec();
    let n_ctx = args.model.n_ctx(&loaded);
    let model_name = args
        .model
        .model
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let cfg = ServerConfig {
        addr: SocketAddr::new(args.host, args.port),
        parallel: args.parallel as usize,
        n_ctx,
        prefill_budget: args.prefill_chunk as usize,
        queue: args.queue as usize,
        api_key: args.api_key.clone(),
        model_name,
    };
    eprintln!(
        "libt2p serve: {} loaded in {load_secs:.2} s | {} slots of {n_ctx} tokens | queue {} | threads {} | kernels {}",
        cfg.model_name,
        cfg.parallel,
        cfg.queue,
        exec.pool.threads(),
        exec.kern.isa()
    );
    serve(loaded, exec, cfg, |addr| {
        eprintln!("libt2p serve: listening on http://{addr}");
        let _ = std::io::stderr().flush();
    })?;
    Ok(ExitCode::SUCCESS)
}
