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
    println!("t2p {}", env!("CARGO_PKG_VERSION"));
    println!(
        "cpu features: {}",
        kernels::cpu::feature_names(kernels::cpu::features()).join(" ")
    );
    let available = Isa::available();
    println!(
        "paths available: {}",
        available
            .iter()
            .map(|i| i.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("path chosen: {}", kernels::active().isa());

    let mut s = 0x5eed;
    let (rows, k) = (args.rows, args.k);
    // Every code including 3 (+2), random scales, extreme activations in one column.
    let pq: Vec<BlockPq2_0> = (0..rows * k / 128)
        .map(|_| {
            let codes = std::array::from_fn(|_| (lcg(&mut s) % 4) as u8);
            BlockPq2_0::from_codes(
                &codes,
                f32_to_f16(0.01 + (lcg(&mut s) % 100) as f32 / 1000.0),
            )
        })
        .collect();
    let w = T2pMatrix::from_pq2_0(&pq, rows, k)?;
    let oracle = Kernels::for_isa(Isa::Scalar)?;
    let mut failed = false;
    for ncols in [1usize, 2, 3, 4, 5, 7, 8] {
        let mut x: Vec<f32> = (0..k * ncols)
            .map(|_| lcg(&mut s) as f32 / u32::MAX as f32 - 0.5)
            .collect();
        x[..k]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = if i % 2 == 0 { 1.0 } else { -1.0 });
        for act_type in [ActQuant::Q8K, ActQuant::Q8_0] {
            let act = QuantizedBatch::new(&x, k, ncols, act_type)?;
            let want = matmul(oracle, &w, &act)?;
            for &isa in &available {
                let got = matmul(Kernels::for_isa(isa)?, &w, &act)?;
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
                failed |= !same;
            }
        }
    }
    // The stock layout on the same weights must agree with T2P (same float order).
    let col: Vec<f32> = (0..k)
        .map(|_| lcg(&mut s) as f32 / u32::MAX as f32 - 0.5)
        .collect();
    let mut y = vec![BlockQ8K::default(); k / 256];
    t2p::format::quantize_row_q8k(&col, &mut y);
    let t2p_out = matmul(oracle, &w, &QuantizedBatch::new(&col, k, 1, ActQuant::Q8K)?)?;
    for &isa in &available {
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
        failed |= !same;
    }
    println!("{}", if failed { "FAIL" } else { "PASS" });
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
