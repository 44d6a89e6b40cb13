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

/// The default probe size when the last-level cache's size is unknown.
const DEFAULT_PROBE_BYTES: usize = 256 << 20;

/// A probe this many times the last-level cache reads DRAM, not cache.
const LLC_MULTIPLE: usize = 8;

impl BandwidthProbe {
    /// The probe size that measures DRAM without doubling a tool's footprint: eight times the
    /// last-level cache (Linux sysfs; 256 MiB elsewhere), within 64 MiB..512 MiB. A 32 MiB L3
    /// gets 256 MiB: the probe then adds a quarter of a GiB to a run's peak, not a whole one.
    pub fn default_bytes() -> usize {
        last_level_cache_bytes()
            .map_or(DEFAULT_PROBE_BYTES, |c| c.saturating_mul(LLC_MULTIPLE))
            .clamp(64 << 20, 512 << 20)
    }

    /// Allocates `bytes` (rounded down to 8) and writes every page, in parallel on `pool`, so the
    /// reads measure DRAM and not page faults. The buffer is on huge pages where the weights are
    /// ([`crate::huge_pages`]): on 4 KiB pages its read stops at every page as theirs did, and
    /// the ceiling came out below what the memory gives them on huge pages.
    pub fn new(pool: &ThreadPool, bytes: usize) -> BandwidthProbe {
        let mut buf = crate::huge_pages::zeroed_vec::<u64>((bytes / 8).max(1));
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

/// The largest cache of CPU 0 in bytes, from Linux sysfs (`None` elsewhere or unreadable).
fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(s.trim()))
        .max()
}

/// `"32768K"`, `"1M"` or `"512"` (sysfs cache sizes) in bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let mul = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cache_sizes_parse_and_the_default_probe_is_bounded() {
        assert_eq!(super::parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(super::parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(super::parse_cache_size("512"), Some(512));
        assert_eq!(super::parse_cache_size("12X"), None);
        assert_eq!(super::parse_cache_size(""), None);
        let b = super::BandwidthProbe::default_bytes();
        assert!((64 << 20..=512 << 20).contains(&b), "{b}");
    }

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
