//! Parallel loops of the forward pass that allocate nothing: the pool's `run` hands out job
//! indices, and each job takes the next part from one shared iterator (parts are disjoint `&mut`
//! pieces of a buffer, so no `unsafe` and no `Vec` of parts per call).

use std::sync::{Mutex, PoisonError};

use crate::pool::ThreadPool;

/// Runs `f(part)` once for each of the `n` parts `parts` yields, spread over `pool`.
pub(crate) fn for_each_part<I, F>(pool: &ThreadPool, n: usize, parts: I, f: F)
where
    I: Iterator + Send,
    I::Item: Send,
    F: Fn(I::Item) + Sync,
{
    let parts = Mutex::new(parts);
    pool.run(n, |_| {
        // The lock is held only to take a part; the work runs outside it.
        let part = parts.lock().unwrap_or_else(PoisonError::into_inner).next();
        if let Some(p) = part {
            f(p);
        }
    });
}

/// The consecutive pieces of `buf` whose lengths `len(i)` gives for `i in 0..n`, each with
/// its index (an iterator for [`for_each_part`]).
pub(crate) fn pieces<'a, T, L: Fn(usize) -> usize + 'a>(
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
