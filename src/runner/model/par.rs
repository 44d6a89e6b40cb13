//! Disjoint `&mut` pieces of one buffer as an iterator, for
//! [`ThreadPool::for_each_item`](crate::pool::ThreadPool::for_each_item): the forward pass's
//! parallel loops hand them out without `unsafe` and without a `Vec` of parts per call.

/// The consecutive pieces of `buf` whose lengths `len(i)` gives for `i in 0..n`, each with
/// its index (an iterator for `ThreadPool::for_each_item`).
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
