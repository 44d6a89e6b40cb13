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
/// else one head. A prompt's consecutive columns go as tiles (`attend_tiles`): each K row is
/// read once for the heads of several columns. Each head is computed exactly as it would be
/// alone, so neither batching, grouping nor tiling changes a bit.
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
    let mut tiles = TILES.take();
    if find_tiles(exec, s, n, &at, &mut tiles) {
        attend_tiles(exec, s, q, layer, &at, &tiles, out);
        TILES.set(tiles);
        return;
    }
    TILES.set(tiles);
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
            let kvh = h0 / group;
            let (k, v) = cache.head(layer, kvh, pos + 1);
            let qh = &q[c * q_dim + h0 * hd..c * q_dim + (h0 + per_job) * hd];
            let len = pos + 1;
            let mut scores = SCORES.take();
            scores.clear();
            scores.reserve(per_job * cache.n_ctx());
            scores.resize(per_job * len, 0.0);
            match (k, v) {
                (KvRows::F16(k), KvRows::F16(v)) => {
                    kern.attention_scores(qh, per_job, k, hd, s.scale, &mut scores);
                    scores
                        .chunks_exact_mut(len)
                        .for_each(|row| kern.attention_softmax(row));
                    kern.attention_weighted_sum(&scores, per_job, v, hd, o);
                }
                (KvRows::F32(k), KvRows::F32(v)) => {
                    let heads = qh.chunks_exact(hd).zip(o.chunks_exact_mut(hd));
                    for ((qg, og), sg) in heads.zip(scores.chunks_exact_mut(len)) {
                        scores_f32(qg, k, hd, s.scale, sg);
                        kern.attention_softmax(sg);
                        weighted_sum_f32(sg, v, hd, og);
                    }
                }
                _ => unreachable!("K and V of one cache have one element type"),
            }
            SCORES.set(scores);
        });
}

/// Query vectors a tile's scores call takes: enough to share each K row widely, few enough for
/// the kernels' registers (the x86 paths keep eight heads' sums in flight).
const TILE_QUERIES: usize = 8;

/// The tiles of a batch into `tiles`, `(first column, columns)`: runs of consecutive columns of
/// one sequence at consecutive positions over an f16 cache, up to `TILE_QUERIES / group`
/// columns each. False where tiles would not pay: groups too wide to tile, an f32 cache, too
/// few tiles to keep every thread busy, or mostly single columns (a batch of decodes).
fn find_tiles<'c>(
    exec: &Exec,
    s: AttnShape,
    n: usize,
    at: &impl Fn(usize) -> (&'c KvCache, usize),
    tiles: &mut Vec<(usize, usize)>,
) -> bool {
    tiles.clear();
    let per_tile = TILE_QUERIES / (s.n_head / s.n_head_kv);
    if per_tile < 2 || n < 2 * per_tile {
        return false;
    }
    for c in 0..n {
        let (cache, pos) = at(c);
        match tiles.last_mut() {
            Some((c0, t))
                if *t < per_tile && {
                    let (cache0, pos0) = at(*c0);
                    std::ptr::eq(cache0, cache) && pos == pos0 + *t
                } =>
            {
                *t += 1
            }
            _ => tiles.push((c, 1)),
        }
        if c == 0 && !cache.is_f16() {
            return false;
        }
    }
    tiles.len() >= 2 * exec.pool.threads() && 2 * n > 3 * tiles.len()
}

/// [`attend`] over tiles of consecutive columns of one sequence, a tile a job: for each KV head,
/// the scores of the query heads of all the tile's columns in one call over the rows up to the
/// last column's position (each K row read once for all of them), then each query's softmax and
/// weighted sum over its own positions only, exactly as alone.
fn attend_tiles<'c>(
    exec: &Exec,
    s: AttnShape,
    q: &[f32],
    layer: usize,
    at: &(impl Fn(usize) -> (&'c KvCache, usize) + Sync),
    tiles: &[(usize, usize)],
    out: &mut [f32],
) {
    let (hd, q_dim) = (s.head_dim, s.n_head * s.head_dim);
    let group = s.n_head / s.n_head_kv;
    let kern = exec.kern;
    let pieces = crate::pool::pieces(out, tiles.len(), |i| tiles[i].1 * q_dim);
    exec.pool.for_each_item(tiles.len(), pieces, |(i, o)| {
        let (c0, t) = tiles[i];
        let (cache, pos0) = at(c0);
        let rows = pos0 + t;
        let (mut queries, mut scores, mut weights) = (QUERIES.take(), TILE.take(), WEIGHTS.take());
        // Room for the longest tile the cache allows, so that later passes do not allocate.
        queries.reserve(TILE_QUERIES * hd);
        weights.reserve(group * cache.n_ctx());
        scores.clear();
        scores.reserve(TILE_QUERIES * cache.n_ctx());
        scores.resize(t * group * rows, 0.0);
        for kvh in 0..s.n_head_kv {
            let heads = kvh * group * hd..(kvh + 1) * group * hd;
            queries.clear();
            for j in 0..t {
                queries.extend_from_slice(&q[(c0 + j) * q_dim..][heads.clone()]);
            }
            let (KvRows::F16(k), KvRows::F16(v)) = cache.head(layer, kvh, rows) else {
                unreachable!("tiles are made over f16 caches only")
            };
            kern.attention_scores(&queries, t * group, k, hd, s.scale, &mut scores);
            for j in 0..t {
                let len = pos0 + j + 1;
                weights.clear();
                for g in 0..group {
                    let row = &mut scores[(j * group + g) * rows..][..len];
                    kern.attention_softmax(row);
                    weights.extend_from_slice(row);
                }
                let o = &mut o[j * q_dim..][heads.clone()];
                kern.attention_weighted_sum(&weights, group, v, hd, o);
            }
        }
        QUERIES.set(queries);
        TILE.set(scores);
        WEIGHTS.set(weights);
    });
}

thread_local! {
    /// The tiles of a batch (on the calling thread; kept so that a pass does not allocate).
    static TILES: std::cell::Cell<Vec<(usize, usize)>> = const { std::cell::Cell::new(Vec::new()) };
    /// A tile's scores, per thread (reserved to `TILE_QUERIES` rows of the cache's `n_ctx`).
    static TILE: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// A tile's query heads of one KV head, per thread, side by side as the scores call reads them.
    static QUERIES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// One column's softmax weights, per thread, laid out as the weighted sum reads them.
    static WEIGHTS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };

    /// One head's scores, per thread: allocated once per context size (reserved to the cache's `n_ctx`), so a
    /// forward pass does not allocate after its first one.
    static SCORES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::XorShift;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut rng = XorShift::new(seed.into());
        (0..n)
            .map(|_| rng.below(20_001) as f32 / 2_000.0 - 5.0)
            .collect()
    }

    /// A prompt's columns attended in tiles give every column's bits from attending it alone
    /// (one column a call, the decode path), for groups of 1, 2 and 4 query heads per KV head,
    /// prompts that do and do not fill the last tile, two sequences in one batch, and a cache
    /// that already holds a prefix.
    #[test]
    fn tiles_give_each_column_its_bits_alone() {
        let exec = Exec::new(2);
        for (n_head, n_head_kv) in [(4, 4), (4, 2), (8, 2)] {
            let s = AttnShape {
                n_head,
                n_head_kv,
                head_dim: 16,
                scale: 0.25,
            };
            let (q_dim, kv_dim) = (n_head * 16, n_head_kv * 16);
            for (prefix, cols) in [(0, 37), (5, 40), (0, 64)] {
                let caches: Vec<KvCache> = (0..2)
                    .map(|seq| {
                        let mut c = KvCache::new(1, 128, n_head_kv, 16);
                        c.reserve(prefix + cols);
                        for p in 0..prefix + cols {
                            let kv = values(2 * kv_dim, (seq * 1000 + p) as u32);
                            c.store(0, p, &kv[..kv_dim], &kv[kv_dim..]);
                        }
                        c
                    })
                    .collect();
                // Two sequences of `cols` columns each, the prompt after `prefix` positions.
                let at = |c: usize| (&caches[c / cols], prefix + c % cols);
                let q = values(2 * cols * q_dim, 7);
                let used = find_tiles(&exec, s, 2 * cols, &at, &mut Vec::new());
                assert!(used, "tiles are used");
                let mut tiled = vec![0.0; q.len()];
                attend(&exec, s, &q, 0, at, &mut tiled);
                for c in 0..2 * cols {
                    let mut alone = vec![0.0; q_dim];
                    let qc = &q[c * q_dim..(c + 1) * q_dim];
                    attend(&exec, s, qc, 0, |_| at(c), &mut alone);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&tiled[c * q_dim..(c + 1) * q_dim]),
                        bits(&alone),
                        "{n_head}/{n_head_kv} heads, prefix {prefix}, column {c}"
                    );
                }
            }
        }
    }
}
