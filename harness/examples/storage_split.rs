//! Where a `storage` workload's time goes, in nanoseconds per operation (not shares), for
//! several heaps, interleaved run by run so that a noisy machine affects each alike.
//!
//! `cargo run --release -p alloclab-harness --example storage_split -- WORKLOADS [HEAPS]
//! [THREADS] [RUNS]` (comma-separated workloads such as `inp-g,cow-h`; heaps default to
//! `alloclab-pmem,pmdk,dram`; 1 thread; 5 runs). Prints, per workload, heap and run, the
//! throughput and each phase's ns/op (each span less the clock's per-span overhead, as the
//! suite's shares are; memory management also raw), then the medians.
//!
//! First it prints the clock's cost (an empty span) and checks the per-span correction
//! against a batched measurement: one alloclab-pmem `alloc_many` of one CoW node (and one
//! `dealloc_many`) per span, raw and corrected, against one span around
//! [`SPAN_CHECK_CALLS`] such calls, per call (medians of rounds).

use std::time::{Duration, Instant};

use alloclab_harness::storage::engines::cow::NODE_BYTES;
use alloclab_harness::storage::{AlloclabPmemStorage, PHeap, Phase, PoolFile, Split};
use alloclab_harness::workloads::storage::{Spec, measure_by_name};
use alloclab_harness::workloads::{Params, Scale};

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

/// Calls per round of the span check.
const SPAN_CHECK_CALLS: usize = 256;

/// Per call, ns (medians of rounds): `alloc_many` of one node and `dealloc_many` of it, each
/// in its own span (raw, then less the calibrated per-span overhead), and K of them in one
/// span; and the overhead itself.
fn span_check(per_ns: f64, dir: &std::path::Path) -> Result<[f64; 7], String> {
    let path = dir.join(format!(
        "alloclab-storage-split-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let heap = <AlloclabPmemStorage as PoolFile>::create(&path, 16 << 20, 64)?;
    let mut rows: Vec<[f64; 7]> = Vec::new();
    let mut out = Vec::with_capacity(SPAN_CHECK_CALLS);
    let k = SPAN_CHECK_CALLS as f64 * per_ns;
    for _ in 0..21 {
        let mut each = Split::default();
        let overhead = each.calibrate();
        out.clear();
        for _ in 0..SPAN_CHECK_CALLS {
            each.time(Phase::Mm, || heap.alloc_many(&[NODE_BYTES], &mut out))?;
        }
        for &off in &out {
            // SAFETY: allocated just now, linked nowhere.
            each.time(Phase::Cc, || unsafe { heap.dealloc_many(&[off]) })?;
        }
        let mut batched = Split::default();
        out.clear();
        batched.time(Phase::Mm, || {
            (0..SPAN_CHECK_CALLS).try_for_each(|_| heap.alloc_many(&[NODE_BYTES], &mut out))
        })?;
        batched.time(Phase::Cc, || {
            // SAFETY: as above.
            out.iter()
                .try_for_each(|&off| unsafe { heap.dealloc_many(&[off]) })
        })?;
        rows.push([
            each.raw_cycles(Phase::Mm) as f64 / k,
            each.cycles(Phase::Mm) as f64 / k,
            batched.cycles(Phase::Mm) as f64 / k,
            each.raw_cycles(Phase::Cc) as f64 / k,
            each.cycles(Phase::Cc) as f64 / k,
            batched.cycles(Phase::Cc) as f64 / k,
            overhead as f64 / per_ns,
        ]);
    }
    drop(heap);
    let _ = std::fs::remove_file(&path);
    Ok(std::array::from_fn(|c| {
        let mut v: Vec<f64> = rows.iter().map(|r| r[c]).collect();
        median(&mut v)
    }))
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
        let mut split = alloclab_harness::storage::Split::default();
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
    match span_check(per_ns, &dir) {
        Ok([a_raw, a, a_one, f_raw, f, f_one, overhead]) => println!(
            "span check (alloclab-pmem, one {NODE_BYTES}-byte node, ns/call): alloc_many {a_raw:.1} raw, \
             {a:.1} corrected, {a_one:.1} in one span of {SPAN_CHECK_CALLS}; dealloc_many {f_raw:.1} raw, \
             {f:.1} corrected, {f_one:.1} in one span; overhead {overhead:.1} per span"
        ),
        Err(e) => println!("span check: {e}"),
    }
    for (workload, spec) in specs {
        let heaps: Vec<&str> = heaps.split(',').collect();
        // Per heap: ops/s and ns/op of each phase, one entry per run.
        let mut table = vec![vec![Vec::new(); 6]; heaps.len()];
        for _ in 0..runs {
            for (h, heap) in heaps.iter().enumerate() {
                let r = measure_by_name(spec, heap, &params, &dir).unwrap_or_else(|e| {
                    eprintln!("storage_split: {workload} on {heap}: {e}");
                    std::process::exit(1)
                });
                let ops = r.ops as f64;
                table[h][0].push(ops / r.elapsed.as_secs_f64());
                for (i, phase) in Phase::ALL.into_iter().enumerate() {
                    table[h][i + 1].push(r.split.cycles(phase) as f64 / per_ns / ops);
                }
                table[h][5].push(r.split.raw_cycles(Phase::Mm) as f64 / per_ns / ops);
            }
        }
        println!(
            "{workload:<12} {:<14} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}  (median; ns/op; runs min-max)",
            "heap", "kops/s", "index", "cc", "mm", "mod", "mm raw"
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
                "{workload:<12} {heap:<14} {:>9.1} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0}  ",
                cols[0].0 / 1e3,
                cols[1].0,
                cols[2].0,
                cols[3].0,
                cols[4].0,
                cols[5].0
            );
            println!(
                "kops {:.0}-{:.0} cc {:.0}-{:.0} mm {:.0}-{:.0}",
                cols[0].1 / 1e3,
                cols[0].2 / 1e3,
                cols[2].1,
                cols[2].2,
                cols[3].1,
                cols[3].2
            );
        }
    }
}
