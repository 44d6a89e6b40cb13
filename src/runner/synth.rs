//! Synthetic models with real shapes and random ternary weights, for benchmarks without a
//! download: a valid GGUF that `libt2p` and llama.cpp both load.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use super::gguf::Value;
use super::gguf_writer::{GgufWriter, TensorSpec};
use super::{GgufError, GgufFile};
use crate::format::{BlockPq2_0, QK_PQ2_0, f32_to_f16};

/// A qwen3 (Ternary Bonsai) shape.
#[derive(Clone, Copy, Debug)]
pub struct Qwen3Shape {
    /// Name used by `--shape`.
    pub name: &'static str,
    /// Residual width.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// FFN width.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Whether `output.weight` is absent (the token table is the LM head).
    pub tied: bool,
}

/// The shapes `synth` knows: Qwen3 1.7B / 4B / 8B (as Ternary Bonsai uses them) and a tiny one.
pub const QWEN3_SHAPES: [Qwen3Shape; 4] = [
    Qwen3Shape {
        name: "bonsai-1.7b",
        n_embd: 2048,
        n_layer: 28,
        n_ff: 6144,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        tied: true,
    },
    Qwen3Shape {
        name: "bonsai-4b",
        n_embd: 2560,
        n_layer: 36,
        n_ff: 9728,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        tied: true,
    },
    Qwen3Shape {
        name: "bonsai-8b",
        n_embd: 4096,
        n_layer: 36,
        n_ff: 12288,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        tied: false,
    },
    Qwen3Shape {
        name: "qwen3-test",
        n_embd: 256,
        n_layer: 2,
        n_ff: 768,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        tied: false,
    },
];

/// A fast deterministic generator for weights.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// `rows x k` random ternary weights as pq2_0 bytes: codes -1/0/+1 with probabilities 1/4, 1/2,
/// 1/4 and one scale per block around `gain / sqrt(k / 2)` (activations keep their size).
fn ternary_pq2_0(rows: usize, k: usize, gain: f32, rng: &mut Rng) -> Vec<u8> {
    // Two random bits per weight: 00 -> -1, 01 and 10 -> 0, 11 -> +1 (codes 0, 1, 1, 2).
    let code = |b: u64| [0u8, 1, 1, 2][(b & 3) as usize];
    let base = gain / (k as f32 / 2.0).sqrt();
    let blocks: Vec<BlockPq2_0> = (0..rows * k / QK_PQ2_0)
        .map(|_| {
            let mut b = BlockPq2_0 {
                d: f32_to_f16(base * (0.75 + (rng.next() % 512) as f32 / 1024.0)),
                qs: [0; 32],
            };
            for chunk in b.qs.chunks_exact_mut(8) {
                let r = rng.next();
                for (i, q) in chunk.iter_mut().enumerate() {
                    let bits = r >> (8 * i);
                    *q = code(bits)
                        | code(bits >> 2) << 2
                        | code(bits >> 4) << 4
                        | code(bits >> 6) << 6;
                }
            }
            b
        })
        .collect();
    bytemuck::cast_slice(&blocks).to_vec()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes a qwen3 GGUF of `shape` with random ternary pq2_0 weights and the `tokenizer.*`
/// metadata of `vocab` (whose token count sets the vocabulary size).
pub fn write_qwen3(
    path: &Path,
    shape: &Qwen3Shape,
    vocab: &GgufFile,
    seed: u64,
) -> Result<(), GgufError> {
    let io_err = |e: io::Error| GgufError::Io {
        what: path.display().to_string(),
        offset: 0,
        message: e.to_string(),
    };
    let n_vocab = vocab.get_str_array("tokenizer.ggml.tokens")?.len();
    if n_vocab % 4 != 0 {
        return Err(GgufError::Shape {
            name: "tokenizer.ggml.tokens".into(),
            reason: format!("{n_vocab} tokens is not a multiple of 4"),
        });
    }
    let s = shape;
    let a = |k: &str| format!("qwen3.{k}");
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("qwen3".into())),
        (
            "general.name".into(),
            Value::String(format!("t2p synthetic {}", s.name)),
        ),
        ("general.file_type".into(), Value::U32(141)),
        ("general.quantization_version".into(), Value::U32(2)),
        (a("context_length"), Value::U32(40960)),
        (a("embedding_length"), Value::U32(s.n_embd as u32)),
        (a("block_count"), Value::U32(s.n_layer as u32)),
        (a("feed_forward_length"), Value::U32(s.n_ff as u32)),
        (a("attention.head_count"), Value::U32(s.n_head as u32)),
        (a("attention.head_count_kv"), Value::U32(s.n_head_kv as u32)),
        (a("attention.key_length"), Value::U32(s.head_dim as u32)),
        (a("attention.value_length"), Value::U32(s.head_dim as u32)),
        (a("rope.freq_base"), Value::F32(1e6)),
        (a("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
    ];
    kv.extend(
        vocab
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned(),
    );

    let (d, hd, ff) = (s.n_embd, s.head_dim, s.n_ff);
    let pq = |name: String, k: usize, rows: usize| TensorSpec {
        name,
        dims: vec![k as u64, rows as u64],
        ggml_type: 142,
        bytes: (rows * k / 128 * 34) as u64,
    };
    let vec = |name: String, n: usize| TensorSpec {
        name,
        dims: vec![n as u64],
        ggml_type: 0,
        bytes: 4 * n as u64,
    };
    let mut specs = vec![
        pq("token_embd.weight".into(), d, n_vocab),
        vec("output_norm.weight".into(), d),
    ];
    if !s.tied {
        specs.push(pq("output.weight".into(), d, n_vocab));
    }
    for i in 0..s.n_layer {
        let p = |t: &str| format!("blk.{i}.{t}.weight");
        specs.extend([
            vec(p("attn_norm"), d),
            pq(p("attn_q"), d, s.n_head * hd),
            pq(p("attn_k"), d, s.n_head_kv * hd),
            pq(p("attn_v"), d, s.n_head_kv * hd),
            vec(p("attn_q_norm"), hd),
            vec(p("attn_k_norm"), hd),
            pq(p("attn_output"), s.n_head * hd, d),
            vec(p("ffn_norm"), d),
            pq(p("ffn_gate"), d, ff),
            pq(p("ffn_up"), d, ff),
            pq(p("ffn_down"), ff, d),
        ]);
    }
    let file = BufWriter::with_capacity(8 << 20, File::create(path).map_err(io_err)?);
    let mut w = GgufWriter::begin(file, &kv, specs.clone()).map_err(io_err)?;
    let mut rng = Rng(seed | 1);
    for spec in &specs {
        let data = if spec.ggml_type == 0 {
            f32_bytes(&vec![1.0; spec.dims[0] as usize])
        } else {
            let gain = if spec.name.starts_with("token_embd") {
                4.0
            } else {
                1.0
            };
            ternary_pq2_0(spec.dims[1] as usize, spec.dims[0] as usize, gain, &mut rng)
        };
        w.tensor_data(&data).map_err(io_err)?;
    }
    w.finish().map_err(io_err)?;
    Ok(())
}
