//! A persistent thread pool for the kernels: threads are created once, and a call hands them a
//! job by bumping an epoch counter, not by spawning.
//!
//! [`ThreadPool::run`] executes `f(0) .. f(n_jobs - 1)` on the pool's workers *and* the calling
//! thread (indices are claimed from a shared counter, so uneven jobs balance themselves) and
//! returns when all of them are done. Idle workers spin for a short while ([`DEFAULT_SPIN`]) so
//! back-to-back calls (one matmul after another in a token) start without a wake-up system
//! call, then sleep on a condition variable and burn no core. A call only waits for workers that
//! actually joined it: a worker the OS has not scheduled yet (a busy machine) does not hold the
//! caller up; the caller then simply runs more of the jobs itself.
//!
//! The job closure borrows from the caller's stack, while the workers are `'static` threads. The
//! pool erases the closure's lifetime for the duration of one call; the whole argument for why
//! that is sound lives in [`ThreadPool::run`].
//!
//! Three hand-offs are "store my flag, then read yours" pairs (Dekker style): a worker going to
//! sleep against a call being posted, a worker joining against the caller closing the call, the
//! caller going to sleep against the last worker leaving. Each side puts a `fence(SeqCst)`
//! between its store and its load. SeqCst accesses alone are enough in the language's memory
//! model, but not under `qemu-aarch64` on an x86 host: it translates `stlr; ldar` without a
//! barrier between them, so the host's store buffer lets the load pass the store (measured: a
//! store-buffering litmus test shows the forbidden outcome in half of 200 000 trials under
//! qemu 7.2, never with the fence). That reordering lost the caller's wake-up in the third pair:
//! the caller slept waiting for a worker that had left without seeing it asleep, and every
//! thread ended in `futex_wait`, the hang once seen under qemu. The fences also let loom (which
//! models SeqCst fences but treats SeqCst accesses as acquire/release) check the protocol.

mod sync;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;
use sync::{
    Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, fence,
    spin_until, thread,
};

/// How long an idle worker (and a caller waiting for the last job) spins before sleeping.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);

/// The job of one call, with its lifetime erased (see [`ThreadPool::run`]).
#[derive(Clone, Copy)]
struct JobRef(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync` (so `&F` may be used from any thread), and `run` keeps it alive
// until every thread that received the pointer has stopped using it.
unsafe impl Send for JobRef {}

struct Shared {
    /// Bumped once per call (and once at shutdown); workers run one job per new epoch.
    epoch: AtomicU64,
    job: Mutex<Option<JobRef>>,
    next: AtomicUsize,
    n_jobs: AtomicUsize,
    /// Whether the current call still accepts workers (set before the epoch bump, cleared when
    /// the caller has run out of indices).
    open: AtomicBool,
    /// Workers registered for the current call: they may hold the job pointer.
    active: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    spin: Duration,
    /// Workers asleep (or about to sleep) on `wake_cv`.
    sleepers: AtomicUsize,
    wake_lock: Mutex<()>,
    wake_cv: Condvar,
    /// The caller sleeps on `done_cv` when the last jobs take longer than the spin.
    caller_sleeping: AtomicBool,
    done_lock: Mutex<()>,
    done_cv: Condvar,
    /// Test hook: where workers stop, to stand in for a thread the OS has descheduled.
    #[cfg(all(test, not(loom)))]
    hold: std::sync::atomic::AtomicU8,
    /// Test hook: workers stopped at `hold` now.
    #[cfg(all(test, not(loom)))]
    held: std::sync::atomic::AtomicUsize,
}

/// Where the test hook stops workers.
#[cfg(all(test, not(loom)))]
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Hold {
    Nowhere = 0,
    /// After seeing a new call, before registering for it.
    BeforeJoin = 1,
    /// Registered for a call, before taking its job.
    AfterJoin = 2,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Jobs run outside every lock, so a poisoned lock cannot hold broken state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Claims and runs job indices until none are left; a panic stops the claiming everywhere.
    fn work(&self, job: JobRef) {
        let n = self.n_jobs.load(Ordering::Acquire);
        let result = catch_unwind(AssertUnwindSafe(|| {
            loop {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                // SAFETY: `run` keeps the closure alive until no worker is registered in
                // `active`; a worker calls `work` only while registered, and the calling thread
                // calls it before waiting (see `ThreadPool::run`).
                let f = unsafe { &*job.0 };
                f(i);
            }
        }));
        if result.is_err() {
            self.panicked.store(true, Ordering::Release);
            self.next.store(n, Ordering::Relaxed);
        }
    }

    /// Stops here while the test hook says so.
    #[cfg(all(test, not(loom)))]
    fn test_hold(&self, at: Hold) {
        if self.hold.load(Ordering::SeqCst) == at as u8 {
            self.held.fetch_add(1, Ordering::SeqCst);
            while self.hold.load(Ordering::SeqCst) == at as u8 {
                std::thread::sleep(Duration::from_micros(200));
            }
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn worker(&self) {
        // Epoch 0 is the pool's creation: a worker that starts after the first call was posted
        // must still run it, so it starts from 0, not from the current value.
        let mut seen = 0;
        loop {
            // Wait for a new epoch: spin first, then sleep.
            if !spin_until(self.spin, || self.epoch.load(Ordering::Acquire) != seen) {
                let mut g = lock(&self.wake_lock);
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                // `run` bumps the epoch, fences, then reads `sleepers`: either it sees this
                // sleeper and notifies under the lock, or this load sees the new epoch.
                fence(Ordering::SeqCst);
                while self.epoch.load(Ordering::SeqCst) == seen {
                    g = self.wake_cv.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
            seen = self.epoch.load(Ordering::Acquire);
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            #[cfg(all(test, not(loom)))]
            self.test_hold(Hold::BeforeJoin);
            // Register, then look: `run` clears `open`, fences, then reads `active`, so either
            // this worker sees `open == false` and keeps its hands off the job, or `run` sees it
            // registered and waits for it. A worker that was descheduled during the whole call
            // never holds anyone up.
            self.active.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            #[cfg(all(test, not(loom)))]
            self.test_hold(Hold::AfterJoin);
            if self.open.load(Ordering::SeqCst) {
                let job = *lock(&self.job);
                if let Some(job) = job {
                    self.work(job);
                }
            }
            let last = self.active.fetch_sub(1, Ordering::SeqCst) == 1;
            fence(Ordering::SeqCst);
            if last && self.caller_sleeping.load(Ordering::SeqCst) {
                // The caller set `caller_sleeping` and fenced before re-reading `active` under
                // `done_lock`, so taking the lock here cannot miss its wait.
                let _g = lock(&self.done_lock);
                self.done_cv.notify_all();
            }
        }
    }

    /// Waits until no worker is registered for the current call (`open` is already false, and
    /// the caller fenced after clearing it).
    fn wait_done(&self) {
        if spin_until(self.spin, || self.active.load(Ordering::SeqCst) == 0) {
            return;
        }
        let mut g = lock(&self.done_lock);
        self.caller_sleeping.store(true, Ordering::SeqCst);
        // Pairs with the fence after a worker's `active.fetch_sub`: either this thread sees
        // `active == 0`, or that worker sees `caller_sleeping` and notifies under the lock.
        fence(Ordering::SeqCst);
        while self.active.load(Ordering::SeqCst) != 0 {
            g = self.done_cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        self.caller_sleeping.store(false, Ordering::SeqCst);
    }
}

/// A fixed set of worker threads plus the calling thread. See the module documentation.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<thread::JoinHandle<()>>,
    /// One call at a time; a call that finds the pool busy (another thread's call, or a job
    /// calling `run` again) runs its jobs inline instead of deadlocking.
    busy: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `threads` threads in total: the caller of [`ThreadPool::run`] plus
    /// `threads - 1` workers (`0` is treated as 1). Workers spin for [`DEFAULT_SPIN`] when idle.
    pub fn new(threads: usize) -> ThreadPool {
        ThreadPool::with_spin(threads, DEFAULT_SPIN)
    }

    /// As [`ThreadPool::new`] with a chosen idle spin time (`Duration::ZERO`: sleep at once).
    pub fn with_spin(threads: usize, spin: Duration) -> ThreadPool {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            next: AtomicUsize::new(0),
            n_jobs: AtomicUsize::new(0),
            open: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            spin,
            sleepers: AtomicUsize::new(0),
            wake_lock: Mutex::new(()),
            wake_cv: Condvar::new(),
            caller_sleeping: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done_cv: Condvar::new(),
            #[cfg(all(test, not(loom)))]
            hold: std::sync::atomic::AtomicU8::new(Hold::Nowhere as u8),
            #[cfg(all(test, not(loom)))]
            held: std::sync::atomic::AtomicUsize::new(0),
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let s = Arc::clone(&shared);
                thread::Builder::new()
                    .name(format!("t2p-worker-{i}"))
                    .spawn(move || s.worker())
                    .expect("spawning a t2p pool worker")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            busy: Mutex::new(()),
        }
    }

    /// A pool with one thread per available CPU.
    pub fn with_available_parallelism() -> ThreadPool {
        ThreadPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Threads that execute jobs, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls of [`run`](Self::run) so far that handed jobs to the workers (calls run inline,
    /// with one job or while another call holds the pool, are not counted): what a profile
    /// divides the pool's overhead by.
    pub fn calls(&self) -> u64 {
        self.shared.epoch.load(Ordering::Relaxed)
    }

    /// Runs `f(i)` for every `i` in `0..n_jobs`, spread over the workers and the calling thread,
    /// and returns when all have finished. Each index runs exactly once; the order is unspecified.
    ///
    /// # Panics
    /// If a job panics (after every thread has stopped working on this call).
    pub fn run<F: Fn(usize) + Sync>(&self, n_jobs: usize, f: F) {
        let inline = || (0..n_jobs).for_each(&f);
        if n_jobs <= 1 || self.workers.is_empty() {
            return inline();
        }
        let Ok(_busy) = self.busy.try_lock() else {
            return inline();
        };
        let s = &*self.shared;
        let dyn_f: &(dyn Fn(usize) + Sync) = &f;
        // SAFETY: only the trait object's lifetime bound changes ('_ to 'static); the layout is
        // identical. Other threads dereference the pointer only inside `Shared::work`, which a
        // worker enters only while registered in `active` and after seeing `open == true`
        // (taking the pointer from the `job` slot). This function clears `open`, then waits for
        // `active == 0`, then empties the slot, and it cannot unwind before that (job panics are
        // caught inside `work`). The fenced register-then-check / clear-then-wait pairing means
        // a worker either is counted in `active` when `wait_done` looks, or sees `open ==
        // false`; a worker that registers later finds `open == false` or, in a later call, that
        // call's job. So no thread can reach this pointer after `run` returns and `f` is dropped.
        let job = JobRef(unsafe {
            std::mem::transmute::<
                *const (dyn Fn(usize) + Sync + '_),
                *const (dyn Fn(usize) + Sync + 'static),
            >(dyn_f)
        });
        *lock(&s.job) = Some(job);
        s.next.store(0, Ordering::Relaxed);
        s.n_jobs.store(n_jobs, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        // Publishes the stores above to workers that see `open` (SeqCst) after registering.
        s.open.store(true, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&s.wake_lock);
            s.wake_cv.notify_all();
        }
        s.work(job);
        s.open.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        s.wait_done();
        *lock(&s.job) = None;
        if s.panicked.load(Ordering::Acquire) {
            panic!("a t2p thread-pool job panicked");
        }
    }
}

/// Chunk `i` of `n` of `len` items cut in whole units of `unit` items (the matmuls' row groups),
/// as even as possible: consecutive chunks cover `0..len`, only the last unit may be short.
pub fn unit_chunk(len: usize, unit: usize, i: usize, n: usize) -> std::ops::Range<usize> {
    let units = len.div_ceil(unit);
    let n = n.max(1);
    let at = |j: usize| (units * j.min(n) / n * unit).min(len);
    at(i)..at(i + 1)
}

/// The consecutive pieces of `buf` whose lengths `len(i)` gives for `i in 0..n`, each with its
/// index: disjoint `&mut` pieces for [`ThreadPool::for_each_item`], so a parallel loop hands
/// them out without `unsafe` and without a `Vec` of parts per call.
///
/// # Panics
/// If the lengths add up to more than `buf.len()`.
pub fn pieces<'a, T, L: Fn(usize) -> usize + 'a>(
    buf: &'a mut [T],
    n: usize,
    len: L,
) -> impl Iterator<Item = (usize, &'a mut [T])> + 'a {
    let mut rest = buf;
    (0..n).map(move |i| {
        let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len(i));
        rest = tail;
        (i, piece)
    })
}

impl ThreadPool {
    /// Runs `f(item)` once for each of the `n` items `items` yields, spread over the pool: each
    /// job takes the next item from the shared iterator (under a lock held only for `next`), so
    /// items can be disjoint `&mut` pieces of one buffer, handed out without `unsafe` and
    /// without allocating. Items past the `n`th are not taken.
    pub fn for_each_item<I, F>(&self, n: usize, items: I, f: F)
    where
        I: Iterator + Send,
        I::Item: Send,
        F: Fn(I::Item) + Sync,
    {
        let items = std::sync::Mutex::new(items);
        self.run(n, |_| {
            let item = items
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .next();
            if let Some(item) = item {
                f(item);
            }
        });
    }

    /// Runs `f(i, part)` once for every part, each part handed to exactly one job.
    pub fn run_parts<P: Send, F: Fn(usize, P) + Sync>(&self, parts: Vec<P>, f: F) {
        let n = parts.len();
        self.for_each_item(n, parts.into_iter().enumerate(), |(i, p)| f(i, p));
    }

    /// Runs `f(j, chunk)` for every `chunk_len`-element chunk of `data` (the last may be
    /// shorter), in parallel, like rayon's `par_chunks_mut`; allocates nothing.
    pub fn for_each_chunk_mut<T: Send, F: Fn(usize, &mut [T]) + Sync>(
        &self,
        data: &mut [T],
        chunk_len: usize,
        f: F,
    ) {
        let chunk_len = chunk_len.max(1);
        let n = data.len().div_ceil(chunk_len);
        self.for_each_item(n, data.chunks_mut(chunk_len).enumerate(), |(j, c)| f(j, c));
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        {
            let _g = lock(&s.wake_lock);
            s.wake_cv.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .field("spin", &self.shared.spin)
            .finish()
    }
}

/// The test hook's controls.
#[cfg(all(test, not(loom)))]
impl ThreadPool {
    fn set_hold(&self, at: Hold) {
        self.shared.hold.store(at as u8, Ordering::SeqCst);
    }

    fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }
}

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_index_runs_once() {
        for threads in [1, 2, 3, 5] {
            for spin in [Duration::ZERO, DEFAULT_SPIN] {
                let pool = ThreadPool::with_spin(threads, spin);
                for n in [0, 1, 2, 7, 100] {
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    pool.run(n, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                }
            }
        }
    }

    #[test]
    fn many_calls_after_sleeping() {
        let pool = ThreadPool::with_spin(3, Duration::from_micros(1));
        let total = AtomicUsize::new(0);
        for round in 0..200 {
            if round % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2)); // let the workers fall asleep
            }
            pool.run(4, |i| {
                total.fetch_add(i + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 200 * 10);
    }

    #[test]
    fn a_panicking_job_is_reported_and_the_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, |i| {
                if i == 5 {
                    panic!("job 5");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(8, |_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }

    /// Many short calls whose closures borrow per-iteration data, with workers racing to join
    /// calls that may already be over.
    #[test]
    fn stress_short_calls_with_borrowed_data() {
        for spin in [Duration::ZERO, Duration::from_micros(3), DEFAULT_SPIN] {
            let pool = ThreadPool::with_spin(3, spin);
            for round in 0..3000usize {
                let n = 1 + round % 9;
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.run(n, |i| {
                    hits[i].fetch_add(round, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == round));
            }
        }
    }

    /// Workers really take part: with jobs long enough for them to wake, more than one thread
    /// runs jobs.
    #[test]
    fn workers_join_long_calls() {
        let pool = ThreadPool::new(2);
        let ids = Mutex::new(std::collections::HashSet::new());
        pool.run(8, |_| {
            ids.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(Duration::from_millis(20));
        });
        assert_eq!(ids.lock().unwrap().len(), 2);
    }

    #[test]
    fn chunks_and_parts_reach_one_job_each() {
        let pool = ThreadPool::new(3);
        let mut data = vec![0usize; 1000];
        pool.for_each_chunk_mut(&mut data, 64, |j, chunk| {
            for (i, v) in chunk.iter_mut().enumerate() {
                *v += j * 64 + i + 1;
            }
        });
        assert!(data.iter().enumerate().all(|(i, &v)| v == i + 1));
        let sum = AtomicUsize::new(0);
        pool.run_parts((0..50).map(|i| vec![i; 3]).collect(), |i, part| {
            assert_eq!(part, vec![i; 3]);
            sum.fetch_add(part.iter().sum::<usize>(), Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 3 * (0..50).sum::<usize>());
    }

    #[test]
    fn nested_run_does_not_deadlock() {
        let pool = ThreadPool::new(2);
        let n = AtomicUsize::new(0);
        pool.run(4, |_| {
            pool.run(3, |_| {
                n.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(n.load(Ordering::Relaxed), 12);
    }

    /// Waits (sleeping) until `cond` holds; fails only if it never does within a minute, a
    /// liveness check, not a speed one.
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !cond() {
            assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// A worker stopped between seeing a call and joining it (what a descheduled thread looks
    /// like to the pool) holds no call up: the caller runs every job itself, call after call,
    /// and the workers rejoin once they run again.
    #[test]
    fn a_descheduled_worker_does_not_stall_calls() {
        for spin in [Duration::ZERO, DEFAULT_SPIN] {
            let pool = ThreadPool::with_spin(3, spin);
            pool.set_hold(Hold::BeforeJoin);
            let me = std::thread::current().id();
            for round in 0..300 {
                let n = 2 + round % 7;
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let elsewhere = AtomicUsize::new(0);
                pool.run(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                    if std::thread::current().id() != me {
                        elsewhere.fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                assert_eq!(
                    elsewhere.load(Ordering::Relaxed),
                    0,
                    "a held worker ran a job"
                );
            }
            // Both workers really were stopped at the hook (not merely late).
            eventually("both workers held", || pool.held() == 2);
            pool.set_hold(Hold::Nowhere);
            let ids = Mutex::new(std::collections::HashSet::new());
            eventually("a worker rejoins", || {
                pool.run(4, |_| {
                    ids.lock().unwrap().insert(std::thread::current().id());
                    std::thread::sleep(Duration::from_millis(2));
                });
                ids.lock().unwrap().len() > 1
            });
        }
    }

    /// The one place a caller waits for a worker is a worker registered for its call (it may
    /// hold the job pointer): the window between registering and taking the job. A worker
    /// stopped there delays the call only until it runs again, and every index still runs once.
    #[test]
    fn a_worker_stopped_after_joining_delays_the_call_only_until_it_runs() {
        let pool = ThreadPool::with_spin(2, Duration::ZERO);
        for _ in 0..20 {
            pool.set_hold(Hold::AfterJoin);
            let hits: Vec<AtomicUsize> = (0..6).map(|_| AtomicUsize::new(0)).collect();
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    eventually("the worker reaches the hook", || pool.held() == 1);
                    std::thread::sleep(Duration::from_millis(1));
                    pool.set_hold(Hold::Nowhere);
                });
                pool.run(6, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }
}
