//! The OpenAI request fields the server reads, checked by hand so that every bad value gets a
//! message naming the field, and the error type every handler answers with. Unknown fields are
//! ignored; `null` counts as absent (as the OpenAI API treats it).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::runner::chat::{Message, ToolCall};
use crate::runner::constrain::Grammar;
use crate::runner::sample::SamplerConfig;

/// Most stop strings a request may give.
pub const MAX_STOPS: usize = 16;

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 8;

/// Most alternatives per token (`top_logprobs`, or `logprobs` of `/v1/completions`), as OpenAI.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Which endpoint a request came to: the fields differ a little (`logprobs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/completions`: text in, text out.
    Text,
    /// `/v1/chat/completions`: messages in, a message out.
    Chat,
}

/// An OpenAI-style error: `{"error": {"message", "type", "code"}}` with an HTTP status.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable reason.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `server_error`.
    pub kind: &'static str,
    /// A short machine-readable code.
    pub code: &'static str,
}

impl ApiError {
    /// A 400 `invalid_request_error`.
    pub fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code,
        }
    }

    /// A 500 `server_error` (a task of the server failed, not the request).
    pub fn internal(e: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal",
            e.to_string(),
        )
    }

    /// Any status, kind and code.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            code,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// The prompt of `/v1/completions`: text, or token ids.
#[derive(Debug, PartialEq)]
pub enum Prompt {
    /// Text to tokenize (BOS added as the model asks, special tokens parsed, as `libt2p run`).
    Text(String),
    /// Token ids used as they are.
    Ids(Vec<u32>),
}

/// The fields shared by both completion endpoints.
#[derive(Debug)]
pub struct Common {
    /// `max_tokens` (or `max_completion_tokens`), if given.
    pub max_tokens: Option<usize>,
    /// Sampling settings (`libt2p run`'s defaults for what is not given).
    pub sampler: SamplerConfig,
    /// `stop`.
    pub stop: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `return_tokens` (as llama-server): the generated ids as `choices[i].tokens`.
    pub return_tokens: bool,
    /// `n`: how many choices (1 to [`MAX_CHOICES`]).
    pub n: usize,
    /// Log-probabilities asked for: `Some(k)` with `k` alternatives per token (chat:
    /// `logprobs: true` and `top_logprobs`; completions: `logprobs: k`), `None` when not.
    pub logprobs: Option<usize>,
    /// The grammar of structured output (`response_format`, `json_schema`, `grammar`).
    pub grammar: Option<Grammar>,
}

/// Parses a request body into a JSON object.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid("invalid_json", format!("the body is not valid JSON: {e}"))
    })?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::invalid(
            "invalid_type",
            format!("the body must be a JSON object, not {}", type_name(&other)),
        )),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn field<'a>(m: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    m.get(name).filter(|v| !v.is_null())
}

fn wrong(name: &str, want: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        "invalid_type",
        format!("'{name}' must be {want}, not {}", type_name(got)),
    )
}

fn out_of_range(name: &str, want: &str) -> ApiError {
    ApiError::invalid("invalid_value", format!("'{name}' must be {want}"))
}

fn opt_f32(m: &Map<String, Value>, name: &str) -> Result<Option<f32>, ApiError> {
    match field(m, name) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| wrong(name, "a number", v)),
    }
}

fn opt_int(m: &Map<String, Value>, name: &str) -> Result<Option<i64>, ApiError> {
    match field(m, name) {
        None => Ok(None),
        Some(v) => match (v.as_i64(), v.as_u64()) {
            (Some(i), _) => Ok(Some(i)),
            (None, Some(_)) => Ok(Some(i64::MAX)),
            _ => Err(wrong(name, "an integer", v)),
        },
    }
}

fn opt_bool(m: &Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match field(m, name) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| wrong(name, "a boolean", v)),
    }
}

fn opt_penalty(
    m: &Map<String, Value>,
    name: &str,
    default: f32,
    ok: impl Fn(f32) -> bool,
    want: &str,
) -> Result<f32, ApiError> {
    let v = opt_f32(m, name)?.unwrap_or(default);
    if v.is_finite() && ok(v) {
        Ok(v)
    } else {
        Err(out_of_range(name, want))
    }
}

/// Reads `logit_bias`: an object from token ids (as strings, the JSON way) to a bias in
/// [-100, 100].
fn parse_logit_bias(m: &Map<String, Value>, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let o = match field(m, "logit_bias") {
        None => return Ok(Vec::new()),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(wrong("logit_bias", "an object of token id -> bias", v)),
    };
    o.iter()
        .map(|(k, v)| {
            let id = match k.trim().parse::<u64>() {
                Ok(id) if (id as usize) < n_vocab => id as u32,
                _ => {
                    return Err(out_of_range(
                        "logit_bias",
                        &format!(
                            "keyed by token ids below the vocabulary size {n_vocab}, not {k:?}"
                        ),
                    ));
                }
            };
            match v.as_f64() {
                Some(b) if (-100.0..=100.0).contains(&b) => Ok((id, b as f32)),
                Some(_) => Err(out_of_range(
                    &format!("logit_bias[{k:?}]"),
                    "between -100 and 100",
                )),
                None => Err(wrong(&format!("logit_bias[{k:?}]"), "a number", v)),
            }
        })
        .collect()
}

/// Reads the log-probability fields of `kind`'s endpoint.
fn parse_logprobs(m: &Map<String, Value>, kind: Kind) -> Result<Option<usize>, ApiError> {
    let top = |name: &str, v: i64| {
        if (0..=MAX_TOP_LOGPROBS as i64).contains(&v) {
            Ok(v as usize)
        } else {
            Err(out_of_range(
                name,
                &format!("between 0 and {MAX_TOP_LOGPROBS}, not {v}"),
            ))
        }
    };
    match kind {
        Kind::Chat => {
            let on = opt_bool(m, "logprobs")?.unwrap_or(false);
            match opt_int(m, "top_logprobs")? {
                Some(_) if !on => Err(ApiError::invalid(
                    "invalid_value",
                    "'top_logprobs' needs 'logprobs': true",
                )),
                Some(k) => Ok(Some(top("top_logprobs", k)?)),
                None => Ok(on.then_some(0)),
            }
        }
        Kind::Text => opt_int(m, "logprobs")?
            .map(|k| top("logprobs", k))
            .transpose(),
    }
}

/// Reads the fields both endpoints share; `n_ctx` bounds `max_tokens` (and is what
/// `repeat_last_n: -1` means), `n_vocab` bounds the token ids of `logit_bias`.
pub fn parse_common(
    m: &Map<String, Value>,
    kind: Kind,
    n_ctx: usize,
    n_vocab: usize,
) -> Result<Common, ApiError> {
    let n = match opt_int(m, "n")? {
        None => 1,
        Some(n) if (1..=MAX_CHOICES as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(out_of_range(
                "n",
                &format!("between 1 and {MAX_CHOICES}, not {n}"),
            ));
        }
    };
    let stream = opt_bool(m, "stream")?.unwrap_or(false);
    let include_usage = match field(m, "stream_options") {
        None => false,
        Some(Value::Object(o)) => opt_bool(o, "include_usage")?.unwrap_or(false),
        Some(v) => return Err(wrong("stream_options", "an object", v)),
    };
    Ok(Common {
        max_tokens: parse_max_tokens(m, n_ctx)?,
        sampler: parse_sampler(m, n_ctx, n_vocab)?,
        stop: parse_stop(m)?,
        stream,
        include_usage,
        return_tokens: opt_bool(m, "return_tokens")?.unwrap_or(false),
        n,
        logprobs: parse_logprobs(m, kind)?,
        grammar: parse_grammar(m)?,
    })
}

/// `max_tokens` (or `max_completion_tokens`): at least 1; more than the context is clamped to
/// it (the scheduler then cuts it to what the prompt leaves), as llama-server does, rather
/// than refused: clients ask for their model's maximum whatever the server's context.
fn parse_max_tokens(m: &Map<String, Value>, n_ctx: usize) -> Result<Option<usize>, ApiError> {
    let max_tokens = match opt_int(m, "max_tokens")? {
        Some(v) => Some(v),
        None => opt_int(m, "max_completion_tokens")?,
    };
    Ok(match max_tokens {
        None => None,
        Some(v) if v < 1 => {
            return Err(out_of_range("max_tokens", &format!("at least 1, not {v}")));
        }
        Some(v) => Some(usize::try_from(v).unwrap_or(usize::MAX).min(n_ctx)),
    })
}

/// The sampling fields, each checked against its range.
fn parse_sampler(
    m: &Map<String, Value>,
    n_ctx: usize,
    n_vocab: usize,
) -> Result<SamplerConfig, ApiError> {
    let d = SamplerConfig::default();
    let temperature = opt_f32(m, "temperature")?.unwrap_or(d.temperature);
    if !(temperature.is_finite() && (0.0..=100.0).contains(&temperature)) {
        return Err(out_of_range("temperature", "between 0 and 100"));
    }
    let top_p = opt_f32(m, "top_p")?.unwrap_or(d.top_p);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(out_of_range("top_p", "in (0, 1]"));
    }
    let min_p = opt_f32(m, "min_p")?.unwrap_or(d.min_p);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(out_of_range("min_p", "in [0, 1]"));
    }
    let top_k = match opt_int(m, "top_k")? {
        None => d.top_k,
        Some(v) if v < 0 => return Err(out_of_range("top_k", "0 (off) or more")),
        Some(v) => usize::try_from(v).unwrap_or(usize::MAX),
    };
    // Any integer: negative seeds are taken as their two's complement, except -1, which means
    // "random" as in llama-server (and as `/props` reports the default). Without one, a fresh
    // seed per request ("regenerate" gives another answer); the response reports it.
    let seed = match opt_int(m, "seed")? {
        None | Some(-1) => random_seed(),
        Some(s) => s as u64,
    };
    // OpenAI's two penalties take the same range.
    let openai_penalty = |name: &str, default: f32| {
        opt_penalty(
            m,
            name,
            default,
            |v| (-2.0..=2.0).contains(&v),
            "between -2 and 2",
        )
    };
    let presence_penalty = openai_penalty("presence_penalty", d.presence_penalty)?;
    let frequency_penalty = openai_penalty("frequency_penalty", d.frequency_penalty)?;
    let repeat_penalty = opt_penalty(
        m,
        "repeat_penalty",
        d.repeat_penalty,
        |v| v > 0.0,
        "a number above 0 (1: off)",
    )?;
    let repeat_last_n = match opt_int(m, "repeat_last_n")? {
        None => d.repeat_last_n,
        Some(-1) => n_ctx,
        Some(v) if v >= 0 => usize::try_from(v).unwrap_or(usize::MAX),
        Some(_) => {
            return Err(out_of_range(
                "repeat_last_n",
                "0 (off), a token count, or -1 (the context)",
            ));
        }
    };
    Ok(SamplerConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        seed,
        repeat_penalty,
        repeat_last_n,
        presence_penalty,
        frequency_penalty,
        logit_bias: parse_logit_bias(m, n_vocab)?,
    })
}

/// A seed no other request is likely to get: the standard library's per-process random hash
/// keys over a counter and the clock (no generator crate needed for this). 53 bits, so that
/// a JavaScript client can send the reported seed back exactly.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() >> 11
}

/// The `reasoning_effort` values OpenAI defines.
const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high"];

/// The variables a chat request passes to its template beyond the messages and tools:
/// `chat_template_kwargs` (an object, as llama-server and vLLM take it: `enable_thinking`
/// for Qwen3 and Qwen3.5), and `reasoning_effort` as the template variable of that name
/// (gpt-oss-style templates read it); `"none"` also sets `enable_thinking: false`, the
/// Qwen templates' only knob, unless the kwargs set it.
pub fn parse_template_kwargs(m: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let mut kw = match field(m, "chat_template_kwargs") {
        None => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => return Err(wrong("chat_template_kwargs", "an object", v)),
    };
    match field(m, "reasoning_effort") {
        None => {}
        Some(Value::String(e)) if EFFORTS.contains(&e.as_str()) => {
            kw.entry("reasoning_effort")
                .or_insert_with(|| e.clone().into());
            if e == "none" {
                kw.entry("enable_thinking").or_insert(Value::Bool(false));
            }
        }
        Some(_) => {
            return Err(out_of_range(
                "reasoning_effort",
                "one of \"none\", \"minimal\", \"low\", \"medium\", \"high\"",
            ));
        }
    }
    Ok(kw)
}

/// `stop`: a string or an array of at most [`MAX_STOPS`] strings.
fn parse_stop(m: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    Ok(match field(m, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            if a.len() > MAX_STOPS {
                return Err(out_of_range(
                    "stop",
                    &format!("at most {MAX_STOPS} strings"),
                ));
            }
            a.iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| wrong("stop[]", "a string", v))
                })
                .collect::<Result<_, _>>()?
        }
        Some(v) => return Err(wrong("stop", "a string or an array of strings", v)),
    })
}

/// Reads `prompt`: a string, an array of token ids, or an array holding one of those.
pub fn parse_prompt(m: &Map<String, Value>, n_vocab: usize) -> Result<Prompt, ApiError> {
    let v = field(m, "prompt")
        .ok_or_else(|| ApiError::invalid("missing_field", "'prompt' is required"))?;
    let ids = |a: &[Value]| -> Result<Prompt, ApiError> {
        a.iter()
            .map(|x| match x.as_u64() {
                Some(id) if (id as usize) < n_vocab => Ok(id as u32),
                _ => Err(out_of_range(
                    "prompt",
                    &format!("a string or token ids below the vocabulary size {n_vocab}"),
                )),
            })
            .collect::<Result<Vec<u32>, _>>()
            .map(Prompt::Ids)
    };
    match v {
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(a) if a.iter().all(Value::is_number) => ids(a),
        Value::Array(a) if a.len() == 1 => match &a[0] {
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Array(inner) => ids(inner),
            other => Err(wrong(
                "prompt[0]",
                "a string or an array of token ids",
                other,
            )),
        },
        Value::Array(_) => Err(ApiError::invalid(
            "invalid_value",
            "'prompt' must be one string or one list of token ids (batches of prompts are not supported)",
        )),
        other => Err(wrong("prompt", "a string or an array of token ids", other)),
    }
}

/// Reads `messages`: a non-empty list of `{role, content}` objects; `content` is a string or a
/// list of `{"type": "text", "text": ...}` parts (joined).
pub fn parse_messages(m: &Map<String, Value>) -> Result<Vec<Message>, ApiError> {
    let v = field(m, "messages")
        .ok_or_else(|| ApiError::invalid("missing_field", "'messages' is required"))?;
    let Value::Array(list) = v else {
        return Err(wrong("messages", "an array of {role, content} objects", v));
    };
    if list.is_empty() {
        return Err(out_of_range("messages", "a non-empty array"));
    }
    list.iter()
        .enumerate()
        .map(|(i, msg)| {
            let Value::Object(o) = msg else {
                return Err(wrong(&format!("messages[{i}]"), "an object", msg));
            };
            let role = match field(o, "role") {
                Some(Value::String(r)) if !r.is_empty() => r.clone(),
                Some(v) => return Err(wrong(&format!("messages[{i}].role"), "a non-empty string", v)),
                None => {
                    return Err(ApiError::invalid(
                        "missing_field",
                        format!("messages[{i}] has no 'role'"),
                    ));
                }
            };
            let content = match field(o, "content") {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => text.push_str(t),
                            _ => {
                                return Err(ApiError::invalid(
                                    "invalid_value",
                                    format!("messages[{i}].content parts must be {{\"type\": \"text\", \"text\": ...}}"),
                                ));
                            }
                        }
                    }
                    text
                }
                Some(v) => {
                    return Err(wrong(
                        &format!("messages[{i}].content"),
                        "a string or an array of text parts",
                        v,
                    ));
                }
            };
            let opt_str = |name: &str| match field(o, name) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(wrong(&format!("messages[{i}].{name}"), "a string", v)),
            };
            Ok(Message {
                role,
                content,
                tool_calls: parse_tool_calls(o, i)?,
                tool_call_id: opt_str("tool_call_id")?,
                name: opt_str("name")?,
                reasoning_content: opt_str("reasoning_content")?,
            })
        })
        .collect()
}

/// Reads an assistant message's `tool_calls`: `[{id, type: "function", function: {name,
/// arguments}}]`, the arguments a JSON string (or an object, which is written out).
fn parse_tool_calls(o: &Map<String, Value>, i: usize) -> Result<Vec<ToolCall>, ApiError> {
    let calls = match field(o, "tool_calls") {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong(&format!("messages[{i}].tool_calls"), "an array", v)),
    };
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let at = format!("messages[{i}].tool_calls[{j}]");
            let f = c
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid("invalid_value", format!("{at} has no 'function' object"))
                })?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(
                    "invalid_value",
                    format!("{at}.function has no 'name' string"),
                )
            })?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(v @ Value::Object(_)) => v.to_string(),
                Some(v) => {
                    return Err(wrong(
                        &format!("{at}.function.arguments"),
                        "a JSON string",
                        v,
                    ));
                }
            };
            Ok(ToolCall {
                id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

/// The grammar a request constrains its output to, from `response_format` (OpenAI:
/// `{"type": "json_object"}`, `{"type": "json_schema", "json_schema": {"schema": ...}}`;
/// llama-server: `{"type": "json_object", "schema": ...}`), or llama-server's `json_schema`
/// (a schema) or `grammar` (GBNF; llguidance's Lark when it starts with `%llguidance`).
pub fn parse_grammar(m: &Map<String, Value>) -> Result<Option<Grammar>, ApiError> {
    let from_format = match field(m, "response_format") {
        None => None,
        Some(Value::Object(o)) => match field(o, "type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => Some(match field(o, "schema") {
                Some(schema) => Grammar::JsonSchema(schema.clone()),
                None => Grammar::JsonObject,
            }),
            Some("json_schema") => {
                let schema = field(o, "json_schema")
                    .and_then(|j| field(j.as_object()?, "schema"))
                    .or_else(|| field(o, "schema"))
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "invalid_value",
                            "'response_format' of type json_schema needs 'json_schema': {\"schema\": {...}}",
                        )
                    })?;
                Some(Grammar::JsonSchema(schema.clone()))
            }
            _ => {
                return Err(out_of_range(
                    "response_format.type",
                    "\"text\", \"json_object\" or \"json_schema\"",
                ));
            }
        },
        Some(v) => return Err(wrong("response_format", "an object", v)),
    };
    let from_schema = field(m, "json_schema").map(|s| Grammar::JsonSchema(s.clone()));
    let from_grammar = match field(m, "grammar") {
        None => None,
        Some(Value::String(g)) if g.trim_start().starts_with("%llguidance") => {
            Some(Grammar::Lark(g.clone()))
        }
        Some(Value::String(g)) => Some(Grammar::Gbnf(g.clone())),
        Some(v) => return Err(wrong("grammar", "a string (GBNF)", v)),
    };
    let mut given = [from_format, from_schema, from_grammar]
        .into_iter()
        .flatten();
    let first = given.next();
    if given.next().is_some() {
        return Err(ApiError::invalid(
            "invalid_value",
            "give only one of 'response_format', 'json_schema' and 'grammar'",
        ));
    }
    Ok(first)
}

/// Which tool calls a request allows (`tool_choice`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// `none`: the tools are shown, the output is text.
    None,
    /// `auto` (the default with tools): the model may call them.
    Auto,
    /// `required`: the output is one or more calls.
    Required,
    /// `{"type": "function", "function": {"name"}}`: the output is a call of this one.
    Named(String),
}

/// A tool the model may call: its name and its parameters' schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// `function.name`.
    pub name: String,
    /// `function.parameters` (`{"type": "object"}` when absent).
    pub parameters: Value,
}

/// The tools of a chat request.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    /// The `tools` objects as given (what the chat template renders).
    pub raw: Vec<Value>,
    /// Their names and schemas.
    pub list: Vec<Tool>,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): more than one call allowed.
    pub parallel: bool,
}

/// Most tools one request may give.
pub const MAX_TOOLS: usize = 128;

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`; `None` when there are no tools.
pub fn parse_tools(m: &Map<String, Value>) -> Result<Option<Tools>, ApiError> {
    let raw = match field(m, "tools") {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_TOOLS => a.clone(),
        Some(Value::Array(_)) => {
            return Err(out_of_range("tools", &format!("at most {MAX_TOOLS} tools")));
        }
        Some(v) => {
            return Err(wrong(
                "tools",
                "an array of {type: function, function} objects",
                v,
            ));
        }
    };
    let list = raw
        .iter()
        .enumerate()
        .map(|(i, t)| parse_tool(i, t))
        .collect::<Result<Vec<_>, _>>()?;
    let choice = parse_tool_choice(m, &list)?;
    if list.is_empty() {
        return match choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            _ => Err(ApiError::invalid(
                "invalid_value",
                "'tool_choice' needs 'tools'",
            )),
        };
    }
    Ok(Some(Tools {
        raw,
        list,
        choice,
        parallel: opt_bool(m, "parallel_tool_calls")?.unwrap_or(true),
    }))
}

/// `tools[i]`: a `{type: function, function: {name, parameters}}` object.
fn parse_tool(i: usize, t: &Value) -> Result<Tool, ApiError> {
    let f = t
        .get("function")
        .and_then(Value::as_object)
        .filter(|_| t.get("type").and_then(Value::as_str).unwrap_or("function") == "function")
        .ok_or_else(|| {
            ApiError::invalid(
                "invalid_value",
                format!("tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}"),
            )
        })?;
    let name = match f.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        _ => {
            return Err(ApiError::invalid(
                "invalid_value",
                format!("tools[{i}].function needs a non-empty 'name'"),
            ));
        }
    };
    let parameters = match field(f, "parameters") {
        None => json!({"type": "object"}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(v) => {
            return Err(wrong(
                &format!("tools[{i}].function.parameters"),
                "a JSON schema object",
                v,
            ));
        }
    };
    Ok(Tool { name, parameters })
}

/// `tool_choice` (default `auto` with tools, `none` without); a named function must be in `list`.
fn parse_tool_choice(m: &Map<String, Value>, list: &[Tool]) -> Result<ToolChoice, ApiError> {
    Ok(match field(m, "tool_choice") {
        None if list.is_empty() => ToolChoice::None,
        None => ToolChoice::Auto,
        Some(Value::String(c)) => match c.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => {
                return Err(out_of_range(
                    "tool_choice",
                    "\"none\", \"auto\", \"required\" or a function",
                ));
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid("invalid_value", "'tool_choice' names no function: {\"type\": \"function\", \"function\": {\"name\": ...}}"))?;
            if !list.iter().any(|t| t.name == name) {
                return Err(out_of_range(
                    "tool_choice",
                    &format!("a function of 'tools', not {name:?}"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
        Some(v) => return Err(wrong("tool_choice", "a string or an object", v)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys the parsers read, so that random requests reach deep into them.
    const KEYS: &[&str] = &[
        "prompt",
        "messages",
        "role",
        "content",
        "type",
        "text",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "n",
        "stream",
        "stream_options",
        "include_usage",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "presence_penalty",
        "frequency_penalty",
        "repeat_penalty",
        "repeat_last_n",
        "response_format",
        "json_schema",
        "schema",
        "grammar",
        "tools",
        "tool_choice",
        "function",
        "name",
        "parameters",
        "arguments",
        "tool_calls",
        "tool_call_id",
        "id",
        "parallel_tool_calls",
        "chat_template_kwargs",
        "reasoning_effort",
        "reasoning_content",
        "0",
        "7",
    ];

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<f64>().prop_map(|f| json!(f)),
            prop::sample::select(KEYS).prop_map(|k| json!(k)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever the request, every parser answers `Ok` or a 400 naming something.
        #[test]
        fn random_requests_get_answers_not_panics(
            fields in prop::collection::vec((prop::sample::select(KEYS), any_json()), 0..12)
        ) {
            let v: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let body = serde_json::to_vec(&v).unwrap();
            let m = parse_object(&body).unwrap();
            for kind in [Kind::Text, Kind::Chat] {
                if let Err(e) = parse_common(&m, kind, 64, 100) {
                    prop_assert_eq!(e.status, StatusCode::BAD_REQUEST);
                    prop_assert!(!e.message.is_empty());
                }
            }
            let _ = parse_prompt(&m, 100);
            let _ = parse_messages(&m);
            let _ = parse_template_kwargs(&m);
            if let Ok(Some(t)) = parse_tools(&m) {
                use crate::runner::server::tool_format::ToolFormat;
                for f in [ToolFormat::Hermes, ToolFormat::QwenXml, ToolFormat::Llama3, ToolFormat::Mistral] {
                    let _ = f.grammar(&t, false, &Default::default());
                }
            }
        }
    }

    fn obj(s: &str) -> Map<String, Value> {
        parse_object(s.as_bytes()).unwrap()
    }

    fn common(s: &str) -> Result<Common, ApiError> {
        parse_common(&obj(s), Kind::Text, 64, 100)
    }

    fn chat_common(s: &str) -> Result<Common, ApiError> {
        parse_common(&obj(s), Kind::Chat, 64, 100)
    }

    /// Asserts that `parse` refuses each body of `cases` with a 400 whose message holds the
    /// case's name (the field at fault).
    fn rejects<T: std::fmt::Debug>(
        parse: impl Fn(&str) -> Result<T, ApiError>,
        cases: &[(&str, &str)],
    ) {
        for &(body, name) in cases {
            let e = parse(body).unwrap_err();
            assert!(e.message.contains(name), "{name}: {}", e.message);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
        }
    }

    #[test]
    fn sampling_fields_are_read_and_their_ranges_checked() {
        let c = common(
            r#"{"n": 3, "presence_penalty": 0.5, "frequency_penalty": -2, "repeat_penalty": 1.3,
                "repeat_last_n": -1, "logit_bias": {"7": -100, " 9": 2.5}, "logprobs": 4}"#,
        )
        .unwrap();
        assert_eq!(c.n, 3);
        assert_eq!(c.logprobs, Some(4));
        let s = &c.sampler;
        assert_eq!(
            (s.presence_penalty, s.frequency_penalty, s.repeat_penalty),
            (0.5, -2.0, 1.3)
        );
        let last_n = |v: &str| {
            parse_common(
                &obj(&format!(r#"{{"repeat_last_n": {v}}}"#)),
                Kind::Text,
                32,
                100,
            )
            .unwrap()
            .sampler
            .repeat_last_n
        };
        assert_eq!((last_n("-1"), last_n("5"), last_n("0")), (32, 5, 0));
        let mut bias = s.logit_bias.clone();
        bias.sort_by_key(|b| b.0);
        assert_eq!(bias, [(7, -100.0), (9, 2.5)]);
        let d = common("{}").unwrap();
        assert_eq!((d.n, d.logprobs), (1, None));
        assert!(d.sampler.logit_bias.is_empty());
        rejects(
            common,
            &[
                (r#"{"n": 0}"#, "'n'"),
                (r#"{"n": 9}"#, "'n'"),
                (r#"{"presence_penalty": 2.5}"#, "presence_penalty"),
                (r#"{"frequency_penalty": "x"}"#, "frequency_penalty"),
                (r#"{"repeat_penalty": 0}"#, "repeat_penalty"),
                (r#"{"repeat_last_n": -2}"#, "repeat_last_n"),
                (r#"{"logit_bias": {"100": 1}}"#, "logit_bias"),
                (r#"{"logit_bias": {"a": 1}}"#, "logit_bias"),
                (r#"{"logit_bias": {"1": 101}}"#, "logit_bias"),
                (r#"{"logit_bias": {"1": "x"}}"#, "logit_bias"),
                (r#"{"logit_bias": [1]}"#, "logit_bias"),
                (r#"{"logprobs": 21}"#, "logprobs"),
                (r#"{"logprobs": true}"#, "logprobs"),
            ],
        );
        // Chat: a boolean and `top_logprobs`.
        assert_eq!(
            chat_common(r#"{"logprobs": true}"#).unwrap().logprobs,
            Some(0)
        );
        assert_eq!(
            chat_common(r#"{"logprobs": true, "top_logprobs": 5}"#)
                .unwrap()
                .logprobs,
            Some(5)
        );
        assert_eq!(
            chat_common(r#"{"logprobs": false}"#).unwrap().logprobs,
            None
        );
        rejects(
            chat_common,
            &[
                (r#"{"top_logprobs": 2}"#, "top_logprobs"),
                (r#"{"logprobs": true, "top_logprobs": 30}"#, "top_logprobs"),
                (r#"{"logprobs": 3}"#, "logprobs"),
            ],
        );
    }

    #[test]
    fn fields_are_checked_with_messages_naming_them() {
        assert!(parse_object(b"{").is_err());
        assert!(parse_object(b"[1]").is_err());
        let e = common(r#"{"max_tokens": "ten"}"#).unwrap_err();
        assert!(e.message.contains("max_tokens"), "{}", e.message);
        assert!(common(r#"{"max_tokens": -1}"#).is_err());
        assert_eq!(
            common(r#"{"max_tokens": 65}"#).unwrap().max_tokens,
            Some(64)
        );
        assert!(common(r#"{"max_tokens": 1e30}"#).is_err());
        assert!(common(r#"{"temperature": -0.5}"#).is_err());
        assert!(common(r#"{"stop": 3}"#).is_err());
        assert!(common(r#"{"n": 12}"#).is_err());
        let c =
            common(r#"{"max_tokens": 64, "stop": ["a", "b"], "seed": -2, "top_k": null, "x": {}}"#)
                .unwrap();
        assert_eq!(c.max_tokens, Some(64));
        assert_eq!(c.stop, ["a", "b"]);
        assert_eq!(c.sampler.seed, u64::MAX - 1);
        // -1 is llama-server's "random": two requests draw two seeds.
        let random = |_| common(r#"{"seed": -1}"#).unwrap().sampler.seed;
        assert_ne!(random(0), random(1));
        assert_eq!(c.sampler.top_k, SamplerConfig::default().top_k);
    }

    #[test]
    fn grammar_fields_take_openai_and_llama_server_shapes() {
        let g = |s: &str| parse_grammar(&obj(s));
        assert_eq!(g("{}").unwrap(), None);
        assert_eq!(g(r#"{"response_format": {"type": "text"}}"#).unwrap(), None);
        assert_eq!(
            g(r#"{"response_format": {"type": "json_object"}}"#).unwrap(),
            Some(Grammar::JsonObject)
        );
        let schema = json!({"type": "integer"});
        for body in [
            r#"{"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}}"#,
            r#"{"response_format": {"type": "json_object", "schema": {"type": "integer"}}}"#,
            r#"{"json_schema": {"type": "integer"}}"#,
        ] {
            assert_eq!(
                g(body).unwrap(),
                Some(Grammar::JsonSchema(schema.clone())),
                "{body}"
            );
        }
        assert_eq!(
            g(r#"{"grammar": "root ::= \"a\""}"#).unwrap(),
            Some(Grammar::Gbnf(r#"root ::= "a""#.into()))
        );
        assert!(matches!(
            g(r#"{"grammar": "%llguidance {}\nstart: \"a\""}"#).unwrap(),
            Some(Grammar::Lark(_))
        ));
        rejects(
            g,
            &[
                (r#"{"response_format": "json"}"#, "response_format"),
                (
                    r#"{"response_format": {"type": "xml"}}"#,
                    "response_format.type",
                ),
                (
                    r#"{"response_format": {"type": "json_schema"}}"#,
                    "json_schema",
                ),
                (r#"{"grammar": 1}"#, "grammar"),
                (
                    r#"{"grammar": "root ::= \"a\"", "json_schema": {}}"#,
                    "only one",
                ),
            ],
        );
    }

    #[test]
    fn tools_and_tool_choice_are_checked() {
        let t = |s: &str| parse_tools(&obj(s));
        let f =
            r#"{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}"#;
        assert_eq!(t("{}").unwrap(), None);
        let tools = t(&format!(r#"{{"tools": [{f}]}}"#)).unwrap().unwrap();
        assert_eq!((tools.choice, tools.parallel), (ToolChoice::Auto, true));
        assert_eq!(tools.list[0].name, "f");
        let named = t(&format!(
            r#"{{"tools": [{f}], "tool_choice": {{"type": "function", "function": {{"name": "f"}}}}, "parallel_tool_calls": false}}"#
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            (named.choice, named.parallel),
            (ToolChoice::Named("f".into()), false)
        );
        rejects(
            t,
            &[
                (
                    &format!(r#"{{"tools": [{f}], "tool_choice": "sometimes"}}"#),
                    "tool_choice",
                ),
                (
                    &format!(
                        r#"{{"tools": [{f}], "tool_choice": {{"function": {{"name": "g"}}}}}}"#
                    ),
                    "tool_choice",
                ),
                (
                    r#"{"tools": [{"type": "function", "function": {}}]}"#,
                    "tools[0]",
                ),
                (r#"{"tools": [{"type": "retrieval"}]}"#, "tools[0]"),
                (r#"{"tools": {}}"#, "tools"),
                (r#"{"tool_choice": "required"}"#, "needs 'tools'"),
            ],
        );
        // Assistant tool calls and tool answers are read from the messages.
        let m = parse_messages(&obj(
            r#"{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}"#,
        ))
        .unwrap();
        assert_eq!(
            m[0].tool_calls,
            [ToolCall {
                id: "c1".into(),
                name: "f".into(),
                arguments: r#"{"x":1}"#.into()
            }]
        );
        assert_eq!(m[1].tool_call_id.as_deref(), Some("c1"));
        assert!(
            parse_messages(&obj(
                r#"{"messages": [{"role": "assistant", "tool_calls": [{}]}]}"#
            ))
            .is_err()
        );
    }

    #[test]
    fn template_kwargs_and_reasoning_effort() {
        let k = |s: &str| parse_template_kwargs(&obj(s));
        assert!(k("{}").unwrap().is_empty());
        let kw = k(r#"{"chat_template_kwargs": {"enable_thinking": false, "x": 1}}"#).unwrap();
        assert_eq!(kw["enable_thinking"], json!(false));
        let kw = k(r#"{"reasoning_effort": "none"}"#).unwrap();
        assert_eq!(
            (&kw["enable_thinking"], &kw["reasoning_effort"]),
            (&json!(false), &json!("none"))
        );
        let kw =
            k(r#"{"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": true}}"#)
                .unwrap();
        assert_eq!(kw["enable_thinking"], json!(true));
        rejects(
            k,
            &[
                (r#"{"chat_template_kwargs": [1]}"#, "chat_template_kwargs"),
                (r#"{"reasoning_effort": "max"}"#, "reasoning_effort"),
            ],
        );
        // No seed: a different one each time.
        assert_ne!(
            common("{}").unwrap().sampler.seed,
            common("{}").unwrap().sampler.seed
        );
    }

    #[test]
    fn prompts_and_messages_take_the_openai_shapes() {
        let p = |s: &str| parse_prompt(&obj(s), 100);
        assert_eq!(p(r#"{"prompt": "hi"}"#).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(p(r#"{"prompt": [1, 2]}"#).unwrap(), Prompt::Ids(vec![1, 2]));
        assert_eq!(p(r#"{"prompt": [[3]]}"#).unwrap(), Prompt::Ids(vec![3]));
        assert_eq!(p(r#"{"prompt": ["x"]}"#).unwrap(), Prompt::Text("x".into()));
        assert!(p(r#"{"prompt": [100]}"#).is_err());
        assert!(p(r#"{"prompt": ["a", "b"]}"#).is_err());
        assert!(p(r#"{}"#).is_err());
        let m = |s: &str| parse_messages(&obj(s));
        let ok = m(r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}"#).unwrap();
        assert_eq!(
            (ok[0].role.as_str(), ok[0].content.as_str()),
            ("user", "ab")
        );
        assert!(m(r#"{"messages": "hi"}"#).is_err());
        assert!(m(r#"{"messages": []}"#).is_err());
        assert!(m(r#"{"messages": [{"content": "x"}]}"#).is_err());
        assert!(m(r#"{"messages": [{"role": "user", "content": 5}]}"#).is_err());
        assert!(m(r#"{"messages": ["hi"]}"#).is_err());
    }
}
