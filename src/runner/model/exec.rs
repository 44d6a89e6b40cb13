//! Where a forward pass runs: the kernels, the thread pool, the activation type and the
//! profile every layer reads.

use super::profile::Profile;
use crate::kernels::Kernels;
use crate::matmul::ActQuant;
use crate::pool::ThreadPool;

/// Where matmuls run: the kernels and the one thread pool of the process.
pub struct Exec {
    /// The kernel path.
    pub kern: &'static Kernels,
    /// The persistent pool every parallel step uses.
    pub pool: ThreadPool,
    /// How activations are quantized for the T2P matrices.
    pub act: ActQuant,
    /// Time per phase of the forward passes run on this `Exec` (off unless enabled).
    pub profile: Profile,
}

impl Exec {
    /// The active kernels on a pool of `threads` threads, with the default activation type.
    pub fn new(threads: usize) -> Exec {
        Exec {
            kern: crate::kernels::active(),
            pool: ThreadPool::new(threads.max(1)),
            act: ActQuant::default(),
            profile: Profile::default(),
        }
    }

    /// The same with activations quantized as `act`.
    pub fn with_act(mut self, act: ActQuant) -> Exec {
        self.act = act;
        self
    }
}
