//! Model check of the pool's protocol with loom: every interleaving (up to the preemption bound
//! where one is set) of the caller, the workers and shutdown, on the real `ThreadPool` code
//! compiled against loom's primitives. Each model asserts that every index runs exactly once,
//! that the job closure is never touched after `run` returns, and (by loom's own checks) that no
//! interleaving deadlocks, i.e. ends with every thread blocked. Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --lib
//! --no-default-features loom_tests -- --nocapture` (prints the interleavings explored; on the
//! 2-core Zen 3 dev machine, shared: 15 142 + 129 239 + 325 053 in 204 s, too slow for
//! `test.sh`). Without the fence in `Shared::wait_done` the first model fails at once with
//! loom's deadlock report (caller blocked on `done_cv`, worker on `wake_cv`): the qemu hang.

use super::ThreadPool;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Calls `run` `calls` times with `n_jobs` jobs on a pool of `threads`, then drops it.
fn model(threads: usize, calls: usize, n_jobs: usize, preemption_bound: Option<usize>) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = preemption_bound;
    // Interleavings explored (the tests run in parallel, so each counts its own).
    let explored = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = explored.clone();
    b.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        let pool = ThreadPool::with_spin(threads, Duration::ZERO);
        for _ in 0..calls {
            let hits: Vec<loom::sync::atomic::AtomicUsize> = (0..n_jobs)
                .map(|_| loom::sync::atomic::AtomicUsize::new(0))
                .collect();
            // Set when `run` has returned; a job seeing it would be a use after the call.
            let returned = AtomicBool::new(false);
            pool.run(n_jobs, |i| {
                assert!(
                    !returned.load(Ordering::SeqCst),
                    "job ran after its call returned"
                );
                hits[i].fetch_add(1, loom::sync::atomic::Ordering::Relaxed);
            });
            returned.store(true, Ordering::SeqCst);
            for h in &hits {
                assert_eq!(h.load(loom::sync::atomic::Ordering::Relaxed), 1);
            }
        }
        drop(pool);
    });
    println!(
        "loom: {threads} threads, {calls} calls of {n_jobs} jobs, preemption bound \
         {preemption_bound:?}: {} interleavings",
        explored.load(Ordering::Relaxed)
    );
}

/// One worker, two calls back to back: the worker may join the first, the second, both or
/// neither, and may sleep or not between them.
#[test]
fn one_worker_two_calls() {
    model(2, 2, 2, Some(3));
}

/// Two workers racing to join one call and to leave it.
#[test]
fn two_workers_one_call() {
    model(3, 1, 3, Some(3));
}

/// Two workers, two calls: a worker late for the first call may find the second one.
#[test]
fn two_workers_two_calls() {
    model(3, 2, 2, Some(2));
}
