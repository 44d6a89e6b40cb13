//! What every handler shares: the server's state, and the JSON-object body read (the small
//! endpoints of [`super::tokens`] and the completions of [`super::routes`] both use them).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::api::{self, ApiError};
use super::metrics::Metrics;
use super::reasoning::ReasoningFormat;
use super::scheduler::Job;
use super::tool_format::{ControlMarkers, ToolFormat};
use crate::runner::Tokenizer;
use crate::runner::chat::ChatTemplate;
use crate::runner::constrain::{GrammarCompiler, GrammarError};

/// Largest request body accepted (413 past it).
pub const MAX_BODY: usize = 16 << 20;

/// What every handler shares.
pub struct AppState {
    /// The scheduler's queue (bounded: full means 503).
    pub jobs: SyncSender<Job>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// Its chat template, if the file has one.
    pub template: Option<Arc<ChatTemplate>>,
    /// The tool-call syntax the template teaches.
    pub tool_format: ToolFormat,
    /// Its markers (and think tags) that are control tokens: rendered in chat answers,
    /// written as tokens in grammars.
    pub markers: ControlMarkers,
    /// Whether the template writes think blocks (only then are answers searched for one).
    pub thinks: bool,
    /// Where reasoning goes (`--reasoning-format`).
    pub reasoning: ReasoningFormat,
    /// `--cors-origin`.
    pub cors_origin: Option<String>,
    /// The panic test hook is on ([`super::scheduler::PANIC_HOOK_ENV`]).
    pub panic_hook: bool,
    /// Compiles the grammars of structured output, or says why the model cannot have any.
    pub grammars: Result<Arc<GrammarCompiler>, GrammarError>,
    /// The name `/v1/models` lists and responses carry.
    pub model_name: String,
    /// Context of a slot.
    pub n_ctx: usize,
    /// Vocabulary size (token-id prompts are checked against it).
    pub n_vocab: usize,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// Seconds since the epoch at start-up (`created` of the model).
    pub started: u64,
    /// Source of response ids.
    pub next_id: AtomicU64,
    /// Longest a request body may take to arrive (408 past it).
    pub body_timeout: Duration,
    /// What `/props` answers.
    pub props: Value,
}

/// The 413 answer.
pub(super) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        "body_too_large",
        format!("the request body is larger than {MAX_BODY} bytes"),
    )
}

/// Bad-body rejections of the `Bytes` extractor as API errors (the body is already read).
fn body_error(e: BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::new(
            e.status(),
            "invalid_request_error",
            "bad_body",
            e.body_text(),
        )
    }
}

/// Parses a JSON-object body (the small endpoints share this with the completions).
pub(super) fn object_body(
    body: Result<Bytes, BytesRejection>,
) -> Result<Map<String, Value>, ApiError> {
    api::parse_object(&body.map_err(body_error)?)
}

/// Runs `f` on tokio's blocking threads (tokenizing a long prompt, compiling a grammar: work
/// that would stall the async ones); a task that panicked is a 500.
pub(super) async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)
}
