//! Tokenizers against llama.cpp: `test-tokenizer-0` vectors for five vocabularies, the prompt
//! ids of the reference runs, the perplexity texts, and decoding of generated ids.

mod runner_data;

use std::path::Path;

use t2p::runner::{GgufFile, Tokenizer};

fn tokenizer(path: &Path) -> Tokenizer {
    let gguf = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn check_vectors(vocab: &str) {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let base = dir
        .join("tokenizer")
        .join(format!("ggml-vocab-{vocab}.gguf"));
    let tok = tokenizer(&base);
    let inp = std::fs::read_to_string(base.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).unwrap();
    let mut inputs: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(
        inputs.pop(),
        Some(""),
        "the .inp file ends with the separator"
    );
    let expected: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        expected.len(),
        "{vocab}: inputs vs output lines"
    );
    let mut failures = Vec::new();
    for (text, want) in inputs.iter().zip(&expected) {
        let got = tok.encode(text, false, false);
        if &got != want {
            failures.push(format!("{text:?}\n   want {want:?}\n   got  {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{vocab}: {} of {} vectors differ:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
    println!("{vocab}: {} vectors ok", inputs.len());
}

#[test]
fn vectors_qwen2() {
    check_vectors("qwen2");
}

#[test]
fn vectors_qwen35() {
    check_vectors("qwen35");
}

#[test]
fn vectors_llama_spm() {
    check_vectors("llama-spm");
}

#[test]
fn vectors_llama_bpe() {
    check_vectors("llama-bpe");
}

#[test]
fn vectors_gpt_2() {
    check_vectors("gpt-2");
}

#[test]
fn stories260k_prompt_and_ppl_text() {
    let Some((d, tok)) =
        runner_data::open_in_testdata("stories260K", "stories260K.gguf", tokenizer)
    else {
        return;
    };
    assert_eq!(tok.bos(), Some(1));
    assert_eq!(tok.eos(), Some(2));
    assert!(tok.is_eog(2));
    let prompt = std::fs::read_to_string(d.join("prompt-once-upon-a-time.txt")).unwrap();
    assert_eq!(tok.encode(&prompt, true, true), [1, 403, 407, 261, 378]);
    check_ppl_text(&tok, &d);
    check_greedy(&tok, &d.join("greedy-once-upon-a-time-n200.json"), None);
    check_greedy(&tok, &d.join("greedy-bos-n200.json"), None);
}

fn check_ppl_text(tok: &Tokenizer, d: &Path) {
    let text = std::fs::read_to_string(d.join("ppl-text.txt")).unwrap();
    let want: Vec<u32> = std::fs::read_to_string(d.join("ppl-text.ids.txt"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let got = tok.encode(&text, true, false);
    let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(
        got.len(),
        want.len(),
        "{}: ppl-text length; first difference at {first_diff:?}",
        d.display()
    );
    assert_eq!(first_diff, None, "{}: ppl-text ids", d.display());
}

/// Prompt ids (when the prompt file is given) and detokenization of the generated ids.
fn check_greedy(tok: &Tokenizer, json: &Path, prompt: Option<&Path>) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let prompt_bytes = runner_data::unhex(v["prompt_hex"].as_str().unwrap());
    if let Some(p) = prompt {
        assert_eq!(std::fs::read(p).unwrap(), prompt_bytes, "{}", p.display());
    }
    let text = String::from_utf8(prompt_bytes).unwrap();
    assert_eq!(
        tok.encode(&text, true, true),
        ids("prompt_ids"),
        "{}: prompt ids",
        json.display()
    );
    let generated = ids("generated_ids");
    for (i, (&id, hex)) in generated
        .iter()
        .zip(v["generated_pieces_hex"].as_array().unwrap())
        .enumerate()
    {
        assert_eq!(
            tok.token_to_piece(id, true),
            runner_data::unhex(hex.as_str().unwrap()),
            "{}: piece {i} (id {id})",
            json.display()
        );
    }
    let want_text = runner_data::unhex(v["generated_text_hex"].as_str().unwrap());
    assert_eq!(
        tok.decode(&generated, false),
        want_text,
        "{}",
        json.display()
    );
    // The streaming decoder gives the same text, never splitting a character.
    let mut dec = tok.stream_decoder(false);
    let mut streamed = String::new();
    for &id in &generated {
        streamed.push_str(&dec.push(id));
    }
    streamed.push_str(&dec.finish());
    assert_eq!(streamed, String::from_utf8_lossy(&want_text));
}

fn check_qwen_model(folder: &str, file: &str) {
    let Some((d, tok)) = runner_data::open_in_testdata(folder, file, tokenizer) else {
        return;
    };
    assert!(!tok.add_bos());
    let mut n = 0;
    for e in std::fs::read_dir(d.join("greedy")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let name = p.file_name().unwrap().to_str().unwrap();
            let prompt = d
                .join("prompts")
                .join(format!("{}.txt", name.split('.').next().unwrap()));
            check_greedy(&tok, &p, Some(&prompt));
            n += 1;
        }
    }
    assert_eq!(n, 6, "greedy JSON files in {folder}");
    check_ppl_text(&tok, &d);
}

#[test]
fn qwen3_tiny_prompts() {
    check_qwen_model("qwen3-tiny", "qwen3-tiny-pq2_0.gguf");
}

#[test]
fn qwen35_tiny_prompts() {
    check_qwen_model("qwen35-tiny", "qwen35-tiny-pq2_0.gguf");
}

#[test]
fn special_tokens_are_parsed_only_when_asked() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let tok = tokenizer(&dir.join("tokenizer/ggml-vocab-qwen2.gguf"));
    let im_start = tok.token_id("<|im_start|>").unwrap();
    let with = tok.encode("<|im_start|>user", false, true);
    assert_eq!(with[0], im_start);
    let without = tok.encode("<|im_start|>user", false, false);
    assert!(!without.contains(&im_start));
    assert!(tok.is_eog(tok.token_id("<|im_end|>").unwrap()));
    assert!(tok.is_eog(tok.eos().unwrap()));
    // A control token renders only when asked.
    assert!(tok.token_to_piece(im_start, false).is_empty());
    assert_eq!(tok.token_to_piece(im_start, true), b"<|im_start|>");
}

#[test]
fn streaming_decoder_holds_partial_characters() {
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let tok = tokenizer(&dir.join("tokenizer/ggml-vocab-llama-spm.gguf"));
    // "€" = E2 82 AC through byte-fallback tokens.
    let ids: Vec<u32> = ["<0xE2>", "<0x82>", "<0xAC>"]
        .iter()
        .map(|t| tok.token_id(t).unwrap())
        .collect();
    let mut dec = tok.stream_decoder(false);
    assert_eq!(dec.push(ids[0]), "");
    assert_eq!(dec.push(ids[1]), "");
    assert_eq!(dec.pending(), [0xE2, 0x82]);
    assert_eq!(dec.push(ids[2]), "€");
    // An invalid byte is replaced at once instead of being held forever.
    assert_eq!(dec.push(tok.token_id("<0xFF>").unwrap()), "\u{FFFD}");
    assert_eq!(dec.push(ids[0]), "");
    assert_eq!(dec.finish(), "\u{FFFD}");
}
