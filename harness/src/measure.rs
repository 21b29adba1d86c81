//! Measuring without measuring ourselves: clock cost, resident set.
//!
//! **Timer overhead.** Every timed sample costs two clock reads. [`timer_overhead_ns`]
//! measures one read; a workload reports its shortest sample, and the harness reports
//! `2 × overhead / shortest sample` as the `timer_overhead` metric. Workloads time batches
//! (in the `cpu` suite, the whole fixed amount of work) so that this stays far below 5%.
//!
//! **Footprint.** Host heaps are measured from the outside: the peak resident set of the
//! worker process, minus its resident set before the allocator was first used — so memory
//! an allocator takes when it starts counts, as in a whole-process peak RSS. Before that
//! baseline the worker maps in every page of its code and read-only data and of its
//! libraries' ([`prefault_code`]): otherwise each allocator but glibc's would pay for its
//! own code, faulted in at its first calls, while glibc's malloc is resident before the
//! baseline since the harness itself uses it (on an AMD EPYC VM the randomized heap's
//! first allocation raised the resident set by 236-368 KiB, mostly the worker binary's
//! text, against 64 KiB for glibc's, at footprints near 1 MiB). Linux lets a
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

/// Maps in every page of the readable, non-writable mappings of this process's executable
/// and shared libraries (code and read-only data) by reading one byte of each, so that code
/// paths run later fault no code pages in. Other file mappings are left alone (a mapping
/// may reach past its file's end, where a read faults). Returns the pages touched; 0 where
/// `/proc/self/maps` cannot be read.
pub fn prefault_code() -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let exe = std::fs::read_link("/proc/self/exe").ok();
    let page = 4096;
    let mut touched = 0;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // A file path (not `[vdso]`, `[stack]` or an anonymous mapping) after offset, device
        // and inode.
        let path = fields.nth(3);
        if !perms.starts_with('r') || perms.as_bytes().get(1) == Some(&b'w') {
            continue;
        }
        let Some(path) = path.filter(|p| p.starts_with('/')) else {
            continue;
        };
        let library = path.ends_with(".so") || path.contains(".so.");
        if !library && exe.as_deref() != Some(std::path::Path::new(path)) {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        let mut at = lo;
        while at < hi {
            // SAFETY: `at` lies in a readable mapping of this process's executable or of a
            // loaded library, within its file, which nothing unmaps meanwhile; a volatile
            // read of one byte.
            unsafe { std::ptr::read_volatile(at as *const u8) };
            touched += 1;
            at += page;
        }
    }
    touched
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
    fn prefaulting_maps_in_every_page_of_the_executables_code() {
        let touched = prefault_code();
        assert!(touched > 100, "only {touched} pages of code and libraries");
        // Every page of this test binary's code mapping is now resident in this process
        // (what other test threads allocate meanwhile does not enter this mapping).
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines();
        let mut code = None;
        while let Some(line) = lines.next() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() == 6 && fields[1] == "r-xp" && std::path::Path::new(fields[5]) == exe {
                let kib = |name: &str, lines: &mut std::str::Lines<'_>| loop {
                    let l = lines.next().expect("the mapping's fields");
                    if let Some(v) = l.strip_prefix(name) {
                        break v.trim().trim_end_matches(" kB").parse::<u64>().unwrap();
                    }
                };
                let size = kib("Size:", &mut lines);
                let rss = kib("Rss:", &mut lines);
                code = Some((size, rss));
                break;
            }
        }
        let (size, rss) = code.expect("the executable's code mapping");
        assert!(
            size > 0 && rss == size,
            "{rss} of {size} KiB of code resident"
        );
        // Touching it again finds the same pages.
        assert_eq!(prefault_code(), touched);
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
