//! Synthetic `qwen35` models (the Qwen3.5 hybrid of Ternary Bonsai 2): the real shapes and
//! metadata keys with random weights, for benchmarks and tests without the 7 GB download. The
//! file is what `libt2p` and PrismML's llama.cpp fork both load: every key the fork's
//! `qwen35` loader reads (the key set of `qwen35-tiny`), the tensor types of a real Ternary
//! Bonsai 2 file (pq2_0 for every 2-D weight except the BF16 `ssm_alpha`/`ssm_beta` and the
//! F32 `ssm_conv1d`; F32 vectors) and, optionally, a `prism.hadamard.*` fold block that lists
//! the same 401 weights as the real checkpoint (the weights are random, so they are not
//! actually rotated; the runner still pays for the rotation, as it would on the real file).
//!
//! Weight recipe (that of the shared `qwen35-tiny` model): ternary pq2_0 matrices keeping the
//! activation size (gain 1; 0.7 for the projections back into the residual; 3 for `output`, 8
//! for `token_embd`), `ssm_conv1d` uniform in (-0.6, 0.6), `ssm_dt.bias` in (-1, 1),
//! `ssm_a = -uniform(0.05, 2)`, every norm in (0.8, 1.2). Activations stay finite over 64
//! layers: each block is pre-normed, the DeltaNet decay is <= 1 and its keys are L2-normed.

use std::path::Path;

use super::gguf_writer::TensorSpec;
use super::synth::ternary_pq2_0;
use super::{DecoderKv, Rng, f32_bytes, write_gguf};
use crate::format::GgmlType;
use crate::runner::model::DecoderDims;
use crate::runner::{Array, GgufError, GgufFile, Value};

/// A `qwen35` shape: the hyper-parameters a synthetic file is written with.
#[derive(Clone, Copy, Debug)]
pub struct Qwen35Shape {
    /// Name used by `--shape`.
    pub name: &'static str,
    /// Widths, layers and heads.
    pub dims: DecoderDims,
    /// Rotated dimensions at the start of each attention head.
    pub rope_dims: usize,
    /// IMROPE sections (`rope.dimension_sections`, summing to `rope_dims / 2`).
    pub rope_sections: [i32; 4],
    /// RoPE base frequency.
    pub rope_base: f32,
    /// Training context (`context_length`).
    pub n_ctx_train: usize,
    /// Every `full_attention_interval`-th layer (1-based) is full attention, the others are
    /// Gated DeltaNet layers.
    pub full_attention_interval: usize,
    /// Taps of the DeltaNet conv1d (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Values per DeltaNet key head and value head (`ssm.state_size`).
    pub state_size: usize,
    /// DeltaNet key/query heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// DeltaNet value heads (`ssm.time_step_rank`), a multiple of `n_k_heads`.
    pub n_v_heads: usize,
    /// Vocabulary size; the vocab GGUF's token list is padded with unused `[PAD<i>]` tokens up
    /// to it. `None`: the vocab GGUF's own token count.
    pub n_vocab: Option<usize>,
    /// Block size of the `prism.hadamard.*` fold written into the file (`None`: no fold keys).
    pub hadamard_block: Option<usize>,
}

impl Qwen35Shape {
    /// The shape of [`QWEN35_SHAPES`] called `name`.
    pub fn named(name: &str) -> Option<&'static Qwen35Shape> {
        let all: &'static [Qwen35Shape] = &QWEN35_SHAPES;
        all.iter().find(|s| s.name == name)
    }

    /// Whether layer `il` is a Gated DeltaNet layer (else full attention).
    pub fn is_recurrent(&self, il: usize) -> bool {
        !(il + 1).is_multiple_of(self.full_attention_interval)
    }

    /// Width of the DeltaNet q (and k): `n_k_heads * state_size`.
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.state_size
    }

    /// Width of the DeltaNet v and output (`ssm.inner_size`): `n_v_heads * state_size`.
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.state_size
    }

    /// Channels of the DeltaNet conv (q | k | v).
    pub fn conv_channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// The activation widths of the folded weights, ascending and distinct: one sign vector
    /// each (for Bonsai 2 27B: 5120, 6144, 17408).
    pub fn hadamard_widths(&self) -> Vec<usize> {
        let mut w = vec![
            self.dims.n_embd,
            self.value_dim(),
            self.dims.n_head * self.dims.head_dim,
            self.dims.n_ff,
        ];
        w.sort_unstable();
        w.dedup();
        w
    }
}

/// The shapes `synth` knows for `qwen35`.
///
/// `bonsai2-27b` is Ternary Bonsai 2 27B as `../shared/DESIGN.md` describes it (64 layers, 48
/// Gated DeltaNet + 16 full attention, hidden 5120, FFN 17408, 24 query / 4 KV heads of 256,
/// RoPE base 1e7 on 64 dims with sections [11, 11, 10, 0], DeltaNet 16 key / 48 value heads of
/// 128 with a 4-tap conv, vocab 248320, untied output, Hadamard blocks of 1024). Values
/// DESIGN.md does not give are assumptions: `context_length` 262144 (Qwen3.5's native
/// context), RMSNorm epsilon 1e-6 (that of `qwen35-tiny` and Qwen3.5), no NextN/MTP block
/// (`nextn_predict_layers` absent), the 248320 - 151936 tokens the shared vocab GGUFs lack
/// padded as unused `[PAD<i>]` tokens.
///
/// `qwen35-odd` has the widths that are multiples of 128 but not of 256 (`n_ff` 640,
/// `ssm.inner_size` 384, one key head and three value heads of 128), which T2P holds with
/// q8_0 activations.
///
/// `qwen35-test` keeps the structure (the same interleave over 8 layers: 6 DeltaNet + 2
/// attention; 6 query heads per KV head; 3 value heads per key head; a quarter of each head
/// rotated; a Hadamard fold over three widths) at tiny widths, for tests.
pub const QWEN35_SHAPES: [Qwen35Shape; 3] = [
    Qwen35Shape {
        name: "bonsai2-27b",
        dims: DecoderDims {
            n_embd: 5120,
            n_layer: 64,
            n_ff: 17408,
            n_head: 24,
            n_head_kv: 4,
            head_dim: 256,
        },
        rope_dims: 64,
        rope_sections: [11, 11, 10, 0],
        rope_base: 1e7,
        n_ctx_train: 262144,
        full_attention_interval: 4,
        conv_kernel: 4,
        state_size: 128,
        n_k_heads: 16,
        n_v_heads: 48,
        n_vocab: Some(248320),
        hadamard_block: Some(1024),
    },
    QWEN35_TEST,
    // qwen35-test with the odd widths (see above).
    Qwen35Shape {
        name: "qwen35-odd",
        dims: DecoderDims {
            n_layer: 4,
            n_ff: 640,
            n_head: 4,
            ..QWEN35_TEST.dims
        },
        state_size: 128,
        n_k_heads: 1,
        n_v_heads: 3,
        hadamard_block: None,
        ..QWEN35_TEST
    },
];

/// `qwen35-test` of [`QWEN35_SHAPES`] (which `qwen35-odd` varies).
const QWEN35_TEST: Qwen35Shape = Qwen35Shape {
    name: "qwen35-test",
    dims: DecoderDims {
        n_embd: 256,
        n_layer: 8,
        n_ff: 1024,
        n_head: 6,
        n_head_kv: 1,
        head_dim: 128,
    },
    rope_dims: 32,
    rope_sections: [6, 5, 5, 0],
    rope_base: 1e7,
    n_ctx_train: 4096,
    full_attention_interval: 4,
    conv_kernel: 4,
    state_size: 64,
    n_k_heads: 4,
    n_v_heads: 12,
    n_vocab: None,
    hadamard_block: Some(256),
};

/// How a tensor's data is generated.
#[derive(Clone, Copy, Debug)]
enum Init {
    /// Random ternary pq2_0 keeping the activation size times `gain`.
    Ternary(f32),
    /// BF16 uniform in `±gain * sqrt(3 / k)` (unit variance of the output for unit inputs).
    Bf16(f32),
    /// F32 uniform in `[lo, hi)`.
    Uniform(f32, f32),
}

fn shape_error(name: &str, reason: String) -> GgufError {
    GgufError::Shape {
        name: name.into(),
        reason,
    }
}

/// Checks what the runner (T2P repack: rows % 4, k % 256), llama.cpp (IMROPE sections) and the
/// fold (power-of-two blocks dividing every folded width) need from a shape.
fn check_shape(s: &Qwen35Shape, n_vocab: usize) -> Result<(), GgufError> {
    let bad = |reason: String| Err(shape_error(s.name, reason));
    if s.dims.n_head_kv == 0 || !s.dims.n_head.is_multiple_of(s.dims.n_head_kv) {
        return bad(format!(
            "{} query heads cannot share {} KV heads",
            s.dims.n_head, s.dims.n_head_kv
        ));
    }
    if s.n_k_heads == 0 || !s.n_v_heads.is_multiple_of(s.n_k_heads) {
        return bad(format!(
            "{} value heads are not a multiple of {} key heads",
            s.n_v_heads, s.n_k_heads
        ));
    }
    if s.full_attention_interval == 0 || s.conv_kernel == 0 {
        return bad("full_attention_interval and conv_kernel must be positive".into());
    }
    let half: i32 = s.rope_sections.iter().sum();
    if s.rope_dims > s.dims.head_dim
        || !s.rope_dims.is_multiple_of(2)
        || half as usize * 2 != s.rope_dims
    {
        return bad(format!(
            "{} rotated dims of {} (sections {:?})",
            s.rope_dims, s.dims.head_dim, s.rope_sections
        ));
    }
    // pq2_0 blocks are 128 wide: every matrix's k must be a multiple of 128.
    for t in plan(s, n_vocab) {
        let k = t.0.dims[0];
        if t.0.ggml_type == GgmlType::PQ2_0.0 && (k == 0 || !k.is_multiple_of(128)) {
            return bad(format!(
                "{} has k = {k}: pq2_0 needs k % 128 == 0",
                t.0.name
            ));
        }
    }
    if let Some(b) = s.hadamard_block
        && (!b.is_power_of_two()
            || b < 2
            || s.hadamard_widths().iter().any(|w| !w.is_multiple_of(b)))
    {
        return bad(format!(
            "Hadamard block {b} does not divide the widths {:?}",
            s.hadamard_widths()
        ));
    }
    Ok(())
}

/// Every tensor of `shape` with `n_vocab` tokens, in file order, with how it is filled.
fn plan(s: &Qwen35Shape, n_vocab: usize) -> Vec<(TensorSpec, Init)> {
    let d = s.dims.n_embd;
    let pq = |name: String, k: usize, rows: usize, gain: f32| {
        let spec = TensorSpec::new(name, &[k, rows], GgmlType::PQ2_0);
        (spec, Init::Ternary(gain))
    };
    let bf16 = |name: String, k: usize, rows: usize| {
        let spec = TensorSpec::new(name, &[k, rows], GgmlType::BF16);
        (spec, Init::Bf16(1.0))
    };
    let f32v = |name: String, dims: Vec<usize>, lo: f32, hi: f32| {
        let spec = TensorSpec::new(name, &dims, GgmlType::F32);
        (spec, Init::Uniform(lo, hi))
    };
    let norm = |name: String, n: usize| f32v(name, vec![n], 0.8, 1.2);
    let mut t = vec![
        pq("token_embd.weight".into(), d, n_vocab, 8.0),
        norm("output_norm.weight".into(), d),
        pq("output.weight".into(), d, n_vocab, 3.0),
    ];
    let (hd, ff) = (s.dims.head_dim, s.dims.n_ff);
    for il in 0..s.dims.n_layer {
        let p = |x: &str| format!("blk.{il}.{x}.weight");
        t.push(norm(p("attn_norm"), d));
        t.push(norm(p("post_attention_norm"), d));
        if s.is_recurrent(il) {
            let nv = s.n_v_heads;
            t.extend([
                pq(p("attn_qkv"), d, s.conv_channels(), 1.0),
                pq(p("attn_gate"), d, s.value_dim(), 1.0),
                bf16(p("ssm_alpha"), d, nv),
                bf16(p("ssm_beta"), d, nv),
                f32v(
                    p("ssm_conv1d"),
                    vec![s.conv_kernel, s.conv_channels()],
                    -0.6,
                    0.6,
                ),
                f32v(format!("blk.{il}.ssm_dt.bias"), vec![nv], -1.0, 1.0),
                f32v(format!("blk.{il}.ssm_a"), vec![nv], -2.0, -0.05),
                norm(p("ssm_norm"), s.state_size),
                pq(p("ssm_out"), s.value_dim(), d, 0.7),
            ]);
        } else {
            t.extend([
                pq(p("attn_q"), d, 2 * s.dims.n_head * hd, 1.0),
                pq(p("attn_k"), d, s.dims.n_head_kv * hd, 1.0),
                pq(p("attn_v"), d, s.dims.n_head_kv * hd, 1.0),
                norm(p("attn_q_norm"), hd),
                norm(p("attn_k_norm"), hd),
                pq(p("attn_output"), s.dims.n_head * hd, d, 0.7),
            ]);
        }
        t.extend([
            pq(p("ffn_gate"), d, ff, 1.0),
            pq(p("ffn_up"), d, ff, 1.0),
            pq(p("ffn_down"), ff, d, 0.7),
        ]);
    }
    t
}

/// The tensors of `shape` with `n_vocab` tokens, in the order [`write_qwen35`] writes them.
pub fn qwen35_tensor_specs(shape: &Qwen35Shape, n_vocab: usize) -> Vec<TensorSpec> {
    plan(shape, n_vocab).into_iter().map(|(s, _)| s).collect()
}

/// The weights the `prism.hadamard.weight_names` of a real Ternary Bonsai 2 file lists: every
/// pq2_0 matrix except the token table (listed as an inverse weight instead), i.e. per DeltaNet
/// layer `attn_qkv`, `attn_gate`, `ssm_out` and the FFN, per attention layer `attn_q/k/v`,
/// `attn_output` and the FFN, plus `output.weight` (27B: 48 x 6 + 16 x 7 + 1 = 401). The BF16
/// `ssm_alpha`/`ssm_beta` are not listed (assumption: that is the only split of the 401 that
/// fits the DESIGN.md count).
pub fn hadamard_weight_names(shape: &Qwen35Shape, n_vocab: usize) -> Vec<String> {
    qwen35_tensor_specs(shape, n_vocab)
        .into_iter()
        .filter(|t| t.ggml_type == GgmlType::PQ2_0.0 && t.name != "token_embd.weight")
        .map(|t| t.name)
        .collect()
}

/// The `tokenizer.*` metadata of `vocab`, its token list padded to `n_vocab` with unused
/// `[PAD<i>]` tokens (how HF -> GGUF conversion pads a model vocabulary wider than its
/// tokenizer): `tokens`, `token_type` (5, unused) and, when present, `scores` (0).
fn tokenizer_kv(vocab: &GgufFile, n_vocab: usize) -> Result<Vec<(String, Value)>, GgufError> {
    let have = vocab.get_str_array("tokenizer.ggml.tokens")?.len();
    if n_vocab < have {
        return Err(shape_error(
            "tokenizer.ggml.tokens",
            format!("the vocab has {have} tokens, more than the shape's {n_vocab}"),
        ));
    }
    let extra = have..n_vocab;
    let mut out = Vec::new();
    for (k, v) in vocab.metadata() {
        if !k.starts_with("tokenizer.") {
            continue;
        }
        let v = match (k.as_str(), v) {
            ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                let mut t = t.clone();
                t.extend(extra.clone().map(|i| format!("[PAD{i}]")));
                Value::Array(Array::String(t))
            }
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) => {
                let mut t = t.clone();
                t.extend(extra.clone().map(|_| 5));
                Value::Array(Array::I32(t))
            }
            ("tokenizer.ggml.scores", Value::Array(Array::F32(t))) => {
                let mut t = t.clone();
                t.extend(extra.clone().map(|_| 0.0));
                Value::Array(Array::F32(t))
            }
            ("tokenizer.ggml.token_type" | "tokenizer.ggml.scores", _) if !extra.is_empty() => {
                return Err(shape_error(
                    k,
                    format!("cannot pad a {} to {n_vocab} tokens", v.type_name()),
                ));
            }
            _ => v.clone(),
        };
        out.push((k.clone(), v));
    }
    Ok(out)
}

/// The `general.*`, `qwen35.*` and `prism.hadamard.*` metadata of `shape`.
fn model_kv(s: &Qwen35Shape, n_vocab: usize, rng: &mut Rng) -> Vec<(String, Value)> {
    let a = |k: &str| format!("qwen35.{k}");
    let u = |v: usize| Value::U32(v as u32);
    let mut kv = DecoderKv {
        arch: "qwen35",
        name: s.name,
        file_type: 141,
        n_ctx_train: s.n_ctx_train,
        dims: s.dims,
        rope_base: s.rope_base,
    }
    .kv();
    kv.extend([
        (a("rope.dimension_count"), u(s.rope_dims)),
        (
            a("rope.dimension_sections"),
            Value::Array(Array::I32(s.rope_sections.to_vec())),
        ),
        (a("ssm.conv_kernel"), u(s.conv_kernel)),
        (a("ssm.state_size"), u(s.state_size)),
        (a("ssm.group_count"), u(s.n_k_heads)),
        (a("ssm.time_step_rank"), u(s.n_v_heads)),
        (a("ssm.inner_size"), u(s.value_dim())),
        (a("full_attention_interval"), u(s.full_attention_interval)),
    ]);
    if let Some(block) = s.hadamard_block {
        let widths = s.hadamard_widths();
        let signs: Vec<i8> = (0..widths.iter().sum::<usize>())
            .map(|_| if rng.next() >> 63 == 0 { 1 } else { -1 })
            .collect();
        kv.extend(hadamard_kv(
            block,
            &widths,
            signs,
            hadamard_weight_names(s, n_vocab),
        ));
    }
    kv
}

/// The `prism.hadamard.*` keys of a fold in blocks of `block` with explicit signs (`signs`:
/// one vector per width of `widths`, concatenated) applied to `weight_names`, its inverse to
/// the token table, and the grouped value layout of the Gated DeltaNet output projection.
pub fn hadamard_kv(
    block: usize,
    widths: &[usize],
    signs: Vec<i8>,
    weight_names: Vec<String>,
) -> Vec<(String, Value)> {
    let h = |k: &str| format!("prism.hadamard.{k}");
    vec![
        (h("version"), Value::U32(1)),
        (h("block_size"), Value::U32(block as u32)),
        (
            h("transform"),
            Value::String("normalized-sylvester-walsh-hadamard".into()),
        ),
        (h("axis"), Value::String("input-last-dimension".into())),
        (h("sign_mode"), Value::String("explicit".into())),
        (
            h("sign_widths"),
            Value::Array(Array::I32(widths.iter().map(|&w| w as i32).collect())),
        ),
        (h("sign_values"), Value::Array(Array::I8(signs))),
        (h("weight_names"), Value::Array(Array::String(weight_names))),
        (
            h("inverse_weight_names"),
            Value::Array(Array::String(vec!["token_embd.weight".into()])),
        ),
        (h("gdn_v_grouped"), Value::Bool(true)),
    ]
}

/// Writes a `qwen35` GGUF of `shape` with random weights (see the module documentation) and
/// the `tokenizer.*` metadata of `vocab`, padded to the shape's vocabulary size. The same
/// `seed` gives the same file.
pub fn write_qwen35(
    path: &Path,
    shape: &Qwen35Shape,
    vocab: &GgufFile,
    seed: u64,
) -> Result<(), GgufError> {
    let n_vocab = match shape.n_vocab {
        Some(n) => n,
        None => vocab.get_str_array("tokenizer.ggml.tokens")?.len(),
    };
    check_shape(shape, n_vocab)?;
    let mut rng = Rng(seed | 1);
    let mut kv = model_kv(shape, n_vocab, &mut rng);
    kv.extend(tokenizer_kv(vocab, n_vocab)?);
    let plan = plan(shape, n_vocab);
    let specs: Vec<TensorSpec> = plan.iter().map(|(s, _)| s.clone()).collect();
    let mut inits = plan.iter().map(|&(_, init)| init);
    write_gguf(path, &kv, specs, |spec| {
        let n: usize = spec.dims.iter().map(|&x| x as usize).product();
        let k = spec.dims[0] as usize;
        // `write_gguf` asks for the tensors in plan order.
        Ok(match inits.next().expect("one init per tensor") {
            Init::Ternary(gain) => ternary_pq2_0(n / k, k, gain, &mut rng),
            Init::Bf16(gain) => {
                let a = gain * (3.0 / k as f32).sqrt();
                (0..n)
                    .flat_map(|_| half::bf16::from_f32(rng.uniform(-a, a)).to_le_bytes())
                    .collect()
            }
            Init::Uniform(lo, hi) => {
                f32_bytes(&(0..n).map(|_| rng.uniform(lo, hi)).collect::<Vec<f32>>())
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(name: &str) -> Qwen35Shape {
        *Qwen35Shape::named(name).unwrap()
    }

    #[test]
    fn bonsai2_27b_has_the_design_counts_and_size() {
        let s = shape("bonsai2-27b");
        let n_vocab = s.n_vocab.unwrap();
        check_shape(&s, n_vocab).unwrap();
        let rec = (0..s.dims.n_layer).filter(|&i| s.is_recurrent(i)).count();
        assert_eq!((rec, s.dims.n_layer - rec), (48, 16));
        assert!(!s.is_recurrent(3) && !s.is_recurrent(63) && s.is_recurrent(0));
        assert_eq!(s.conv_channels(), 2048 + 2048 + 6144);
        assert_eq!(s.hadamard_widths(), [5120, 6144, 17408]);
        assert_eq!(hadamard_weight_names(&s, n_vocab).len(), 401);
        let specs = qwen35_tensor_specs(&s, n_vocab);
        let bytes: u64 = specs.iter().map(|t| t.bytes).sum();
        // DESIGN.md: 7.21 GB in pq2_0 (the tokenizer metadata adds a few MB on top).
        assert!(
            (7.1e9..7.3e9).contains(&(bytes as f64)),
            "{bytes} bytes of tensors"
        );
        // The DeltaNet recurrent state: 48 layers x 48 heads x 128 x 128 f32 = 151 MB.
        assert_eq!(
            rec * s.n_v_heads * s.state_size * s.state_size * 4,
            150_994_944
        );
    }

    #[test]
    fn the_test_shape_is_valid() {
        let s = shape("qwen35-test");
        check_shape(&s, 151936).unwrap();
        assert!(s.hadamard_widths().len() == 3);
    }
}
