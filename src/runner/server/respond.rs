//! Turning the scheduler's events into OpenAI responses: one JSON object with every choice, or
//! server-sent events (one chunk per piece of text, each choice with its own `index`), and
//! the `logprobs` of either endpoint in OpenAI's shape.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream::{BoxStream, SelectAll};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use super::api::{ApiError, Kind};
use super::reasoning::{self, AnswerSpec, AnswerSplitter};
use super::scheduler::{Event, Finish, TokenLogprob};
use super::tool_format::{Piece, ToolFormat};
use crate::runner::Tokenizer;

/// How long a stream may stay silent before a comment (`: ping`) is sent.
pub const PING_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The environment variable that, read when the server starts, sets the silence before a ping
/// in milliseconds instead of [`PING_EVERY`]: how the tests see pings without waiting seconds.
pub const PING_ENV: &str = "T2P_SERVE_TEST_PING_MS";

/// The parts of every response object of one request that do not change.
pub struct Reply {
    /// `id` of every object.
    pub id: String,
    /// The endpoint.
    pub kind: Kind,
    /// `created`.
    pub created: u64,
    /// `model`.
    pub model: String,
    /// Turns token ids into the strings and bytes of `logprobs`.
    pub tokenizer: Arc<Tokenizer>,
    /// Prompt tokens (counted once in `usage`, however many choices).
    pub prompt_tokens: usize,
    /// Whether the request asked for `logprobs`.
    pub logprobs: bool,
    /// How a chat answer is split into reasoning, content and tool calls (`None`: the text
    /// is the content, as for `/v1/completions`).
    pub answer: Option<AnswerSpec>,
    /// The seed of the first choice (a request without one gets a random one, reported so
    /// that the run can be repeated).
    pub seed: u64,
}

/// What a finished choice adds to `usage`.
#[derive(Clone, Copy, Default)]
struct Counts {
    cached: Option<usize>,
    completion: usize,
}

impl Counts {
    fn add(&mut self, cached: usize, completion: usize) {
        // The prompt is counted once; its cached part is what every choice found cached.
        self.cached = Some(self.cached.map_or(cached, |c| c.min(cached)));
        self.completion += completion;
    }
}

fn model_failed(msg: String) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "model_error",
        msg,
    )
}

/// The `finish_reason` of a choice that made `calls` tool calls.
fn finish_reason(finish: Finish, calls: usize) -> &'static str {
    if calls > 0 && finish == Finish::Stop {
        "tool_calls"
    } else {
        finish.as_str()
    }
}

impl Reply {
    /// A tool call in OpenAI's shape; `k` numbers the calls of choice `index`.
    fn tool_call(&self, index: usize, k: usize, name: &str, arguments: &str) -> Value {
        let format = self
            .answer
            .as_ref()
            .and_then(|a| a.tools.as_ref())
            .map_or(ToolFormat::Hermes, |t| t.0);
        json!({
            "id": format.call_id(&self.id, index, k),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        })
    }

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
        // The seed goes in the fingerprint OpenAI documents for reproducing a run, and as a
        // field of its own (llama-server's).
        m.insert(
            "system_fingerprint".into(),
            format!("t2p-{}-seed-{}", env!("CARGO_PKG_VERSION"), self.seed).into(),
        );
        m.insert("seed".into(), self.seed.into());
        m.insert("choices".into(), choices);
        m
    }

    fn usage(&self, c: Counts) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": c.completion,
            "total_tokens": self.prompt_tokens + c.completion,
            "prompt_tokens_details": {"cached_tokens": c.cached.unwrap_or(0)},
        })
    }

    /// A token as `logprobs` name it: its text (special tokens by name; bytes that are not
    /// UTF-8 on their own as U+FFFD) and its exact bytes.
    fn token(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self.tokenizer.token_to_piece(id, true);
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    /// `logprobs` of a choice (or of one chunk's tokens): `null` when not asked for; chat:
    /// `{"content": [{token, logprob, bytes, top_logprobs}]}`; completions, OpenAI's legacy
    /// `{tokens, token_logprobs, top_logprobs, text_offset}`.
    fn logprobs(&self, lps: &[TokenLogprob]) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        match self.kind {
            Kind::Chat => {
                let entry = |id: u32, lp: f32| {
                    let (token, bytes) = self.token(id);
                    json!({"token": token, "logprob": lp, "bytes": bytes})
                };
                let content: Vec<Value> = lps
                    .iter()
                    .map(|t| {
                        let mut e = entry(t.id, t.logprob);
                        e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
                        e
                    })
                    .collect();
                json!({"content": content})
            }
            Kind::Text => {
                let tokens: Vec<String> = lps.iter().map(|t| self.token(t.id).0).collect();
                let top: Vec<Map<String, Value>> = lps
                    .iter()
                    .map(|t| {
                        t.top
                            .iter()
                            .map(|&(id, lp)| (self.token(id).0, json!(lp)))
                            .collect()
                    })
                    .collect();
                json!({
                    "tokens": tokens,
                    "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": lps.iter().map(|t| t.offset).collect::<Vec<_>>(),
                })
            }
        }
    }

    /// A streamed chunk of choice `index` carrying `text` (or the finish reason).
    fn chunk(
        &self,
        index: usize,
        text: Option<&str>,
        logprobs: Value,
        finish: Option<&str>,
    ) -> Value {
        let delta = match text {
            Some(t) => json!({"content": t}),
            None => json!({}),
        };
        self.chunk_delta(index, delta, logprobs, finish)
    }

    /// A streamed chunk of choice `index` with a chat `delta` (completions: its `content` as
    /// `text`).
    fn chunk_delta(
        &self,
        index: usize,
        delta: Value,
        logprobs: Value,
        finish: Option<&str>,
    ) -> Value {
        let choice = match self.kind {
            Kind::Text => {
                let text = delta.get("content").and_then(Value::as_str).unwrap_or("");
                json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
            }
            Kind::Chat => {
                json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
        };
        Value::Object(self.envelope(true, json!([choice])))
    }

    /// The `message` of a whole chat answer, and how many tool calls it made.
    fn message(&self, index: usize, text: String) -> (Value, usize) {
        let Some(spec) = &self.answer else {
            return (json!({"role": "assistant", "content": text}), 0);
        };
        let (thought, content, calls) = reasoning::split_answer(spec, &text);
        let mut msg = json!({"role": "assistant", "content": content});
        if let Some(r) = thought {
            msg["reasoning_content"] = r.into();
        }
        if !calls.is_empty() {
            msg["tool_calls"] = calls
                .iter()
                .enumerate()
                .map(|(k, (name, args))| self.tool_call(index, k, name, args))
                .collect();
        }
        (msg, calls.len())
    }
}

/// One choice of a non-streamed response, as its events arrive.
#[derive(Default)]
struct Choice {
    text: String,
    logprobs: Vec<TokenLogprob>,
}

/// Waits for every choice and answers with one object. The receivers are read one after the
/// other: the channels are unbounded, so the others' events wait in them meanwhile.
pub async fn whole(
    reply: Reply,
    receivers: Vec<UnboundedReceiver<Event>>,
    return_tokens: bool,
) -> Result<Response, ApiError> {
    let mut choices = Vec::with_capacity(receivers.len());
    let mut counts = Counts::default();
    for (index, mut rx) in receivers.into_iter().enumerate() {
        let mut c = Choice::default();
        loop {
            match rx.recv().await {
                Some(Event::Logprob(t)) => c.logprobs.push(t),
                Some(Event::Text(t)) => c.text.push_str(&t),
                Some(Event::Done {
                    finish,
                    cached_tokens,
                    completion_tokens,
                    tokens,
                    ..
                }) => {
                    counts.add(cached_tokens, completion_tokens);
                    let lp = reply.logprobs(&c.logprobs);
                    let mut choice = match reply.kind {
                        Kind::Text => {
                            json!({"index": index, "text": c.text, "logprobs": lp, "finish_reason": finish.as_str()})
                        }
                        Kind::Chat => {
                            let (message, calls) = reply.message(index, c.text);
                            json!({
                                "index": index,
                                "message": message,
                                "logprobs": lp,
                                "finish_reason": finish_reason(finish, calls),
                            })
                        }
                    };
                    if return_tokens {
                        choice["tokens"] = json!(tokens);
                    }
                    choices.push(choice);
                    break;
                }
                Some(Event::Error(e)) => return Err(model_failed(e)),
                None => return Err(model_failed("the model thread stopped".into())),
            }
        }
    }
    let mut m = reply.envelope(false, Value::Array(choices));
    m.insert("usage".into(), reply.usage(counts));
    Ok(axum::Json(Value::Object(m)).into_response())
}

/// Where a streamed response stands.
struct Streaming {
    events: SelectAll<BoxStream<'static, (usize, Event)>>,
    out: VecDeque<String>,
    reply: Reply,
    /// Per choice: log-probabilities waiting for the text their tokens bring.
    pending: Vec<Vec<TokenLogprob>>,
    /// Per choice, when the answer is split: the splitter and the calls made so far.
    calls: Vec<Option<(AnswerSplitter, usize)>>,
    left: usize,
    counts: Counts,
    include_usage: bool,
    ended: bool,
}

impl Streaming {
    /// Queues the chunks of choice `i`'s next text (split into content and calls when tool
    /// calls are parsed; the pending log-probabilities go with the first chunk).
    fn text(&mut self, i: usize, t: &str, end: bool) {
        let r = &self.reply;
        let mut pieces = Vec::new();
        match &mut self.calls[i] {
            None => pieces.push(Piece::Content(t.to_string())),
            Some((splitter, _)) => splitter.push(t, end, &mut pieces),
        }
        for p in pieces {
            if p == Piece::Content(String::new()) {
                continue;
            }
            let lp = r.logprobs(&std::mem::take(&mut self.pending[i]));
            let delta = match p {
                Piece::Content(c) => json!({"content": c}),
                Piece::Reasoning(c) => json!({"reasoning_content": c}),
                Piece::Call { name, arguments } => {
                    let (_, k) = self.calls[i].as_mut().expect("calls are parsed");
                    // A streamed call carries its position among the choice's calls.
                    let mut call = r.tool_call(i, *k, &name, &arguments);
                    call["index"] = json!(*k);
                    *k += 1;
                    json!({"tool_calls": [call]})
                }
            };
            self.out
                .push_back(r.chunk_delta(i, delta, lp, None).to_string());
        }
    }

    /// Queues the chunks `ev` of choice `i` makes.
    fn on(&mut self, i: usize, ev: Event) {
        match ev {
            Event::Logprob(t) => self.pending[i].push(t),
            Event::Text(t) => self.text(i, &t, false),
            Event::Done {
                finish,
                cached_tokens,
                completion_tokens,
                ..
            } => {
                self.text(i, "", true);
                let r = &self.reply;
                if !self.pending[i].is_empty() {
                    // Tokens whose text never came (a held-back stop prefix, an unfinished
                    // character): their log-probabilities still arrive, with no text.
                    let lp = r.logprobs(&std::mem::take(&mut self.pending[i]));
                    self.out
                        .push_back(r.chunk(i, Some(""), lp, None).to_string());
                }
                let calls = self.calls[i].as_ref().map_or(0, |c| c.1);
                let finish = finish_reason(finish, calls);
                self.out
                    .push_back(r.chunk(i, None, Value::Null, Some(finish)).to_string());
                self.counts.add(cached_tokens, completion_tokens);
                self.left -= 1;
                if self.left == 0 {
                    self.end(None);
                }
            }
            Event::Error(e) => self.end(Some(e)),
        }
    }

    /// Queues the stream's last payloads: the usage and `[DONE]`, or an error.
    fn end(&mut self, error: Option<String>) {
        match error {
            Some(e) => {
                // The error as an event of its own, then the usual end: clients that wait
                // for `[DONE]` stop waiting.
                self.out.push_back(model_failed(e).body().to_string());
                self.out.push_back("[DONE]".into());
            }
            None => {
                if self.include_usage {
                    let mut m = self.reply.envelope(true, json!([]));
                    m.insert("usage".into(), self.reply.usage(self.counts));
                    self.out.push_back(Value::Object(m).to_string());
                }
                self.out.push_back("[DONE]".into());
            }
        }
        self.ended = true;
    }
}

/// Streams the completion as server-sent events, the choices' chunks interleaved as they come.
/// [`PING_EVERY`], or what [`PING_ENV`] says.
fn ping_every() -> std::time::Duration {
    static EVERY: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        std::env::var(PING_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&ms| ms > 0)
            .map_or(PING_EVERY, std::time::Duration::from_millis)
    })
}

/// Dropping the stream (the client went away) drops the receivers, which the scheduler sees
/// before its next step and frees the slots.
pub fn stream(
    reply: Reply,
    receivers: Vec<UnboundedReceiver<Event>>,
    include_usage: bool,
) -> Response {
    let n = receivers.len();
    let mut out = VecDeque::new();
    if reply.kind == Kind::Chat {
        for i in 0..n {
            let mut first = reply.chunk(i, Some(""), Value::Null, None);
            first["choices"][0]["delta"] = json!({"role": "assistant", "content": ""});
            out.push_back(first.to_string());
        }
    }
    let events =
        futures_util::stream::select_all(receivers.into_iter().enumerate().map(|(i, rx)| {
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
            )
            .map(move |ev| (i, ev))
            .boxed()
        }));
    let calls = (0..n)
        .map(|_| reply.answer.as_ref().map(|a| (AnswerSplitter::new(a), 0)))
        .collect();
    let state = Streaming {
        events,
        out,
        reply,
        pending: vec![Vec::new(); n],
        calls,
        left: n,
        counts: Counts::default(),
        include_usage,
        ended: false,
    };
    let body = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(data) = s.out.pop_front() {
                let ev: Result<SseEvent, Infallible> = Ok(SseEvent::default().data(data));
                return Some((ev, s));
            }
            if s.ended {
                return None;
            }
            match s.events.next().await {
                Some((i, ev)) => s.on(i, ev),
                // Every channel closed with a choice unfinished.
                None => s.end(Some("the model thread stopped".into())),
            }
        }
    });
    // A comment line after each idle stretch: a long prompt evaluation (or a wait for a slot)
    // sends nothing else, and proxies with idle timeouts would cut the stream.
    let ping = KeepAlive::new().interval(ping_every()).text("ping");
    let mut resp = Sse::new(body).keep_alive(ping).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    resp
}
