//! The HTTP side: axum routes, the API key check, the body read (bounded in size and time),
//! request -> [`Job`]s (one per choice), and the responses (one JSON object, or server-sent
//! events ending with `data: [DONE]`, built in [`super::respond`]). The small endpoints
//! (`/tokenize`, `/detokenize`, `/props`) are in [`super::tokens`], the state both share in
//! [`super::app`].

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::TrySendError;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::unbounded_channel;

use super::api::{self, ApiError, Kind, Prompt, ToolChoice, Tools};
use super::reasoning::{self, AnswerSpec};
use crate::runner::constrain::{Constraint, Grammar};

use super::app::{AppState, MAX_BODY, object_body, off_thread, too_large};
use super::respond::{self, Reply};
use super::scheduler::Job;
use super::tokens;

type Shared = Arc<AppState>;

/// The router: completions, models and the tokenizer endpoints behind the API key, `/health`
/// and `/metrics` open.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokens::tokenize))
        .route("/detokenize", post(tokens::detokenize))
        .route("/props", get(tokens::props))
        .route("/apply-template", post(apply_template))
        .route_layer(middleware::from_fn_with_state(state.clone(), check_key))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            super::cors::cors,
        ))
        .with_state(state)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn check_key(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        let ok = super::auth::given_key(req.headers())
            .is_some_and(|g| super::auth::same_key(g, key.as_bytes()));
        if !ok {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid_api_key",
                "missing or wrong API key (Authorization: Bearer <key>, or x-api-key: <key>)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Reads the whole body before any handler runs, so that it is bounded in size (413) and in
/// time (408: a client that sends half a body is not waited on past `body_timeout`); counts
/// the 4xx answers.
async fn read_body(State(st): State<Shared>, req: Request, next: Next) -> Response {
    // A declared body past the limit is refused before it is read (a client that sent
    // `Expect: 100-continue` then never sends it).
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let resp = if declared.is_some_and(|n| n > MAX_BODY as u64) {
        closing(too_large().into_response())
    } else {
        let (parts, body) = req.into_parts();
        match tokio::time::timeout(st.body_timeout, collect(body)).await {
            Ok(Ok(bytes)) => {
                next.run(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
            Ok(Err(e)) => closing(e.into_response()),
            Err(_) => {
                st.metrics.timeouts.fetch_add(1, Relaxed);
                closing(
                    ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "invalid_request_error",
                        "body_timeout",
                        format!(
                            "the request body did not arrive within {} ms",
                            st.body_timeout.as_millis()
                        ),
                    )
                    .into_response(),
                )
            }
        }
    };
    if resp.status().is_client_error() {
        st.metrics.requests_invalid.fetch_add(1, Relaxed);
    }
    resp
}

/// The body's bytes, at most [`MAX_BODY`] of them.
async fn collect(body: Body) -> Result<Vec<u8>, ApiError> {
    let mut data = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = data.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::invalid(
                "bad_body",
                format!("the request body could not be read: {e}"),
            )
        })?;
        if buf.len() + chunk.len() > MAX_BODY {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// Marks `resp` as the connection's last: the rest of a body not read is never waited for.
fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    resp
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found_error",
        "not_found",
        "no such endpoint (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, POST /tokenize, POST /detokenize, GET /props, GET /health, GET /metrics)",
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

async fn health(State(st): State<Shared>) -> Response {
    if st.metrics.model_down.load(Relaxed) != 0 {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "model_down",
            "the model thread has stopped; restart the server",
        )
        .into_response();
    }
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

/// A chat request's messages and tools rendered by the model's template, with the variables
/// the template reads (the request's `chat_template_kwargs`, then the tool format's).
async fn render_chat(
    st: &Shared,
    m: &Map<String, Value>,
    tools: Option<&Tools>,
) -> Result<String, ApiError> {
    let messages = api::parse_messages(m)?;
    let mut kwargs = api::parse_template_kwargs(m)?;
    let listed = tools.map(|t| &t.list[..]).unwrap_or_default();
    st.tool_format.template_kwargs(listed, &mut kwargs, now());
    let tmpl = st.template.clone().ok_or_else(|| {
        ApiError::invalid(
            "no_chat_template",
            "the model has no chat template; use /v1/completions",
        )
    })?;
    // Off the async threads: a long conversation takes milliseconds.
    let tools = tools.map(|t| t.raw.clone()).unwrap_or_default();
    off_thread(move || tmpl.render_with(&messages, &tools, true, &kwargs))
        .await?
        .map_err(|e| {
            ApiError::invalid("invalid_messages", format!("the chat template failed: {e}"))
        })
}

/// `POST /apply-template` (as llama-server): the prompt a chat request would be evaluated
/// on, `{"prompt": ...}`, without evaluating it.
async fn apply_template(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = off_thread(move || object_body(body)).await??;
    let tools = api::parse_tools(&m)?;
    let prompt = render_chat(&st, &m, tools.as_ref()).await?;
    Ok(axum::Json(json!({ "prompt": prompt })).into_response())
}

/// Tokenizes the request's prompt (off the async threads: a prompt can be megabytes); a chat's
/// tools are rendered by the template with the messages. Also says whether the rendered chat
/// prompt leaves the model inside a think block.
async fn prompt_ids(
    st: &Shared,
    m: &Map<String, Value>,
    kind: Kind,
    tools: Option<&Tools>,
) -> Result<(Vec<u32>, bool), ApiError> {
    let mut opens_think = false;
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
            // As `libt2p chat`: the rendered conversation, no BOS added, specials parsed.
            let text = render_chat(st, m, tools).await?;
            opens_think = reasoning::prompt_opens_think(&text);
            Src::Text(text, false)
        }
    };
    let ids = match src {
        Src::Ids(ids) => ids,
        Src::Text(text, add_bos) => {
            let tok = st.tokenizer.clone();
            off_thread(move || {
                let mut ids = tok.encode(&text, add_bos, true);
                // As `libt2p run`: an empty prompt is the BOS token alone.
                if ids.is_empty() {
                    ids.extend(tok.bos());
                }
                ids
            })
            .await?
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
    Ok((ids, opens_think))
}

/// The grammar the output follows: the request's structured-output grammar, or the tool-call
/// grammar when the request must call a tool (not both).
fn output_grammar(
    st: &Shared,
    requested: Option<Grammar>,
    tools: Option<&Tools>,
    in_think: bool,
) -> Result<Option<Grammar>, ApiError> {
    let calls = match tools {
        Some(t) => st
            .tool_format
            .grammar(t, in_think, &st.markers)
            .map_err(|e| {
                ApiError::invalid("invalid_tools", format!("the tools' parameters: {e}"))
            })?,
        None => None,
    };
    match (requested, calls) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "invalid_value",
            "'response_format' / 'json_schema' / 'grammar' and a 'tool_choice' that requires a call cannot be combined",
        )),
        (g, None) | (None, g) => Ok(g),
    }
}

/// Compiles `g` off the async threads (a large schema takes milliseconds); a grammar the
/// engine refuses is the client's error.
async fn compile(st: &Shared, g: Grammar) -> Result<Constraint, ApiError> {
    let compiler = st.grammars.clone().map_err(|e| {
        ApiError::invalid(
            "grammar_unsupported",
            format!("this model cannot constrain its output: {e}"),
        )
    })?;
    off_thread(move || compiler.compile(&g))
        .await?
        .map_err(|e| ApiError::invalid("invalid_grammar", format!("the grammar was refused: {e}")))
}

async fn complete(
    st: Shared,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Result<Response, ApiError> {
    // A body of up to 16 MiB is parsed off the async threads (they serve every connection).
    let m = off_thread(move || object_body(body)).await??;
    let mut common = api::parse_common(&m, kind, st.n_ctx, st.n_vocab)?;
    let tools = match kind {
        Kind::Chat => api::parse_tools(&m)?,
        Kind::Text => None,
    };
    let (prompt, opens_think) = prompt_ids(&st, &m, kind, tools.as_ref()).await?;
    let grammar = output_grammar(&st, common.grammar.take(), tools.as_ref(), opens_think)?;
    let constraint = match grammar {
        Some(g) => Some(compile(&st, g).await?),
        None => None,
    };
    let prompt_len = prompt.len();
    let answer = answer_spec(&st, kind, tools, opens_think);
    // A chat answer that is parsed sees the syntax's control-token markers.
    let rendered: Arc<[u32]> = if answer.is_some() {
        st.markers.ids()
    } else {
        Arc::from([])
    };
    // OpenAI's defaults: 16 tokens for text completions, as many as fit for chat.
    let max_tokens = common.max_tokens.unwrap_or(match kind {
        Kind::Text => 16,
        Kind::Chat => st.n_ctx - prompt_len,
    });
    // One job per choice, choice i drawing with seed + i (so at a temperature above 0 the
    // choices differ and choice 0 is what `n: 1` gives); the first carries the others, which
    // share its prompt evaluation.
    let mut receivers = Vec::with_capacity(common.n);
    let mut jobs: Vec<Job> = (0..common.n)
        .map(|i| {
            let (tx, rx) = unbounded_channel();
            receivers.push(rx);
            let mut sampler = common.sampler.clone();
            sampler.seed = sampler.seed.wrapping_add(i as u64);
            Job {
                prompt: prompt.clone(),
                max_tokens,
                sampler,
                stop: common.stop.clone(),
                logprobs: common.logprobs,
                constraint: constraint.as_ref().map(Constraint::fork),
                events: tx,
                siblings: Vec::new(),
                inject_panic: st.panic_hook && m.get("t2p_test_panic") == Some(&Value::Bool(true)),
                rendered: rendered.clone(),
            }
        })
        .collect();
    let mut job = jobs.remove(0);
    job.siblings = jobs;
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
        tokenizer: st.tokenizer.clone(),
        prompt_tokens: prompt_len,
        logprobs: common.logprobs.is_some(),
        answer,
        seed: common.sampler.seed,
    };
    if common.stream {
        Ok(respond::stream(reply, receivers, common.include_usage))
    } else {
        respond::whole(reply, receivers, common.return_tokens).await
    }
}

/// How a chat answer is split: think blocks when the template writes them, tool calls in the
/// template's syntax when the request has tools it may call; `None` when the text is all
/// content.
fn answer_spec(
    st: &Shared,
    kind: Kind,
    tools: Option<Tools>,
    opens_think: bool,
) -> Option<AnswerSpec> {
    let tools = tools
        .filter(|t| t.choice != ToolChoice::None)
        .map(|t| (st.tool_format, t.list.into()));
    let think = st.thinks.then_some(opens_think);
    (kind == Kind::Chat && (tools.is_some() || think.is_some())).then_some(AnswerSpec {
        think,
        reasoning: st.reasoning,
        tools,
    })
}
