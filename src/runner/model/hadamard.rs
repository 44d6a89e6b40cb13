//! The Hadamard fold of PrismML checkpoints (`prism.hadamard.*` metadata).
//!
//! The listed weights were rotated offline, `W' = W R^T` with `R x = H_B (s * x)`: a sign flip
//! `s` (one ±1 vector per activation width) followed by a normalized Sylvester Walsh-Hadamard
//! transform `H_B` applied independently to consecutive blocks of `B` values (`H_B H_B = I`,
//! so `R` is orthogonal). A runner honours the fold by applying `R` to the activation right
//! before each listed matmul (`W' R x = W x`); the embedding table, listed under
//! `inverse_weight_names`, holds `R e` per row and its looked-up row gets `R^T = s * H_B(.)`.
//! `gdn_v_grouped` says `ssm_out` kept the training (grouped) value-head order of its columns,
//! so its activation, produced in the GGUF's tiled order, is permuted to grouped before `R`.
//!
//! Skipping the rotation does not fail, it produces garbage; so every key is checked and a file
//! whose fold this module cannot honour exactly is refused at load.

use std::collections::HashSet;

use super::error::{ModelError, Result};
use super::exec::Exec;
use crate::kernels::Kernels;
use crate::kernels::fwht::fwht_blocks;
use crate::runner::{Array, GgufFile, Value};

const PREFIX: &str = "prism.hadamard.";
const TRANSFORM: &str = "normalized-sylvester-walsh-hadamard";
const AXIS: &str = "input-last-dimension";
/// Every key of the fold this module understands; any other `prism.hadamard.*` key may change
/// the meaning of the fold, so its presence refuses the file.
const KNOWN_KEYS: [&str; 10] = [
    "version",
    "block_size",
    "transform",
    "axis",
    "sign_mode",
    "sign_widths",
    "sign_values",
    "weight_names",
    "inverse_weight_names",
    "gdn_v_grouped",
];

/// What a matmul has to do to its activation because of the fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldKind {
    /// The weight is not rotated.
    None,
    /// `x -> R x`.
    Rotate,
    /// `x -> R P x`, `P` the tiled -> grouped value-head permutation (`ssm_out` with
    /// `gdn_v_grouped`).
    PermuteRotate(GdnGeometry),
}

/// The value-head geometry `ssm_out`'s permutation needs: the activation is `n_v_heads` heads of
/// `head_dim`, value head `h = r * n_k_heads + g` in tiled order, `g * rep + r` in grouped order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnGeometry {
    /// Values per head.
    pub head_dim: usize,
    /// Key heads (groups).
    pub n_k_heads: usize,
    /// Value heads (a multiple of `n_k_heads`).
    pub n_v_heads: usize,
}

/// A parsed, validated `prism.hadamard.*` block.
#[derive(Clone, Debug)]
pub struct HadamardFold {
    block: usize,
    /// `(width, signs)`; empty in sign mode `identity`.
    signs: Vec<(usize, Vec<f32>)>,
    identity_signs: bool,
    forward: HashSet<String>,
    inverse: HashSet<String>,
    gdn_v_grouped: bool,
}

fn bad(msg: impl std::fmt::Display) -> ModelError {
    ModelError::BadShape(format!("prism.hadamard: {msg}"))
}

/// Checks that `{PREFIX}{name}` is the one value this runner implements.
fn only(gguf: &GgufFile, name: &str, want: &str) -> Result<()> {
    let got = gguf.get_str(&format!("{PREFIX}{name}"))?;
    if got != want {
        return Err(bad(format!(
            "{name} {got:?} is not implemented (only {want:?})"
        )));
    }
    Ok(())
}

/// The explicit sign vectors: `sign_widths[i]` values of `sign_values` for width
/// `sign_widths[i]`, each +1 or -1, one vector per width.
fn explicit_signs(gguf: &GgufFile) -> Result<Vec<(usize, Vec<f32>)>> {
    let widths = gguf.get_i64_array(&format!("{PREFIX}sign_widths"))?;
    let values = gguf.get_f32_array(&format!("{PREFIX}sign_values"))?;
    let total: i64 = widths.iter().sum();
    if widths.iter().any(|&w| w <= 0) || total as usize != values.len() {
        return Err(bad(format!(
            "sign_widths {widths:?} do not add up to the {} sign_values",
            values.len()
        )));
    }
    if let Some(v) = values.iter().find(|&&v| v != 1.0 && v != -1.0) {
        return Err(bad(format!("sign value {v} is not +1 or -1")));
    }
    let mut signs: Vec<(usize, Vec<f32>)> = Vec::new();
    let mut at = 0;
    for &w in &widths {
        let w = w as usize;
        if signs.iter().any(|(x, _)| *x == w) {
            return Err(bad(format!("width {w} has two sign vectors")));
        }
        signs.push((w, values[at..at + w].to_vec()));
        at += w;
    }
    Ok(signs)
}

fn strings(gguf: &GgufFile, key: &str) -> Result<Vec<String>> {
    match gguf.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(Array::String(v))) => Ok(v.clone()),
        // An empty array written with another element type is still an empty list.
        Some(Value::Array(a)) if a.is_empty() => Ok(Vec::new()),
        Some(v) => Err(bad(format!(
            "{key} is {}, expected an array of strings",
            v.type_name()
        ))),
    }
}

impl HadamardFold {
    /// Reads the fold from `gguf`: `Ok(None)` when the file has no `prism.hadamard.*` key, an
    /// error when the keys are inconsistent or ask for something not implemented here.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Option<HadamardFold>> {
        let keys: Vec<&str> = gguf
            .metadata()
            .iter()
            .filter_map(|(k, _)| k.strip_prefix(PREFIX))
            .collect();
        if keys.is_empty() {
            return Ok(None);
        }
        if let Some(k) = keys.iter().find(|k| !KNOWN_KEYS.contains(k)) {
            return Err(bad(format!(
                "unknown key {PREFIX}{k}: this runner cannot tell how it changes the fold"
            )));
        }
        let key = |s: &str| format!("{PREFIX}{s}");
        let version = gguf.get_u32(&key("version"))?;
        if version != 1 {
            return Err(bad(format!(
                "version {version} is not implemented (only 1)"
            )));
        }
        only(gguf, "transform", TRANSFORM)?;
        only(gguf, "axis", AXIS)?;
        let block = gguf.get_u32(&key("block_size"))? as usize;
        if !block.is_power_of_two() || block < 2 {
            return Err(bad(format!(
                "block_size {block} is not a power of two >= 2"
            )));
        }
        let identity_signs = match gguf.get_str(&key("sign_mode"))? {
            "explicit" => false,
            "identity" => true,
            m => {
                return Err(bad(format!(
                    "sign_mode {m:?} is not implemented (explicit, identity)"
                )));
            }
        };
        let signs = if identity_signs {
            if gguf.get(&key("sign_values")).is_some() {
                return Err(bad("sign_mode identity with sign_values"));
            }
            Vec::new()
        } else {
            explicit_signs(gguf)?
        };
        let forward: HashSet<String> = strings(gguf, &key("weight_names"))?.into_iter().collect();
        let inverse: HashSet<String> = strings(gguf, &key("inverse_weight_names"))?
            .into_iter()
            .collect();
        if let Some(n) = inverse.iter().find(|n| *n != "token_embd.weight") {
            return Err(bad(format!(
                "inverse weight {n:?}: only token_embd.weight is implemented"
            )));
        }
        if let Some(n) = forward.intersection(&inverse).next() {
            return Err(bad(format!(
                "{n:?} is listed as both a weight and an inverse weight"
            )));
        }
        let gdn_v_grouped = match gguf.get(&key("gdn_v_grouped")) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => match v.as_u64() {
                Some(0) => false,
                Some(1) => true,
                _ => return Err(bad(format!("gdn_v_grouped is {v:?}"))),
            },
        };
        Ok(Some(HadamardFold {
            block,
            signs,
            identity_signs,
            forward,
            inverse,
            gdn_v_grouped,
        }))
    }

    /// The block size `B`.
    pub fn block_size(&self) -> usize {
        self.block
    }

    /// Whether `ssm_out`'s activation is permuted tiled -> grouped before the rotation.
    pub fn gdn_v_grouped(&self) -> bool {
        self.gdn_v_grouped
    }

    /// Every weight name the fold lists (forward and inverse).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.forward.iter().chain(&self.inverse).map(|s| s.as_str())
    }

    /// Whether the rows of `name` are stored rotated (listed forward or inverse).
    pub fn is_rotated(&self, name: &str) -> bool {
        self.forward.contains(name) || self.inverse.contains(name)
    }

    /// Checks that activations of `width` can be rotated (a sign vector and whole blocks).
    pub fn check_width(&self, name: &str, width: usize) -> Result<()> {
        if !width.is_multiple_of(self.block) {
            return Err(bad(format!(
                "{name}: width {width} is not a multiple of block_size {}",
                self.block
            )));
        }
        if !self.identity_signs && self.sign_vector(width).is_none() {
            return Err(bad(format!("{name}: no sign vector for width {width}")));
        }
        Ok(())
    }

    fn sign_vector(&self, width: usize) -> Option<&[f32]> {
        self.signs
            .iter()
            .find(|(w, _)| *w == width)
            .map(|(_, s)| s.as_slice())
    }

    /// `x -> R x` on one vector (its width must have passed [`check_width`](Self::check_width)),
    /// the transform on the path `kern`.
    pub fn rotate(&self, kern: &Kernels, x: &mut [f32]) {
        if let Some(s) = self.sign_vector(x.len()) {
            x.iter_mut().zip(s).for_each(|(v, s)| *v *= s);
        }
        kern.fwht_blocks(x, self.block);
    }

    /// `x -> R^T x` on one vector (the embedding lookup of an inverse-listed table).
    pub fn unrotate(&self, x: &mut [f32]) {
        fwht_blocks(x, self.block);
        if let Some(s) = self.sign_vector(x.len()) {
            x.iter_mut().zip(s).for_each(|(v, s)| *v *= s);
        }
    }

    /// The activation a matmul of kind `kind` reads: a transformed copy of `x` (`n` vectors of
    /// `k`), or `None` for [`FoldKind::None`]. Tokens are spread over the pool.
    pub fn apply(&self, exec: &Exec, kind: FoldKind, x: &[f32], k: usize) -> Option<Vec<f32>> {
        if kind == FoldKind::None {
            return None;
        }
        let mut out = Vec::new();
        self.apply_into(exec, kind, x, k, &mut out);
        Some(out)
    }

    /// [`apply`](Self::apply) into `out` (reusing its allocation); for [`FoldKind::None`]
    /// `out` is a plain copy of `x`.
    pub fn apply_into(&self, exec: &Exec, kind: FoldKind, x: &[f32], k: usize, out: &mut Vec<f32>) {
        out.clear();
        out.extend_from_slice(x);
        if kind == FoldKind::None || x.is_empty() {
            return;
        }
        let n = x.len() / k;
        let per = n.div_ceil(exec.pool.threads() * 2).max(1);
        let chunks = out.chunks_mut(per * k);
        exec.pool.for_each_item(chunks.len(), chunks, |chunk| {
            PERMUTE_TMP.with_borrow_mut(|tmp| {
                for v in chunk.chunks_exact_mut(k) {
                    if let FoldKind::PermuteRotate(g) = kind {
                        tiled_to_grouped(v, g, tmp);
                    }
                    self.rotate(exec.kern, v);
                }
            })
        });
    }
}

thread_local! {
    /// Per-thread scratch of [`tiled_to_grouped`] inside [`HadamardFold::apply_into`].
    static PERMUTE_TMP: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reorders one `ssm_out` activation from tiled value-head order (`h = r * n_k + g`) to
/// grouped order (`h = g * rep + r`); `tmp` is scratch.
pub fn tiled_to_grouped(v: &mut [f32], g: GdnGeometry, tmp: &mut Vec<f32>) {
    let (hd, nk) = (g.head_dim, g.n_k_heads);
    let rep = g.n_v_heads / nk;
    tmp.clear();
    tmp.extend_from_slice(v);
    for grp in 0..nk {
        for r in 0..rep {
            let (dst, src) = ((grp * rep + r) * hd, (r * nk + grp) * hd);
            v[dst..dst + hd].copy_from_slice(&tmp[src..src + hd]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fwht_matches_the_sylvester_matrix_and_is_its_own_inverse() {
        let n = 16;
        let x: Vec<f32> = (0..2 * n).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut y = x.clone();
        fwht_blocks(&mut y, n);
        for b in 0..2 {
            for i in 0..n {
                let want: f32 = (0..n)
                    .map(|j| {
                        let s = if (i & j).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        s * x[b * n + j]
                    })
                    .sum::<f32>()
                    / (n as f32).sqrt();
                assert!((y[b * n + i] - want).abs() < 1e-5);
            }
        }
        fwht_blocks(&mut y, n);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 1e-5));
    }

    #[test]
    fn tiled_to_grouped_moves_whole_heads() {
        let g = GdnGeometry {
            head_dim: 2,
            n_k_heads: 2,
            n_v_heads: 6,
        };
        // tiled head h = r * 2 + grp holds the value h.
        let mut v: Vec<f32> = (0..12).map(|i| (i / 2) as f32).collect();
        tiled_to_grouped(&mut v, g, &mut Vec::new());
        // grouped head grp * 3 + r must hold tiled head r * 2 + grp.
        let want = [0.0, 2.0, 4.0, 1.0, 3.0, 5.0];
        for (h, w) in want.iter().enumerate() {
            assert_eq!(&v[2 * h..2 * h + 2], &[*w, *w]);
        }
    }
}
