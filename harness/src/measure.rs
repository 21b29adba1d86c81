//! Measuring without measuring ourselves: clock cost, resident set.
//!
//! **Timer overhead.** Every timed sample costs two clock reads. [`timer_overhead_ns`]
//! measures one read; a workload reports its shortest sample, and the harness reports
//! `2 × overhead / shortest sample` as the `timer_overhead` metric. Workloads time batches
//! (in the `cpu` suite, the whole fixed amount of work) so that this stays far below 5%.
//!
//! **Footprint.** Host heaps are measured from the outside: the peak resident set of the
//! worker process, minus its resident set before the allocator was first used — so memory
//! an allocator takes when it starts counts, as in a whole-process peak RSS. Linux lets a
//! process reset its peak (`VmHWM`) by writing `5` to `/proc/self/clear_refs`; where that
//! is refused, the peak since the process started is used (the worker is a fresh process
//! whose start-up is small, so the difference is the harness's own few MiB).

use std::hint::black_box;
use std::time::Instant;

/// The cost of one `Instant::now()`, in nanoseconds: the median over 101 batches of 1000
/// back-to-back reads.
pub fn timer_overhead_ns() -> f64 {
    const READS: u32 = 1000;
    let mut per_read: Vec<f64> = (0..101)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..READS {
                black_box(Instant::now());
            }
            start.elapsed().as_nanos() as f64 / f64::from(READS)
        })
        .collect();
    per_read.sort_by(f64::total_cmp);
    per_read[per_read.len() / 2]
}

/// Resets the process's peak resident set to its current resident set. Returns whether the
/// OS allowed it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Current resident set of this process, in bytes (`VmRSS`), if the OS tells.
pub fn current_rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|k| k * 1024)
}

/// Peak resident set of this process, in bytes (`VmHWM`), if the OS tells.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_overhead_is_positive_and_below_a_microsecond() {
        let ns = timer_overhead_ns();
        assert!(ns > 0.0 && ns < 1000.0, "one clock read took {ns} ns");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn peak_rss_sees_memory_touched_after_a_reset() {
        reset_peak_rss();
        let before = current_rss_bytes().expect("VmRSS");
        let mut block = vec![0u8; 64 << 20];
        for i in (0..block.len()).step_by(4096) {
            block[i] = 1;
        }
        black_box(&block);
        let peak = peak_rss_bytes().expect("VmHWM");
        assert!(
            peak >= before + (48 << 20),
            "peak {peak} does not show 64 MiB touched over {before}"
        );
    }
}
