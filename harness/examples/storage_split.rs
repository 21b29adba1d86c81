//! Where a `storage` workload's time goes, in nanoseconds per operation (not shares), for
//! several heaps, interleaved run by run so that a noisy machine affects each alike.
//!
//! `cargo run --release -p alloclab-harness --example storage_split -- WORKLOADS [HEAPS]
//! [THREADS] [RUNS]` (comma-separated workloads such as `inp-g,cow-h`; heaps default to
//! `alloclab-pmem,pmdk,dram`; 1 thread; 5 runs). Prints, per workload and heap, the
//! medians over the runs of the throughput, of each phase's ns per operation timed (the
//! suite times a sample of the operations for the split) and of the memory-management
//! share.

use std::time::{Duration, Instant};

use alloclab_harness::workloads::storage::{Spec, measure_together};
use alloclab_harness::workloads::{Params, Scale};
use alloclab_storage_engines::Phase;

/// Cycles of the time-split clock per nanosecond.
fn clock_per_ns() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64.
        let c0 = unsafe { core::arch::x86_64::_rdtsc() };
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: as above.
        let c1 = unsafe { core::arch::x86_64::_rdtsc() };
        (c1 - c0) as f64 / t0.elapsed().as_nanos() as f64
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        1.0
    }
}

const USAGE: &str = "usage: storage_split [WORKLOADS] [HEAPS] [THREADS] [RUNS]";

/// Prints what is wrong and the usage, and exits with status 2.
fn usage(why: &str) -> ! {
    eprintln!("storage_split: {why}\n{USAGE}");
    std::process::exit(2)
}

/// A positional count in `1..=1024`, `default` when absent.
fn count(arg: Option<&String>, default: usize, what: &str) -> usize {
    match arg.map(|s| s.parse::<usize>()) {
        None => default,
        Some(Ok(n)) if (1..=1024).contains(&n) => n,
        Some(_) => usage(&format!("{what} must be a number in 1..=1024")),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // As the storage workers do, before anything loads libpmem or libpmemobj.
    // SAFETY: no other thread runs yet.
    unsafe {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
        std::env::set_var("PMEM_NO_FLUSH", "0");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() > 4 {
        usage("too many arguments");
    }
    let workloads = args.first().map_or("inp-g", String::as_str).to_owned();
    let specs: Vec<(&str, Spec)> = workloads
        .split(',')
        .map(|w| match Spec::parse(w) {
            Some(spec) => (w, spec),
            None => usage(&format!(
                "'{w}' is not a storage workload (e.g. inp-g, cow-h)"
            )),
        })
        .collect();
    let heaps = args
        .get(1)
        .map_or("alloclab-pmem,pmdk,dram", String::as_str)
        .to_owned();
    let threads = count(args.get(2), 1, "THREADS");
    let runs = count(args.get(3), 5, "RUNS");
    let per_ns = clock_per_ns();
    let dir = alloclab_harness::workloads::pmem::pool_dir();
    let params = Params {
        threads,
        scale: Scale::Small,
        seed: 42,
    };
    println!("clock: {per_ns:.3} cycles/ns; {threads} thread(s), {runs} runs interleaved");
    {
        let mut split = alloclab_storage_engines::Split::default();
        let n = 1_000_000u64;
        let t0 = Instant::now();
        for i in 0..n {
            split.time(Phase::Mm, || std::hint::black_box(i));
        }
        let wall = t0.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "empty span: {:.1} ns attributed, {wall:.1} ns wall",
            split.cycles(Phase::Mm) as f64 / per_ns / n as f64
        );
    }
    for (workload, spec) in specs {
        let heaps: Vec<&str> = heaps.split(',').collect();
        // Per heap: ops/s and ns/op of each phase, one entry per run.
        let mut table = vec![vec![Vec::new(); 6]; heaps.len()];
        for _ in 0..runs {
            // The heaps together, interleaved, as the suite measures them.
            let reports = measure_together(spec, &heaps, &params, &dir).unwrap_or_else(|e| {
                eprintln!("storage_split: {workload}: {e}");
                std::process::exit(1)
            });
            for (h, (heap, r)) in heaps.iter().zip(reports).enumerate() {
                let r = r.unwrap_or_else(|e| {
                    eprintln!("storage_split: {workload} on {heap}: {e}");
                    std::process::exit(1)
                });
                table[h][0].push(r.ops_per_s);
                let timed = r.split.timed_ops().max(1) as f64;
                for (i, phase) in Phase::ALL.into_iter().enumerate() {
                    table[h][i + 1].push(r.split.cycles(phase) as f64 / per_ns / timed);
                }
                table[h][5].push(r.split.share(Phase::Mm) * 100.0);
            }
        }
        println!(
            "{workload:<12} {:<14} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}  (median; ns/op; runs min-max)",
            "heap", "kops/s", "index", "cc", "mm", "mod", "mm%"
        );
        for (h, heap) in heaps.iter().enumerate() {
            let cols: Vec<(f64, f64, f64)> = table[h]
                .iter_mut()
                .map(|v| {
                    let m = median(v);
                    (m, v[0], v[v.len() - 1])
                })
                .collect();
            print!(
                "{workload:<12} {heap:<14} {:>9.1} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>6.1}  ",
                cols[0].0 / 1e3,
                cols[1].0,
                cols[2].0,
                cols[3].0,
                cols[4].0,
                cols[5].0
            );
            println!(
                "kops {:.0}-{:.0} cc {:.0}-{:.0} mm {:.0}-{:.0} mm% {:.1}-{:.1}",
                cols[0].1 / 1e3,
                cols[0].2 / 1e3,
                cols[2].1,
                cols[2].2,
                cols[3].1,
                cols[3].2,
                cols[5].1,
                cols[5].2
            );
        }
    }
}
