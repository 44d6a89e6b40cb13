//! Causal multi-head attention over the f16 KV cache, with grouped KV heads (query head `h`
//! reads KV head `h / (n_head / n_head_kv)`, the blocked mapping llama.cpp uses). The scores and
//! the weighted V sum read the cached halves directly (the attention entries of the matmul
//! kernels' table, [`crate::kernels::attention`]); the softmax is the table's too.

use crate::kernels::attention::{scores_f32, weighted_sum_f32};

use super::exec::Exec;
use super::kv_cache::{KvCache, KvRows};

/// The shape of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Query heads.
    pub n_head: usize,
    /// KV heads (divides `n_head`).
    pub n_head_kv: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
}

/// `out[c][h]` = `softmax(q[c][h] . K[0..=pos]) V` for every column `c` of a batch and head `h`,
/// where `at(c)` gives the cache column `c`'s sequence reads (already holding its K/V up to
/// and including `pos`), `pos` and the `layer`. The columns of every sequence of a server
/// batch are spread over the pool in one call; a job is the query heads that share one KV head
/// (each K and V row read once for all of them) when that still gives every thread a few jobs,
/// else one head. Each head is computed exactly as it would be alone, so neither batching nor
/// grouping changes a bit.
pub fn attend<'c>(
    exec: &Exec,
    s: AttnShape,
    q: &[f32],
    layer: usize,
    at: impl Fn(usize) -> (&'c KvCache, usize) + Sync,
    out: &mut [f32],
) {
    let (hd, q_dim, kv_dim) = (s.head_dim, s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    let n = q.len() / q_dim;
    let group = s.n_head / s.n_head_kv;
    let per_job = match n * s.n_head_kv >= 2 * exec.pool.threads() {
        true => group,
        false => 1,
    };
    let jobs_per_col = s.n_head / per_job;
    let kern = exec.kern;
    exec.pool
        .for_each_chunk_mut(&mut out[..n * q_dim], per_job * hd, |j, o| {
            let (c, h0) = (j / jobs_per_col, j % jobs_per_col * per_job);
            let (cache, pos) = at(c);
            debug_assert_eq!(kv_dim, cache.kv_dim());
            let (k, v) = cache.layer(layer, pos + 1);
            let kvh = h0 / group;
            let qh = &q[c * q_dim + h0 * hd..c * q_dim + (h0 + per_job) * hd];
            let len = pos + 1;
            let mut scores = SCORES.take();
            scores.clear();
            scores.reserve(per_job * cache.n_ctx());
            scores.resize(per_job * len, 0.0);
            match (k, v) {
                (KvRows::F16(k), KvRows::F16(v)) => {
                    let (k, v) = (&k[kvh * hd..], &v[kvh * hd..]);
                    kern.attention_scores(qh, per_job, k, kv_dim, s.scale, &mut scores);
                    scores
                        .chunks_exact_mut(len)
                        .for_each(|row| kern.attention_softmax(row));
                    kern.attention_weighted_sum(&scores, per_job, v, kv_dim, o);
                }
                (KvRows::F32(k), KvRows::F32(v)) => {
                    let (k, v) = (&k[kvh * hd..], &v[kvh * hd..]);
                    let heads = qh.chunks_exact(hd).zip(o.chunks_exact_mut(hd));
                    for ((qg, og), sg) in heads.zip(scores.chunks_exact_mut(len)) {
                        scores_f32(qg, k, kv_dim, s.scale, sg);
                        kern.attention_softmax(sg);
                        weighted_sum_f32(sg, v, kv_dim, og);
                    }
                }
                _ => unreachable!("K and V of one cache have one element type"),
            }
            SCORES.set(scores);
        });
}

thread_local! {
    /// One head's scores, per thread: allocated once per context size (reserved to the cache's `n_ctx`), so a
    /// forward pass does not allocate after its first one.
    static SCORES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}
