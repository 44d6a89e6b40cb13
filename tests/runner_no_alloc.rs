//! No forward pass allocates after a session's first one: a counting global allocator (for
//! this test binary only) sees every allocation on every thread while later decode steps and
//! batches run on real tiny models (attention-only qwen3, hybrid qwen35, dense f32 llama).
//!
//! Every allocation counts, whichever module makes it (model layer, kernels, attention, pool,
//! matmul driver); the first one's backtrace is printed when the count is not zero.

mod reference;
mod runner_data;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use reference::load;
use t2p::runner::model::{Exec, Loaded, Logits, Seq, Session};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
/// Allocations counted while `COUNTING` is set.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// The backtrace of the first counted allocation, for the failure message.
static FIRST: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

thread_local! {
    /// Set while this thread attributes an allocation (whose own allocations are not counted).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if !COUNTING.load(Ordering::Relaxed) || INSIDE.with(|c| c.replace(true)) {
        return;
    }
    if ALLOCS.fetch_add(1, Ordering::Relaxed) == 0 {
        let bt = std::backtrace::Backtrace::force_capture().to_string();
        *FIRST.lock().unwrap_or_else(|e| e.into_inner()) = bt;
    }
    INSIDE.with(|c| c.set(false));
}

// SAFETY: forwards every call to the system allocator unchanged; counting only touches
// atomics and a thread-local flag that keeps it from recursing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made while `f` runs, on any thread; prints the first one's backtrace.
fn allocations(what: &str, f: impl FnOnce()) -> usize {
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    let n = ALLOCS.load(Ordering::SeqCst);
    if n > 0 {
        let first = FIRST.lock().unwrap_or_else(|e| e.into_inner());
        println!("{what}: first of {n} allocations:\n{first}");
    }
    n
}

fn tokens(l: &Loaded, n: usize, seed: u32) -> Vec<u32> {
    let nv = l.model.n_vocab() as u32;
    (0..n as u32)
        .map(|i| (i * 7919 + seed * 31 + 13) % nv)
        .collect()
}

/// A prompt and a first decode step, then decode steps and a prompt-sized pass with every
/// position's logits; two sessions' first batch, then a batch of the same sizes.
fn check(l: &Loaded, what: &str) {
    // One thread: every job then runs on this thread, which the warm-up has taken through
    // every kernel. With more threads, jobs are claimed dynamically, and a worker's first call
    // of a kernel makes its per-thread buffer once (not asserted here).
    let exec = Exec::new(1);
    let m = &l.model;
    let prompt = tokens(l, 8, 1);
    let mut s = m.new_session(64);
    m.forward_one(&exec, &mut s, &prompt, Logits::All).unwrap();
    // Two warm-up decode steps: per-thread kernel buffers are made on a thread's first call,
    // and jobs are claimed dynamically, so each thread should have met a decode once.
    for &id in &prompt[..2] {
        m.forward_one(&exec, &mut s, &[id], Logits::Last).unwrap();
    }
    let decode = allocations(&format!("{what}, 4 decode steps"), || {
        for &id in &prompt[1..5] {
            let logits = m.forward_one(&exec, &mut s, &[id], Logits::Last).unwrap();
            assert_eq!(logits.len(), m.n_vocab());
        }
    });
    assert_eq!(decode, 0, "{what}: 4 decode steps allocated {decode} times");
    let again = allocations(&format!("{what}, an 8-token pass"), || {
        m.forward_one(&exec, &mut s, &prompt, Logits::All).unwrap();
    });
    assert_eq!(
        again, 0,
        "{what}: a second 8-token pass allocated {again} times"
    );

    let (mut a, mut b): (Session, Session) = (m.new_session(32), m.new_session(32));
    let (ta, tb) = (tokens(l, 3, 2), tokens(l, 3, 3));
    let batch = |a: &mut Session, b: &mut Session| {
        let seq = |session, tokens| Seq {
            session,
            tokens,
            logits: Logits::Last,
        };
        m.forward(&exec, &mut [seq(a, &ta[..]), seq(b, &tb[..])])
            .unwrap();
    };
    batch(&mut a, &mut b);
    let batched = allocations(&format!("{what}, a 2 x 3 batch"), || batch(&mut a, &mut b));
    assert_eq!(
        batched, 0,
        "{what}: a 2 x 3 batch allocated {batched} times"
    );
    assert_eq!(
        (a.logits().len(), b.logits().len()),
        (m.n_vocab(), m.n_vocab())
    );
}

/// One test (the harness would run several on parallel threads, and a window counts every
/// thread's allocations): the counter itself, then each model.
#[test]
fn forward_passes_after_the_first_do_not_allocate() {
    let n = allocations("the counter's own check", || {
        drop(std::hint::black_box(vec![1u8; 100]))
    });
    // At least: the test harness's own threads may allocate in the window too.
    assert!(n >= 1, "the counting allocator must see a Vec");
    let Some(dir) = runner_data::testdata() else {
        return;
    };
    for (what, file) in [
        ("qwen3-tiny", "qwen3-tiny/qwen3-tiny-pq2_0.gguf"),
        ("qwen35-tiny", "qwen35-tiny/qwen35-tiny-pq2_0.gguf"),
        ("stories260K", "stories260K/stories260K.gguf"),
    ] {
        check(&load(&dir.join(file)), what);
    }
}
