//! Tool calls in the Hermes / Qwen format that Qwen3 and Ternary Bonsai chat templates teach
//! the model: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per
//! call. With `tool_choice` `required` or a named function, decoding is constrained to such
//! blocks whose JSON satisfies the function's parameter schema ([`call_grammar`]); whatever
//! the choice, the model's text is split into content and calls as it streams
//! ([`CallSplitter`]).

use serde_json::{Value, json};

use super::api::{ToolChoice, Tools};
use crate::runner::constrain::{Grammar, GrammarError, lark_json};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Most calls one constrained answer may make (with `parallel_tool_calls`).
pub const MAX_CALLS: usize = 4;

/// The grammar of an answer that must call tools (`required`: any of them, one or more when
/// `parallel`; a named function: that one, once), or `None` when the model may answer freely.
pub fn call_grammar(tools: &Tools) -> Result<Option<Grammar>, GrammarError> {
    let call = |name: &str, parameters: &Value| {
        json!({
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": parameters},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })
    };
    let (schema, many) = match &tools.choice {
        ToolChoice::None | ToolChoice::Auto => return Ok(None),
        ToolChoice::Named(n) => {
            let t = tools
                .list
                .iter()
                .find(|t| &t.name == n)
                .expect("tool_choice names a listed tool (checked when parsed)");
            (call(&t.name, &t.parameters), false)
        }
        ToolChoice::Required => {
            let any: Vec<Value> = tools
                .list
                .iter()
                .map(|t| call(&t.name, &t.parameters))
                .collect();
            (json!({"anyOf": any}), tools.parallel)
        }
    };
    let more = if many {
        format!(" (\"\\n\" call){{0,{}}}", MAX_CALLS - 1)
    } else {
        String::new()
    };
    Ok(Some(Grammar::Lark(format!(
        "start: call{more}\ncall: \"{OPEN}\\n\" args \"\\n{CLOSE}\"\nargs: {}\n",
        lark_json(&schema)?
    ))))
}

/// A piece of the model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text for `content`.
    Content(String),
    /// A complete call.
    Call {
        /// The function.
        name: String,
        /// Its arguments as a JSON document.
        arguments: String,
    },
}

/// Splits streamed text into content and calls: text that may be the start of a call block is
/// held back until it is known not to be one.
#[derive(Default)]
pub struct CallSplitter {
    buf: String,
    inside: bool,
}

/// A call block's JSON, `{"name": "...", "arguments": {...} or "..."}`.
fn parse_call(inner: &str) -> Option<Piece> {
    let v: Value = serde_json::from_str(inner.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments") {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(a) => a.to_string(),
    };
    Some(Piece::Call { name, arguments })
}

/// Bytes at the end of `s` that begin `OPEN` (a call that may be starting).
fn open_prefix_len(s: &str) -> usize {
    (1..OPEN.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.ends_with(&OPEN[..k]))
        .unwrap_or(0)
}

impl CallSplitter {
    /// Takes the next text; appends what is now known to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.buf.push_str(text);
        loop {
            if self.inside {
                let Some(j) = self.buf.find(CLOSE) else {
                    return;
                };
                let inner = &self.buf[..j];
                out.push(
                    parse_call(inner)
                        .unwrap_or_else(|| Piece::Content(format!("{OPEN}{inner}{CLOSE}"))),
                );
                self.buf.drain(..j + CLOSE.len());
                self.inside = false;
            } else if let Some(i) = self.buf.find(OPEN) {
                if i > 0 {
                    out.push(Piece::Content(self.buf[..i].to_string()));
                }
                self.buf.drain(..i + OPEN.len());
                self.inside = true;
            } else {
                // `OPEN` is ASCII, so a suffix that begins it starts on a character boundary.
                let keep = open_prefix_len(&self.buf);
                let emit = self.buf.len() - keep;
                if emit > 0 {
                    out.push(Piece::Content(self.buf[..emit].to_string()));
                    self.buf.drain(..emit);
                }
                return;
            }
        }
    }

    /// The end of the text: whatever is held back is content (an unfinished call included).
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        let rest = std::mem::take(&mut self.buf);
        let rest = if std::mem::take(&mut self.inside) {
            format!("{OPEN}{rest}")
        } else {
            rest
        };
        if !rest.is_empty() {
            out.push(Piece::Content(rest));
        }
    }
}

/// Splits a whole answer: its content (`None` when only blanks are left) and its calls.
pub fn split_answer(text: &str) -> (Option<String>, Vec<(String, String)>) {
    let mut s = CallSplitter::default();
    let mut pieces = Vec::new();
    s.push(text, &mut pieces);
    s.finish(&mut pieces);
    let mut content = String::new();
    let mut calls = Vec::new();
    for p in pieces {
        match p {
            Piece::Content(c) => content.push_str(&c),
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

    #[test]
    fn calls_are_split_from_content_whatever_the_chunking() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call><tool_call>not json</tool_call> <tool_ca";
        let want = vec![
            Piece::Content("Let me look.\n".into()),
            Piece::Call {
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            },
            Piece::Content("\n".into()),
            Piece::Call {
                name: "f".into(),
                arguments: "{}".into(),
            },
            Piece::Content("<tool_call>not json</tool_call>".into()),
            Piece::Content(" ".into()),
            Piece::Content("<tool_ca".into()),
        ];
        for step in [1, 2, 3, 5, 7, 11, text.len()] {
            let mut s = CallSplitter::default();
            let mut got = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for chunk in chars.chunks(step) {
                s.push(&chunk.iter().collect::<String>(), &mut got);
            }
            s.finish(&mut got);
            // Content may come in more pieces when chunked finely: compare merged runs.
            let merge = |v: &[Piece]| {
                let mut out: Vec<Piece> = Vec::new();
                for p in v {
                    match (out.last_mut(), p) {
                        (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(b),
                        _ => out.push(p.clone()),
                    }
                }
                out
            };
            assert_eq!(merge(&got), merge(&want), "chunks of {step}");
        }
        let (content, calls) = split_answer("\n<tool_call>{\"name\": \"g\"}</tool_call>\n");
        assert_eq!((content, calls), (None, vec![("g".into(), "{}".into())]));
        let (content, calls) = split_answer("plain <tool");
        assert_eq!((content.as_deref(), calls.len()), (Some("plain <tool"), 0));
    }
}
