//! No forward pass allocates after a session's first one: a counting global allocator (for
//! this test binary only) counts every allocation on every thread while later decode steps and
//! batches run on real tiny models (attention-only qwen3, hybrid qwen35, dense f32 llama).
//!
//! The attention kernel (`model::attend`, owned apart from the model layer and being replaced
//! by an f16 one) may still allocate per call; its own count is measured by calling it alone
//! with the same shapes, and a forward pass must allocate exactly that many times per
//! attention call and nothing else. Once `attend` allocates nothing, that is zero.

mod reference;
mod runner_data;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use reference::load;
use t2p::runner::model::{AttnShape, Exec, KvCache, Loaded, Session, attend};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the counter is an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
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

/// Allocations (on any thread) while `f` runs.
fn allocations(f: impl FnOnce()) -> usize {
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst)
}

fn tokens(l: &Loaded, n: usize, seed: u32) -> Vec<u32> {
    let nv = l.model.n_vocab() as u32;
    (0..n as u32).map(|i| (i * 7919 + seed * 31 + 13) % nv).collect()
}

/// Allocations of one `attend` call over `n` tokens after `pos0` with the model's shape.
fn attend_allocations(l: &Loaded, exec: &Exec, n: usize, pos0: usize) -> usize {
    let c = &l.model.net().cfg;
    let shape = AttnShape {
        n_head: c.n_head,
        n_head_kv: c.n_head_kv,
        head_dim: c.head_dim,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
    };
    let mut cache = KvCache::new(1, pos0 + n, c.kv_dim());
    let kv = vec![0.5f32; c.kv_dim()];
    for p in 0..pos0 + n {
        cache.store(0, p, &kv, &kv);
    }
    let q = vec![0.25f32; n * c.q_dim()];
    let mut out = vec![0.0f32; n * c.q_dim()];
    attend(exec, shape, &q, &cache, 0, pos0, &mut out);
    allocations(|| attend(exec, shape, &q, &cache, 0, pos0, &mut out))
}

/// A prompt and a first decode step, then decode steps, a prompt-sized pass with every
/// position's logits, and a two-sequence batch of the sizes of its first run.
fn check(l: &Loaded, what: &str) {
    let exec = Exec::new(2);
    let m = &l.model;
    let prompt = tokens(l, 8, 1);
    let mut s = m.new_session(64);
    m.eval(&exec, &mut s, &prompt, true).unwrap();
    m.eval(&exec, &mut s, &prompt[..1], false).unwrap();
    let n_attn = m.net().cfg.n_attn();
    // What `attend` itself allocates per call, for 1, 3 and 8 tokens.
    let (att1, att3, att8) = (
        attend_allocations(l, &exec, 1, 9),
        attend_allocations(l, &exec, 3, 0),
        attend_allocations(l, &exec, 8, 13),
    );
    println!("{what}: attend allocates {att1} / {att3} / {att8} times per call of 1 / 3 / 8 tokens");
    let decode = allocations(|| {
        for &id in &prompt[1..5] {
            let logits = m.eval(&exec, &mut s, &[id], false).unwrap();
            assert_eq!(logits.len(), m.n_vocab());
        }
    });
    let own = decode - (4 * n_attn * att1).min(decode);
    assert_eq!(
        decode,
        4 * n_attn * att1,
        "{what}: 4 decode steps allocated {decode} times, {own} of them outside attend"
    );
    let again = allocations(|| {
        m.eval(&exec, &mut s, &prompt, true).unwrap();
    });
    assert_eq!(
        again,
        n_attn * att8,
        "{what}: a second 8-token pass allocated {again} times ({} in attend)",
        n_attn * att8
    );

    let (mut a, mut b): (Session, Session) = (m.new_session(32), m.new_session(32));
    let (ta, tb) = (tokens(l, 3, 2), tokens(l, 3, 3));
    let mut batch = |a: &mut Session, b: &mut Session, n: usize| {
        m.eval_batch(&exec, &mut [(a, &ta[..n]), (b, &tb[..n])])
            .unwrap();
    };
    batch(&mut a, &mut b, 3);
    let batched = allocations(|| batch(&mut a, &mut b, 3));
    assert_eq!(
        batched,
        2 * n_attn * att3,
        "{what}: a 2 x 3 batch allocated {batched} times ({} in attend)",
        2 * n_attn * att3
    );
    assert_eq!(a.logits().len(), m.n_vocab());
    assert_eq!(b.logits().len(), m.n_vocab());
}

/// One test (the harness would run several on parallel threads, and a window counts every
/// thread's allocations): the counter itself, then each model.
#[test]
fn forward_passes_after_the_first_do_not_allocate() {
    let n = allocations(|| drop(std::hint::black_box(vec![1u8; 100])));
    assert_eq!(n, 1, "the counting allocator must see a Vec");
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
