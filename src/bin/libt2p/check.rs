//! `libt2p check`: what this CPU can run, and a quick exactness check of every path.

use std::process::ExitCode;

use t2p::format::{BlockPq2_0, BlockQ8K, f32_to_f16};
use t2p::kernels::{self, Isa, Kernels};
use t2p::matmul::{ActQuant, QuantizedBatch, T2pMatrix, matmul};

/// Options of `libt2p check`.
#[derive(clap::Args)]
pub struct Args {
    /// Rows of the test matrix (a multiple of 4).
    #[arg(long, default_value_t = 64)]
    rows: usize,
    /// Inner dimension of the test matrix (a multiple of 256).
    #[arg(long, default_value_t = 1024)]
    k: usize,
}

fn lcg(state: &mut u64) -> u32 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 33) as u32
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    print_cpu();
    let available = Isa::available();
    let mut s = 0x5eed;
    let (rows, k) = (args.rows, args.k);
    let pq = random_pq2_0(rows, k, &mut s);
    let w = T2pMatrix::from_pq2_0(&pq, rows, k)?;
    let mut failed = !t2p_paths_exact(&w, &available, &mut s)?;
    failed |= !stock_matches_t2p(&pq, &w, &available, &mut s)?;
    println!("{}", if failed { "FAIL" } else { "PASS" });
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The version, the CPU's features and the kernel paths.
fn print_cpu() {
    println!("t2p {}", env!("CARGO_PKG_VERSION"));
    println!(
        "cpu features: {}",
        kernels::cpu::feature_names(kernels::cpu::features()).join(" ")
    );
    println!(
        "paths available: {}",
        Isa::available()
            .iter()
            .map(|i| i.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("path chosen: {}", kernels::active().isa());
}

/// `rows x k` pq2_0 weights with every code including 3 (+2) and random scales.
fn random_pq2_0(rows: usize, k: usize, s: &mut u64) -> Vec<BlockPq2_0> {
    (0..rows * k / 128)
        .map(|_| {
            let codes = std::array::from_fn(|_| (lcg(s) % 4) as u8);
            BlockPq2_0::from_codes(&codes, f32_to_f16(0.01 + (lcg(s) % 100) as f32 / 1000.0))
        })
        .collect()
}

/// Every path's T2P product against the oracle's, bit for bit, for 1..8 columns and 19 (the
/// AMX tiles; extreme activations in the first) and both activation types; prints a line per
/// comparison.
fn t2p_paths_exact(
    w: &T2pMatrix,
    available: &[Isa],
    s: &mut u64,
) -> Result<bool, Box<dyn std::error::Error>> {
    let (rows, k) = (w.rows(), w.k());
    let oracle = Kernels::for_isa(Isa::Scalar)?;
    let mut exact = true;
    for ncols in [1usize, 2, 3, 4, 5, 7, 8, 19] {
        let mut x: Vec<f32> = (0..k * ncols)
            .map(|_| lcg(s) as f32 / u32::MAX as f32 - 0.5)
            .collect();
        x[..k]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = if i % 2 == 0 { 1.0 } else { -1.0 });
        for act_type in [ActQuant::Q8K, ActQuant::Q8_0] {
            let act = QuantizedBatch::new(&x, k, ncols, act_type)?;
            let want = matmul(oracle, w, &act)?;
            for &isa in available {
                let got = matmul(Kernels::for_isa(isa)?, w, &act)?;
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                println!(
                    "  {:<13} {rows}x{k} x {ncols} column(s), {}: {}",
                    isa.name(),
                    act_type.name(),
                    if same { "exact" } else { "MISMATCH" }
                );
                exact &= same;
            }
        }
    }
    Ok(exact)
}

/// The stock layout's vec_dot on the same weights agrees with T2P on every path (same float
/// order); prints a line per path.
fn stock_matches_t2p(
    pq: &[BlockPq2_0],
    w: &T2pMatrix,
    available: &[Isa],
    s: &mut u64,
) -> Result<bool, Box<dyn std::error::Error>> {
    let (rows, k) = (w.rows(), w.k());
    let col: Vec<f32> = (0..k)
        .map(|_| lcg(s) as f32 / u32::MAX as f32 - 0.5)
        .collect();
    let mut y = vec![BlockQ8K::default(); k / 256];
    t2p::format::quantize_row_q8k(&col, &mut y);
    let oracle = Kernels::for_isa(Isa::Scalar)?;
    let t2p_out = matmul(oracle, w, &QuantizedBatch::new(&col, k, 1, ActQuant::Q8K)?)?;
    let mut exact = true;
    for &isa in available {
        let kern = Kernels::for_isa(isa)?;
        let same = (0..rows).all(|r| {
            kern.vec_dot_stock(&pq[r * k / 128..(r + 1) * k / 128], &y)
                .to_bits()
                == t2p_out[r].to_bits()
        });
        println!(
            "  {:<13} stock pq2_0 vec_dot vs T2P: {}",
            isa.name(),
            if same { "exact" } else { "MISMATCH" }
        );
        exact &= same;
    }
    Ok(exact)
}
