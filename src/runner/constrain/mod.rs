//! Constrained decoding: a JSON schema, a grammar or a regular expression compiled by
//! [llguidance](https://github.com/guidance-ai/llguidance) into a mask over the vocabulary,
//! applied to the logits before sampling, so that whatever the model prefers, the output is in
//! the language (a schema-valid JSON document, a sentence of the grammar).
//!
//! One [`GrammarCompiler`] is built per tokenizer (it holds the token trie); each request
//! compiles its [`Grammar`] into a [`Constraint`], which then follows the sampled tokens.
//! Requests are hostile: a schema nested past [`MAX_SCHEMA_DEPTH`], a grammar past
//! llguidance's size and fuel limits, or one that admits no output at all is refused with a
//! [`GrammarError`] when it is compiled, never later and never with a hang; a panic inside the
//! engine is caught and becomes an error too.

mod gbnf;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie};

use super::sample::TokenMask;
use super::{TokenType, Tokenizer};

pub use gbnf::gbnf_to_lark;

/// Deepest nesting of objects and arrays a JSON schema may have (Pydantic's schemas are a few
/// levels deep; llguidance's compiler recurses on it).
pub const MAX_SCHEMA_DEPTH: usize = 48;

/// What a request constrains its output to.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON document valid under this schema.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark dialect (`%llguidance` grammars of llama.cpp).
    Lark(String),
    /// A grammar in llama.cpp's GBNF (translated to Lark).
    Gbnf(String),
    /// A regular expression the whole output must match.
    Regex(String),
}

/// Why a grammar could not be compiled or followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrammarError(pub String);

impl std::fmt::Display for GrammarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GrammarError {}

/// Runs `f`, turning a panic inside llguidance into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, GrammarError>) -> Result<T, GrammarError> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(GrammarError(format!("{what}: the grammar engine failed"))))
}

/// Compiles grammars for one tokenizer.
pub struct GrammarCompiler {
    factory: ParserFactory,
    n_vocab: usize,
}

/// The bytes llguidance sees for token `id`: its text, or for control tokens their name behind
/// llguidance's special-token marker (so text never matches them, and Lark's `<name>` does).
fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    match tok.token_type(id) {
        TokenType::Control | TokenType::Unknown => {
            let name = tok.token_text(id).unwrap_or_default();
            if name.is_empty() {
                Vec::new()
            } else {
                let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                b.extend_from_slice(name.as_bytes());
                b
            }
        }
        TokenType::Unused => Vec::new(),
        _ => tok.token_to_piece(id, false),
    }
}

impl GrammarCompiler {
    /// Builds the token trie of `tok`; the end-of-generation tokens end a finished grammar.
    pub fn new(tok: &Tokenizer) -> Result<GrammarCompiler, GrammarError> {
        let n_vocab = tok.n_vocab();
        let words: Vec<Vec<u8>> = (0..n_vocab as u32).map(|id| token_bytes(tok, id)).collect();
        let eog: Vec<u32> = (0..n_vocab as u32).filter(|&id| tok.is_eog(id)).collect();
        let Some(&first) = eog.first() else {
            return Err(GrammarError(
                "the model has no end-of-generation token, which a grammar needs to end".into(),
            ));
        };
        let info = TokRxInfo {
            tok_bos: tok.bos(),
            tok_unk: tok.unk(),
            tok_end_of_turn: tok.eot(),
            ..TokRxInfo::new(n_vocab as u32, first)
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env = Arc::new(ApproximateTokEnv::new(trie));
        guarded("the token trie", || {
            let mut factory =
                ParserFactory::new_simple(&(env as _)).map_err(|e| GrammarError(e.to_string()))?;
            factory.quiet();
            *factory.limits_mut() = ParserLimits {
                verbose_errors: false,
                ..ParserLimits::default()
            };
            Ok(GrammarCompiler { factory, n_vocab })
        })
    }

    /// Compiles `g`, checking that it admits at least one output.
    pub fn compile(&self, g: &Grammar) -> Result<Constraint, GrammarError> {
        let top = match g {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(serde_json::json!({
                "type": "object",
                "x-guidance": {"whitespace_flexible": false},
            })),
            Grammar::JsonSchema(schema) => TopLevelGrammar::from_json_schema(prepare(schema)?),
            Grammar::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
            Grammar::Gbnf(src) => TopLevelGrammar::from_lark(gbnf_to_lark(src)?),
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
        };
        guarded("compiling the grammar", || {
            let parser = self
                .factory
                .create_parser(top)
                .map_err(|e| GrammarError(e.to_string()))?;
            let mut c = Constraint {
                matcher: Matcher::new(Ok(parser)),
                n_vocab: self.n_vocab,
            };
            // A grammar with no first token (unsatisfiable) fails here, not after the prompt.
            let first = c.allowed()?;
            if first.is_zero() {
                return Err(GrammarError("the grammar admits no output".into()));
            }
            Ok(c)
        })
    }
}

/// `schema` as a Lark expression (`%json {...}`), prepared as [`Grammar::JsonSchema`] prepares
/// it, for grammars that embed JSON documents (tool calls).
pub fn lark_json(schema: &Value) -> Result<String, GrammarError> {
    Ok(format!("%json {}", prepare(schema)?))
}

/// `schema` checked for depth and made ready: see [`compact`].
fn prepare(schema: &Value) -> Result<Value, GrammarError> {
    check_depth(schema, 0)?;
    Ok(compact(schema))
}

/// `schema` as it is compiled: compact JSON, unless the schema sets its own `x-guidance` (a
/// model that may put whitespace anywhere can fill its whole budget with it), and no keys
/// beyond an object's `properties` unless it says `additionalProperties` (llama.cpp's default
/// too: Pydantic's schemas do not say it, and a model that may add keys can add them forever).
fn compact(schema: &Value) -> Value {
    let mut s = schema.clone();
    close_objects(&mut s);
    if let Value::Object(o) = &mut s {
        o.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_flexible": false}));
    }
    s
}

/// Sets `additionalProperties: false` on every object schema with `properties` that does not
/// set it, walking only the keywords that hold schemas (a property named `properties` is a
/// name, not a keyword).
fn close_objects(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    if o.get("properties").is_some_and(Value::is_object) && !o.contains_key("additionalProperties")
    {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, sub) in o.iter_mut() {
        match (key.as_str(), sub) {
            (
                "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas",
                Value::Object(m),
            ) => m.values_mut().for_each(close_objects),
            ("items" | "prefixItems" | "anyOf" | "oneOf" | "allOf", Value::Array(a)) => {
                a.iter_mut().for_each(close_objects)
            }
            (
                "items"
                | "additionalProperties"
                | "not"
                | "if"
                | "then"
                | "else"
                | "contains"
                | "additionalItems"
                | "unevaluatedProperties"
                | "propertyNames",
                v,
            ) => close_objects(v),
            _ => {}
        }
    }
}

fn check_depth(v: &Value, depth: usize) -> Result<(), GrammarError> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(GrammarError(format!(
            "the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels"
        )));
    }
    match v {
        Value::Array(a) => a.iter().try_for_each(|x| check_depth(x, depth + 1)),
        Value::Object(o) => o.values().try_for_each(|x| check_depth(x, depth + 1)),
        _ => Ok(()),
    }
}

/// One output's grammar state.
pub struct Constraint {
    matcher: Matcher,
    n_vocab: usize,
}

impl Constraint {
    fn allowed(&mut self) -> Result<SimpleVob, GrammarError> {
        self.matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError(e.to_string()))
    }

    /// Sets every logit the grammar does not allow next to `-inf` (ids past the tokenizer's
    /// vocabulary included).
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = guarded("computing the token mask", || self.allowed())?;
        let words = allowed.as_slice();
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = if w * 32 < self.n_vocab {
                words.get(w).copied().unwrap_or(0)
            } else {
                0
            };
            if bits == u32::MAX && chunk.len() == 32 {
                continue;
            }
            for (b, v) in chunk.iter_mut().enumerate() {
                if bits >> b & 1 == 0 || w * 32 + b >= self.n_vocab {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    /// Advances past the sampled token `id` (which [`Constraint::apply`] allowed).
    pub fn accept(&mut self, id: u32) -> Result<(), GrammarError> {
        guarded("following the grammar", || {
            self.matcher
                .consume_token(id)
                .map_err(|e| GrammarError(e.to_string()))
        })
    }

    /// Whether the output is complete: nothing but the end may follow.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// An independent copy in the same state (a further choice of the same request).
    pub fn fork(&self) -> Constraint {
        Constraint {
            matcher: self.matcher.deep_clone(),
            n_vocab: self.n_vocab,
        }
    }
}

impl TokenMask for Constraint {
    fn apply(&mut self, logits: &mut [f32]) -> Result<(), String> {
        Constraint::apply(self, logits).map_err(|e| e.0)
    }

    fn accept(&mut self, id: u32) -> Result<(), String> {
        Constraint::accept(self, id).map_err(|e| e.0)
    }

    fn is_finished(&self) -> bool {
        Constraint::is_finished(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_closed_where_the_schema_is_silent() {
        let mut s = serde_json::json!({
            "properties": {"properties": {"type": "object", "properties": {"a": {}}}},
            "$defs": {"P": {"properties": {}, "additionalProperties": true}},
            "anyOf": [{"properties": {}}],
        });
        close_objects(&mut s);
        assert_eq!(s["additionalProperties"], false);
        let named = &s["properties"]["properties"];
        assert_eq!(named["additionalProperties"], false);
        assert!(
            s["properties"].get("additionalProperties").is_none(),
            "a name, not a keyword"
        );
        assert_eq!(s["$defs"]["P"]["additionalProperties"], true);
        assert_eq!(s["anyOf"][0]["additionalProperties"], false);
    }

    #[test]
    fn deep_schemas_are_refused_before_compiling() {
        let mut s = serde_json::json!({"type": "integer"});
        for _ in 0..MAX_SCHEMA_DEPTH {
            s = serde_json::json!({"type": "array", "items": s});
        }
        let e = check_depth(&s, 0).unwrap_err();
        assert!(e.0.contains("nested"), "{e}");
        assert!(check_depth(&serde_json::json!({"a": [1, {"b": 2}]}), 0).is_ok());
    }
}
