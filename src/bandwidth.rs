//! The memory-bandwidth probe behind every "% of ceiling" number: a plain multi-threaded read
//! (sum) of a buffer far larger than the last-level cache, on the same [`ThreadPool`] as the
//! kernels, so kernel and ceiling are measured with the same threads in the same run.

use std::time::Instant;

use crate::pool::ThreadPool;

/// Bytes per job of the read; small enough to balance, large enough that job claiming is noise.
const JOB_BYTES: usize = 4 << 20;

/// A buffer of `u64`s, allocated and touched once, read by [`BandwidthProbe::measure`].
#[derive(Debug)]
pub struct BandwidthProbe {
    buf: Vec<u64>,
}

/// Result of a bandwidth measurement, in GB/s (10^9 bytes per second).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidth {
    /// Median over the repetitions.
    pub median_gbps: f64,
    /// Fastest repetition.
    pub best_gbps: f64,
    /// Slowest repetition.
    pub worst_gbps: f64,
}

impl BandwidthProbe {
    /// Allocates `bytes` (rounded down to 8) and writes every page, in parallel on `pool`, so the
    /// reads measure DRAM and not page faults.
    pub fn new(pool: &ThreadPool, bytes: usize) -> BandwidthProbe {
        let mut buf = vec![0u64; (bytes / 8).max(1)];
        let per = JOB_BYTES / 8;
        pool.for_each_chunk_mut(&mut buf, per, |j, s| {
            for (i, v) in s.iter_mut().enumerate() {
                *v = (j * per + i) as u64;
            }
        });
        BandwidthProbe { buf }
    }

    /// Size of the buffer in bytes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(self.buf.as_slice())
    }

    /// One full read of the buffer on `pool`; returns the seconds it took.
    pub fn read_once(&self, pool: &ThreadPool) -> f64 {
        let per = JOB_BYTES / 8;
        let n = self.buf.len().div_ceil(per);
        let total = std::sync::atomic::AtomicU64::new(0);
        let t = Instant::now();
        pool.run(n, |j| {
            let chunk = &self.buf[j * per..((j + 1) * per).min(self.buf.len())];
            // Wrapping integer sum: vectorised by the compiler, one load per 8 bytes.
            let s = chunk.iter().fold(0u64, |a, &x| a.wrapping_add(x));
            total.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
        });
        let secs = t.elapsed().as_secs_f64();
        std::hint::black_box(total.into_inner());
        secs
    }

    /// Reads the buffer `reps` times (after one warm-up read) and reports GB/s.
    pub fn measure(&self, pool: &ThreadPool, reps: usize) -> Bandwidth {
        self.read_once(pool);
        let mut gbps: Vec<f64> = (0..reps.max(1))
            .map(|_| self.bytes() as f64 / self.read_once(pool) / 1e9)
            .collect();
        gbps.sort_by(f64::total_cmp);
        Bandwidth {
            median_gbps: gbps[gbps.len() / 2],
            best_gbps: gbps[gbps.len() - 1],
            worst_gbps: gbps[0],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_probe_reads_and_reports() {
        let pool = ThreadPool::new(2);
        let p = BandwidthProbe::new(&pool, 9 << 20);
        assert_eq!(p.bytes(), 9 << 20);
        let b = p.measure(&pool, 3);
        assert!(
            b.worst_gbps > 0.0 && b.worst_gbps <= b.median_gbps && b.median_gbps <= b.best_gbps
        );
    }
}
