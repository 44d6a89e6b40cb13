//! Where a forward pass runs: the kernels, the thread pool, the activation type, the profile
//! every layer reads, and the batch workspace the pass works in.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::batch::Batch;
use super::profile::Profile;
use crate::kernels::Kernels;
use crate::matmul::ActQuant;
use crate::pool::ThreadPool;

/// Where forward passes run: the kernels, the one thread pool of the process, and the buffers
/// of a batch (reused by every pass on this `Exec`, whichever sessions it runs).
pub struct Exec {
    /// The kernel path.
    pub kern: &'static Kernels,
    /// The persistent pool every parallel step uses.
    pub pool: ThreadPool,
    /// How activations are quantized for the T2P matrices.
    pub act: ActQuant,
    /// Time per phase of the forward passes run on this `Exec` (off unless enabled).
    pub profile: Profile,
    /// A mutex so that passes can take it through `&Exec` (one pass at a time, as the one pool
    /// runs them anyway).
    batch: Mutex<Batch>,
}

impl Exec {
    /// The active kernels on a pool of `threads` threads, with the default activation type.
    pub fn new(threads: usize) -> Exec {
        Exec {
            kern: crate::kernels::active(),
            pool: ThreadPool::new(threads.max(1)),
            act: ActQuant::default(),
            profile: Profile::default(),
            batch: Mutex::default(),
        }
    }

    /// The same with activations quantized as `act`.
    pub fn with_act(mut self, act: ActQuant) -> Exec {
        self.act = act;
        self
    }

    /// The batch workspace, for one forward pass. A pass that panicked leaves no meaning in it
    /// (every pass lays its batch out afresh), so a poisoned lock is taken all the same.
    pub(crate) fn batch(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
