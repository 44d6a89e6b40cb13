//! Arbitrary bytes as a GGUF file: header, tensors (T2P repack included) and tokenizer must
//! give `Ok` or a typed error, never a panic, a hang or an allocation beyond the input size.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use t2p::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let Ok(gguf) = GgufFile::from_bytes(data) else {
        return;
    };
    let opts = LoadOptions {
        progress: None,
        chunk_bytes: 4096,
        ..LoadOptions::default()
    };
    if let Ok(store) = TensorStore::load(&gguf, &mut Cursor::new(data), &opts) {
        for t in store.iter() {
            let _ = t.to_f32_vec();
        }
    }
    if let Ok(tok) = Tokenizer::from_gguf(&gguf) {
        let ids = tok.encode("Hello <s> world\n\n  123 \u{e9}t\u{e9}", true, true);
        let _ = tok.decode(&ids, true);
    }
});
