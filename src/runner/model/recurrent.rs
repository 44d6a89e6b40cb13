//! Gated DeltaNet (the linear-attention layers of `qwen35`): the per-sequence recurrent state
//! and the two sequential pieces of a layer, the causal depthwise conv1d and the delta-rule
//! recurrence. The projections around them are ordinary matmuls (see `blocks/deltanet.rs`).
//!
//! **Batches.** A prompt batch runs every projection over the whole batch (gemm tiles); the
//! recurrence then runs one pool job per value head, each block of 16 value rows through every
//! token of the batch while its state stays in L1 ([`crate::kernels::delta::delta_rule`]:
//! decay, `S k`, rank-1 update and `S q` in two passes, ~7 flops per state element): for
//! Ternary Bonsai 2 27B about 5.5 MFLOP per layer per token next to ~770 MFLOP of matmuls in
//! the same layer (0.7 %). A chunked (WY / UT-transform) form would turn this 0.7 %
//! into small matmuls at the price of extra work and a different summation order; it pays on
//! GPUs, not here. The sequential form is also what llama.cpp's fused CPU op computes, in the
//! same order, so the references are reproduced without a second numeric path.
//!
//! **State and rollback.** [`RecurrentState`] holds per DeltaNet layer the conv history
//! (`conv_kernel - 1` inputs) and the `S[dv][dk]` matrices of every value head (stored
//! transposed). Speculative
//! decoding needs to return to an earlier point; copying ~150 MB (27B) per drafted token would
//! cost more than the draft saves. Instead the state is double-buffered: a checkpoint only marks
//! the active buffer read-only (O(1)); the next forward pass reads each head from it and writes
//! the updated head into the other buffer (a head is copied into cache and updated there, so
//! the memory traffic is that of an ordinary update); rollback switches back (O(1)). The second
//! buffer is allocated on the first checkpoint only.

use super::error::{ModelError, Result};
use super::ops::silu;
use crate::kernels::Kernels;
use crate::kernels::delta::DeltaSeq;
use crate::pool::ThreadPool;

/// The dimensions of a Gated DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaNetShape {
    /// Key/query heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of `n_k_heads`; value head `h` reads key
    /// head `h % n_k_heads` (the tiled order of the GGUF).
    pub n_v_heads: usize,
    /// Values per key head (`ssm.state_size`).
    pub head_k_dim: usize,
    /// Values per value head (`ssm.inner_size / n_v_heads`).
    pub head_v_dim: usize,
    /// Taps of the causal conv1d (`ssm.conv_kernel`).
    pub conv_kernel: usize,
}

impl DeltaNetShape {
    /// Width of q (and of k): `n_k_heads * head_k_dim`.
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_k_dim
    }

    /// Width of v and of the layer output: `n_v_heads * head_v_dim`.
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_v_dim
    }

    /// Channels of the conv (q | k | v).
    pub fn conv_channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    fn ssm_len(&self) -> usize {
        self.n_v_heads * self.head_v_dim * self.head_k_dim
    }

    fn conv_len(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_channels()
    }
}

/// One layer's state: conv history (`conv_kernel - 1` rows of `conv_channels`, oldest first)
/// and `n_v_heads` matrices `S[dv][dk]`, each stored transposed (`dk` rows of `dv` values, as
/// [`crate::kernels::delta::delta_rule`] reads them).
#[derive(Clone, Debug, Default)]
struct LayerState {
    conv: Vec<f32>,
    ssm: Vec<f32>,
}

/// Where a [`RecurrentState`] can return to (see [`RecurrentState::checkpoint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentCheckpoint {
    epoch: u64,
    buf: usize,
    pos: usize,
}

impl RecurrentCheckpoint {
    /// Tokens the state had absorbed when the checkpoint was taken.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Whether the checkpoint is at the start of the sequence.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }
}

/// What the recurrence of a batch reads: per token, `c` holds q | k | v after the conv (q and
/// k already L2-normalised), `decay[t][h] = exp(g)` and `beta[t][h]` the gates.
#[derive(Clone, Copy)]
pub(crate) struct DeltaInput<'a> {
    /// `[n][conv_channels]`.
    pub c: &'a [f32],
    /// `[n][n_v_heads]`.
    pub decay: &'a [f32],
    /// `[n][n_v_heads]`.
    pub beta: &'a [f32],
}

/// The conv and SSM state of every DeltaNet layer of one sequence, double-buffered for O(1)
/// checkpoints (see the module documentation).
#[derive(Clone, Debug)]
pub struct RecurrentState {
    shape: DeltaNetShape,
    bufs: [Vec<LayerState>; 2],
    active: usize,
    /// The buffer a live checkpoint points to (never written while it is).
    protected: Option<usize>,
    epoch: u64,
    pos: usize,
    /// Set when the session was truncated to a point the state cannot return to.
    broken: bool,
}

/// Which buffers a forward pass reads and writes (see [`RecurrentState::begin`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Update {
    src: usize,
    dst: usize,
}

impl RecurrentState {
    /// A zero state for `n_layers` DeltaNet layers.
    pub fn new(shape: DeltaNetShape, n_layers: usize) -> RecurrentState {
        let zero = || LayerState {
            conv: vec![0.0; shape.conv_len()],
            ssm: vec![0.0; shape.ssm_len()],
        };
        RecurrentState {
            shape,
            bufs: [(0..n_layers).map(|_| zero()).collect(), Vec::new()],
            active: 0,
            protected: None,
            epoch: 0,
            pos: 0,
            broken: false,
        }
    }

    /// The layer shape.
    pub fn shape(&self) -> DeltaNetShape {
        self.shape
    }

    /// Tokens absorbed.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Whether no token was absorbed.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// Bytes of one copy of the state (conv + SSM, every layer); a checkpoint adds a second.
    pub fn state_bytes(&self) -> usize {
        4 * self.bufs[self.active].len() * (self.shape.conv_len() + self.shape.ssm_len())
    }

    /// Bytes held now (one or two copies).
    pub fn size_bytes(&self) -> usize {
        self.bufs
            .iter()
            .flatten()
            .map(|l| 4 * (l.conv.len() + l.ssm.len()))
            .sum()
    }

    /// A copy of the current state alone (no checkpoint, one buffer): what a prompt cache keeps.
    pub fn compact(&self) -> RecurrentState {
        RecurrentState {
            shape: self.shape,
            bufs: [self.bufs[self.active].clone(), Vec::new()],
            active: 0,
            protected: None,
            epoch: self.epoch,
            pos: self.pos,
            broken: self.broken,
        }
    }

    /// Back to the zero state of an empty sequence; forgets any checkpoint.
    pub fn reset(&mut self) {
        for l in &mut self.bufs[self.active] {
            l.conv.fill(0.0);
            l.ssm.fill(0.0);
        }
        self.protected = None;
        self.epoch += 1;
        self.pos = 0;
        self.broken = false;
    }

    /// Marks the state unusable (the session was truncated to a position it cannot return to)
    /// until [`reset`](Self::reset) or a rollback to a checkpoint taken before.
    pub(crate) fn invalidate(&mut self) {
        self.broken = true;
    }

    /// Takes a checkpoint in O(1): the current buffer becomes read-only until the next
    /// checkpoint or reset. Only the latest checkpoint stays valid.
    pub fn checkpoint(&mut self) -> RecurrentCheckpoint {
        self.epoch += 1;
        self.protected = Some(self.active);
        RecurrentCheckpoint {
            epoch: self.epoch,
            buf: self.active,
            pos: self.pos,
        }
    }

    /// Returns to `cp` in O(1). It stays valid: one can roll back to it again.
    pub fn rollback(&mut self, cp: &RecurrentCheckpoint) -> Result<()> {
        if cp.epoch != self.epoch || self.protected != Some(cp.buf) {
            return Err(ModelError::BadShape(
                "stale recurrent checkpoint: a newer checkpoint or a reset replaced it".into(),
            ));
        }
        self.active = cp.buf;
        self.pos = cp.pos;
        self.broken = false;
        Ok(())
    }

    /// Starts a forward pass at `pos0`: picks the buffer to write (the other one when the
    /// active buffer holds a checkpoint, allocated on first use).
    pub(crate) fn begin(&mut self, pos0: usize) -> Result<Update> {
        if self.broken || pos0 != self.pos {
            return Err(ModelError::BadShape(format!(
                "the recurrent state holds {} tokens but the session is at {pos0}: a hybrid \
                 session can only return to a checkpoint (Session::rollback) or to 0",
                self.pos
            )));
        }
        let src = self.active;
        if self.protected != Some(src) {
            return Ok(Update { src, dst: src });
        }
        let dst = 1 - src;
        if self.bufs[dst].is_empty() {
            let s = self.shape;
            self.bufs[dst] = (0..self.bufs[src].len())
                .map(|_| LayerState {
                    conv: vec![0.0; s.conv_len()],
                    ssm: vec![0.0; s.ssm_len()],
                })
                .collect();
        }
        Ok(Update { src, dst })
    }

    /// Ends a forward pass of `n` tokens started with `u`.
    pub(crate) fn finish(&mut self, u: Update, n: usize) {
        self.active = u.dst;
        self.pos += n;
    }

    /// Runs the conv (+ SiLU) of DeltaNet layer `layer` on `x` (`n x conv_channels`,
    /// token-major) in place, reading and advancing the layer's conv history, then
    /// `finish_row` on each output row; the rows are spread over `pool`. `w` is
    /// `conv_channels x conv_kernel` (the GGUF `ssm_conv1d.weight`); `all` is scratch for the
    /// conv's input rows (`(conv_kernel - 1 + n) x conv_channels`).
    pub(crate) fn conv_silu(
        &mut self,
        pool: &ThreadPool,
        (u, layer): (Update, usize),
        w: &[f32],
        x: &mut [f32],
        all: &mut Vec<f32>,
        finish_row: impl Fn(&mut [f32]) + Sync,
    ) {
        let ch = self.shape.conv_channels();
        let kc = self.shape.conv_kernel;
        let (src, dst) = self.layer_pair(u, layer);
        let n = x.len() / ch;
        // The input row `i` of the conv: history rows first, then the batch.
        all.clear();
        all.extend_from_slice(match src {
            Some(s) => &s.conv,
            None => &dst.conv,
        });
        all.extend_from_slice(x);
        let all = &all[..];
        pool.for_each_chunk_mut(&mut x[..n * ch], ch, |t, out| {
            for (c, o) in out.iter_mut().enumerate() {
                let taps = &w[c * kc..(c + 1) * kc];
                let mut s = 0.0f32;
                for (j, &wj) in taps.iter().enumerate() {
                    s += all[(t + j) * ch + c] * wj;
                }
                *o = silu(s);
            }
            finish_row(out);
        });
        dst.conv.copy_from_slice(&all[n * ch..]);
    }

    /// The delta-rule recurrence of DeltaNet layer `layer` over a batch, with update `u`, from
    /// `input` ([`DeltaInput`]); writes `o` (`n x value_dim`). Per token and value head:
    /// `S = decay S; d = (v - S k) beta; S += d k^T; o = S q / sqrt(dv)`
    /// ([`Kernels::delta_rule`]), the value heads spread over `pool`. `heads` is scratch
    /// for the output in head-major order (`n_v_heads x n x head_v_dim`), so each pool job
    /// writes one contiguous piece.
    pub(crate) fn recurrence(
        &mut self,
        (pool, kern): (&ThreadPool, &Kernels),
        (u, layer): (Update, usize),
        input: DeltaInput,
        o: &mut [f32],
        heads: &mut Vec<f32>,
    ) {
        let DeltaInput { c, decay, beta } = input;
        let s = self.shape;
        let (dk, dv, nv, nk) = (s.head_k_dim, s.head_v_dim, s.n_v_heads, s.n_k_heads);
        let ch = s.conv_channels();
        let n = c.len() / ch;
        let scale = 1.0 / (dv as f32).sqrt();
        let (src, dst) = self.layer_pair(u, layer);
        let src_ssm: Option<&[f32]> = src.map(|l| l.ssm.as_slice());
        heads.resize(nv * n * dv, 0.0);
        // Per value head: its state and its output of every token.
        let parts = dst
            .ssm
            .chunks_mut(dv * dk)
            .zip(heads.chunks_mut(n * dv))
            .enumerate();
        pool.for_each_item(nv, parts, |(h, (st, outs))| {
            if let Some(src) = src_ssm {
                st.copy_from_slice(&src[h * dv * dk..(h + 1) * dv * dk]);
            }
            let hk = h % nk;
            let seq = DeltaSeq {
                rows: c,
                stride: ch,
                dk,
                q: hk * dk,
                k: s.key_dim() + hk * dk,
                v: 2 * s.key_dim() + h * dv,
                decay: &decay[h..],
                beta: &beta[h..],
                gate_stride: nv,
                scale,
            };
            kern.delta_rule(st, &seq, outs);
        });
        for (t, token) in o[..n * nv * dv].chunks_exact_mut(nv * dv).enumerate() {
            for (h, piece) in token.chunks_exact_mut(dv).enumerate() {
                piece.copy_from_slice(&heads[(h * n + t) * dv..(h * n + t + 1) * dv]);
            }
        }
    }

    /// The layer's state to read (`None`: the one written, updated in place) and the one to
    /// write (the other buffer when a checkpoint protects the active one).
    fn layer_pair(&mut self, u: Update, layer: usize) -> (Option<&LayerState>, &mut LayerState) {
        if u.src == u.dst {
            (None, &mut self.bufs[u.dst][layer])
        } else {
            let [a, b] = &mut self.bufs;
            let (s, d) = if u.src == 0 { (&*a, b) } else { (&*b, a) };
            (Some(&s[layer]), &mut d[layer])
        }
    }
}

/// Per-head L2 normalisation as the reference computes it: `y / max(||y||, eps)` (sum of
/// squares in f64), over consecutive heads of `head` values.
pub fn l2_norm_heads(x: &mut [f32], head: usize, eps: f32) {
    for h in x.chunks_exact_mut(head) {
        let ss: f64 = h.iter().map(|&v| v as f64 * v as f64).sum();
        let scale = 1.0 / (ss as f32).sqrt().max(eps);
        h.iter_mut().for_each(|v| *v *= scale);
    }
}
