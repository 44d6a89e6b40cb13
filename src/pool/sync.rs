//! The pool's synchronisation primitives: std's, or loom's when the crate's tests are built with
//! `--cfg loom` (the model check in `pool::loom_tests`). The pool's protocol code is the same in
//! both builds; only the idle spin differs (see [`spin_until`]).

#[cfg(not(all(loom, test)))]
pub(super) use std::{
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(all(loom, test))]
pub(super) use loom::{
    sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
};

use std::time::Duration;

/// Spins for up to `spin` until `done()` holds; whether it did. The caller then sleeps on a
/// condition variable (re-checking `done` under its lock), so the spin only saves a wake-up.
#[cfg(not(all(loom, test)))]
pub(super) fn spin_until(spin: Duration, done: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= spin {
            return false;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// Loom cannot explore a spin bounded by a clock. A spin is a run of loads of the same state,
/// and any outcome of `k` loads is an outcome of one load placed at the moment of the last, so
/// one check covers every interleaving the spin could see.
#[cfg(all(loom, test))]
pub(super) fn spin_until(_spin: Duration, done: impl Fn() -> bool) -> bool {
    done()
}
