//! Where a forward pass spends its time, by phase (`libt2p bench --profile`).
//!
//! Off by default: every hook is then one branch on a `bool`. On, each phase's wall time is
//! taken with [`Instant`] on the calling thread. Matmul phases also measure the busy time of
//! every chunk on every thread: their wall time is split into the average thread's compute
//! and the rest, which is time threads spent waiting in the pool (imbalance and wake-ups).
//! Every matmul step also books the bytes of weights it streamed and its wall time (compute
//! and wait together), so a phase's bandwidth can be set against the memory ceiling.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// A phase of the forward pass (or of the decode loop around it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Ternary (T2P) matmuls of the layers.
    Matmul,
    /// Dense (f32 / BF16) matmuls of the layers.
    DenseMatmul,
    /// Quantizing activations for the T2P matmuls.
    Quantize,
    /// Attention over the KV cache (and storing K/V).
    Attention,
    /// The DeltaNet conv and recurrence.
    Recurrence,
    /// Norms, RoPE, activations, gates, residual adds, embedding lookups, Hadamard rotations.
    Elementwise,
    /// The LM head matmul.
    LmHead,
    /// Picking the next token from the logits (timed by the caller).
    Sampling,
    /// Threads idle in matmuls, waiting for the slowest chunk.
    PoolWait,
    /// Whole forward passes (the other phases are parts of this).
    Forward,
}

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; 10] = [
        Phase::Matmul,
        Phase::DenseMatmul,
        Phase::Quantize,
        Phase::Attention,
        Phase::Recurrence,
        Phase::Elementwise,
        Phase::LmHead,
        Phase::Sampling,
        Phase::PoolWait,
        Phase::Forward,
    ];

    /// A short label.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Matmul => "ternary matmuls",
            Phase::DenseMatmul => "dense matmuls",
            Phase::Quantize => "activation quantization",
            Phase::Attention => "attention",
            Phase::Recurrence => "DeltaNet conv + recurrence",
            Phase::Elementwise => "norms / RoPE / activations",
            Phase::LmHead => "LM head",
            Phase::Sampling => "sampling",
            Phase::PoolWait => "pool waits",
            Phase::Forward => "forward total",
        }
    }
}

/// A phase being timed: adds its time to the profile when dropped ([`Profile::time`]).
#[must_use = "the phase is timed until the guard is dropped"]
pub struct Timed<'a> {
    profile: &'a Profile,
    phase: Phase,
    start: Option<Instant>,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.start {
            self.profile.add(self.phase, t.elapsed().as_nanos() as u64);
        }
    }
}

/// What the matmul steps of one [`Phase`] streamed ([`Profile::traffic`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Bytes of weights read.
    pub bytes: u64,
    /// Wall seconds of the steps that read them (compute and pool waits).
    pub seconds: f64,
    /// Matmul steps (one pool call each when the pool has workers).
    pub steps: u64,
}

impl Traffic {
    /// Read bandwidth in GB/s (0 when nothing was timed).
    pub fn gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds * 1e-9
        } else {
            0.0
        }
    }
}

/// Accumulated nanoseconds per [`Phase`], and per matmul phase the bytes it streamed.
#[derive(Debug, Default)]
pub struct Profile {
    on: AtomicBool,
    nanos: [AtomicU64; Phase::ALL.len()],
    bytes: [AtomicU64; Phase::ALL.len()],
    step_nanos: [AtomicU64; Phase::ALL.len()],
    steps: [AtomicU64; Phase::ALL.len()],
}

impl Profile {
    /// Turns timing on or off.
    pub fn enable(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Whether timing is on.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Times `phase` until the returned guard is dropped (nothing when timing is off), so a
    /// phase's start and stop cannot come apart.
    #[inline]
    pub fn time(&self, phase: Phase) -> Timed<'_> {
        Timed {
            profile: self,
            phase,
            start: self.is_on().then(Instant::now),
        }
    }

    /// Adds `ns` nanoseconds to `phase`.
    pub fn add(&self, phase: Phase, ns: u64) {
        self.nanos[phase as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// Seconds accumulated in `phase`.
    pub fn seconds(&self, phase: Phase) -> f64 {
        self.nanos[phase as usize].load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// What the matmul steps booked to `phase` streamed.
    pub fn traffic(&self, phase: Phase) -> Traffic {
        let i = phase as usize;
        Traffic {
            bytes: self.bytes[i].load(Ordering::Relaxed),
            seconds: self.step_nanos[i].load(Ordering::Relaxed) as f64 * 1e-9,
            steps: self.steps[i].load(Ordering::Relaxed),
        }
    }

    /// Clears every phase.
    pub fn reset(&self) {
        [&self.nanos, &self.bytes, &self.step_nanos, &self.steps]
            .into_iter()
            .flatten()
            .for_each(|n| n.store(0, Ordering::Relaxed));
    }

    /// Books one matmul step of `phase` that read `bytes` of weights in `wall` nanoseconds.
    pub(crate) fn add_step(&self, phase: Phase, bytes: u64, wall: u64) {
        let i = phase as usize;
        self.bytes[i].fetch_add(bytes, Ordering::Relaxed);
        self.step_nanos[i].fetch_add(wall, Ordering::Relaxed);
        self.steps[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Splits a parallel matmul's `wall` nanoseconds, whose chunks were busy `busy`
    /// nanoseconds in all on `threads` threads, into `phase` and [`Phase::PoolWait`], and books
    /// the step's `bytes` of weights ([`add_step`](Self::add_step)).
    pub(crate) fn add_parallel(
        &self,
        phase: Phase,
        wall: u64,
        busy: u64,
        threads: usize,
        bytes: u64,
    ) {
        let compute = (busy / threads.max(1) as u64).min(wall);
        self.add(phase, compute);
        self.add(Phase::PoolWait, wall - compute);
        self.add_step(phase, bytes, wall);
    }
}
