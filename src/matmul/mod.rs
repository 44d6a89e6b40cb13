//! The one matmul driver and the one name for each kind of weight matrix.
//!
//! * [`Matrix`]: a `rows x k` weight matrix of any kind a model holds, each kind in its own
//!   module: [`T2pMatrix`] (`t2p.rs`, ternary weights in the T2P layout), [`QuantMatrix`]
//!   (`quant.rs`, one of ggml's block types as the file holds it), [`Int8Matrix`] (`int8.rs`,
//!   BitNet codes in T2P with f32 scales), [`F16Matrix`] (`f16.rs`) and dense f32;
//! * `act.rs`: activation quantization for T2P ([`ActQuant`], [`ActLayout`],
//!   [`QuantizedBatch`]);
//! * `plan.rs`: one T2P product ([`MatmulPlan`]: which kernel runs, padded tiles and row
//!   groups, any row range into a strided output) and the one row-chunk rule of every kind
//!   ([`chunk_count`], [`chunk_rows`]);
//! * `parallel.rs`: the parallel step ([`run_products`]): the row chunks of the products that
//!   share an input in one pool call.
//!
//! Every caller (the runner's pool, the C ABI, the llama.cpp extra buffer type through the C
//! ABI) runs a T2P matmul through a [`MatmulPlan`].

mod act;
mod f16;
mod int8;
mod parallel;
mod plan;
mod quant;
mod t2p;

pub use act::{ActLayout, ActQuant, Q8_0Quantizer, QuantizedBatch};
pub use f16::F16Matrix;
pub use int8::Int8Matrix;
pub use parallel::{
    F16Product, QuantProduct, RowChunked, StepTime, T2pProduct, matmul_parallel, run_products,
};
pub use plan::{MatmulPlan, chunk_count, chunk_rows, matmul, with_scratch};
pub use quant::QuantMatrix;
pub use t2p::T2pMatrix;
