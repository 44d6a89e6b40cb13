//! Reasoning: the `<think>...</think>` block Qwen3-family models write before their answer,
//! split off into `reasoning_content` (llama-server's `--reasoning-format deepseek`) or left
//! in the content (`none`), and [`AnswerSplitter`], which runs the think split and then the
//! tool-call split of [`super::tool_format`] on what is not reasoning (a call written while
//! thinking is not a call).

use std::sync::Arc;

use super::api::Tool;
use super::tool_format::{CallSplitter, Piece, ToolFormat};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Where reasoning goes (`--reasoning-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// `reasoning_content` / `delta.reasoning_content`, as DeepSeek's API and llama-server.
    #[default]
    Deepseek,
    /// Left in the content, tags and all.
    None,
}

impl ReasoningFormat {
    /// Reads `deepseek` or `none`.
    pub fn parse(s: &str) -> Result<ReasoningFormat, String> {
        match s {
            "deepseek" => Ok(ReasoningFormat::Deepseek),
            "none" => Ok(ReasoningFormat::None),
            _ => Err(format!("unknown reasoning format {s:?} (deepseek or none)")),
        }
    }
}

/// Whether a chat template writes think blocks at all (only then is the answer searched for
/// one).
pub fn template_thinks(template: &str) -> bool {
    template.contains(OPEN)
}

/// Whether a rendered prompt leaves the model inside a think block (Qwen3.5's generation
/// prompt opens `<think>\n`; with `enable_thinking: false` it writes an empty block instead).
pub fn prompt_opens_think(prompt: &str) -> bool {
    prompt.trim_end().ends_with(OPEN)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before any text: a `<think>` may come.
    Start,
    /// Inside the block.
    Inside,
    /// Just after `</think>`: blanks before the answer are dropped.
    Closed,
    /// Everything else is content.
    Answer,
}

/// Splits streamed text into reasoning and content.
pub struct ThinkSplitter {
    state: State,
    buf: String,
    /// Keep the text as written (tags and blanks) in the reasoning pieces (`none`).
    raw: bool,
    /// Reasoning sent so far (leading blanks are dropped).
    said: bool,
}

impl ThinkSplitter {
    /// A splitter; `inside` when the prompt already opened the block.
    pub fn new(inside: bool, raw: bool) -> ThinkSplitter {
        ThinkSplitter {
            state: if inside { State::Inside } else { State::Start },
            buf: String::new(),
            raw,
            said: false,
        }
    }

    fn reasoning(&mut self, text: String, out: &mut Vec<Piece>) {
        let text = if self.raw || self.said {
            text
        } else {
            text.trim_start().to_string()
        };
        if !text.is_empty() {
            self.said = true;
            out.push(Piece::Reasoning(text));
        }
    }

    /// Takes the next text; appends what is now known to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.buf.push_str(text);
        self.advance(false, out);
    }

    /// The end: what is held back goes where it was heading (an unclosed block is
    /// reasoning, as llama-server treats it).
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        self.advance(true, out);
    }

    fn advance(&mut self, end: bool, out: &mut Vec<Piece>) {
        loop {
            match self.state {
                State::Start => {
                    let body = self.buf.trim_start();
                    if body.starts_with(OPEN) {
                        let cut = self.buf.len() - body.len() + OPEN.len();
                        let tag: String = self.buf.drain(..cut).collect();
                        if self.raw {
                            self.reasoning(tag, out);
                        }
                        self.state = State::Inside;
                    } else if !end && OPEN.starts_with(body) {
                        return;
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Inside => {
                    if let Some(j) = self.buf.find(CLOSE) {
                        let mut r: String = self.buf.drain(..j + CLOSE.len()).collect();
                        if !self.raw {
                            r.truncate(j);
                            r.truncate(r.trim_end().len());
                        }
                        self.reasoning(r, out);
                        self.state = State::Closed;
                        continue;
                    }
                    // Hold what may begin the close tag, and (split mode) trailing blanks,
                    // which are dropped if the tag comes next.
                    let mut keep = (1..CLOSE.len().min(self.buf.len() + 1))
                        .rev()
                        .find(|&k| self.buf.ends_with(&CLOSE[..k]))
                        .unwrap_or(0);
                    if !self.raw {
                        let body = &self.buf[..self.buf.len() - keep];
                        keep += body.len() - body.trim_end().len();
                    }
                    if end {
                        keep = 0;
                    }
                    let emit = self.buf.len() - keep;
                    let r: String = self.buf.drain(..emit).collect();
                    self.reasoning(
                        if end && !self.raw {
                            r.trim_end().to_string()
                        } else {
                            r
                        },
                        out,
                    );
                    return;
                }
                State::Closed => {
                    if self.raw {
                        self.state = State::Answer;
                        continue;
                    }
                    let blanks = self.buf.len() - self.buf.trim_start().len();
                    self.buf.drain(..blanks);
                    if self.buf.is_empty() {
                        return;
                    }
                    self.state = State::Answer;
                }
                State::Answer => {
                    if !self.buf.is_empty() {
                        out.push(Piece::Content(std::mem::take(&mut self.buf)));
                    }
                    return;
                }
            }
        }
    }
}

/// How a chat answer is split: think blocks, tool calls, both or neither.
#[derive(Clone, Default)]
pub struct AnswerSpec {
    /// Search for a think block: `Some(inside)`, `inside` when the prompt opened it.
    pub think: Option<bool>,
    /// Where reasoning goes.
    pub reasoning: ReasoningFormat,
    /// The call syntax and the tools that may be called (a chat with tools and a
    /// `tool_choice` other than `none`).
    pub tools: Option<(ToolFormat, Arc<[Tool]>)>,
}

/// Splits an answer into reasoning, content and calls as it streams.
pub struct AnswerSplitter {
    think: Option<ThinkSplitter>,
    calls: Option<CallSplitter>,
    raw_reasoning: bool,
}

impl AnswerSplitter {
    /// The splitter `spec` describes.
    pub fn new(spec: &AnswerSpec) -> AnswerSplitter {
        let raw = spec.reasoning == ReasoningFormat::None;
        AnswerSplitter {
            think: spec.think.map(|inside| ThinkSplitter::new(inside, raw)),
            calls: spec
                .tools
                .as_ref()
                .map(|(f, t)| CallSplitter::new(*f, t.clone())),
            raw_reasoning: raw,
        }
    }

    /// Takes the next text (`end`: the last); appends the pieces now known to `out`.
    pub fn push(&mut self, text: &str, end: bool, out: &mut Vec<Piece>) {
        let mut first = Vec::new();
        match &mut self.think {
            Some(t) => {
                t.push(text, &mut first);
                if end {
                    t.finish(&mut first);
                }
            }
            None => first.push(Piece::Content(text.to_string())),
        }
        for p in first {
            match p {
                Piece::Reasoning(r) if self.raw_reasoning => out.push(Piece::Content(r)),
                Piece::Content(c) => match &mut self.calls {
                    Some(s) => s.push(&c, out),
                    None => out.push(Piece::Content(c)),
                },
                p => out.push(p),
            }
        }
        if end && let Some(s) = &mut self.calls {
            s.finish(out);
        }
        out.retain(|p| !matches!(p, Piece::Content(c) | Piece::Reasoning(c) if c.is_empty()));
    }
}

/// A whole answer split: reasoning (`None` when there was none), content (`None` when only
/// blanks are left beside calls), calls (name, arguments).
pub fn split_answer(
    spec: &AnswerSpec,
    text: &str,
) -> (Option<String>, Option<String>, Vec<(String, String)>) {
    let mut s = AnswerSplitter::new(spec);
    let mut pieces = Vec::new();
    s.push(text, true, &mut pieces);
    let (mut reasoning, mut content, mut calls) = (None::<String>, String::new(), Vec::new());
    for p in pieces {
        match p {
            Piece::Reasoning(r) => reasoning.get_or_insert_default().push_str(&r),
            Piece::Content(c) => content.push_str(&c),
            Piece::Call { name, arguments } => calls.push((name, arguments)),
        }
    }
    let content = if calls.is_empty() {
        Some(content)
    } else {
        Some(content.trim().to_string()).filter(|c| !c.is_empty())
    };
    (reasoning, content, calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(inside: bool, raw: bool, tools: bool) -> AnswerSpec {
        AnswerSpec {
            think: Some(inside),
            reasoning: if raw {
                ReasoningFormat::None
            } else {
                ReasoningFormat::Deepseek
            },
            tools: tools.then(|| {
                (
                    ToolFormat::Hermes,
                    vec![Tool {
                        name: "f".into(),
                        parameters: json!({"type": "object"}),
                    }]
                    .into(),
                )
            }),
        }
    }

    /// `pieces` with adjacent content pieces and adjacent reasoning pieces joined: how the
    /// pieces of one text compare whatever its chunking.
    fn merged(pieces: Vec<Piece>) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        for p in pieces {
            match (out.last_mut(), &p) {
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(b),
                (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(b),
                _ => out.push(p),
            }
        }
        out
    }

    /// The pieces of `text` pushed whole, as the end.
    fn whole(spec: &AnswerSpec, text: &str) -> Vec<Piece> {
        let mut pieces = Vec::new();
        AnswerSplitter::new(spec).push(text, true, &mut pieces);
        pieces
    }

    /// The pieces of `text` pushed in chunks of `cuts[0]`, `cuts[1]`, ... characters (the
    /// sizes cycling), then the end.
    fn streamed(spec: &AnswerSpec, text: &str, cuts: &[usize]) -> Vec<Piece> {
        let chars: Vec<char> = text.chars().collect();
        let mut s = AnswerSplitter::new(spec);
        let mut pieces = Vec::new();
        let (mut at, mut k) = (0, 0);
        while at < chars.len() {
            let n = cuts[k % cuts.len()].min(chars.len() - at);
            s.push(
                &chars[at..at + n].iter().collect::<String>(),
                false,
                &mut pieces,
            );
            at += n;
            k += 1;
        }
        s.push("", true, &mut pieces);
        pieces
    }

    /// Split whole, after checking that streamed in chunks of every size it gives the same
    /// pieces.
    fn split(
        spec: &AnswerSpec,
        text: &str,
    ) -> (Option<String>, Option<String>, Vec<(String, String)>) {
        let whole = whole(spec, text);
        for step in [1, 2, 3, 5, 8] {
            assert_eq!(
                merged(streamed(spec, text, &[step])),
                merged(whole.clone()),
                "chunks of {step}: {text:?}"
            );
        }
        split_answer(spec, text)
    }

    #[test]
    fn think_blocks_become_reasoning() {
        let outside = spec(false, false, false);
        let inside = spec(true, false, false);
        let raw = spec(false, true, false);
        // (spec, text, reasoning, content)
        for (s, text, reasoning, content) in [
            (
                &outside,
                "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.",
                Some("Hmm, 2+2."),
                "It is 4.",
            ),
            (&outside, "No thinking.", None, "No thinking."),
            (&outside, "<thin", None, "<thin"),
            // The prompt opened the block: the output starts inside it; unclosed, it is reasoning.
            (
                &inside,
                "Let me see.\n</think>\n\nYes.",
                Some("Let me see."),
                "Yes.",
            ),
            (&inside, "still thinking  ", Some("still thinking"), ""),
            // `none`: everything stays in the content as written.
            (
                &raw,
                "<think>\nx\n</think>\n\ny",
                None,
                "<think>\nx\n</think>\n\ny",
            ),
        ] {
            assert_eq!(
                split(s, text),
                (reasoning.map(String::from), Some(content.into()), vec![]),
                "{text:?}"
            );
        }
    }

    /// Fragments that reach every state of both splitters, in every format.
    const BITS: &[&str] = &[
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<function=f>",
        "</function>",
        "<parameter=x>",
        "</parameter>",
        "{\"name\": \"f\", \"arguments\": {}}",
        "{\"name\": \"f\", \"parameters\": {\"a\": 1}}",
        "<|python_tag|>",
        "[TOOL_CALLS]",
        "f",
        "[ARGS]",
        "[CALL_ID]",
        "{",
        "}",
        "[",
        "\n",
        " ",
        "é",
        "東",
        "<",
        "</",
        "x",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]
        /// Whatever the model writes and however it is chunked: no panic, and the pieces
        /// streamed are the pieces of the whole text.
        #[test]
        fn any_text_in_any_chunks_splits_as_the_whole(
            bits in proptest::collection::vec(proptest::sample::select(BITS), 0..24),
            cuts in proptest::collection::vec(1usize..6, 1..8),
            format in proptest::sample::select(&[ToolFormat::Hermes, ToolFormat::QwenXml, ToolFormat::Llama3, ToolFormat::Mistral][..]),
            inside in proptest::prelude::any::<bool>(),
            raw in proptest::prelude::any::<bool>(),
        ) {
            let text: String = bits.concat();
            let mut sp = spec(inside, raw, true);
            sp.tools = Some((format, sp.tools.unwrap().1));
            proptest::prop_assert_eq!(merged(streamed(&sp, &text, &cuts)), merged(whole(&sp, &text)));
        }
    }

    #[test]
    fn a_call_inside_a_think_block_is_not_a_call() {
        let call = "<tool_call>{\"name\": \"f\"}</tool_call>";
        let (r, c, k) = split(
            &spec(false, false, true),
            &format!("<think>maybe {call}</think>{call}"),
        );
        assert_eq!(r.as_deref(), Some(format!("maybe {call}").as_str()));
        assert_eq!((c, k), (None, vec![("f".into(), "{}".into())]));
        let (r, c, k) = split(&spec(false, true, true), &format!("<think>{call}</think>"));
        assert_eq!(
            (r, c.as_deref(), k.len()),
            (None, Some(format!("<think>{call}</think>").as_str()), 0)
        );
    }
}
