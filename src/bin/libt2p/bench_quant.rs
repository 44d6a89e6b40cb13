//! `libt2p bench`'s rows for ggml block types: the LM head of a Ternary Bonsai 1.7B
//! (151936 x 2048) as `llama-quantize`'s default mix (Q6_K), a community repack (Q4_0) and the
//! Q8_0 fallback, one column (decode) and four (verification), against the same ceiling as the
//! ternary kernels. Split over the pool as the runner splits it
//! ([`chunk_rows`]: the one row-chunk rule).

use std::time::Duration;

use t2p::format::GgmlType;
use t2p::kernels::Kernels;
use t2p::matmul::{ColumnMatrix, QuantMatrix, chunk_count, chunk_rows};
use t2p::pool::ThreadPool;

/// One measured product.
pub struct QuantRow {
    pub ty: GgmlType,
    /// The kernel path that ran it ([`t2p::kernels::quant_path_name`]).
    pub path: &'static str,
    pub rows: usize,
    pub k: usize,
    pub batch: usize,
    pub threads: usize,
    pub median_s: f64,
    pub gbps: f64,
    pub pct: f64,
}

/// Random blocks of `ty` whose fp16 fields are finite (bit 14 of every 16-bit word cleared,
/// so no exponent is all ones).
fn random_matrix(
    ty: GgmlType,
    rows: usize,
    k: usize,
    seed: u64,
) -> Result<QuantMatrix, t2p::Error> {
    let mut words = QuantMatrix::zeroed_words(ty, rows, k)?;
    let mut s = seed | 1;
    for w in words.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *w = (s >> 24) as u16 & 0xBFFF;
    }
    QuantMatrix::new(ty, rows, k, words)
}

/// `m` times the columns in `work` into `out`, row chunks over `pool`.
fn product(
    pool: &ThreadPool,
    kern: &Kernels,
    m: &QuantMatrix,
    work: &[u32],
    ncols: usize,
    out: &mut [f32],
) {
    let rows = m.rows();
    let n = chunk_count(rows, m.k(), ncols, pool.threads());
    let mut parts = Vec::with_capacity(n);
    let mut rest = &mut out[..rows * ncols];
    for i in 0..n {
        let (piece, tail) = rest.split_at_mut(chunk_rows(rows, i, n).len() * ncols);
        parts.push(piece);
        rest = tail;
    }
    pool.run_parts(parts, |i, tile| {
        let r = chunk_rows(rows, i, n);
        m.compute(kern, work, ncols, r.clone(), tile, r.len())
            .expect("shape");
    });
}

/// Times the head in each type at each pool's thread count.
pub fn measure(
    kern: &Kernels,
    pools: &[ThreadPool],
    ceilings: &[f64],
    flush: &[u64],
    full: bool,
) -> Result<Vec<QuantRow>, t2p::Error> {
    let (rows, k) = (151936, 2048);
    let mut results = Vec::new();
    for (i, ty) in [GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q8_0]
        .into_iter()
        .enumerate()
    {
        let m = random_matrix(ty, rows, k, 7 + i as u64)?;
        for batch in [1, 4] {
            let x: Vec<f32> = (0..k * batch)
                .map(|j| ((j * 7919 % 1000) as f32 - 500.0) / 300.0)
                .collect();
            let mut work = vec![0u32; m.act_words(batch)];
            m.quantize_acts(&x, &mut work)?;
            let mut out = vec![0f32; rows * batch];
            for (pool, &ceiling) in pools.iter().zip(ceilings) {
                let evict = || {
                    let s = flush.iter().fold(0u64, |a, &x| a.wrapping_add(x));
                    std::hint::black_box(s);
                };
                let budget = Duration::from_millis(if full { 2000 } else { 400 });
                let times =
                    crate::timing::time_reps(budget, 3, if full { 50 } else { 15 }, evict, || {
                        product(pool, kern, &m, &work, batch, &mut out);
                    });
                let median = times[times.len() / 2];
                let gbps = m.size_bytes() as f64 / median / 1e9;
                eprintln!(
                    "bench: {ty} head {rows}x{k}x{batch} threads {}: {:.3} ms, {gbps:.2} GB/s",
                    pool.threads(),
                    median * 1e3
                );
                results.push(QuantRow {
                    ty,
                    path: t2p::kernels::quant_path_name(kern.isa(), ty),
                    rows,
                    k,
                    batch,
                    threads: pool.threads(),
                    median_s: median,
                    gbps,
                    pct: 100.0 * gbps / ceiling,
                });
            }
        }
    }
    Ok(results)
}

/// The rows as a table on stdout.
pub fn print_table(rows: &[QuantRow]) {
    println!("ggml block types (LM head shape):");
    println!(
        "{:<5} {:<6} {:<12} {:>14} {:>5} {:>3} {:>10} {:>7} {:>6} {:>8}",
        "kern", "type", "path", "rows x k", "batch", "thr", "median ms", "GB/s", "%ceil", "vs gemv"
    );
    for r in rows {
        let gemv = rows
            .iter()
            .find(|o| o.ty == r.ty && o.batch == 1 && o.threads == r.threads)
            .filter(|_| r.batch > 1)
            .map_or(String::new(), |o| {
                format!("{:.2}x", r.median_s / o.median_s)
            });
        println!(
            "{:<5} {:<6} {:<12} {:>14} {:>5} {:>3} {:>10.3} {:>7.2} {:>5.1}% {:>8}",
            if r.batch == 1 { "gemv" } else { "gemm" },
            r.ty.name(),
            r.path,
            format!("{}x{}", r.rows, r.k),
            r.batch,
            r.threads,
            r.median_s * 1e3,
            r.gbps,
            r.pct,
            gemv
        );
    }
}
