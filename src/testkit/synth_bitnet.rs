//! Synthetic BitNet b1.58 models with real shapes: BitNet b1.58 2B-4T (`bitnet-b1.58`: sub-norms,
//! squared-ReLU FFN, head tied to an F16 table) and Falcon3 1.58-bit (`llama` with head_dim 256
//! and an untied F16 head), their matrices in bitnet.cpp's I2_S, as the published files store
//! them: for measuring speed without the real weights.

use std::path::Path;

use super::gguf_writer::TensorSpec;
use super::{DecoderKv, Rng, f32_bytes, tokenizer_metadata, write_gguf};
use crate::format::i2s::{encode_i2s, i2s_bytes};
use crate::format::{GgmlType, f32_to_f16};
use crate::runner::model::DecoderDims;
use crate::runner::{GgufError, GgufFile, Value};

/// A BitNet shape.
#[derive(Clone, Copy, Debug)]
pub struct BitnetShape {
    /// Name used by `--shape`.
    pub name: &'static str,
    /// `general.architecture`: `bitnet-b1.58` or `llama`.
    pub arch: &'static str,
    /// Widths, layers and heads.
    pub dims: DecoderDims,
    /// Whether `output.weight` is absent (the F16 table is the head).
    pub tied: bool,
    /// `attn_sub_norm` and `ffn_sub_norm` (BitNet b1.58).
    pub sub_norms: bool,
    /// `rope.freq_base`.
    pub rope_base: f32,
}

/// The shapes `synth` knows (from the models' published configurations).
pub const BITNET_SHAPES: [BitnetShape; 3] = [
    BitnetShape {
        name: "bitnet-2b",
        arch: "bitnet-b1.58",
        dims: DecoderDims {
            n_embd: 2560,
            n_layer: 30,
            n_ff: 6912,
            n_head: 20,
            n_head_kv: 5,
            head_dim: 128,
        },
        tied: true,
        sub_norms: true,
        rope_base: 500000.0,
    },
    BitnetShape {
        name: "falcon3-1b",
        arch: "llama",
        dims: DecoderDims {
            n_embd: 2048,
            n_layer: 18,
            n_ff: 8192,
            n_head: 8,
            n_head_kv: 4,
            head_dim: 256,
        },
        tied: false,
        sub_norms: false,
        rope_base: 1000042.0,
    },
    BitnetShape {
        name: "falcon3-10b",
        arch: "llama",
        dims: DecoderDims {
            n_embd: 3072,
            n_layer: 40,
            n_ff: 23040,
            n_head: 12,
            n_head_kv: 4,
            head_dim: 256,
        },
        tied: false,
        sub_norms: false,
        rope_base: 1000042.0,
    },
];

/// `general.file_type` of bitnet.cpp's I2_S files (its `LLAMA_FTYPE_MOSTLY_I2_S`).
const FILE_TYPE_I2_S: u32 = 40;

/// The tensors of `s` with `n_vocab` tokens, in file order: I2_S matrices, F16 table and head,
/// F32 norms.
fn tensor_specs(s: &BitnetShape, n_vocab: usize) -> Vec<TensorSpec> {
    let (d, hd, ff) = (s.dims.n_embd, s.dims.head_dim, s.dims.n_ff);
    let (q, kv) = (s.dims.n_head * hd, s.dims.n_head_kv * hd);
    let mat = |name: String, k: usize, rows: usize| TensorSpec {
        name,
        dims: vec![k as u64, rows as u64],
        ggml_type: GgmlType::I2_S.0,
        bytes: i2s_bytes(k * rows) as u64,
    };
    let vec = |name: String, n: usize| TensorSpec::new(name, &[n], GgmlType::F32);
    let mut specs = vec![
        TensorSpec::new("token_embd.weight", &[d, n_vocab], GgmlType::F16),
        vec("output_norm.weight".into(), d),
    ];
    if !s.tied {
        specs.push(TensorSpec::new(
            "output.weight",
            &[d, n_vocab],
            GgmlType::F16,
        ));
    }
    for i in 0..s.dims.n_layer {
        let p = |t: &str| format!("blk.{i}.{t}.weight");
        specs.extend([
            vec(p("attn_norm"), d),
            mat(p("attn_q"), d, q),
            mat(p("attn_k"), d, kv),
            mat(p("attn_v"), d, kv),
            mat(p("attn_output"), q, d),
            vec(p("ffn_norm"), d),
            mat(p("ffn_gate"), d, ff),
            mat(p("ffn_up"), d, ff),
            mat(p("ffn_down"), ff, d),
        ]);
        if s.sub_norms {
            specs.extend([vec(p("attn_sub_norm"), q), vec(p("ffn_sub_norm"), ff)]);
        }
    }
    specs
}

/// Writes a GGUF of `shape` with random weights (I2_S codes -1/0/+1 with probabilities 1/4,
/// 1/2, 1/4 and a scale per tensor around `1 / sqrt(k / 2)`; an F16 table of values around
/// 1) and the `tokenizer.*` metadata of `vocab`.
pub fn write_bitnet(
    path: &Path,
    shape: &BitnetShape,
    vocab: &GgufFile,
    seed: u64,
) -> Result<(), GgufError> {
    let n_vocab = vocab.get_str_array("tokenizer.ggml.tokens")?.len();
    let s = shape;
    let mut kv = DecoderKv {
        arch: s.arch,
        name: s.name,
        file_type: FILE_TYPE_I2_S,
        n_ctx_train: 4096,
        dims: s.dims,
        rope_base: s.rope_base,
    }
    .kv();
    kv.push((
        format!("{}.rope.dimension_count", s.arch),
        Value::U32(s.dims.head_dim as u32),
    ));
    kv.extend(tokenizer_metadata(vocab));
    let mut rng = Rng(seed | 1);
    write_gguf(path, &kv, tensor_specs(s, n_vocab), |spec| {
        let n: usize = spec.dims.iter().map(|&x| x as usize).product();
        if spec.dims.len() == 1 {
            return Ok(f32_bytes(&vec![1.0; n]));
        }
        if spec.ggml_type == GgmlType::F16.0 {
            // Values in [-1, 1) in steps of 1/512.
            return Ok((0..n)
                .flat_map(|_| {
                    let v = (rng.next() % 1024) as f32 / 512.0 - 1.0;
                    f32_to_f16(v).to_le_bytes()
                })
                .collect());
        }
        // Two random bits per weight: 00 -> -1, 01 and 10 -> 0, 11 -> +1.
        let mut codes = Vec::with_capacity(n);
        while codes.len() < n {
            let r = rng.next();
            for i in 0..32 {
                codes.push([0u8, 1, 1, 2][((r >> (2 * i)) & 3) as usize]);
            }
        }
        codes.truncate(n);
        let k = spec.dims[0] as f32;
        encode_i2s(&codes, 1.0 / (k / 2.0).sqrt()).map_err(|e| GgufError::Shape {
            name: spec.name.clone(),
            reason: e.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_i2s_rows_and_heads_that_fit() {
        for s in BITNET_SHAPES {
            for t in tensor_specs(&s, 1024) {
                if t.ggml_type == GgmlType::I2_S.0 {
                    assert_eq!(t.dims[0] % 128, 0, "{} {}", s.name, t.name);
                }
            }
            assert_eq!(s.dims.n_head % s.dims.n_head_kv, 0, "{}", s.name);
        }
    }
}
