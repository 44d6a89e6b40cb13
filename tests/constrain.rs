//! Constrained decoding on the real Qwen3 vocabulary (`testdata/chat`): with the mask applied,
//! random logits (a model that prefers anything) still give output in the language: JSON that
//! satisfies the schema, sentences of a GBNF grammar, matches of a regex. Hostile grammars are
//! refused when compiled.

mod common;
mod runner_data;

use common::Lcg;

use serde_json::{Value, json};
use t2p::runner::constrain::{Constraint, Grammar, GrammarCompiler, MAX_SCHEMA_DEPTH};
use t2p::runner::{GgufFile, Tokenizer};

fn tokenizer() -> Option<Tokenizer> {
    let dir = runner_data::testdata()?;
    let gguf = GgufFile::open(dir.join("chat/qwen3-tiny-chat.gguf")).unwrap();
    Some(Tokenizer::from_gguf(&gguf).unwrap())
}

/// Decodes greedily from random logits (plus `boost` on token ids that the model "likes")
/// under `c`; returns the text and whether the grammar ended it.
fn decode(tok: &Tokenizer, mut c: Constraint, seed: u64, max: usize) -> (String, bool) {
    let n = tok.n_vocab() + 64; // the model's rows may pass the tokenizer's vocabulary
    let mut rng = Lcg(seed);
    let mut logits = vec![0f32; n];
    let mut ids = Vec::new();
    for _ in 0..max {
        for v in logits.iter_mut() {
            *v = (rng.next() >> 8) as f32 / (1u32 << 24) as f32 * 8.0;
        }
        c.apply(&mut logits).unwrap();
        assert!(
            logits[tok.n_vocab()..]
                .iter()
                .all(|v| *v == f32::NEG_INFINITY),
            "ids past the vocabulary are masked"
        );
        let id = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0 as u32;
        assert!(logits[id as usize].is_finite(), "some token is allowed");
        if tok.is_eog(id) {
            return (tok.decode_lossy(&ids, false), true);
        }
        ids.push(id);
        c.accept(id).unwrap();
        if c.is_finished() {
            return (tok.decode_lossy(&ids, false), true);
        }
    }
    (tok.decode_lossy(&ids, false), false)
}

#[test]
fn a_pydantic_schema_gives_valid_json_from_random_logits() {
    let Some(tok) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tok).unwrap();
    // What Pydantic writes for `class Pet(BaseModel)` nested in `class Person(BaseModel)`.
    let schema = json!({
        "$defs": {"Pet": {
            "properties": {
                "kind": {"enum": ["cat", "dog"], "title": "Kind", "type": "string"},
                "legs": {"maximum": 8, "minimum": 0, "title": "Legs", "type": "integer"},
            },
            "required": ["kind", "legs"], "title": "Pet", "type": "object",
        }},
        "properties": {
            "name": {"maxLength": 12, "title": "Name", "type": "string"},
            "age": {"maximum": 150, "minimum": 0, "title": "Age", "type": "integer"},
            "pets": {"items": {"$ref": "#/$defs/Pet"}, "maxItems": 3, "title": "Pets", "type": "array"},
            "alive": {"title": "Alive", "type": "boolean"},
        },
        "required": ["name", "age", "pets", "alive"], "title": "Person", "type": "object",
    });
    let base = compiler.compile(&Grammar::JsonSchema(schema)).unwrap();
    for seed in 1..=12u64 {
        let (text, ended) = decode(&tok, base.fork(), seed * 7919, 300);
        assert!(ended, "seed {seed}: the grammar ended the output: {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let name = v["name"].as_str().unwrap();
        assert!(name.chars().count() <= 12, "{text}");
        assert!((0..=150).contains(&v["age"].as_i64().unwrap()), "{text}");
        assert!(v["alive"].is_boolean(), "{text}");
        let pets = v["pets"].as_array().unwrap();
        assert!(pets.len() <= 3, "{text}");
        for p in pets {
            assert!(
                ["cat", "dog"].contains(&p["kind"].as_str().unwrap()),
                "{text}"
            );
            assert!((0..=8).contains(&p["legs"].as_i64().unwrap()), "{text}");
        }
        assert_eq!(v.as_object().unwrap().len(), 4, "no extra keys: {text}");
    }
}

#[test]
fn json_mode_gives_an_object() {
    let Some(tok) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tok).unwrap();
    let c = compiler.compile(&Grammar::JsonObject).unwrap();
    // Random logits may nest or run long: a prefix that is cut off is still a JSON prefix,
    // so check the ones that end, and that some do.
    let mut ended = 0;
    for seed in 1..=8u64 {
        let (text, done) = decode(&tok, c.fork(), seed, 200);
        assert!(text.starts_with('{'), "{text:?}");
        if done {
            ended += 1;
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(v.is_object(), "{text}");
        }
    }
    assert!(ended > 0, "no output ended");
}

#[test]
fn gbnf_and_regex_grammars_hold() {
    let Some(tok) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tok).unwrap();
    let gbnf = r#"
root ::= answer " " num ("," num)*
answer ::= "yes" | "no"  # a comment
num ::= [1-9] [0-9]{0,2}
"#;
    let c = compiler.compile(&Grammar::Gbnf(gbnf.into())).unwrap();
    for seed in 1..=6u64 {
        let (text, _) = decode(&tok, c.fork(), seed, 40);
        let (answer, nums) = text.split_once(' ').unwrap_or_else(|| panic!("{text:?}"));
        assert!(answer == "yes" || answer == "no", "{text:?}");
        for n in nums.split(',').filter(|n| !n.is_empty()) {
            assert!(n.len() <= 3 && !n.starts_with('0'), "{text:?}");
            assert!(n.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
        }
    }
    let c = compiler
        .compile(&Grammar::Regex("[a-c]{2}-[0-9]{3}".into()))
        .unwrap();
    for seed in 1..=4u64 {
        let (text, ended) = decode(&tok, c.fork(), seed, 20);
        assert!(ended, "{text:?}");
        let b = text.as_bytes();
        assert_eq!(b.len(), 6, "{text:?}");
        assert!(b[..2].iter().all(|x| (b'a'..=b'c').contains(x)) && b[2] == b'-');
        assert!(b[3..].iter().all(u8::is_ascii_digit), "{text:?}");
    }
    // Lark as given: a special token of the vocabulary by name.
    let lark = r#"start: "<tool_call>" /[a-z]{1,4}/ "</tool_call>""#;
    let c = compiler.compile(&Grammar::Lark(lark.into())).unwrap();
    let (text, ended) = decode(&tok, c, 3, 20);
    assert!(ended, "{text:?}");
    assert!(
        text.starts_with("<tool_call>") && text.ends_with("</tool_call>"),
        "{text:?}"
    );
}

#[test]
fn hostile_grammars_are_refused_when_compiled() {
    let Some(tok) = tokenizer() else { return };
    let compiler = GrammarCompiler::new(&tok).unwrap();
    let refuse = |g: Grammar, want: &str| {
        let e = compiler
            .compile(&g)
            .err()
            .unwrap_or_else(|| panic!("{g:?} compiled"));
        assert!(e.0.to_lowercase().contains(want), "{g:?}: {e}");
    };
    let mut deep = json!({"type": "integer"});
    for _ in 0..=MAX_SCHEMA_DEPTH {
        deep = json!({"type": "array", "items": deep});
    }
    refuse(Grammar::JsonSchema(deep), "nested");
    refuse(
        Grammar::JsonSchema(json!({"type": "integer", "minimum": 5, "maximum": 3})),
        "",
    );
    refuse(Grammar::JsonSchema(json!({"type": "frobnicate"})), "");
    refuse(Grammar::Lark("start: (".into()), "");
    refuse(Grammar::Gbnf("root ::= missing".into()), "never defined");
    refuse(Grammar::Regex("(".into()), "");
    // A schema far past the grammar-size limit: refused, not compiled for minutes.
    let huge: Vec<String> = (0..200_000).map(|i| format!("value-{i}-{i}-{i}")).collect();
    refuse(Grammar::JsonSchema(json!({"enum": huge})), "");
}

#[test]
fn a_decoder_under_a_grammar_writes_schema_valid_json_with_the_real_model() {
    use t2p::runner::LoadOptions;
    use t2p::runner::generate::Decoder;
    use t2p::runner::model::{Exec, Model};
    use t2p::runner::sample::{Sampler, SamplerConfig};
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let l = Model::load(
        dir.join("chat/qwen3-tiny-chat.gguf"),
        &LoadOptions::default(),
    )
    .unwrap();
    let exec = Exec::new(2);
    let compiler = GrammarCompiler::new(&l.tokenizer).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 5}, "ok": {"type": "boolean"}},
        "required": ["n", "ok"],
    });
    let base = compiler.compile(&Grammar::JsonSchema(schema)).unwrap();
    let prompt = l.tokenizer.encode("Answer in JSON:", false, true);
    for seed in 0..4 {
        let mut s = l.model.new_session(256);
        let mut sampler = Sampler::new(SamplerConfig {
            temperature: 1.0,
            seed,
            ..Default::default()
        });
        let mut ids = Vec::new();
        let mut c = base.fork();
        Decoder::new(&l.model, &exec, &mut s, 64)
            .generate_masked(
                &prompt,
                100,
                &mut sampler,
                &mut c,
                |id| l.tokenizer.is_eog(id),
                |id| {
                    ids.push(id);
                    true
                },
            )
            .unwrap();
        ids.retain(|&id| !l.tokenizer.is_eog(id));
        let text = l.tokenizer.decode_lossy(&ids, false);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!((-5..=5).contains(&v["n"].as_i64().unwrap()), "{text}");
        assert!(v["ok"].is_boolean(), "{text}");
    }
}
