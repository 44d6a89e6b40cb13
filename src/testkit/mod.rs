//! Fixture writers: GGUF files written from scratch for tests and benchmarks, kept out of the
//! runner's API (feature `testkit`, which the `cli` feature turns on for `libt2p synth`).
//!
//! [`gguf_writer`] writes any GGUF v3 file tensor by tensor; [`synth`] (qwen3) and
//! [`synth_qwen35`] (Qwen3.5 hybrid) write synthetic models with real shapes and random
//! ternary weights, valid for both `libt2p` and llama.cpp.

pub use crate::runner::gguf_writer;
pub mod quantize;
pub mod synth;
pub mod synth_bitnet;
pub mod synth_qwen35;

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use crate::runner::model::DecoderDims;
use crate::runner::{GgufError, GgufFile, Value};
use gguf_writer::{GgufWriter, TensorSpec};
use synth::Qwen3Shape;
use synth_qwen35::Qwen35Shape;

/// Writes the shape called `shape` of [`synth::QWEN3_SHAPES`] or
/// [`synth_qwen35::QWEN35_SHAPES`] at `path` with pq2_0 matrices, the file `libt2p synth
/// --shape <shape> --seed <seed>` writes. An unknown name is a [`GgufError::Shape`].
pub fn write_named(path: &Path, shape: &str, vocab: &GgufFile, seed: u64) -> Result<(), GgufError> {
    if let Some(s) = Qwen3Shape::named(shape) {
        return synth::write_qwen3(path, s, vocab, seed);
    }
    match Qwen35Shape::named(shape) {
        Some(s) => synth_qwen35::write_qwen35(path, s, vocab, seed),
        None => Err(GgufError::Shape {
            name: shape.into(),
            reason: "no synthetic shape has this name".into(),
        }),
    }
}

/// A fast deterministic generator for weights (xorshift64*).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[lo, hi)` from the top 24 bits.
    pub(crate) fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }
}

/// Little-endian bytes of `v`.
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The hyper-parameters every synthetic decoder writes: `general.architecture`, `general.name`
/// (from the shape's name), `general.file_type`, and under `<arch>.`: `context_length`,
/// `embedding_length`, `block_count`, `feed_forward_length`, `attention.head_count`,
/// `attention.head_count_kv`, `attention.key_length` and `attention.value_length` (both
/// `head_dim`), `rope.freq_base`.
pub(crate) struct DecoderKv<'a> {
    pub arch: &'a str,
    pub name: &'a str,
    pub file_type: u32,
    pub n_ctx_train: usize,
    pub dims: DecoderDims,
    pub rope_base: f32,
}

impl DecoderKv<'_> {
    /// The `general.*` keys and the `<arch>.*` keys above (RMSNorm epsilon 1e-6).
    pub(crate) fn kv(&self) -> Vec<(String, Value)> {
        let a = |k: &str| format!("{}.{k}", self.arch);
        let u = |v: usize| Value::U32(v as u32);
        vec![
            (
                "general.architecture".into(),
                Value::String(self.arch.into()),
            ),
            (
                "general.name".into(),
                Value::String(format!("t2p synthetic {}", self.name)),
            ),
            ("general.file_type".into(), Value::U32(self.file_type)),
            ("general.quantization_version".into(), Value::U32(2)),
            (a("context_length"), u(self.n_ctx_train)),
            (a("embedding_length"), u(self.dims.n_embd)),
            (a("block_count"), u(self.dims.n_layer)),
            (a("feed_forward_length"), u(self.dims.n_ff)),
            (a("attention.head_count"), u(self.dims.n_head)),
            (a("attention.head_count_kv"), u(self.dims.n_head_kv)),
            (a("attention.key_length"), u(self.dims.head_dim)),
            (a("attention.value_length"), u(self.dims.head_dim)),
            (a("rope.freq_base"), Value::F32(self.rope_base)),
            (a("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        ]
    }
}

/// The `tokenizer.*` metadata of `vocab`, as it stands: what a synthetic model copies to be
/// readable with the real model's tokenizer.
pub(crate) fn tokenizer_metadata(vocab: &GgufFile) -> impl Iterator<Item = (String, Value)> + '_ {
    vocab
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .cloned()
}

/// Writes a GGUF file at `path` with metadata `kv` and the tensors `specs`, asking `data` for
/// each tensor's bytes in order (so only one tensor is in memory at a time).
pub(crate) fn write_gguf(
    path: &Path,
    kv: &[(String, Value)],
    specs: Vec<TensorSpec>,
    mut data: impl FnMut(&TensorSpec) -> Result<Vec<u8>, GgufError>,
) -> Result<(), GgufError> {
    let io_err = |e: io::Error| GgufError::Io {
        what: path.display().to_string(),
        offset: 0,
        message: e.to_string(),
    };
    let file = BufWriter::with_capacity(8 << 20, File::create(path).map_err(io_err)?);
    let mut w = GgufWriter::begin(file, kv, specs.clone()).map_err(io_err)?;
    for spec in &specs {
        w.tensor_data(&data(spec)?).map_err(io_err)?;
    }
    w.finish().map_err(io_err)?;
    Ok(())
}

/// Copies the GGUF at `src` to `dst` with the metadata values of `set` (replaced, or added at
/// the end): how tests give a model another `tokenizer.chat_template`. The tensors are copied
/// byte for byte.
pub fn copy_with_metadata(
    src: &Path,
    dst: &Path,
    set: &[(String, Value)],
) -> Result<(), GgufError> {
    use std::io::{Read, Seek, SeekFrom};
    let gguf = GgufFile::open(src)?;
    let mut kv: Vec<(String, Value)> = gguf
        .metadata()
        .iter()
        .filter(|(k, _)| !set.iter().any(|(s, _)| s == k))
        .cloned()
        .collect();
    kv.extend(set.iter().cloned());
    let specs: Vec<TensorSpec> = gguf
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.shape.clone(),
            ggml_type: t.stored_type_id,
            bytes: t.n_bytes,
        })
        .collect();
    let io_err = |e: io::Error| GgufError::Io {
        what: src.display().to_string(),
        offset: 0,
        message: e.to_string(),
    };
    let mut input = File::open(src).map_err(io_err)?;
    let ranges: Vec<_> = gguf
        .tensors()
        .iter()
        .map(|t| gguf.tensor_file_range(t))
        .collect();
    let mut i = 0;
    write_gguf(dst, &kv, specs, |_| {
        let range = ranges[i].clone();
        i += 1;
        let mut data = vec![0u8; (range.end - range.start) as usize];
        input
            .seek(SeekFrom::Start(range.start))
            .and_then(|_| input.read_exact(&mut data))
            .map_err(io_err)?;
        Ok(data)
    })
}
