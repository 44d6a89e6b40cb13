//! Arbitrary bytes as text for the SentencePiece and byte-level BPE tokenizers (and as ids for
//! the streaming decoder): encoding must not panic, and decoding what was encoded must give
//! back the text (both vocabularies have complete byte coverage).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use t2p::runner::{GgufFile, Tokenizer};

fn load(rel: &str) -> Option<Tokenizer> {
    let dir = std::env::var_os("T2P_TESTDATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata")
        });
    let gguf = GgufFile::open(dir.join(rel)).ok()?;
    Tokenizer::from_gguf(&gguf).ok()
}

fn tokenizers() -> &'static Vec<Tokenizer> {
    static T: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let mut v = Vec::new();
        // The corpus' tiny SPM vocabulary is always there; the real ones when test data is.
        let tiny = include_bytes!("../../tests/gguf-corpus/ok-minimal.gguf");
        v.push(Tokenizer::from_gguf(&GgufFile::from_bytes(tiny).unwrap()).unwrap());
        for rel in [
            "tokenizer/ggml-vocab-qwen35.gguf",
            "tokenizer/ggml-vocab-llama-spm.gguf",
            "tokenizer/ggml-vocab-llama-bpe.gguf",
        ] {
            v.extend(load(rel));
        }
        v
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let all = tokenizers();
    // One tokenizer per input (chosen by the first byte) keeps the executions fast.
    let i = (first >> 1) as usize % all.len();
    {
        let tok = &all[i];
        let parse_special = first & 1 == 1;
        let ids = tok.encode(&text, i.is_multiple_of(2), parse_special);
        if !parse_special {
            let mut back = tok.decode(&ids, false);
            // SPM prefixes a space to the text.
            if tok.kind() == t2p::runner::TokenizerKind::Spm && back.first() == Some(&b' ') {
                back.remove(0);
            }
            if tok.kind() == t2p::runner::TokenizerKind::Bpe {
                assert_eq!(back, text.as_bytes(), "round trip");
            }
        }
        // The bytes as ids through the streaming decoder.
        let mut dec = tok.stream_decoder(true);
        for c in rest.chunks(2) {
            let id = u16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
            let _ = dec.push(id % (tok.n_vocab() as u32 + 3));
        }
        let _ = dec.finish();
    }
});
