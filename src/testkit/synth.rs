//! Synthetic models with real shapes and random ternary weights, for benchmarks without a
//! download: a valid GGUF that `libt2p` and llama.cpp both load.
//!
//! The matrices can be written as pq2_0 (the default), tq2_0, tq1_0, F32, pq2_0 bytes under the
//! legacy id 42 or mainline's group-64 Q2_0 ([`SynthType`]). With one scale per 256 weights ([`SynthOptions::scale_group`])
//! every one of them holds exactly the same weights, so the files differ only in their bytes.

use std::path::Path;

use super::gguf_writer::TensorSpec;
use super::{DecoderKv, Rng, f32_bytes, tokenizer_metadata, write_gguf};
use crate::format::{
    BlockPq2_0, BlockQ2_0g64, BlockTq1_0, BlockTq2_0, GgmlType, QK_PQ2_0, TernaryBlock, f16_to_f32,
    f32_to_f16,
};
use crate::runner::model::DecoderDims;
use crate::runner::{GgufError, GgufFile};

/// A qwen3 (Ternary Bonsai) shape.
#[derive(Clone, Copy, Debug)]
pub struct Qwen3Shape {
    /// Name used by `--shape`.
    pub name: &'static str,
    /// Widths, layers and heads.
    pub dims: DecoderDims,
    /// Whether `output.weight` is absent (the token table is the LM head).
    pub tied: bool,
}

/// The shapes `synth` knows: Qwen3 1.7B / 4B / 8B (as Ternary Bonsai uses them) and a tiny one.
pub const QWEN3_SHAPES: [Qwen3Shape; 4] = [
    Qwen3Shape {
        name: "bonsai-1.7b",
        dims: DecoderDims {
            n_embd: 2048,
            n_layer: 28,
            n_ff: 6144,
            n_head: 16,
            n_head_kv: 8,
            head_dim: 128,
        },
        tied: true,
    },
    Qwen3Shape {
        name: "bonsai-4b",
        dims: DecoderDims {
            n_embd: 2560,
            n_layer: 36,
            n_ff: 9728,
            n_head: 32,
            n_head_kv: 8,
            head_dim: 128,
        },
        tied: true,
    },
    Qwen3Shape {
        name: "bonsai-8b",
        dims: DecoderDims {
            n_embd: 4096,
            n_layer: 36,
            n_ff: 12288,
            n_head: 32,
            n_head_kv: 8,
            head_dim: 128,
        },
        tied: false,
    },
    Qwen3Shape {
        name: "qwen3-test",
        dims: DecoderDims {
            n_embd: 256,
            n_layer: 2,
            n_ff: 768,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
        },
        tied: false,
    },
];

/// `rows x k` random ternary weights as pq2_0 bytes: codes -1/0/+1 with probabilities 1/4, 1/2,
/// 1/4 and one scale per block around `gain / sqrt(k / 2)` (activations keep their size).
pub(crate) fn ternary_pq2_0(rows: usize, k: usize, gain: f32, rng: &mut Rng) -> Vec<u8> {
    bytemuck::cast_slice(&ternary_blocks(rows, k, gain, rng)).to_vec()
}

/// The blocks of [`ternary_pq2_0`] (the same random stream).
fn ternary_blocks(rows: usize, k: usize, gain: f32, rng: &mut Rng) -> Vec<BlockPq2_0> {
    // Two random bits per weight: 00 -> -1, 01 and 10 -> 0, 11 -> +1 (codes 0, 1, 1, 2).
    let code = |b: u64| [0u8, 1, 1, 2][(b & 3) as usize];
    let base = gain / (k as f32 / 2.0).sqrt();
    (0..rows * k / QK_PQ2_0)
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
        .collect()
}

impl Qwen3Shape {
    /// The shape of [`QWEN3_SHAPES`] called `name`.
    pub fn named(name: &str) -> Option<&'static Qwen3Shape> {
        let all: &'static [Qwen3Shape] = &QWEN3_SHAPES;
        all.iter().find(|s| s.name == name)
    }
}

/// The type `synth` writes the matrices in (1-D tensors are always F32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthType {
    /// `pq2_0` (type 142): 128 weights in 34 bytes. The default.
    Pq2_0,
    /// `tq2_0` (type 35): 256 weights in 66 bytes; needs one scale per 256 weights.
    Tq2_0,
    /// `tq1_0` (type 34): 256 weights in 54 bytes; needs one scale per 256 weights.
    Tq1_0,
    /// `f32` (type 0): the exact values the ternary types hold, e.g. as input for
    /// `llama-quantize` or as the dense reference.
    F32,
    /// pq2_0 bytes under the legacy type id 42 ("Q2_0", group 128) of older Ternary Bonsai files.
    Q2_0Legacy,
    /// Mainline llama.cpp's Q2_0 (id 42, 64 weights in 18 bytes): the pq2_0 codes with a
    /// scale per 64 weights (both halves of a 128 share one unless the scale group is 64).
    Q2_0,
}

impl SynthType {
    /// Every type, in the order `--help` lists them.
    pub const ALL: [SynthType; 6] = [
        SynthType::Pq2_0,
        SynthType::Tq2_0,
        SynthType::Tq1_0,
        SynthType::F32,
        SynthType::Q2_0Legacy,
        SynthType::Q2_0,
    ];

    /// The name `--type` takes.
    pub fn name(self) -> &'static str {
        match self {
            SynthType::Pq2_0 => "pq2_0",
            SynthType::Tq2_0 => "tq2_0",
            SynthType::Tq1_0 => "tq1_0",
            SynthType::F32 => "f32",
            SynthType::Q2_0Legacy => "q2_0-legacy",
            SynthType::Q2_0 => "q2_0",
        }
    }

    /// The type called `name` (see [`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<SynthType> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The GGML type id written in the tensor infos.
    pub fn ggml_type(self) -> u32 {
        self.stored_type().0
    }

    /// The GGML type written in the tensor infos.
    fn stored_type(self) -> GgmlType {
        match self {
            SynthType::Pq2_0 => BlockPq2_0::GGML_TYPE,
            SynthType::Tq2_0 => BlockTq2_0::GGML_TYPE,
            SynthType::Tq1_0 => BlockTq1_0::GGML_TYPE,
            SynthType::F32 => GgmlType::F32,
            SynthType::Q2_0Legacy | SynthType::Q2_0 => GgmlType::Q2_0_LEGACY,
        }
    }

    /// The type the bytes are in (the legacy id holds pq2_0 bytes, mainline's Q2_0 its own).
    fn layout(self) -> GgmlType {
        match self {
            SynthType::Q2_0Legacy => GgmlType::PQ2_0,
            SynthType::Q2_0 => GgmlType::Q2_0_G64,
            t => t.stored_type(),
        }
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`): `ALL_F32` 0, `MOSTLY_TQ1_0` 36,
    /// `MOSTLY_TQ2_0` 37, `MOSTLY_PQ2_0` 141 (also written for the legacy id and for Q2_0,
    /// whose file type the loaders do not read).
    pub fn file_type(self) -> u32 {
        match self {
            SynthType::Pq2_0 | SynthType::Q2_0Legacy | SynthType::Q2_0 => 141,
            SynthType::Tq2_0 => 37,
            SynthType::Tq1_0 => 36,
            SynthType::F32 => 0,
        }
    }
}

impl std::fmt::Display for SynthType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How [`write_qwen3_with`] writes the matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthOptions {
    /// The type of every 2-D tensor.
    pub ty: SynthType,
    /// Weights per scale, 64 (Q2_0 only), 128 or 256. With 256 each pair of 128-weight blocks
    /// of a row shares the scale of its first block (the codes are the same as with 128), so
    /// pq2_0, tq2_0, tq1_0, Q2_0 and F32 files of the same seed hold the same weights, and
    /// quantizing the F32 file with llama.cpp (`d = amax` per block) gives them back exactly.
    /// With 64 the second half of each 128 gets its own scale (`7/8` of the first's).
    pub scale_group: usize,
    /// Write `llama-quantize`'s default mix: `token_embd` as Q4_K and `output` as Q6_K
    /// (rounded from the same ternary values; a tied table, being the head, as Q6_K), the
    /// rest in `ty`.
    pub default_mix: bool,
}

impl SynthOptions {
    /// `ty` with its default scale group: 128 for pq2_0 and the legacy id (the files `synth`
    /// has always written), 256 for tq2_0, tq1_0 (which need it) and F32.
    pub fn new(ty: SynthType) -> SynthOptions {
        let scale_group = match ty {
            SynthType::Pq2_0 | SynthType::Q2_0Legacy | SynthType::Q2_0 => 128,
            SynthType::Tq2_0 | SynthType::Tq1_0 | SynthType::F32 => 256,
        };
        SynthOptions {
            ty,
            scale_group,
            default_mix: false,
        }
    }
}

/// Encodes pq2_0 blocks (row-major, `B::WEIGHTS / 128` consecutive blocks sharing one scale)
/// as format `B`.
fn encode_as<B: TernaryBlock>(blocks: &[BlockPq2_0]) -> crate::Result<Vec<u8>> {
    let per = B::WEIGHTS / QK_PQ2_0;
    let mut out = Vec::with_capacity(blocks.len() / per * std::mem::size_of::<B>());
    let mut codes = vec![0u8; B::WEIGHTS];
    let mut scales = vec![0u16; per];
    for group in blocks.chunks_exact(per) {
        for (i, b) in group.iter().enumerate() {
            codes[i * QK_PQ2_0..(i + 1) * QK_PQ2_0].copy_from_slice(&b.codes());
            scales[i] = b.d;
        }
        out.extend_from_slice(bytemuck::bytes_of(&B::encode(&codes, &scales)?));
    }
    Ok(out)
}

/// Each pq2_0 block as two Q2_0 blocks of its codes, with its scale, or (`own_scale`) the
/// second with `7/8` of it.
fn q2_0_halves(blocks: &[BlockPq2_0], own_scale: bool) -> crate::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(blocks.len() * 2 * std::mem::size_of::<BlockQ2_0g64>());
    for b in blocks {
        let codes = b.codes();
        let d1 = if own_scale {
            f32_to_f16(f16_to_f32(b.d) * 0.875)
        } else {
            b.d
        };
        for (half, d) in codes.chunks_exact(64).zip([b.d, d1]) {
            out.extend_from_slice(bytemuck::bytes_of(&BlockQ2_0g64::encode(half, &[d])?));
        }
    }
    Ok(out)
}

/// `rows x k` random ternary weights in the type and scale group of `opts`. The codes (and, with
/// 128 weights per scale, the whole pq2_0 bytes) are those of [`ternary_pq2_0`].
fn ternary_matrix(
    rows: usize,
    k: usize,
    gain: f32,
    rng: &mut Rng,
    opts: &SynthOptions,
) -> crate::Result<Vec<u8>> {
    if opts.scale_group == 128 && matches!(opts.ty, SynthType::Pq2_0 | SynthType::Q2_0Legacy) {
        return Ok(ternary_pq2_0(rows, k, gain, rng));
    }
    let mut blocks = ternary_blocks(rows, k, gain, rng);
    if opts.scale_group == 256 {
        for pair in blocks.chunks_exact_mut(2) {
            pair[1].d = pair[0].d;
        }
    }
    Ok(match opts.ty {
        SynthType::Pq2_0 | SynthType::Q2_0Legacy => bytemuck::cast_slice(&blocks).to_vec(),
        SynthType::Tq2_0 => encode_as::<BlockTq2_0>(&blocks)?,
        SynthType::Tq1_0 => encode_as::<BlockTq1_0>(&blocks)?,
        SynthType::Q2_0 => q2_0_halves(&blocks, opts.scale_group == 64)?,
        SynthType::F32 => {
            let mut out = Vec::with_capacity(blocks.len() * QK_PQ2_0 * 4);
            for x in blocks.iter().flat_map(|b| b.dequantize()) {
                out.extend_from_slice(&x.to_le_bytes());
            }
            out
        }
    })
}

/// Writes a qwen3 GGUF of `shape` with random ternary pq2_0 weights and the `tokenizer.*`
/// metadata of `vocab` (whose token count sets the vocabulary size).
pub fn write_qwen3(
    path: &Path,
    shape: &Qwen3Shape,
    vocab: &GgufFile,
    seed: u64,
) -> Result<(), GgufError> {
    write_qwen3_with(
        path,
        shape,
        vocab,
        seed,
        &SynthOptions::new(SynthType::Pq2_0),
    )
}

/// [`write_qwen3`] with the matrices in the type and scale group of `opts`. The same `seed`
/// gives the same codes in every type; see [`SynthOptions::scale_group`] for the scales.
pub fn write_qwen3_with(
    path: &Path,
    shape: &Qwen3Shape,
    vocab: &GgufFile,
    seed: u64,
    opts: &SynthOptions,
) -> Result<(), GgufError> {
    check_scale_group(shape, opts)?;
    let n_vocab = vocab.get_str_array("tokenizer.ggml.tokens")?.len();
    if n_vocab % 4 != 0 {
        return Err(GgufError::Shape {
            name: "tokenizer.ggml.tokens".into(),
            reason: format!("{n_vocab} tokens is not a multiple of 4"),
        });
    }
    let s = shape;
    let mut kv = DecoderKv {
        arch: "qwen3",
        name: s.name,
        file_type: opts.ty.file_type(),
        n_ctx_train: 40960,
        dims: s.dims,
        rope_base: 1e6,
    }
    .kv();
    kv.extend(tokenizer_metadata(vocab));
    let mut rng = Rng(seed | 1);
    write_gguf(path, &kv, qwen3_tensor_specs(s, n_vocab, opts), |spec| {
        if spec.dims.len() == 1 {
            return Ok(f32_bytes(&vec![1.0; spec.dims[0] as usize]));
        }
        let gain = if spec.name.starts_with("token_embd") {
            4.0
        } else {
            1.0
        };
        let (rows, k) = (spec.dims[1] as usize, spec.dims[0] as usize);
        let err = |e: crate::Error| GgufError::Shape {
            name: spec.name.clone(),
            reason: e.to_string(),
        };
        let mix = mix_type(&spec.name, opts, s.tied);
        if mix == GgmlType::F32 {
            return ternary_matrix(rows, k, gain, &mut rng, opts).map_err(err);
        }
        let f32_opts = SynthOptions::new(SynthType::F32);
        let bytes = ternary_matrix(rows, k, gain, &mut rng, &f32_opts).map_err(err)?;
        let x: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok(if mix == GgmlType::Q6_K {
            bytemuck::cast_slice(&super::quantize::quantize_q6_k(&x)).to_vec()
        } else {
            bytemuck::cast_slice(&super::quantize::quantize_q4_k(&x)).to_vec()
        })
    })
}

/// The type the default mix gives tensor `name`, or F32 for "the file's ternary type". The
/// head is Q6_K and the table Q4_K; a `tied` model's table is its head, so `llama-quantize`
/// gives it the head's type.
fn mix_type(name: &str, opts: &SynthOptions, tied: bool) -> GgmlType {
    match name {
        "output.weight" if opts.default_mix => GgmlType::Q6_K,
        "token_embd.weight" if opts.default_mix && tied => GgmlType::Q6_K,
        "token_embd.weight" if opts.default_mix => GgmlType::Q4_K,
        _ => GgmlType::F32,
    }
}

/// Refuses a scale group the type or the shape cannot hold.
fn check_scale_group(shape: &Qwen3Shape, opts: &SynthOptions) -> Result<(), GgufError> {
    let (block, _) = opts.ty.layout().block().unwrap_or((1, 4));
    let group_ok = match opts.scale_group {
        64 => block == 64,
        128 => block <= 128,
        256 => [
            shape.dims.n_embd,
            shape.dims.n_ff,
            shape.dims.n_head * shape.dims.head_dim,
        ]
        .iter()
        .all(|k| k.is_multiple_of(256)),
        _ => false,
    };
    if group_ok {
        return Ok(());
    }
    Err(GgufError::Shape {
        name: shape.name.into(),
        reason: format!(
            "one scale per {} weights cannot be written as {} (tq2_0 and tq1_0 need 256, \
             64 is for q2_0 only, and 256 needs every row length a multiple of 256)",
            opts.scale_group, opts.ty
        ),
    })
}

/// The tensors of a qwen3 `shape` with `n_vocab` tokens, in file order: matrices in the type of
/// `opts`, vectors F32.
fn qwen3_tensor_specs(s: &Qwen3Shape, n_vocab: usize, opts: &SynthOptions) -> Vec<TensorSpec> {
    let (d, hd, ff) = (s.dims.n_embd, s.dims.head_dim, s.dims.n_ff);
    let mat = |name: String, k: usize, rows: usize| match mix_type(&name, opts, s.tied) {
        GgmlType::F32 => {
            let mut spec = TensorSpec::new(name, &[k, rows], opts.ty.layout());
            spec.ggml_type = opts.ty.ggml_type();
            spec
        }
        ty => TensorSpec::new(name, &[k, rows], ty),
    };
    let vec = |name: String, n: usize| TensorSpec::new(name, &[n], GgmlType::F32);
    let mut specs = vec![
        mat("token_embd.weight".into(), d, n_vocab),
        vec("output_norm.weight".into(), d),
    ];
    if !s.tied {
        specs.push(mat("output.weight".into(), d, n_vocab));
    }
    for i in 0..s.dims.n_layer {
        let p = |t: &str| format!("blk.{i}.{t}.weight");
        specs.extend([
            vec(p("attn_norm"), d),
            mat(p("attn_q"), d, s.dims.n_head * hd),
            mat(p("attn_k"), d, s.dims.n_head_kv * hd),
            mat(p("attn_v"), d, s.dims.n_head_kv * hd),
            vec(p("attn_q_norm"), hd),
            vec(p("attn_k_norm"), hd),
            mat(p("attn_output"), s.dims.n_head * hd, d),
            vec(p("ffn_norm"), d),
            mat(p("ffn_gate"), d, ff),
            mat(p("ffn_up"), d, ff),
            mat(p("ffn_down"), ff, d),
        ]);
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The types `llama-quantize`'s default mix gives the head and the table, by name.
    fn mix_types(shape: &Qwen3Shape) -> Vec<(String, u32)> {
        let mut opts = SynthOptions::new(SynthType::Pq2_0);
        opts.default_mix = true;
        qwen3_tensor_specs(shape, 512, &opts)
            .into_iter()
            .filter(|s| !s.name.starts_with("blk.") && s.dims.len() == 2)
            .map(|s| (s.name, s.ggml_type))
            .collect()
    }

    #[test]
    fn the_default_mix_gives_a_tied_table_the_head_type() {
        let tied = QWEN3_SHAPES[0];
        let untied = QWEN3_SHAPES[2];
        assert!(tied.tied && !untied.tied);
        assert_eq!(
            mix_types(&tied),
            [("token_embd.weight".into(), GgmlType::Q6_K.0)]
        );
        assert_eq!(
            mix_types(&untied),
            [
                ("token_embd.weight".into(), GgmlType::Q4_K.0),
                ("output.weight".into(), GgmlType::Q6_K.0)
            ]
        );
    }
}
