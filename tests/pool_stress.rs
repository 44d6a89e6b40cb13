//! The pool under preemption: more threads than cores, background threads that keep every core
//! busy (so the OS deschedules pool threads at arbitrary points, mid-call included), jobs that
//! yield or sleep at random, many short calls, several callers sharing one pool, panics. Every
//! call must return and run each index exactly once. Nothing here is timed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;
use t2p::pool::{DEFAULT_SPIN, ThreadPool};

mod common;

use common::Lcg;

/// A random pause of a job: nothing, a yield, a short spin or (rarely) a sleep.
fn pause(seed: u64) {
    match Lcg(seed | 1).next() % 64 {
        0..=39 => {}
        40..=55 => thread::yield_now(),
        56..=62 => (0..(seed % 2000)).for_each(|_| std::hint::spin_loop()),
        _ => thread::sleep(Duration::from_micros(seed % 300)),
    }
}

/// Runs `f` while `n` threads spin on every core, so pool threads lose their core at random.
fn with_busy_cores(f: impl FnOnce()) {
    let stop = AtomicBool::new(false);
    let n = thread::available_parallelism().map_or(2, |n| n.get());
    thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        f();
        stop.store(true, Ordering::Relaxed);
    });
}

/// Runs `calls` calls of random size on `pool`, checking each index ran exactly once.
fn hammer(pool: &ThreadPool, calls: usize, seed: u64) {
    let mut rng = Lcg(seed);
    for call in 0..calls {
        let n = 1 + (rng.next() % 24) as usize;
        let salt = u64::from(rng.next());
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        pool.run(n, |i| {
            pause(salt ^ (i as u64) << 32);
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(h.load(Ordering::Relaxed), 1, "call {call} index {i} of {n}");
        }
    }
}

#[test]
fn oversubscribed_pools_under_preemption_run_every_index_once() {
    with_busy_cores(|| {
        for threads in [2, 3, 8, 17] {
            for spin in [Duration::ZERO, Duration::from_micros(2), DEFAULT_SPIN] {
                let pool = ThreadPool::with_spin(threads, spin);
                hammer(&pool, 400, threads as u64 * 7919 + spin.as_nanos() as u64);
            }
        }
    });
}

/// Callers on several threads share one pool: one call at a time gets the workers, the others
/// run inline; each still runs its own indices exactly once.
#[test]
fn concurrent_callers_share_one_pool() {
    let pool = ThreadPool::with_spin(4, Duration::from_micros(5));
    with_busy_cores(|| {
        thread::scope(|s| {
            for c in 0..4u64 {
                let pool = &pool;
                s.spawn(move || hammer(pool, 300, 1000 + c));
            }
        });
    });
}

/// Pools created and dropped while calls are in flight on other pools, and workers that may
/// not have started yet when the first call is posted.
#[test]
fn short_lived_pools_start_and_stop_cleanly() {
    with_busy_cores(|| {
        for round in 0..60u64 {
            let pool = ThreadPool::with_spin(2 + (round % 5) as usize, Duration::ZERO);
            hammer(&pool, 3, round);
        }
    });
}

/// A job that panics now and then, at a random point of the call: the call reports it, and the
/// pool keeps running every index of the next calls exactly once.
#[test]
fn panics_under_preemption_leave_the_pool_usable() {
    let pool = ThreadPool::with_spin(5, Duration::from_micros(3));
    let mut rng = Lcg(77);
    with_busy_cores(|| {
        for _ in 0..40 {
            let bad = (rng.next() % 16) as usize;
            let r = catch_unwind(AssertUnwindSafe(|| {
                pool.run(16, |i| {
                    pause(i as u64 * 31 + bad as u64);
                    assert_ne!(i, bad, "planned panic");
                })
            }));
            assert!(r.is_err());
            hammer(&pool, 5, bad as u64);
        }
    });
}
