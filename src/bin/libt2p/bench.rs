//! `libt2p bench`: kernel throughput against the memory ceiling, T2P against the stock layout.
//!
//! Everything runs on persistent pools (one per thread count), and the ceiling is measured in the
//! same run with the same pool: a multi-threaded sum over a buffer far larger than the LLC.
//! gemv is memory-bound and reported as GB/s of weights and % of that ceiling; gemm is
//! compute-bound and reported as GMAC/s and GFLOPS (2 FLOP per MAC). The stock baseline is the
//! stock `vec_dot` on `pq2_0` as it sits in the file, one call per (row, column), parallelised
//! over rows the same way.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use t2p::bandwidth::BandwidthProbe;
use t2p::format::{BlockPq2_0, BlockQ8K, BlockT2p, QK_K, QK_PQ2_0, f32_to_f16, quantize_row_q8k};
use t2p::kernels::{Isa, Kernels};
use t2p::matmul::{ActQuant, MatmulPlan, QuantizedBatch, T2pMatrix, matmul_parallel};
use t2p::pool::ThreadPool;

use crate::timing::time_reps;

/// Options of `libt2p bench`.
#[derive(clap::Args)]
pub struct Args {
    /// Print exactly one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// More repetitions, and the stock baseline at 512 columns too (takes minutes).
    #[arg(long)]
    full: bool,
    /// Thread counts to run (default: 1 and all available CPUs).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Kernel path (default: the best this CPU supports).
    #[arg(long)]
    isa: Option<String>,
    /// Size of the bandwidth probe buffer in MiB.
    #[arg(long, default_value_t = 1024)]
    ceiling_mib: usize,
    /// Benchmark a model instead of the kernels: prompt and generation tok/s like llama-bench,
    /// and the cost of verifying a draft (forward over B tokens / a 1-token decode).
    #[arg(short = 'm', long = "model")]
    model: Option<std::path::PathBuf>,
    /// Activation quantization of a model benchmark (q8_0 or q8_K).
    #[arg(long = "act", default_value = "q8_0", value_parser = crate::run::parse_act)]
    act: ActQuant,
    /// KV cache element type of a model benchmark (as `libt2p run --cache-type`).
    #[arg(long = "cache-type", value_enum, default_value_t = crate::run::CacheType::F16)]
    cache_type: crate::run::CacheType,
    /// Read the T2P matrices of a converted model (`libt2p convert`) into memory of their own
    /// instead of using them where the mapped file lies.
    #[arg(long = "no-mmap")]
    no_mmap: bool,
    /// Only the ggml block-type rows (Q6_K / Q4_0 / Q8_0 LM heads), not the ternary kernels.
    #[arg(long)]
    quant_only: bool,
    #[command(flatten)]
    model_bench: crate::model_bench::ModelBenchArgs,
}

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// T2P weights, q8_K activations.
    T2p,
    /// T2P weights, q8_0 activations (llama.cpp's numerics for pq2_0).
    T2pQ8_0,
    /// pq2_0 as in the file, q8_K activations.
    Stock,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::T2p => "t2p",
            Layout::T2pQ8_0 => "t2p-q8_0",
            Layout::Stock => "stock",
        }
    }
}

struct Shape {
    label: &'static str,
    rows: usize,
    k: usize,
    batch: usize,
}

struct Row {
    label: &'static str,
    layout: Layout,
    isa: Isa,
    rows: usize,
    k: usize,
    batch: usize,
    threads: usize,
    median_s: f64,
    spread: f64,
    reps: usize,
    gbps: f64,
    pct: f64,
    gflops: f64,
}

impl Row {
    fn kernel(&self) -> &'static str {
        if self.batch == 1 { "gemv" } else { "gemm" }
    }
}

fn lcg(s: &mut u64) -> u64 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *s
}

/// `n` random blocks: every code byte of `parts(block).0` random (ternary codes mostly, some
/// code 3), then each scale of `parts(block).1` small, positive or negative.
fn random_blocks<B: bytemuck::Zeroable>(
    n: usize,
    seed: u64,
    parts: impl Fn(&mut B) -> (&mut [u8], &mut [u16]),
) -> Vec<B> {
    let mut s = seed;
    // On huge pages, as a model's weights and the bandwidth probe are.
    let mut blocks = t2p::huge_pages::zeroed_vec::<B>(n);
    for b in &mut blocks {
        let (codes, scales) = parts(b);
        for byte in codes {
            *byte = (lcg(&mut s) >> 40) as u8;
        }
        for d in scales {
            *d = f32_to_f16(((lcg(&mut s) >> 40) % 200) as f32 / 1000.0 - 0.1);
        }
    }
    blocks
}

fn t2p_blocks(n: usize, seed: u64) -> Vec<BlockT2p> {
    random_blocks(n, seed, |b: &mut BlockT2p| {
        (b.qs.as_flattened_mut().as_flattened_mut(), &mut b.d[..])
    })
}

fn pq2_0_blocks(n: usize, seed: u64) -> Vec<BlockPq2_0> {
    random_blocks(n, seed, |b: &mut BlockPq2_0| {
        (&mut b.qs[..], std::slice::from_mut(&mut b.d))
    })
}

fn columns(k: usize, ncols: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..k * ncols)
        .map(|_| (lcg(&mut s) >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        .collect()
}

/// The stock baseline: `vec_dot_stock` per (row, column), rows split across the pool in the
/// same whole-row-group jobs as [`matmul_parallel`]; `y` holds the columns, `k / 256` blocks each.
fn stock_parallel(
    pool: &ThreadPool,
    kern: &Kernels,
    pq: &[BlockPq2_0],
    rows: usize,
    k: usize,
    y: &[BlockQ8K],
    out: &mut [f32],
) {
    let nbr = k / QK_PQ2_0;
    let nby = k / QK_K;
    let ncols = y.len() / nby;
    // The T2P driver's row chunks, so both layouts split the same way.
    let plan = MatmulPlan::new(rows, k, ncols, ActQuant::Q8K).expect("shape");
    let n = plan.chunk_count(pool.threads());
    let parts = plan.split_output(&mut out[..rows * ncols], rows, n);
    pool.run_parts(parts, |i, mut dst| {
        let r0 = plan.chunk_rows(i, n).start;
        for (c, d) in dst.iter_mut().enumerate() {
            for (j, o) in d.iter_mut().enumerate() {
                let row = &pq[(r0 + j) * nbr..(r0 + j + 1) * nbr];
                *o = kern.vec_dot_stock(row, &y[c * nby..(c + 1) * nby]);
            }
        }
    });
}

/// Per-call overhead of a pool: an empty job (one index per thread) and a tiny gemv through
/// [`matmul_parallel`], against the same gemv on the calling thread alone; median microseconds.
struct Overhead {
    threads: usize,
    empty_us: f64,
    tiny_gemv_us: f64,
    tiny_gemv_serial_us: f64,
}

fn pool_overhead(pool: &ThreadPool, kern: &Kernels) -> Result<Overhead, t2p::Error> {
    let median_us = |mut f: Box<dyn FnMut() + '_>| {
        for _ in 0..200 {
            f();
        }
        let mut t: Vec<f64> = (0..2000)
            .map(|_| {
                let s = Instant::now();
                f();
                s.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let n = pool.threads();
    let empty_us = median_us(Box::new(|| {
        pool.run(n, |i| {
            std::hint::black_box(i);
        })
    }));
    // 64 x 1024: 64K weights, about a microsecond of work; split in whole row groups.
    let (rows, k) = (64, 1024);
    let w = T2pMatrix::from_t2p_blocks(t2p_blocks(rows * k / QK_PQ2_0 / 4, 9), rows, k)?;
    let act = QuantizedBatch::new(&columns(k, 1, 10), k, 1, ActQuant::Q8K)?;
    let mut out = vec![0.0f32; rows];
    let solo = ThreadPool::new(1);
    // Split as a big product would be, although this one is below the driver's threshold.
    let plan = MatmulPlan::for_batch(&w, &act)?;
    let chunks = pool.threads() * 4;
    let tiny_gemv_us = median_us(Box::new(|| {
        let parts = plan.split_output(&mut out, rows, chunks);
        pool.run_parts(parts, |i, mut piece| {
            let r = plan.chunk_rows(i, chunks);
            plan.compute(kern, w.blocks(), act.work(), r, piece[0], 0)
                .expect("shape")
        })
    }));
    let tiny_gemv_serial_us = median_us(Box::new(|| {
        matmul_parallel(&solo, kern, &w, &act, &mut out, rows).expect("shape")
    }));
    Ok(Overhead {
        threads: n,
        empty_us,
        tiny_gemv_us,
        tiny_gemv_serial_us,
    })
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// The kernel shapes measured: decode gemv and its verify tile, gemvs that fit L3 and L2, and
/// prefill gemms at three batch sizes.
const SHAPES: [Shape; 7] = [
    Shape {
        label: "decode",
        rows: 32768,
        k: 8192,
        batch: 1,
    },
    // Verifying 4 draft tokens: the same weights as the decode gemv, 4 columns at once
    // (the table's "vs gemv" column is this tile's time over the gemv's).
    Shape {
        label: "decode",
        rows: 32768,
        k: 8192,
        batch: 4,
    },
    Shape {
        label: "L3",
        rows: 4096,
        k: 14336,
        batch: 1,
    },
    Shape {
        label: "L2",
        rows: 1024,
        k: 1024,
        batch: 1,
    },
    Shape {
        label: "prefill",
        rows: 17408,
        k: 5120,
        batch: 4,
    },
    Shape {
        label: "prefill",
        rows: 17408,
        k: 5120,
        batch: 64,
    },
    Shape {
        label: "prefill",
        rows: 17408,
        k: 5120,
        batch: 512,
    },
];

/// What one `libt2p bench` run measured: ceilings and pool overheads per thread count, then one
/// row per (shape, thread count, layout, path).
struct Report {
    isa: Isa,
    threads: Vec<usize>,
    ceilings: Vec<f64>,
    overheads: Vec<Overhead>,
    results: Vec<Row>,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if let Some(model) = &args.model {
        return run_model(&args, model);
    }
    let isa = match &args.isa {
        Some(name) => Isa::from_name(name)?,
        None => Isa::best(),
    };
    let kern = Kernels::for_isa(isa)?;
    let threads = thread_counts(&args.threads);
    let pools: Vec<ThreadPool> = threads.iter().map(|&t| ThreadPool::new(t)).collect();
    let ceilings = measure_ceilings(&args, isa, &threads, &pools);
    let overheads = measure_overheads(&pools, kern)?;
    let results = if args.quant_only {
        Vec::new()
    } else {
        measure_kernels(&args, isa, kern, &pools, &ceilings)?
    };
    let flush: Vec<u64> = (0..(96usize << 20) / 8).map(|i| i as u64).collect();
    let quant = crate::bench_quant::measure(kern, &pools, &ceilings, &flush, args.full)?;
    let report = Report {
        isa,
        threads,
        ceilings,
        overheads,
        results,
    };
    if args.json {
        println!("{}", report.json()?);
    } else {
        report.print_table();
        crate::bench_quant::print_table(&quant);
    }
    Ok(ExitCode::SUCCESS)
}

/// `bench -m`: the model benchmark at one thread count.
fn run_model(args: &Args, model: &std::path::Path) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if args.threads.len() > 1 {
        return Err("a model benchmark runs at one thread count (--threads N)".into());
    }
    if let Some(name) = &args.isa {
        t2p::kernels::set_active(Isa::from_name(name)?)?;
    }
    let margs = crate::run::ModelArgs {
        model: model.to_path_buf(),
        threads: args.threads.first().copied(),
        ctx_size: None,
        batch: 512,
        act: args.act,
        cache_type: args.cache_type,
        no_mmap: args.no_mmap,
    };
    crate::model_bench::run(&margs, &args.model_bench, args.json)
}

/// The thread counts asked for (default 1 and every CPU), positive, ascending, distinct.
fn thread_counts(asked: &[usize]) -> Vec<usize> {
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = if asked.is_empty() {
        vec![1, all]
    } else {
        asked.to_vec()
    };
    threads.retain(|&t| t > 0);
    threads.sort_unstable();
    threads.dedup();
    threads
}

/// The read-bandwidth ceiling at each pool's thread count (GB/s), on one probe buffer.
fn measure_ceilings(args: &Args, isa: Isa, threads: &[usize], pools: &[ThreadPool]) -> Vec<f64> {
    eprintln!(
        "bench: isa {isa}, threads {threads:?}, probing bandwidth over {} MiB ...",
        args.ceiling_mib
    );
    let probe = BandwidthProbe::new(pools.last().expect("one pool"), args.ceiling_mib << 20);
    let ceilings: Vec<f64> = pools
        .iter()
        .map(|p| probe.measure(p, if args.full { 7 } else { 3 }).median_gbps)
        .collect();
    for (t, c) in threads.iter().zip(&ceilings) {
        eprintln!("bench: ceiling at {t} thread(s): {c:.2} GB/s");
    }
    ceilings
}

/// Each pool's per-call overhead.
fn measure_overheads(pools: &[ThreadPool], kern: &Kernels) -> Result<Vec<Overhead>, t2p::Error> {
    let overheads: Vec<Overhead> = pools
        .iter()
        .map(|p| pool_overhead(p, kern))
        .collect::<Result<_, _>>()?;
    for o in &overheads {
        eprintln!(
            "bench: pool overhead at {} thread(s): empty call {:.2} us, 64x1024 gemv split {:.2} us (one thread {:.2} us)",
            o.threads, o.empty_us, o.tiny_gemv_us, o.tiny_gemv_serial_us
        );
    }
    Ok(overheads)
}

/// The inputs of one shape: the same random weights in both layouts, and the columns quantized
/// every way a layout needs them.
struct Inputs {
    w: T2pMatrix,
    pq: Vec<BlockPq2_0>,
    act: QuantizedBatch,
    act_q8_0: QuantizedBatch,
    yq: Vec<BlockQ8K>,
}

impl Inputs {
    fn new(shape: &Shape, seed: u64) -> Result<Inputs, t2p::Error> {
        let (rows, k, batch) = (shape.rows, shape.k, shape.batch);
        let nblk = rows * k / QK_PQ2_0;
        let w = T2pMatrix::from_t2p_blocks(t2p_blocks(nblk / 4, seed + 1), rows, k)?;
        let pq = pq2_0_blocks(nblk, seed + 100);
        let x = columns(k, batch, seed + 200);
        let act = QuantizedBatch::new(&x, k, batch, ActQuant::Q8K)?;
        let act_q8_0 = QuantizedBatch::new(&x, k, batch, ActQuant::Q8_0)?;
        let mut yq = vec![BlockQ8K::default(); batch * k / QK_K];
        quantize_row_q8k(&x, &mut yq);
        Ok(Inputs {
            w,
            pq,
            act,
            act_q8_0,
            yq,
        })
    }
}

/// Times every shape at every thread count in every layout (T2P with q8_K and q8_0, stock on
/// the chosen path and on the scalar oracle), skipping the stock runs that take too long.
fn measure_kernels(
    args: &Args,
    isa: Isa,
    kern: &'static Kernels,
    pools: &[ThreadPool],
    ceilings: &[f64],
) -> Result<Vec<Row>, t2p::Error> {
    let oracle = Kernels::for_isa(Isa::Scalar)?;
    let mut variants = vec![
        (Layout::T2p, kern),
        (Layout::T2pQ8_0, kern),
        (Layout::Stock, kern),
    ];
    if isa != Isa::Scalar {
        variants.push((Layout::Stock, oracle));
    }
    // Larger than the LLC (32 MiB here), read between decode runs to evict the weights.
    let flush: Vec<u64> = (0..(96usize << 20) / 8).map(|i| i as u64).collect();
    let total_runs = SHAPES.len() * pools.len() * variants.len();
    let mut results: Vec<Row> = Vec::new();
    let mut done = 0;
    for (si, shape) in SHAPES.iter().enumerate() {
        let (rows, k, batch) = (shape.rows, shape.k, shape.batch);
        let inputs = Inputs::new(shape, si as u64)?;
        let mut out = vec![0.0f32; rows * batch];
        for (pool, &ceiling) in pools.iter().zip(ceilings) {
            for &(layout, vkern) in &variants {
                done += 1;
                // The stock baselines at many columns take tens of seconds: only with --full.
                let limit = if vkern.isa() == Isa::Scalar && isa != Isa::Scalar {
                    4
                } else {
                    64
                };
                // The verify tile compares T2P tiles with the T2P gemv; no stock run there.
                if layout == Layout::Stock && shape.label == "decode" && batch > 1 {
                    continue;
                }
                if layout == Layout::Stock && batch > limit && !args.full {
                    eprintln!(
                        "bench: [{done}/{total_runs}] skip stock {} {rows}x{k}x{batch} (use --full)",
                        vkern.isa()
                    );
                    continue;
                }
                eprint!(
                    "bench: [{done}/{total_runs}] {} {} {} {rows}x{k}x{batch} threads {} ...",
                    if batch == 1 { "gemv" } else { "gemm" },
                    layout.name(),
                    vkern.isa(),
                    pool.threads()
                );
                let _ = std::io::stderr().flush();
                let run = Run {
                    shape,
                    layout,
                    kern: vkern,
                    pool,
                    ceiling,
                };
                results.push(run.measure(args, &inputs, &mut out, &flush));
            }
        }
    }
    Ok(results)
}

/// One measurement: a shape in one layout on one path and pool.
struct Run<'a> {
    shape: &'a Shape,
    layout: Layout,
    kern: &'static Kernels,
    pool: &'a ThreadPool,
    ceiling: f64,
}

impl Run<'_> {
    /// Times the run within the repetition budget of `args` and makes its table row.
    fn measure(&self, args: &Args, inputs: &Inputs, out: &mut [f32], flush: &[u64]) -> Row {
        let (shape, layout, vkern, pool) = (self.shape, self.layout, self.kern, self.pool);
        let (rows, k, batch) = (shape.rows, shape.k, shape.batch);
        let Inputs {
            w,
            pq,
            act,
            act_q8_0,
            yq,
        } = inputs;
        let budget = Duration::from_millis(if args.full { 2000 } else { 400 });
        let (min_reps, max_reps) = if args.full { (5, 50) } else { (3, 15) };
        let bytes = w.size_bytes() as f64;
        let macs = (rows * k * batch) as f64;
        // Big gemm runs: fewer repetitions, but never a single one.
        let (lo, hi) = if macs * 2.0 > 2e10 {
            (2, max_reps)
        } else {
            (min_reps, max_reps)
        };
        // Decode streams weights that were not read recently (a token touches gigabytes):
        // evict the matrix from the caches before each decode run (untimed).
        let evict = || {
            if shape.label == "decode" {
                let s = flush.iter().fold(0u64, |a, &x| a.wrapping_add(x));
                std::hint::black_box(s);
            }
        };
        let times = match layout {
            Layout::T2p => time_reps(budget, lo, hi, evict, || {
                matmul_parallel(pool, vkern, w, act, out, rows).expect("shape");
            }),
            Layout::T2pQ8_0 => time_reps(budget, lo, hi, evict, || {
                matmul_parallel(pool, vkern, w, act_q8_0, out, rows).expect("shape");
            }),
            Layout::Stock => time_reps(budget, lo, hi, evict, || {
                stock_parallel(pool, vkern, pq, rows, k, yq, out);
            }),
        };
        let median = times[times.len() / 2];
        let spread = (times[times.len() - 1] - times[0]) / median;
        eprintln!(" {:.3} ms (x{})", median * 1e3, times.len());
        let gbps = bytes / median / 1e9;
        Row {
            label: shape.label,
            layout,
            isa: vkern.isa(),
            rows,
            k,
            batch,
            threads: pool.threads(),
            median_s: median,
            spread,
            reps: times.len(),
            gbps,
            pct: 100.0 * gbps / self.ceiling,
            gflops: 2.0 * macs / median / 1e9,
        }
    }
}

impl Report {
    /// The report as one JSON object.
    fn json(&self) -> Result<String, std::fmt::Error> {
        let (threads, ceilings, results, overheads) = (
            &self.threads[..],
            &self.ceilings[..],
            &self.results[..],
            &self.overheads[..],
        );
        let mut s = String::new();
        write!(
            s,
            "{{\"ceiling_gbps\": {}, \"ceiling_gbps_by_threads\": {{",
            json_num(*ceilings.last().expect("one ceiling"))
        )?;
        for (i, (t, c)) in threads.iter().zip(ceilings).enumerate() {
            write!(
                s,
                "{}\"{t}\": {}",
                if i > 0 { ", " } else { "" },
                json_num(*c)
            )?;
        }
        write!(
            s,
            "}}, \"threads\": [{}], \"results\": [",
            threads
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        for (i, r) in results.iter().enumerate() {
            write!(
                s,
                "{}{{\"kernel\": \"{}\", \"layout\": \"{}\", \"isa\": \"{}\", \"rows\": {}, \"cols\": {}, \"batch\": {}, \"threads\": {}, \"median_s\": {}, \"gbps\": {}, \"pct_of_ceiling\": {}, \"gflops\": {}}}",
                if i > 0 { ", " } else { "" },
                r.kernel(),
                r.layout.name(),
                r.isa,
                r.rows,
                r.k,
                r.batch,
                r.threads,
                json_num(r.median_s),
                json_num(r.gbps),
                json_num(r.pct),
                json_num(r.gflops)
            )?;
        }
        s.push_str("], \"pool_overhead_us\": [");
        for (i, o) in overheads.iter().enumerate() {
            write!(
                s,
                "{}{{\"threads\": {}, \"empty\": {}, \"tiny_gemv\": {}, \"tiny_gemv_one_thread\": {}}}",
                if i > 0 { ", " } else { "" },
                o.threads,
                json_num(o.empty_us),
                json_num(o.tiny_gemv_us),
                json_num(o.tiny_gemv_serial_us)
            )?;
        }
        s.push_str("]}");
        Ok(s)
    }

    /// The report as a table on stdout.
    fn print_table(&self) {
        self.print_preamble();
        println!(
            "{:<5} {:<8} {:<8} {:<6} {:>14} {:>5} {:>3} {:>10} {:>6} {:>7} {:>6} {:>8} {:>8} {:>9} {:>9} {:>8}",
            "kern",
            "shape",
            "lay",
            "isa",
            "rows x k",
            "batch",
            "thr",
            "median ms",
            "spread",
            "GB/s",
            "%ceil",
            "GMAC/s",
            "GFLOPS",
            "vs stock",
            "vs scalar",
            "vs gemv"
        );
        for r in &self.results {
            self.print_row(r);
        }
        println!(
            "(median of {}..{} repetitions after a warm-up; spread = (max - min) / median; GB/s counts weight bytes; % of the ceiling at the same thread count)",
            self.results.iter().map(|r| r.reps).min().unwrap_or(0),
            self.results.iter().map(|r| r.reps).max().unwrap_or(0)
        );
    }

    /// The path, the ceilings and the pool's per-call overheads.
    fn print_preamble(&self) {
        println!("t2p bench: isa {}, weights {} bytes per 128", self.isa, 34);
        for (t, c) in self.threads.iter().zip(&self.ceilings) {
            println!("ceiling (read bandwidth, {t} thread(s)): {c:.2} GB/s");
        }
        for o in &self.overheads {
            println!(
                "pool per-call overhead, {} thread(s): empty call {:.2} us; 64x1024 gemv split over the pool {:.2} us, on one thread {:.2} us",
                o.threads, o.empty_us, o.tiny_gemv_us, o.tiny_gemv_serial_us
            );
        }
    }

    /// One result's line.
    fn print_row(&self, r: &Row) {
        let (vs_stock, vs_scalar) = if r.layout == Layout::T2p {
            (self.vs_stock(r, r.isa), self.vs_stock(r, Isa::Scalar))
        } else {
            (String::new(), String::new())
        };
        println!(
            "{:<5} {:<8} {:<8} {:<6} {:>14} {:>5} {:>3} {:>10.3} {:>5.0}% {:>7.2} {:>5.1}% {:>8.1} {:>8.1} {:>9} {:>9} {:>8}",
            r.kernel(),
            r.label,
            r.layout.name(),
            r.isa.name(),
            format!("{}x{}", r.rows, r.k),
            r.batch,
            r.threads,
            r.median_s * 1e3,
            100.0 * r.spread,
            r.gbps,
            r.pct,
            r.gflops / 2.0,
            r.gflops,
            vs_stock,
            vs_scalar,
            self.vs_gemv(r)
        );
    }

    /// The stock layout's time on path `isa` over `r`'s, on the same shape ("-" without one).
    fn vs_stock(&self, r: &Row, isa: Isa) -> String {
        self.results
            .iter()
            .find(|o| {
                o.layout == Layout::Stock
                    && o.isa == isa
                    && (o.rows, o.k, o.batch, o.threads) == (r.rows, r.k, r.batch, r.threads)
            })
            .map_or("-".to_string(), |o| {
                format!("{:.1}x", o.median_s / r.median_s)
            })
    }

    /// A gemm's time over the gemv's on the same matrix, layout, path and thread count.
    fn vs_gemv(&self, r: &Row) -> String {
        self.results
            .iter()
            .find(|o| {
                r.batch > 1
                    && o.batch == 1
                    && o.layout == r.layout
                    && o.isa == r.isa
                    && (o.rows, o.k, o.threads) == (r.rows, r.k, r.threads)
            })
            .map_or(String::new(), |o| {
                format!("{:.2}x", r.median_s / o.median_s)
            })
    }
}
