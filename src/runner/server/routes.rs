//! The HTTP side: axum routes, the API key check, request -> [`Job`], and the responses
//! (one JSON object, or server-sent events ending with `data: [DONE]`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::api::{self, ApiError, Prompt};
use super::metrics::Metrics;
use super::scheduler::{Event, Finish, Job};
use crate::runner::Tokenizer;
use crate::runner::chat::ChatTemplate;

/// Largest request body accepted (413 past it).
pub const MAX_BODY: usize = 16 << 20;

/// Completions answer as text (`/v1/completions`) or as a chat message.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Chat,
}

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
}

type Shared = Arc<AppState>;

/// The router: completions behind the API key, `/health` and `/metrics` open.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route_layer(middleware::from_fn_with_state(state.clone(), check_key))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), count_errors))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn check_key(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid_api_key",
                "missing or wrong API key (Authorization: Bearer <key>)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

async fn count_errors(State(st): State<Shared>, req: Request, next: Next) -> Response {
    // A declared body past the limit is refused before it is read (a client that sent
    // `Expect: 100-continue` then never sends it).
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let resp = if declared.is_some_and(|n| n > MAX_BODY as u64) {
        too_large().into_response()
    } else {
        next.run(req).await
    };
    if resp.status().is_client_error() {
        st.metrics.requests_invalid.fetch_add(1, Relaxed);
    }
    resp
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        "body_too_large",
        format!("the request body is larger than {MAX_BODY} bytes"),
    )
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found_error",
        "not_found",
        "no such endpoint (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics)",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(st): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
        .into_response()
}

async fn models(State(st): State<Shared>) -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": st.model_name, "object": "model", "created": st.started, "owned_by": "t2p"}],
    }))
    .into_response()
}

async fn completions(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    complete(st, body, Kind::Text).await
}

async fn chat_completions(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    complete(st, body, Kind::Chat).await
}

/// Tokenizes the request's prompt (off the async threads: a prompt can be megabytes).
async fn prompt_ids(st: &Shared, m: &Map<String, Value>, kind: Kind) -> Result<Vec<u32>, ApiError> {
    enum Src {
        Text(String, bool),
        Ids(Vec<u32>),
    }
    let src = match kind {
        Kind::Text => match api::parse_prompt(m, st.n_vocab)? {
            Prompt::Text(t) => Src::Text(t, true),
            Prompt::Ids(ids) => Src::Ids(ids),
        },
        Kind::Chat => {
            let messages = api::parse_messages(m)?;
            let tmpl = st.template.as_ref().ok_or_else(|| {
                ApiError::invalid(
                    "no_chat_template",
                    "the model has no chat template; use /v1/completions",
                )
            })?;
            // As `libt2p chat`: the rendered conversation, no BOS added, specials parsed.
            let text = tmpl.render(&messages, true).map_err(|e| {
                ApiError::invalid("invalid_messages", format!("the chat template failed: {e}"))
            })?;
            Src::Text(text, false)
        }
    };
    let ids = match src {
        Src::Ids(ids) => ids,
        Src::Text(text, add_bos) => {
            let tok = st.tokenizer.clone();
            tokio::task::spawn_blocking(move || {
                let mut ids = tok.encode(&text, add_bos, true);
                // As `libt2p run`: an empty prompt is the BOS token alone.
                if ids.is_empty() {
                    ids.extend(tok.bos());
                }
                ids
            })
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal",
                    e.to_string(),
                )
            })?
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid(
            "empty_prompt",
            "the prompt is empty and the model has no BOS token",
        ));
    }
    if ids.len() >= st.n_ctx {
        return Err(ApiError::invalid(
            "context_length_exceeded",
            format!(
                "the prompt has {} tokens; the context holds {} (prompt + at least one generated token)",
                ids.len(),
                st.n_ctx
            ),
        ));
    }
    Ok(ids)
}

async fn complete(
    st: Shared,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Result<Response, ApiError> {
    let body = body.map_err(|e| {
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
    })?;
    let m = api::parse_object(&body)?;
    let common = api::parse_common(&m, st.n_ctx)?;
    let prompt = prompt_ids(&st, &m, kind).await?;
    let prompt_len = prompt.len();
    // OpenAI's defaults: 16 tokens for text completions, as many as fit for chat.
    let max_tokens = common.max_tokens.unwrap_or(match kind {
        Kind::Text => 16,
        Kind::Chat => st.n_ctx - prompt_len,
    });
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt,
        max_tokens,
        sampler: common.sampler.clone(),
        stop: common.stop.clone(),
        events: tx,
    };
    st.metrics.queue_depth.fetch_add(1, Relaxed);
    if let Err(e) = st.jobs.try_send(job) {
        st.metrics.queue_depth.fetch_sub(1, Relaxed);
        st.metrics.requests_rejected.fetch_add(1, Relaxed);
        let msg = match e {
            TrySendError::Full(_) => {
                "the server is busy: every slot is taken and the queue is full; retry later"
            }
            TrySendError::Disconnected(_) => "the model thread has stopped",
        };
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "server_busy",
            msg,
        ));
    }
    st.metrics.requests.fetch_add(1, Relaxed);
    let id = st.next_id.fetch_add(1, Relaxed);
    let reply = Reply {
        id: match kind {
            Kind::Text => format!("cmpl-{id}"),
            Kind::Chat => format!("chatcmpl-{id}"),
        },
        kind,
        created: now(),
        model: st.model_name.clone(),
    };
    if common.stream {
        Ok(stream(reply, rx, common.include_usage).into_response())
    } else {
        whole(reply, rx, common.return_tokens).await
    }
}

/// The parts of every response object that do not change.
struct Reply {
    id: String,
    kind: Kind,
    created: u64,
    model: String,
}

fn usage(prompt_tokens: usize, cached_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    })
}

fn model_failed(msg: String) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "model_error",
        msg,
    )
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Text, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), self.id.clone().into());
        m.insert("object".into(), self.object(chunk).into());
        m.insert("created".into(), self.created.into());
        m.insert("model".into(), self.model.clone().into());
        m.insert("choices".into(), choices);
        m
    }

    /// A streamed chunk carrying `text` (or the finish reason).
    fn chunk(&self, text: Option<&str>, finish: Option<Finish>) -> Value {
        let finish = finish.map(Finish::as_str);
        let choice = match self.kind {
            Kind::Text => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
            Kind::Chat => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None => json!({}),
                };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
        };
        Value::Object(self.envelope(true, json!([choice])))
    }
}

/// Waits for the whole completion and answers with one object.
async fn whole(
    reply: Reply,
    mut rx: UnboundedReceiver<Event>,
    return_tokens: bool,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done {
                finish,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
                tokens,
            }) => {
                let finish = finish.as_str();
                let mut choice = match reply.kind {
                    Kind::Text => {
                        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
                    }
                    Kind::Chat => json!({
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": null,
                        "finish_reason": finish,
                    }),
                };
                if return_tokens {
                    choice["tokens"] = json!(tokens);
                }
                let mut m = reply.envelope(false, json!([choice]));
                m.insert(
                    "usage".into(),
                    usage(prompt_tokens, cached_tokens, completion_tokens),
                );
                return Ok(axum::Json(Value::Object(m)).into_response());
            }
            Some(Event::Error(e)) => return Err(model_failed(e)),
            None => return Err(model_failed("the model thread stopped".into())),
        }
    }
}

/// Streams the completion as server-sent events. Dropping the stream (the client went away)
/// drops the receiver, which the scheduler sees before its next step and frees the slot.
fn stream(reply: Reply, rx: UnboundedReceiver<Event>, include_usage: bool) -> Response {
    let mut out = VecDeque::new();
    if reply.kind == Kind::Chat {
        let mut first = reply.chunk(Some(""), None);
        first["choices"][0]["delta"] = json!({"role": "assistant", "content": ""});
        out.push_back(first.to_string());
    }
    let state = (Some(rx), out, reply);
    let events = futures_util::stream::unfold(state, move |(mut rx, mut out, reply)| async move {
        loop {
            if let Some(data) = out.pop_front() {
                let ev: Result<SseEvent, Infallible> = Ok(SseEvent::default().data(data));
                return Some((ev, (rx, out, reply)));
            }
            let r = rx.as_mut()?;
            match r.recv().await {
                Some(Event::Text(t)) => out.push_back(reply.chunk(Some(&t), None).to_string()),
                Some(Event::Done {
                    finish,
                    prompt_tokens,
                    cached_tokens,
                    completion_tokens,
                    ..
                }) => {
                    out.push_back(reply.chunk(None, Some(finish)).to_string());
                    if include_usage {
                        let mut m = reply.envelope(true, json!([]));
                        m.insert(
                            "usage".into(),
                            usage(prompt_tokens, cached_tokens, completion_tokens),
                        );
                        out.push_back(Value::Object(m).to_string());
                    }
                    out.push_back("[DONE]".into());
                    rx = None;
                }
                Some(Event::Error(e)) => {
                    out.push_back(model_failed(e).body().to_string());
                    rx = None;
                }
                None => {
                    out.push_back(
                        model_failed("the model thread stopped".into())
                            .body()
                            .to_string(),
                    );
                    rx = None;
                }
            }
        }
    });
    let mut resp = Sse::new(events).into_response();
    let h: &mut HeaderMap = resp.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    resp
}
