//! Loading the shared models: every tensor arrives with the right type and values, pq2_0
//! matrices land in T2P (checked row by row against the file's own bytes), streaming in small
//! chunks gives the same result, the repacked matrices lie in one range of memory, and loading
//! holds no second copy of the weights.

mod runner_data;

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use t2p::format::{BlockPq2_0, T2pSlice, dequantize_row_pq2_0, f16_to_f32};
use t2p::runner::{
    GgmlType, GgufFile, LoadOptions, TensorData, TensorInfo, TensorStore, current_rss_bytes,
    peak_rss_bytes,
};

/// The tests of this file run one at a time so that the RSS measurement sees only its own load.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn quiet() -> LoadOptions {
    LoadOptions {
        progress: None,
        ..LoadOptions::default()
    }
}

fn raw(path: &Path, gguf: &GgufFile, t: &TensorInfo) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    let r = gguf.tensor_file_range(t);
    f.seek(SeekFrom::Start(r.start)).unwrap();
    let mut v = vec![0u8; (r.end - r.start) as usize];
    f.read_exact(&mut v).unwrap();
    v
}

/// Reference dequantization straight from the file bytes.
fn reference_rows(path: &Path, gguf: &GgufFile, t: &TensorInfo) -> Vec<f32> {
    let bytes = raw(path, gguf, t);
    match t.ggml_type {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        GgmlType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        GgmlType::PQ2_0 => {
            let blocks: Vec<BlockPq2_0> = bytes
                .chunks_exact(34)
                .map(|c| BlockPq2_0 {
                    d: u16::from_le_bytes([c[0], c[1]]),
                    qs: c[2..].try_into().unwrap(),
                })
                .collect();
            let mut out = vec![0f32; blocks.len() * 128];
            dequantize_row_pq2_0(&blocks, &mut out);
            out
        }
        other => panic!("unexpected type {other}"),
    }
}

fn check_model(path: &Path, opts: &LoadOptions) -> (GgufFile, TensorStore) {
    let (gguf, store) = TensorStore::load_file(path, opts).unwrap();
    assert_eq!(store.len(), gguf.tensors().len());
    for t in gguf.tensors() {
        let tensor = store.require(&t.name).unwrap();
        assert_eq!(tensor.shape, t.shape);
        assert_eq!(tensor.ggml_type(), t.ggml_type, "{}", t.name);
        assert_eq!(tensor.size_bytes() as u64, t.n_bytes, "{}", t.name);
        let uses_t2p = opts.uses_t2p(t);
        assert_eq!(
            matches!(tensor.data, TensorData::T2p(_)),
            uses_t2p,
            "{}",
            t.name
        );
        let want = reference_rows(path, &gguf, t);
        let got = tensor.to_f32_vec().unwrap();
        assert_eq!(got.len(), want.len(), "{}", t.name);
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{}: values differ from the file", t.name);
    }
    (gguf, store)
}

/// The matrices a load repacks lie one after another in one allocation, in file order, so
/// that huge pages can hold all of them (the weight arena), not only those of 2 MiB or more.
fn assert_repacked_in_one_range(gguf: &GgufFile, store: &TensorStore) {
    let spans: Vec<(usize, usize)> = gguf
        .tensors()
        .iter()
        .filter(|t| t.ggml_type == GgmlType::PQ2_0)
        .filter_map(|t| store.require(&t.name).unwrap().as_t2p())
        .map(|m| match m.blocks() {
            T2pSlice::G128(b) => (b.as_ptr() as usize, std::mem::size_of_val(b)),
            T2pSlice::G64(b) => (b.as_ptr() as usize, std::mem::size_of_val(b)),
        })
        .collect();
    assert!(spans.len() > 1);
    for w in spans.windows(2) {
        assert_eq!(w[0].0 + w[0].1, w[1].0, "repacked matrices apart");
    }
}

#[test]
fn stories260k_loads_as_f32() {
    let _guard = serial();
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let (gguf, store) = check_model(&dir.join("stories260K/stories260K.gguf"), &quiet());
    assert_eq!(gguf.architecture().unwrap(), "llama");
    assert_eq!(gguf.get_u32("llama.block_count").unwrap(), 5);
    assert_eq!(gguf.get_u32("llama.embedding_length").unwrap(), 64);
    assert!(
        (gguf
            .get_f32("llama.attention.layer_norm_rms_epsilon")
            .unwrap()
            - 1e-5)
            .abs()
            < 1e-9
    );
    assert!(gguf.get_u32("llama.nonexistent").is_err());
    assert!(gguf.get_str("llama.block_count").is_err());
    assert_eq!(store.len(), 48);
    let emb = store.require("token_embd.weight").unwrap();
    assert_eq!((emb.row_len(), emb.n_rows()), (64, 512));
    let mut row = vec![0f32; 64];
    emb.dequantize_row(403, &mut row).unwrap();
    assert_eq!(row, emb.as_f32().unwrap()[403 * 64..404 * 64]);
    assert!(emb.dequantize_row(512, &mut row).is_err());
    assert!(store.require("nope").is_err());
}

#[test]
fn qwen_models_load_into_t2p() {
    let _guard = serial();
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    for p in [
        "qwen3-tiny/qwen3-tiny-pq2_0.gguf",
        "qwen35-tiny/qwen35-tiny-pq2_0.gguf",
    ] {
        let path = dir.join(p);
        let (gguf, store) = check_model(&path, &quiet());
        let n_t2p = store
            .iter()
            .filter(|t| matches!(t.data, TensorData::T2p(_)))
            .count();
        let n_pq2 = gguf
            .tensors()
            .iter()
            .filter(|t| t.ggml_type == GgmlType::PQ2_0)
            .count();
        assert_eq!(n_t2p, n_pq2, "{p}: every pq2_0 matrix is T2P-able");
        assert_repacked_in_one_range(&gguf, &store);
        let emb = store.require("token_embd.weight").unwrap();
        assert!(emb.as_t2p().is_some());
        assert_eq!(emb.n_rows(), 151936);
        // Tiny chunks exercise every chunk boundary of the streaming repack; keeping
        // token_embd as pq2_0 exercises the other path.
        let small = LoadOptions {
            chunk_bytes: 1,
            keep_pq2_0: vec!["token_embd.weight".into()],
            ..quiet()
        };
        let (_, store2) = check_model(&path, &small);
        assert!(matches!(
            store2.require("token_embd.weight").unwrap().data,
            TensorData::Pq2_0(_)
        ));
        let (a, b) = (
            store
                .require("blk.0.ffn_down.weight")
                .unwrap()
                .as_t2p()
                .unwrap(),
            store2
                .require("blk.0.ffn_down.weight")
                .unwrap()
                .as_t2p()
                .unwrap(),
        );
        assert_eq!(a.blocks(), b.blocks());
    }
}

/// Loading adds the tensor bytes and little else: no second copy of the model.
#[test]
fn loading_holds_one_copy() {
    let _guard = serial();
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    let path = dir.join("qwen35-tiny/qwen35-tiny-pq2_0.gguf");
    let gguf = GgufFile::open(&path).unwrap();
    let (Some(before), Some(_)) = (current_rss_bytes(), peak_rss_bytes()) else {
        println!("no /proc/self/status: RSS not measured");
        return;
    };
    let mut f = std::fs::File::open(&path).unwrap();
    let store = TensorStore::load(&gguf, &mut f, &quiet()).unwrap();
    let after = current_rss_bytes().unwrap();
    let peak = peak_rss_bytes().unwrap();
    let tensor_bytes = store.total_bytes() as u64;
    println!(
        "file {} B, tensors {} B, RSS before load {} B, after {} B (+{}), process peak {} B",
        gguf.file_len(),
        tensor_bytes,
        before,
        after,
        after.saturating_sub(before),
        peak
    );
    // The growth of this load is bounded: the tensors plus a few MiB of chunking and
    // allocator slack (a second copy would double it).
    assert!(
        after.saturating_sub(before) < tensor_bytes + (12 << 20),
        "load grew RSS by {} for {} tensor bytes",
        after - before,
        tensor_bytes
    );
}
