//! Replays the regression corpus in `tests/gguf-corpus/` (written by its `make_corpus.py`):
//! `ok-*` files load completely, `bad-*` files are refused with an error, none panics.

use std::io::Cursor;
use std::path::PathBuf;

use t2p::runner::{GgufError, GgufFile, LoadOptions, TensorData, TensorStore, Tokenizer};

fn load_all(path: &std::path::Path) -> Result<(GgufFile, TensorStore), GgufError> {
    let opts = LoadOptions {
        progress: None,
        ..LoadOptions::default()
    };
    let (gguf, store) = TensorStore::load_file(path, &opts)?;
    // The in-memory path must agree with the file path.
    let bytes = std::fs::read(path).unwrap();
    let g2 = GgufFile::from_bytes(&bytes)?;
    TensorStore::load(&g2, &mut Cursor::new(&bytes), &opts)?;
    if gguf.get("tokenizer.ggml.model").is_some() {
        let tok = Tokenizer::from_gguf(&gguf)?;
        let ids = tok.encode("ab a <|x|> c\u{e9}", true, true);
        assert!(!ids.is_empty());
        let _ = tok.decode_lossy(&ids, true);
    }
    Ok((gguf, store))
}

#[test]
fn corpus_replays() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gguf-corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 40,
        "corpus missing: run make_corpus.py in {}",
        dir.display()
    );
    let (mut ok, mut bad) = (0, 0);
    for p in &files {
        let name = p.file_name().unwrap().to_str().unwrap();
        let r =
            std::panic::catch_unwind(|| load_all(p)).unwrap_or_else(|_| panic!("{name}: panicked"));
        if name.starts_with("ok-") {
            let (gguf, store) = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(store.len(), gguf.tensors().len());
            ok += 1;
        } else {
            let e = r.err().unwrap_or_else(|| panic!("{name}: accepted"));
            println!("{name}: {e}");
            bad += 1;
        }
    }
    println!("{ok} ok, {bad} refused");
}

/// Row `r` of tensor `name`, dequantized.
fn dequantized_row<const N: usize>(store: &TensorStore, name: &str, r: usize) -> [f32; N] {
    let mut row = [0f32; N];
    store
        .require(name)
        .unwrap()
        .dequantize_row(r, &mut row)
        .unwrap();
    row
}

#[test]
fn corpus_details() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/gguf-corpus");
    let (_, store) = load_all(&dir.join("ok-legacy-q2_0-g128.gguf")).unwrap();
    assert!(matches!(
        store.require("legacy.q2_0").unwrap().data,
        TensorData::T2p(_)
    ));
    let (gguf, store) = load_all(&dir.join("ok-minimal.gguf")).unwrap();
    assert!(matches!(
        store.require("b.pq2_0").unwrap().data,
        TensorData::T2p(_)
    ));
    assert_eq!(
        store.require("a.f32").unwrap().as_f32().unwrap(),
        [1.0, 2.0, 3.0, 4.0]
    );
    let row: [f32; 32] = dequantized_row(&store, "c.q8_0", 1);
    assert_eq!(row[0], 0.5);
    assert_eq!(row[31], 16.0);
    assert_eq!(dequantized_row(&store, "d.f16", 0), [1.0; 8]);
    assert_eq!(dequantized_row(&store, "e.bf16", 0), [1.0; 8]);
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    // "<|x|>" is user-defined: matched even without parse_special.
    let x = tok.token_id("<|x|>").unwrap();
    assert!(tok.encode("a<|x|>b", false, false).contains(&x));
    // 'é' is not in the vocabulary: byte fallback to <0xC3> <0xA9>.
    let ids = tok.encode("\u{e9}", false, false);
    let want: Vec<u32> = ["\u{2581}", "<0xC3>", "<0xA9>"]
        .iter()
        .map(|t| tok.token_id(t).unwrap())
        .collect();
    assert_eq!(ids, want);
    assert_eq!(tok.decode(&ids, false), " \u{e9}".as_bytes());
    // Id 42 in mainline's group-64 layout (once refused): group-64 T2P where its rows are a
    // multiple of 128 weights, else a ggml block type as stored.
    let (g64, store) = load_all(&dir.join("ok-q2_0-g64.gguf")).unwrap();
    let info = g64
        .tensors()
        .iter()
        .find(|t| t.name == "legacy.g64")
        .unwrap();
    assert_eq!(
        (info.ggml_type, info.stored_type_id),
        (t2p::runner::GgmlType::Q2_0_G64, 42)
    );
    let held = &store.require("legacy.g64").unwrap().data;
    if info.is_t2p_candidate() {
        assert!(matches!(held, TensorData::T2p(m) if m.blocks().halves() == 2));
    } else {
        assert!(matches!(held, TensorData::Quant(_)));
    }
}
