//! Tool calls in the syntax the model's chat template teaches, as llama.cpp's `common/chat`
//! tells them apart: [`ToolFormat::detect`] reads the template, [`ToolFormat::grammar`] builds
//! the grammar of an answer that must call (`tool_choice` `required` or a named function),
//! and [`CallSplitter`] splits the model's text into content and calls as it streams.
//!
//! | format | a call |
//! |---|---|
//! | Hermes (Qwen3, Ternary Bonsai 1.7B-8B) | `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` |
//! | Qwen XML (Qwen3.5 / Bonsai 2 27B, Qwen3-Coder) | `<tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>` |
//! | Llama 3.x | `{"name": ..., "parameters": {...}}` as the whole answer, or after `<|python_tag|>` |
//! | Llama 3.1 built-in tools | `<|python_tag|>brave_search.call(query="...")`, or code after `<|python_tag|>` |
//! | Mistral | `[TOOL_CALLS]NAME[ARGS]{...}` (or the older `[TOOL_CALLS][{"name", "arguments"}]`) |
//!
//! A call whose function is not one of the request's `tools`, or whose syntax is broken, stays
//! in the content as the model wrote it.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::api::{Tool, ToolChoice, Tools};
use crate::runner::constrain::{Grammar, GrammarError, lark_json};

/// Most calls one constrained answer may make (with `parallel_tool_calls`).
pub const MAX_CALLS: usize = 4;

/// Longest string parameter a constrained Qwen XML call may write when its schema sets no
/// `maxLength` (its value is free text, so only a bound ends a model that never closes it).
const XML_STRING_MAX: u64 = 128;

const TOOL_CALL_OPEN: &str = "<tool_call>";
const TOOL_CALL_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_OPEN: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";

/// A tool-call syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// JSON in `<tool_call>` blocks (Qwen3, Hermes 2 Pro, and the default).
    Hermes,
    /// `<function=...>` / `<parameter=...>` in `<tool_call>` blocks (Qwen3.5, Qwen3-Coder).
    QwenXml,
    /// Llama 3.x: one JSON object `{"name", "parameters"}`.
    Llama3,
    /// Mistral: `[TOOL_CALLS]name[ARGS]{...}`.
    Mistral,
}

impl ToolFormat {
    /// The syntax `template` (a chat template's source) teaches, by the markers it writes;
    /// Hermes when it names none (what Qwen-family GGUFs without tools in their template
    /// were served with before).
    pub fn detect(template: &str) -> ToolFormat {
        if template.contains("<function=") && template.contains("<parameter=") {
            ToolFormat::QwenXml
        } else if template.contains(MISTRAL_OPEN) {
            ToolFormat::Mistral
        } else if template.contains("<|start_header_id|>ipython<|end_header_id|>")
            || template.contains(PYTHON_TAG)
        {
            ToolFormat::Llama3
        } else {
            ToolFormat::Hermes
        }
    }

    /// The format's name, as `/props` reports it.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::QwenXml => "qwen-xml",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral => "mistral",
        }
    }

    /// The markers of this syntax (and of think blocks) that are single control tokens of
    /// `tok`'s vocabulary. Qwen's markers are user-defined tokens, which are text anyway.
    pub fn control_markers(self, tok: &crate::runner::Tokenizer) -> ControlMarkers {
        let markers: &[&'static str] = match self {
            ToolFormat::Hermes | ToolFormat::QwenXml => &[TOOL_CALL_OPEN, TOOL_CALL_CLOSE],
            ToolFormat::Llama3 => &[PYTHON_TAG],
            ToolFormat::Mistral => &[MISTRAL_OPEN, MISTRAL_ARGS, MISTRAL_CALL_ID],
        };
        let named: Vec<(&'static str, u32)> = markers
            .iter()
            .chain(&["<think>", "</think>"])
            .filter_map(|&m| match tok.encode(m, false, true)[..] {
                [id] if tok.token_to_piece(id, false).is_empty() => Some((m, id)),
                _ => None,
            })
            .collect();
        ControlMarkers {
            ids: named.iter().map(|&(_, id)| id).collect(),
            named,
        }
    }

    /// The tools of `tools` that Llama 3.1 knows by name (`builtin_tools` of its template):
    /// the search tools with a `query` parameter, the code tools with `code`. Other formats
    /// have none.
    pub fn builtin_tools(self, tools: &[Tool]) -> Vec<String> {
        match self {
            ToolFormat::Llama3 => tools
                .iter()
                .filter(|t| builtin_param(t).is_some())
                .map(|t| t.name.clone())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// What the template reads besides the messages and tools, as llama.cpp passes them:
    /// Llama 3.x gets today's `date_string`, its tools in the system turn
    /// (`tools_in_user_message: false`) and, when the request lists built-in tools,
    /// `builtin_tools` (the template then announces `Environment: ipython` and renders
    /// earlier built-in calls in their own syntax). A client's `chat_template_kwargs` win.
    pub fn template_kwargs(self, tools: &[Tool], kwargs: &mut Map<String, Value>, now: u64) {
        if self != ToolFormat::Llama3 {
            return;
        }
        let builtin = self.builtin_tools(tools);
        if !builtin.is_empty() {
            kwargs
                .entry("builtin_tools")
                .or_insert_with(|| json!(builtin));
        }
        kwargs
            .entry("date_string")
            .or_insert_with(|| json!(crate::runner::chat::strftime_utc("%d %b %Y", now)));
        kwargs
            .entry("tools_in_user_message")
            .or_insert(Value::Bool(false));
    }

    /// The id of call `k` of choice `index` of response `response`. Mistral's template
    /// refuses ids that are not 9 characters long, so its ids are 9 alphanumerics.
    pub fn call_id(self, response: &str, index: usize, k: usize) -> String {
        match self {
            ToolFormat::Mistral => {
                // FNV-1a of the long id, written in base 36: unique enough within a
                // conversation, and the same for the same response.
                let long = format!("{response}_{index}_{k}");
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in long.bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
                const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
                (0..9)
                    .map(|_| {
                        let d = DIGITS[(h % 36) as usize] as char;
                        h /= 36;
                        d
                    })
                    .collect()
            }
            _ => format!("call_{response}_{index}_{k}"),
        }
    }

    /// The grammar of an answer that must call tools (`required`: any of them, one or more
    /// when `parallel` and the format allows it; a named function: that one, once), or `None`
    /// when the model may answer freely. `in_think`: the prompt left the model inside a think
    /// block (Qwen3.5's generation prompt opens one), which the answer closes first.
    /// `control`: the markers the grammar writes as control tokens.
    pub fn grammar(
        self,
        tools: &Tools,
        in_think: bool,
        control: &ControlMarkers,
    ) -> Result<Option<Grammar>, GrammarError> {
        let (chosen, many): (Vec<&Tool>, bool) = match &tools.choice {
            ToolChoice::None | ToolChoice::Auto => return Ok(None),
            ToolChoice::Named(n) => (tools.list.iter().filter(|t| &t.name == n).collect(), false),
            ToolChoice::Required => (tools.list.iter().collect(), tools.parallel),
        };
        if chosen.is_empty() {
            return Err(GrammarError("tool_choice names no listed tool".into()));
        }
        // Llama 3.1's template renders one call per turn, and refuses more.
        let many = many && self != ToolFormat::Llama3;
        let call = match self {
            ToolFormat::Hermes => {
                let any: Vec<Value> = chosen
                    .iter()
                    .map(|t| json_call(&t.name, "arguments", &t.parameters))
                    .collect();
                format!(
                    "{} \"\\n\" {} \"\\n\" {}",
                    control.lark(TOOL_CALL_OPEN),
                    lark_json(&json!({"anyOf": any}))?,
                    control.lark(TOOL_CALL_CLOSE)
                )
            }
            ToolFormat::Llama3 => {
                let (builtin, custom): (Vec<&Tool>, Vec<&Tool>) =
                    chosen.iter().partition(|t| builtin_param(t).is_some());
                let mut alts = Vec::new();
                if !custom.is_empty() {
                    let any: Vec<Value> = custom
                        .iter()
                        .map(|t| json_call(&t.name, "parameters", &t.parameters))
                        .collect();
                    alts.push(lark_json(&json!({"anyOf": any}))?);
                }
                for t in builtin {
                    let param = builtin_param(t).unwrap_or_default();
                    let schema = &t.parameters["properties"][param];
                    alts.push(format!(
                        "({} {} {} \")\")",
                        control.lark(PYTHON_TAG),
                        lark_str(&format!("{}.call({param}=", t.name)),
                        lark_json(schema)?
                    ));
                }
                alts.join(" | ")
            }
            ToolFormat::QwenXml => {
                let alts = chosen
                    .iter()
                    .map(|t| xml_call_rule(t))
                    .collect::<Result<Vec<_>, _>>()?;
                format!(
                    "{} \"\\n\" ({}) {}",
                    control.lark(TOOL_CALL_OPEN),
                    alts.join(" | "),
                    control.lark(TOOL_CALL_CLOSE)
                )
            }
            ToolFormat::Mistral => {
                let alts = chosen
                    .iter()
                    .map(|t| {
                        Ok(format!(
                            "({} {} {})",
                            lark_str(&t.name),
                            control.lark(MISTRAL_ARGS),
                            lark_json(&t.parameters)?
                        ))
                    })
                    .collect::<Result<Vec<_>, GrammarError>>()?;
                format!("{} ({})", control.lark(MISTRAL_OPEN), alts.join(" | "))
            }
        };
        let sep = if self == ToolFormat::Mistral {
            ""
        } else {
            "\"\\n\" "
        };
        let more = if many {
            format!(" ({sep}call){{0,{}}}", MAX_CALLS - 1)
        } else {
            String::new()
        };
        // A forced call leaves no room for thinking: the block the prompt opened is closed
        // at once, as the template itself writes it with `enable_thinking: false`.
        let close = if in_think {
            format!("{} \"\\n\\n\" ", control.lark("</think>"))
        } else {
            String::new()
        };
        Ok(Some(Grammar::Lark(format!(
            "start: {close}call{more}\ncall: {call}\n"
        ))))
    }
}

/// The markers of a tool-call syntax that the vocabulary has as single control tokens.
/// Decoded text leaves control tokens out, so a parsed answer renders these (llama.cpp's
/// "preserved tokens"); a grammar writes them as the token, which text never matches.
#[derive(Clone, Debug, Default)]
pub struct ControlMarkers {
    named: Vec<(&'static str, u32)>,
    ids: Arc<[u32]>,
}

impl ControlMarkers {
    /// The tokens, for the detokenizer to render.
    pub fn ids(&self) -> Arc<[u32]> {
        self.ids.clone()
    }

    /// `marker` in a Lark grammar: its control token, or its text.
    fn lark(&self, marker: &str) -> String {
        match self.named.iter().find(|(m, _)| *m == marker) {
            Some((_, id)) => format!("<[{id}]>"),
            None => lark_str(marker),
        }
    }
}

/// The parameter of `t` when it is one of Llama 3.1's built-in tools, as llama.cpp tells
/// them: `wolfram_alpha`, `web_search` or `brave_search` with a `query`, `python` or
/// `code_interpreter` with `code`.
fn builtin_param(t: &Tool) -> Option<&'static str> {
    let param = match t.name.as_str() {
        "wolfram_alpha" | "web_search" | "brave_search" => "query",
        "python" | "code_interpreter" => "code",
        _ => return None,
    };
    t.parameters
        .get("properties")
        .and_then(|p| p.get(param))
        .map(|_| param)
}

/// The JSON schema of a call `{"name": name, key: parameters}`.
fn json_call(name: &str, key: &str, parameters: &Value) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": name}, key: parameters},
        "required": ["name", key],
        "additionalProperties": false,
    })
}

/// `s` as a Lark string literal.
fn lark_str(s: &str) -> String {
    // A JSON string literal is a valid Lark one (the same escapes).
    Value::String(s.to_string()).to_string()
}

/// The Lark expression of one Qwen XML call of `t`: its required parameters in order, each
/// value free text for a string parameter (bounded) or a JSON document of its schema.
fn xml_call_rule(t: &Tool) -> Result<String, GrammarError> {
    let props = t.parameters.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = t
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut rule = lark_str(&format!("<function={}>\n", t.name));
    for name in required {
        let schema = props
            .and_then(|p| p.get(name))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let value = if is_string_schema(&schema) {
            match schema.get("enum").and_then(Value::as_array) {
                Some(e) if !e.is_empty() && e.iter().all(Value::is_string) => {
                    let alts: Vec<String> = e
                        .iter()
                        .map(|v| lark_str(v.as_str().unwrap_or_default()))
                        .collect();
                    format!("({})", alts.join(" | "))
                }
                _ => {
                    let max = schema
                        .get("maxLength")
                        .and_then(Value::as_u64)
                        .unwrap_or(XML_STRING_MAX);
                    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
                    // No `<` or newline: the value cannot end its own element early.
                    format!("/[^<\\n]{{{},{}}}/", min.min(max), max)
                }
            }
        } else {
            lark_json(&schema)?
        };
        let escaped = lark_str(name);
        rule.push_str(&format!(
            " \"<parameter=\" {escaped} \">\\n\" {value} \"\\n</parameter>\\n\""
        ));
    }
    rule.push_str(" \"</function>\\n\"");
    Ok(format!("({rule})"))
}

/// Whether a parameter schema takes strings only (its value is written raw in Qwen XML).
fn is_string_schema(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        None => schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_string)),
        _ => false,
    }
}

/// A piece of the model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text for `content`.
    Content(String),
    /// Text for `reasoning_content` (see [`super::reasoning`]).
    Reasoning(String),
    /// A complete call of one of the request's tools.
    Call {
        /// The function.
        name: String,
        /// Its arguments as a JSON document.
        arguments: String,
    },
}

/// What the text after a call's opening marker holds.
enum Parsed {
    /// Not enough yet.
    Wait,
    /// Calls, then `used` bytes consumed.
    Calls(Vec<Piece>, usize),
    /// Not a call: the marker and `used` bytes are content.
    NotACall(usize),
}

/// Splits streamed text into content and calls: text that may be the start of a call is
/// held back until it is known not to be one.
pub struct CallSplitter {
    format: ToolFormat,
    tools: Arc<[Tool]>,
    buf: String,
    /// The opening marker of the call being read, when inside one.
    open: Option<&'static str>,
    /// Nothing but blanks seen yet (a Llama 3 call is the whole answer).
    at_start: bool,
    /// How far the open call has been read, so a call that never closes is not parsed
    /// again from its start on every piece (that was quadratic in its length).
    gate: ParseGate,
}

/// Says when the text of an open call is worth parsing again: once its closing tag or the
/// close of its outermost JSON bracket has arrived, or (to find text that is not JSON early)
/// once it has grown by an eighth since the last parse. Each byte is scanned once, and the
/// parses' lengths grow geometrically, so reading a call costs time linear in its length.
#[derive(Default)]
struct ParseGate {
    /// Bytes of the call's text scanned so far.
    scanned: usize,
    /// Length of the text at the last parse.
    parsed: usize,
    /// JSON bracket depth outside strings, and the string state, of the scanned bytes.
    depth: i64,
    in_string: bool,
    escaped: bool,
    /// Bytes handed to the parser in all (what the gate bounds).
    parsed_total: usize,
}

impl ParseGate {
    fn worth_parsing(&mut self, format: ToolFormat, s: &str) -> bool {
        let new = &s.as_bytes()[self.scanned.min(s.len())..];
        let closed = match format {
            ToolFormat::Hermes | ToolFormat::QwenXml => {
                // The tag may have begun in the bytes scanned before.
                let from = self.scanned.saturating_sub(TOOL_CALL_CLOSE.len() - 1);
                s.as_bytes()[from..]
                    .windows(TOOL_CALL_CLOSE.len())
                    .any(|w| w == TOOL_CALL_CLOSE.as_bytes())
            }
            ToolFormat::Llama3 | ToolFormat::Mistral => {
                let mut closed = false;
                for &b in new {
                    match (self.in_string, self.escaped, b) {
                        (true, true, _) => self.escaped = false,
                        (true, false, b'\\') => self.escaped = true,
                        (true, false, b'"') => self.in_string = false,
                        (false, _, b'"') => self.in_string = true,
                        // Parentheses close Llama 3.1's built-in calls.
                        (false, _, b'{' | b'[' | b'(') => self.depth += 1,
                        (false, _, b'}' | b']' | b')') => {
                            self.depth -= 1;
                            closed |= self.depth <= 0;
                        }
                        _ => {}
                    }
                }
                closed
            }
        };
        self.scanned = s.len();
        let grown = s.len() >= self.parsed + (self.parsed / 8).max(64);
        if closed || grown {
            self.parsed = s.len();
            self.parsed_total += s.len();
        }
        closed || grown
    }
}

impl CallSplitter {
    /// A splitter of `format`'s calls of `tools`.
    pub fn new(format: ToolFormat, tools: Arc<[Tool]>) -> CallSplitter {
        CallSplitter {
            format,
            tools,
            buf: String::new(),
            open: None,
            at_start: true,
            gate: ParseGate::default(),
        }
    }

    /// The markers that open a call anywhere in the text.
    fn markers(&self) -> &'static [&'static str] {
        match self.format {
            ToolFormat::Hermes | ToolFormat::QwenXml => &[TOOL_CALL_OPEN],
            ToolFormat::Llama3 => &[PYTHON_TAG],
            ToolFormat::Mistral => &[MISTRAL_OPEN],
        }
    }

    /// Takes the next text; appends what is now known to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.buf.push_str(text);
        self.advance(false, out);
    }

    /// The end of the text: what is held back is content (an unfinished call included).
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        self.advance(true, out);
        let rest = std::mem::take(&mut self.buf);
        let rest = match self.open.take() {
            Some(m) => format!("{m}{rest}"),
            None => rest,
        };
        if !rest.is_empty() {
            out.push(Piece::Content(rest));
        }
    }

    fn content(&mut self, upto: usize, out: &mut Vec<Piece>) {
        if upto > 0 {
            let c: String = self.buf.drain(..upto).collect();
            if !c.trim().is_empty() {
                self.at_start = false;
            }
            out.push(Piece::Content(c));
        }
    }

    fn advance(&mut self, end: bool, out: &mut Vec<Piece>) {
        loop {
            if let Some(marker) = self.open {
                if !end && !self.gate.worth_parsing(self.format, &self.buf) {
                    return;
                }
                match parse_call(self.format, &self.tools, &self.buf, end) {
                    Parsed::Wait => return,
                    Parsed::Calls(calls, used) => {
                        out.extend(calls);
                        self.buf.drain(..used);
                    }
                    Parsed::NotACall(used) => {
                        let c: String = self.buf.drain(..used).collect();
                        let text = format!("{marker}{c}");
                        if !text.is_empty() {
                            out.push(Piece::Content(text));
                        }
                    }
                }
                self.open = None;
                self.gate = ParseGate::default();
                self.at_start = false;
                continue;
            }
            // A Llama 3 call is a JSON object that is the whole answer.
            if self.format == ToolFormat::Llama3 && self.at_start {
                let blanks = self.buf.len() - self.buf.trim_start().len();
                if self.buf[blanks..].starts_with('{') {
                    self.content(blanks, out);
                    self.open = Some("");
                    continue;
                }
                if blanks == self.buf.len() && !end {
                    return;
                }
            }
            let found = self
                .markers()
                .iter()
                .filter_map(|m| self.buf.find(m).map(|i| (i, *m)))
                .min();
            if let Some((i, m)) = found {
                self.content(i, out);
                self.buf.drain(..m.len());
                self.open = Some(m);
                continue;
            }
            // The markers are ASCII, so a suffix that begins one starts on a char boundary.
            let keep = if end {
                0
            } else {
                self.markers()
                    .iter()
                    .map(|m| marker_prefix_len(&self.buf, m))
                    .max()
                    .unwrap_or(0)
            };
            let emit = self.buf.len() - keep;
            self.content(emit, out);
            return;
        }
    }
}

/// Bytes at the end of `s` that begin `marker` (a call that may be starting).
fn marker_prefix_len(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.ends_with(&marker[..k]))
        .unwrap_or(0)
}

/// Reads the text after a call's marker.
fn parse_call(format: ToolFormat, tools: &[Tool], s: &str, end: bool) -> Parsed {
    let known = |name: &str| tools.iter().find(|t| t.name == name);
    let one = |name: &str, args: Option<&Value>, used: usize| -> Parsed {
        match (known(name), args) {
            (Some(_), None | Some(Value::Null)) => Parsed::Calls(vec![call(name, "{}")], used),
            (Some(_), Some(Value::String(a))) => Parsed::Calls(vec![call(name, a)], used),
            (Some(_), Some(a @ Value::Object(_))) => {
                Parsed::Calls(vec![call(name, &a.to_string())], used)
            }
            _ => Parsed::NotACall(used),
        }
    };
    match format {
        ToolFormat::Hermes | ToolFormat::QwenXml => {
            let Some(j) = s.find(TOOL_CALL_CLOSE) else {
                return if end {
                    Parsed::NotACall(s.len())
                } else {
                    Parsed::Wait
                };
            };
            let used = j + TOOL_CALL_CLOSE.len();
            let inner = s[..j].trim();
            if format == ToolFormat::Hermes {
                match serde_json::from_str::<Value>(inner) {
                    Ok(v) => match v.get("name").and_then(Value::as_str) {
                        Some(name) => one(name, v.get("arguments"), used),
                        None => Parsed::NotACall(used),
                    },
                    Err(_) => Parsed::NotACall(used),
                }
            } else {
                match parse_xml_call(inner, tools) {
                    Some((name, args)) => one(&name, Some(&Value::Object(args)), used),
                    None => Parsed::NotACall(used),
                }
            }
        }
        // Text that cannot start a call leaves only the marker as text: what follows is read
        // again from there, so the answer is the same however much of it has arrived.
        ToolFormat::Llama3 if starts_builtin_call(s) => parse_builtin(s, end, tools),
        ToolFormat::Llama3 => match json_prefix(s, end) {
            JsonPrefix::Wait => Parsed::Wait,
            JsonPrefix::Bad => Parsed::NotACall(0),
            JsonPrefix::Value(v, used) => match v.get("name").and_then(Value::as_str) {
                Some(name) => one(
                    name,
                    v.get("parameters").or_else(|| v.get("arguments")),
                    used,
                ),
                None => Parsed::NotACall(used),
            },
        },
        ToolFormat::Mistral => parse_mistral(s, end, tools),
    }
}

fn call(name: &str, arguments: &str) -> Piece {
    Piece::Call {
        name: name.to_string(),
        arguments: arguments.to_string(),
    }
}

/// A JSON value at the start of a text.
enum JsonPrefix {
    /// The text ends inside it.
    Wait,
    /// Not JSON.
    Bad,
    /// The value and the bytes it took.
    Value(Value, usize),
}

fn json_prefix(s: &str, end: bool) -> JsonPrefix {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => JsonPrefix::Value(v, it.byte_offset()),
        Some(Err(e)) if e.is_eof() && !end => JsonPrefix::Wait,
        None if !end => JsonPrefix::Wait,
        _ => JsonPrefix::Bad,
    }
}

/// Whether the text after `<|python_tag|>` is not JSON: a built-in call or code.
fn starts_builtin_call(s: &str) -> bool {
    s.trim_start().chars().next().is_some_and(|c| c != '{')
}

/// Why text is not (yet) what a parser wants.
#[derive(Debug, PartialEq)]
enum Miss {
    /// The text ends before it can tell.
    Short,
    /// It is something else.
    Bad,
}

/// Reads Llama 3.1's built-in call after `<|python_tag|>`: `NAME.call(ARG=JSON, ...)`, its
/// values JSON as llama.cpp reads them. The name, its arguments, and the bytes it took.
fn builtin_call(s: &str) -> Result<(&str, Map<String, Value>, usize), Miss> {
    let blanks = |at: usize| at + (s[at..].len() - s[at..].trim_start().len());
    let ident = |at: usize| -> Result<(&str, usize), Miss> {
        let len = s[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or(Miss::Short)?;
        if len == 0 {
            return Err(Miss::Bad);
        }
        Ok((&s[at..at + len], at + len))
    };
    let literal = |at: usize, lit: &str| -> Result<usize, Miss> {
        let rest = &s[at..];
        if rest.starts_with(lit) {
            Ok(at + lit.len())
        } else if lit.starts_with(rest) {
            Err(Miss::Short)
        } else {
            Err(Miss::Bad)
        }
    };
    let (name, at) = ident(blanks(0))?;
    let at = literal(blanks(at), ".")?;
    let mut at = literal(blanks(at), "call(")?;
    let mut args = Map::new();
    at = blanks(at);
    if let Ok(end) = literal(at, ")") {
        return Ok((name, args, end));
    }
    loop {
        let (key, after) = ident(blanks(at))?;
        at = blanks(literal(blanks(after), "=")?);
        match json_prefix(&s[at..], false) {
            JsonPrefix::Wait => return Err(Miss::Short),
            JsonPrefix::Bad => return Err(Miss::Bad),
            JsonPrefix::Value(v, used) => {
                args.insert(key.to_string(), v);
                at = blanks(at + used);
            }
        }
        match literal(at, ",") {
            Ok(next) => at = next,
            Err(_) => return Ok((name, args, literal(at, ")")?)),
        }
    }
}

/// The text after `<|python_tag|>` that is not JSON: a built-in call of a listed tool, or,
/// when a code tool is listed, code for it (the whole rest of the answer, as Meta's format
/// has it); else the tag is text.
fn parse_builtin(s: &str, end: bool, tools: &[Tool]) -> Parsed {
    let code_tool = tools.iter().find(|t| builtin_param(t) == Some("code"));
    match builtin_call(s) {
        Ok((name, args, used)) if tools.iter().any(|t| t.name == name) => {
            Parsed::Calls(vec![call(name, &Value::Object(args).to_string())], used)
        }
        Err(Miss::Short) if !end => Parsed::Wait,
        _ => match code_tool {
            Some(_) if !end => Parsed::Wait,
            Some(t) => Parsed::Calls(
                vec![call(&t.name, &json!({"code": s.trim()}).to_string())],
                s.len(),
            ),
            None => Parsed::NotACall(0),
        },
    }
}

/// `NAME[ARGS]{...}` (with an optional `[CALL_ID]id` before `[ARGS]`), or the older
/// `[{"name", "arguments"}, ...]`.
fn parse_mistral(s: &str, end: bool, tools: &[Tool]) -> Parsed {
    let known = |n: &str| tools.iter().any(|t| t.name == n);
    if s.trim_start().starts_with('[') {
        let blanks = s.len() - s.trim_start().len();
        return match json_prefix(&s[blanks..], end) {
            JsonPrefix::Wait => Parsed::Wait,
            JsonPrefix::Bad => Parsed::NotACall(0),
            JsonPrefix::Value(Value::Array(list), used) => {
                let calls: Option<Vec<Piece>> = list
                    .iter()
                    .map(|c| {
                        let name = c.get("name")?.as_str()?;
                        let args = match c.get("arguments") {
                            None | Some(Value::Null) => "{}".to_string(),
                            Some(Value::String(a)) => a.clone(),
                            Some(a) => a.to_string(),
                        };
                        known(name).then(|| call(name, &args))
                    })
                    .collect();
                match calls {
                    Some(c) if !c.is_empty() => Parsed::Calls(c, blanks + used),
                    _ => Parsed::NotACall(blanks + used),
                }
            }
            JsonPrefix::Value(_, used) => Parsed::NotACall(blanks + used),
        };
    }
    let Some(a) = s.find(MISTRAL_ARGS) else {
        // A name is short and has no blanks: past that it is not a call.
        let bad = s.len() > 256 || s.contains(char::is_whitespace);
        return if end || bad {
            Parsed::NotACall(0)
        } else {
            Parsed::Wait
        };
    };
    let head = &s[..a];
    let name = head.split(MISTRAL_CALL_ID).next().unwrap_or(head);
    let rest = &s[a + MISTRAL_ARGS.len()..];
    match json_prefix(rest, end) {
        JsonPrefix::Wait => Parsed::Wait,
        JsonPrefix::Bad => Parsed::NotACall(0),
        JsonPrefix::Value(v, used) => {
            let used = a + MISTRAL_ARGS.len() + used;
            if known(name) && v.is_object() {
                Parsed::Calls(vec![call(name, &v.to_string())], used)
            } else {
                Parsed::NotACall(used)
            }
        }
    }
}

/// A Qwen XML call's inside: `<function=NAME>` then `<parameter=ARG>\nVALUE\n</parameter>`
/// elements, then `</function>`. A value is a string when the tool's schema says the
/// parameter is one, else JSON when it parses as JSON (the template writes objects and lists
/// as JSON, numbers and booleans as their text).
fn parse_xml_call(inner: &str, tools: &[Tool]) -> Option<(String, Map<String, Value>)> {
    let rest = inner.strip_prefix("<function=")?;
    let gt = rest.find('>')?;
    let name = rest[..gt].trim().to_string();
    let tool = tools.iter().find(|t| t.name == name)?;
    let mut rest = rest[gt + 1..].trim_start();
    let mut args = Map::new();
    while let Some(r) = rest.strip_prefix("<parameter=") {
        let gt = r.find('>')?;
        let arg = r[..gt].trim().to_string();
        let r = &r[gt + 1..];
        let close = r.find("</parameter>")?;
        let raw = r[..close].strip_prefix('\n').unwrap_or(&r[..close]);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        let schema = tool
            .parameters
            .get("properties")
            .and_then(|p| p.get(&arg))
            .cloned()
            .unwrap_or(Value::Null);
        let value = if is_string_schema(&schema) {
            Value::String(raw.to_string())
        } else {
            serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
        };
        args.insert(arg, value);
        rest = r[close + "</parameter>".len()..].trim_start();
    }
    (rest.trim() == "</function>").then_some((name, args))
}

/// Splits a whole answer: its content (`None` when only blanks are left beside calls), its
/// calls, and the reasoning pieces left as they came.
pub fn split_answer(
    format: ToolFormat,
    tools: Arc<[Tool]>,
    text: &str,
) -> (Option<String>, Vec<(String, String)>) {
    let mut s = CallSplitter::new(format, tools);
    let mut pieces = Vec::new();
    s.push(text, &mut pieces);
    s.finish(&mut pieces);
    let mut content = String::new();
    let mut calls = Vec::new();
    for p in pieces {
        match p {
            Piece::Content(c) | Piece::Reasoning(c) => content.push_str(&c),
            Piece::Call { name, arguments } => calls.push((name, arguments)),
        }
    }
    let content = if calls.is_empty() {
        Some(content)
    } else {
        Some(content.trim().to_string()).filter(|c| !c.is_empty())
    };
    (content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Arc<[Tool]> {
        vec![
            Tool {
                name: "get_weather".into(),
                parameters: json!({"type": "object", "properties": {
                    "city": {"type": "string"}, "days": {"type": "integer"},
                    "opts": {"type": "object"}}, "required": ["city"]}),
            },
            Tool {
                name: "f".into(),
                parameters: json!({"type": "object"}),
            },
        ]
        .into()
    }

    /// Content runs merged (chunking may split them differently).
    fn merge(v: &[Piece]) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for p in v {
            match (out.last_mut(), p) {
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(b),
                _ => out.push(p.clone()),
            }
        }
        out.retain(|p| p != &Piece::Content(String::new()));
        out
    }

    /// `text` split whole and in chunks of every size gives `want`.
    fn check(format: ToolFormat, text: &str, want: &[Piece]) {
        check_with(format, tools(), text, want);
    }

    /// As [`check`], with `tools` listed.
    fn check_with(format: ToolFormat, tools: Arc<[Tool]>, text: &str, want: &[Piece]) {
        for step in [1, 2, 3, 5, 7, 11, text.len().max(1)] {
            let mut s = CallSplitter::new(format, tools.clone());
            let mut got = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for chunk in chars.chunks(step) {
                s.push(&chunk.iter().collect::<String>(), &mut got);
            }
            s.finish(&mut got);
            assert_eq!(merge(&got), merge(want), "{format:?}, chunks of {step}");
        }
    }

    fn c(s: &str) -> Piece {
        Piece::Content(s.into())
    }

    #[test]
    fn hermes_calls_are_split_from_content_whatever_the_chunking() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call><tool_call>not json</tool_call><tool_call>{\"name\": \"nope\"}</tool_call> <tool_ca";
        check(
            ToolFormat::Hermes,
            text,
            &[
                c("Let me look.\n"),
                call("get_weather", "{\"city\":\"Paris\"}"),
                c("\n"),
                call("f", "{}"),
                c(
                    "<tool_call>not json</tool_call><tool_call>{\"name\": \"nope\"}</tool_call> <tool_ca",
                ),
            ],
        );
        let (content, calls) = split_answer(
            ToolFormat::Hermes,
            tools(),
            "\n<tool_call>{\"name\": \"f\"}</tool_call>\n",
        );
        assert_eq!((content, calls), (None, vec![("f".into(), "{}".into())]));
        let (content, calls) = split_answer(ToolFormat::Hermes, tools(), "plain <tool");
        assert_eq!((content.as_deref(), calls.len()), (Some("plain <tool"), 0));
    }

    #[test]
    fn qwen_xml_calls_take_their_types_from_the_schema() {
        let text = "Sure.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n</function>\n</tool_call><tool_call>\n<function=g>\n</function>\n</tool_call>";
        check(
            ToolFormat::QwenXml,
            text,
            &[
                c("Sure.\n\n"),
                call("get_weather", r#"{"city":"42","days":3,"opts":{"a":[1]}}"#),
                c("\n"),
                call("f", "{}"),
                c("<tool_call>\n<function=g>\n</function>\n</tool_call>"),
            ],
        );
        // A broken element is text.
        check(
            ToolFormat::QwenXml,
            "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>",
            &[c(
                "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>",
            )],
        );
    }

    #[test]
    fn llama3_calls_are_the_whole_answer_or_follow_the_python_tag() {
        check(
            ToolFormat::Llama3,
            " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
            &[c(" "), call("get_weather", r#"{"city":"Oslo"}"#)],
        );
        check(
            ToolFormat::Llama3,
            "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
            &[call("f", "{}")],
        );
        // JSON that is not a call of a listed tool, and JSON later in the text, are content.
        check(
            ToolFormat::Llama3,
            "{\"name\": \"nope\", \"parameters\": {}}",
            &[c("{\"name\": \"nope\", \"parameters\": {}}")],
        );
        check(
            ToolFormat::Llama3,
            "Here: {\"name\": \"f\", \"parameters\": {}}",
            &[c("Here: {\"name\": \"f\", \"parameters\": {}}")],
        );
        check(
            ToolFormat::Llama3,
            "{\"name\": \"f\"",
            &[c("{\"name\": \"f\"")],
        );
    }

    fn builtin_tools(code: bool) -> Arc<[Tool]> {
        let mut list = vec![Tool {
            name: "brave_search".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        }];
        if code {
            list.push(Tool {
                name: "code_interpreter".into(),
                parameters: json!({"type": "object", "properties": {"code": {"type": "string"}}}),
            });
        }
        list.extend(tools().iter().cloned());
        list.into()
    }

    #[test]
    fn llama31_builtin_calls_follow_the_python_tag() {
        let tools = builtin_tools(false);
        check_with(
            ToolFormat::Llama3,
            tools.clone(),
            "<|python_tag|>brave_search.call(query=\"weather \\\"Paris\\\"\")",
            &[call("brave_search", r#"{"query":"weather \"Paris\""}"#)],
        );
        // Several arguments, blanks, a JSON value; any listed tool may be called so.
        check_with(
            ToolFormat::Llama3,
            tools.clone(),
            "<|python_tag|> get_weather . call( city = \"Oslo\" , days=3 ) ",
            &[call("get_weather", r#"{"city":"Oslo","days":3}"#), c(" ")],
        );
        check_with(
            ToolFormat::Llama3,
            tools.clone(),
            "<|python_tag|>f.call()",
            &[call("f", "{}")],
        );
        // An unlisted tool, broken syntax, an unfinished call: the text as written.
        for text in [
            "<|python_tag|>nope.call(query=\"x\")",
            "<|python_tag|>brave_search.run(query=\"x\")",
            "<|python_tag|>brave_search.call(query=x)",
            "<|python_tag|>brave_search.call(query=\"x\"",
        ] {
            check_with(ToolFormat::Llama3, tools.clone(), text, &[c(text)]);
        }
        // With a code tool listed, what follows the tag and is no call is its code.
        let code = "<|python_tag|>import math\nprint(math.pi)\n";
        check_with(
            ToolFormat::Llama3,
            builtin_tools(true),
            code,
            &[call(
                "code_interpreter",
                r#"{"code":"import math\nprint(math.pi)"}"#,
            )],
        );
        check_with(ToolFormat::Llama3, tools, code, &[c(code)]);
        // Only Llama 3.x knows built-in tools, and only with their parameter.
        let t = builtin_tools(true);
        assert_eq!(
            ToolFormat::Llama3.builtin_tools(&t),
            ["brave_search", "code_interpreter"]
        );
        assert!(ToolFormat::Hermes.builtin_tools(&t).is_empty());
        let odd = [Tool {
            name: "brave_search".into(),
            parameters: json!({"type": "object", "properties": {"q": {}}}),
        }];
        assert!(ToolFormat::Llama3.builtin_tools(&odd).is_empty());
    }

    #[test]
    fn grammars_write_control_markers_as_tokens() {
        let list: Vec<Tool> = builtin_tools(false).to_vec();
        let tools = Tools {
            raw: Vec::new(),
            list,
            choice: ToolChoice::Required,
            parallel: false,
        };
        let control = ControlMarkers {
            named: vec![(PYTHON_TAG, 7), (MISTRAL_OPEN, 9), ("</think>", 11)],
            ids: Arc::from([7, 9, 11]),
        };
        let lark = |f: ToolFormat, in_think: bool, m: &ControlMarkers| match f
            .grammar(&tools, in_think, m)
            .unwrap()
        {
            Some(Grammar::Lark(g)) => g,
            g => panic!("{g:?}"),
        };
        let g = lark(ToolFormat::Llama3, true, &control);
        assert!(g.starts_with("start: <[11]> \"\\n\\n\" call"), "{g}");
        assert!(g.contains("(<[7]> \"brave_search.call(query=\""), "{g}");
        assert!(g.contains("\"parameters\""), "{g}");
        assert!(lark(ToolFormat::Mistral, false, &control).contains("<[9]> ("));
        // Without the tokens, the markers are text.
        let text = lark(ToolFormat::Llama3, false, &ControlMarkers::default());
        assert!(
            text.contains("(\"<|python_tag|>\" \"brave_search.call("),
            "{text}"
        );
        assert!(!text.contains("<["), "{text}");
    }

    #[test]
    fn mistral_calls_in_both_syntaxes() {
        check(
            ToolFormat::Mistral,
            "Ok[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]f[CALL_ID]abcdefghi[ARGS]{}",
            &[
                c("Ok"),
                call("get_weather", r#"{"city":"Rome"}"#),
                call("f", "{}"),
            ],
        );
        check(
            ToolFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}]",
            &[call("f", r#"{"x":1}"#)],
        );
        check(
            ToolFormat::Mistral,
            "[TOOL_CALLS]no such call here",
            &[c("[TOOL_CALLS]no such call here")],
        );
        assert_eq!(ToolFormat::Mistral.call_id("chatcmpl-1", 0, 0).len(), 9);
    }

    #[test]
    fn a_call_that_never_closes_is_read_in_linear_time() {
        for (format, open) in [
            (
                ToolFormat::Llama3,
                "{\"name\": \"f\", \"parameters\": {\"x\": [",
            ),
            (ToolFormat::Mistral, "[TOOL_CALLS]f[ARGS]{\"x\": ["),
            (
                ToolFormat::Hermes,
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": [",
            ),
        ] {
            let mut s = CallSplitter::new(format, tools());
            let mut out = Vec::new();
            let mut full = open.to_string();
            s.push(open, &mut out);
            for i in 0..20_000 {
                // Nested closes and brackets in strings: a re-parse per closing bracket would
                // be quadratic too.
                let piece = if i % 2 == 0 { "{\"a]\": [1]}" } else { "," };
                full.push_str(piece);
                s.push(piece, &mut out);
            }
            let len = s.buf.len();
            assert!(len > 100_000, "{format:?}");
            assert!(
                s.gate.parsed_total <= 10 * len,
                "{format:?}: parsed {} bytes of a {len}-byte call",
                s.gate.parsed_total
            );
            s.finish(&mut out);
            // An unfinished call is content, as the model wrote it.
            assert_eq!(merge(&out), [c(&full)], "{format:?}");
        }
    }

    /// The real chat templates' folder, or `None` (and a note) when the run may lack it.
    fn templates_dir() -> Option<std::path::PathBuf> {
        let dir = std::env::var_os("T2P_TESTDATA")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "../shared/testdata".into())
            .join("chat/templates");
        if dir.is_dir() {
            return Some(dir);
        }
        // Missing data fails the test unless the run says it may be missing.
        assert!(
            std::env::var_os("T2P_TESTDATA_OPTIONAL").is_some(),
            "no chat templates at {}",
            dir.display()
        );
        eprintln!("SKIPPED: no chat templates at {}", dir.display());
        None
    }

    #[test]
    fn llama31_template_gets_builtin_tools_and_the_date() {
        use crate::runner::chat::{ChatTemplate, Message, ToolCall};
        let Some(dir) = templates_dir() else { return };
        let src =
            std::fs::read_to_string(dir.join("meta-llama-Llama-3.1-8B-Instruct.jinja")).unwrap();
        let tmpl = ChatTemplate::new(&src, "<|begin_of_text|>", "<|eot_id|>").unwrap();
        let tools = builtin_tools(false);
        let raw: Vec<Value> = tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "parameters": t.parameters}}))
            .collect();
        let mut kwargs = Map::new();
        // 2024-02-29 13:05:09 UTC.
        ToolFormat::Llama3.template_kwargs(&tools, &mut kwargs, 1_709_211_909);
        let messages = [
            Message::new("user", "Weather in Paris?"),
            Message {
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "brave_search".into(),
                    arguments: r#"{"query": "Paris weather"}"#.into(),
                }],
                ..Message::new("assistant", "")
            },
            Message {
                tool_call_id: Some("call_1".into()),
                ..Message::new("tool", "18 degrees")
            },
        ];
        let text = tmpl.render_with(&messages, &raw, true, &kwargs).unwrap();
        for want in [
            "Environment: ipython\nTools: brave_search\n\n",
            "Today Date: 29 Feb 2024\n",
            "<|python_tag|>brave_search.call(query=\"Paris weather\")<|eom_id|>",
            "\"name\": \"get_weather\"",
            // Jinja's strings are iterable, so the template writes the result as JSON.
            "<|start_header_id|>ipython<|end_header_id|>\n\n\"18 degrees\"<|eot_id|>",
        ] {
            assert!(text.contains(want), "{want:?} not in {text}");
        }
        // The tools are in the system turn, before the first user message.
        let system = text.split("<|eot_id|>").next().unwrap();
        for want in [
            "\"name\": \"get_weather\"",
            "respond with JSON for a function call",
        ] {
            assert!(system.contains(want), "{want:?} not in {system}");
        }
        let user = "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>";
        assert!(text.contains(user), "{user:?} not in {text}");
        // A client's own kwargs win; other formats get none.
        let mut own = Map::new();
        own.insert("date_string".into(), json!("1 Jan 2030"));
        ToolFormat::Llama3.template_kwargs(&[], &mut own, 0);
        assert_eq!(own["date_string"], "1 Jan 2030");
        assert!(!own.contains_key("builtin_tools"));
        let mut none = Map::new();
        ToolFormat::Hermes.template_kwargs(&tools, &mut none, 0);
        assert!(none.is_empty());
    }

    #[test]
    fn formats_are_detected_from_the_real_templates() {
        let Some(dir) = templates_dir() else { return };
        for (file, want) in [
            ("Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes),
            ("Qwen3.5-4B.jinja", ToolFormat::QwenXml),
            ("Qwen3-Coder.jinja", ToolFormat::QwenXml),
            ("meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::Llama3),
            (
                "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                ToolFormat::Mistral,
            ),
        ] {
            let src = std::fs::read_to_string(dir.join(file)).unwrap();
            assert_eq!(ToolFormat::detect(&src), want, "{file}");
        }
    }
}
