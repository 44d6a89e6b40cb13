//! Timing a closure the way every `libt2p bench` table does: a warm-up, then as many
//! repetitions as fit a time budget.

use std::time::{Duration, Instant};

/// Runs `f` once as warm-up (which also sizes the run), then repeats it within `budget`
/// (at least `min_reps`, at most `max_reps` times), calling `before` untimed ahead of each
/// run; returns the sorted times in seconds.
pub(crate) fn time_reps(
    budget: Duration,
    min_reps: usize,
    max_reps: usize,
    mut before: impl FnMut(),
    mut f: impl FnMut(),
) -> Vec<f64> {
    before();
    let t = Instant::now();
    f();
    let first = t.elapsed().as_secs_f64().max(1e-7);
    let reps = ((budget.as_secs_f64() / first) as usize).clamp(min_reps, max_reps);
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            before();
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times
}
