//! Diagnostic for the `realtime` suite: runs its `latency` workload once on one allocator
//! and prints the shape of the tail — how many allocations and frees took longer than 0.5,
//! 1, 2, 5, ... 100 us — beside the suite's percentiles.
//!
//! ```text
//! cargo run --release -p alloclab-harness --example rt_probe -- ALLOC THREADS [SCALE]
//! ```
//!
//! With `ATTRIBUTE_SLOW_NS=N` it instead wraps the allocator so that every call (after each
//! thread's untimed fill of its working set) is timed inside the wrapper, with the thread's
//! page-fault and context-switch counts (`getrusage(RUSAGE_THREAD)`) read around it, and
//! prints how many calls faulted (and what they cost) and, of the calls slower than N ns,
//! how many faulted, were switched out (involuntarily or voluntarily) or neither
//! (interrupts, the hypervisor). The wrapper's own system calls lie outside what it times,
//! but they slow the run down: use this mode to attribute, not to compare figures.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use alloclab_core::{AllocError, Allocator, HostAllocator, Stats};
use alloclab_harness::peers::{HostHeapTask, with_host_heap};
use alloclab_harness::workloads::realtime::measure;
use alloclab_harness::workloads::{Params, Scale};

struct Probe(Params);

impl HostHeapTask for Probe {
    type Output = ();
    fn run<A: HostAllocator>(self, alloc: &'static A) {
        let warm = Layout::from_size_align(64, 16).expect("valid layout");
        if let Ok(b) = alloc.allocate(warm) {
            // SAFETY: just allocated with `warm`.
            unsafe { alloc.deallocate(b, warm) };
        }
        let lat = measure(alloc, &self.0);
        let thresholds = [500u64, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000];
        for (kind, h) in [("alloc", &lat.alloc), ("free", &lat.free)] {
            let counts: Vec<String> = thresholds
                .iter()
                .map(|&t| {
                    let above: u64 = h
                        .iter_recorded()
                        .filter(|v| v.value_iterated_to() > t)
                        .map(|v| v.count_at_value())
                        .sum();
                    format!(">{}us:{}", t as f64 / 1000.0, above)
                })
                .collect();
            println!(
                "{kind:5} n={} mean={:.1} p50={} p99={} p99.9={} p99.99={} p99.999={} max={} | {}",
                h.len(),
                h.mean(),
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.value_at_quantile(0.9999),
                h.value_at_quantile(0.99999),
                h.max(),
                counts.join(" ")
            );
        }
        let s = alloc.stats();
        println!(
            "steps alloc={:?} free={:?}",
            s.max_alloc_steps, s.max_free_steps
        );
    }
}

/// Wraps an allocator: each call is timed inside, with the thread's fault and context-switch
/// counts read before and after it (`getrusage(RUSAGE_THREAD)`).
struct Attributing<A: 'static>(&'static A);

/// Calls slower than `SLOW_NS`, `[alloc, free][cause]`; cause 0: faulted, 1: switched out
/// involuntarily, 2: voluntarily, 3: none of these.
static SLOW: [[AtomicU64; 4]; 2] = [const { [const { AtomicU64::new(0) }; 4] }; 2];
static FAULTING_OPS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static FAULTS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static FAULT_NS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static FAULT_MAX_NS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
static SLOW_NS: AtomicU64 = AtomicU64::new(10_000);
/// Faulting allocations by when they came: bucket `k` counts those among a thread's
/// allocations `2^k .. 2^(k+1)` (the fill is the first 1024).
static FAULTS_BY_OP: [AtomicU64; 24] = [const { AtomicU64::new(0) }; 24];

fn usage() -> (i64, i64, i64) {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    unsafe {
        let mut u: libc::rusage = core::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        (u.ru_minflt, u.ru_nivcsw, u.ru_nvcsw)
    }
}

std::thread_local! {
    static OPS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

fn attribute(kind: usize, ns: u64, before: (i64, i64, i64), after: (i64, i64, i64)) {
    let faults = (after.0 - before.0) as u64;
    // Skip the untimed fill of the working set (the first allocations of each thread).
    if kind == 0 {
        let n = OPS.get() + 1;
        OPS.set(n);
        if faults > 0 {
            FAULTS_BY_OP[(n.ilog2() as usize).min(23)].fetch_add(1, Relaxed);
        }
        if n <= 1024 {
            return;
        }
    }
    if faults > 0 {
        FAULTING_OPS[kind].fetch_add(1, Relaxed);
        FAULTS[kind].fetch_add(faults, Relaxed);
        FAULT_NS[kind].fetch_add(ns, Relaxed);
        FAULT_MAX_NS[kind].fetch_max(ns, Relaxed);
    }
    if ns > SLOW_NS.load(Relaxed) {
        let class = if faults > 0 {
            0
        } else if after.1 > before.1 {
            1
        } else if after.2 > before.2 {
            2
        } else {
            3
        };
        SLOW[kind][class].fetch_add(1, Relaxed);
    }
}

impl<A: HostAllocator> Allocator for Attributing<A> {
    type Handle = NonNull<u8>;
    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let before = usage();
        let t = Instant::now();
        let r = self.0.allocate(layout);
        let ns = t.elapsed().as_nanos() as u64;
        attribute(0, ns, before, usage());
        r
    }
    unsafe fn deallocate(&self, h: NonNull<u8>, layout: Layout) {
        let before = usage();
        let t = Instant::now();
        // SAFETY: forwarded.
        unsafe { self.0.deallocate(h, layout) };
        let ns = t.elapsed().as_nanos() as u64;
        attribute(1, ns, before, usage());
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn stats(&self) -> Stats {
        self.0.stats()
    }
}
impl<A: HostAllocator> HostAllocator for Attributing<A> {}

struct Attribute(Params);

impl HostHeapTask for Attribute {
    type Output = ();
    fn run<A: HostAllocator>(self, alloc: &'static A) {
        let wrapped: &'static Attributing<A> = Box::leak(Box::new(Attributing(alloc)));
        let warm = Layout::from_size_align(64, 16).expect("valid layout");
        if let Ok(b) = wrapped.allocate(warm) {
            // SAFETY: just allocated with `warm`.
            unsafe { wrapped.deallocate(b, warm) };
        }
        let _ = measure(wrapped, &self.0);
        let by_op: Vec<String> = FAULTS_BY_OP
            .iter()
            .enumerate()
            .filter(|(_, c)| c.load(Relaxed) > 0)
            .map(|(k, c)| format!("2^{k}:{}", c.load(Relaxed)))
            .collect();
        println!(
            "faulting allocations by a thread's allocation number: {}",
            by_op.join(" ")
        );
        for (k, kind) in ["alloc", "free"].iter().enumerate() {
            let n = FAULTING_OPS[k].load(Relaxed);
            println!(
                "{kind:5} faulting_ops={n} faults={} mean_ns={} max_ns={} | >{}ns: fault={} invol={} vol={} none={}",
                FAULTS[k].load(Relaxed),
                FAULT_NS[k].load(Relaxed) / n.max(1),
                FAULT_MAX_NS[k].load(Relaxed),
                SLOW_NS.load(Relaxed),
                SLOW[k][0].load(Relaxed),
                SLOW[k][1].load(Relaxed),
                SLOW[k][2].load(Relaxed),
                SLOW[k][3].load(Relaxed),
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(name) = args.get(1) else {
        eprintln!("usage: rt_probe ALLOC THREADS [tiny|small|medium|large]");
        std::process::exit(2);
    };
    let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
    let scale = match args.get(3).map(String::as_str) {
        Some("tiny") => Scale::Tiny,
        Some("medium") => Scale::Medium,
        Some("large") => Scale::Large,
        _ => Scale::Small,
    };
    let params = Params {
        threads,
        scale,
        seed: 42,
    };
    if let Ok(ns) = std::env::var("ATTRIBUTE_SLOW_NS") {
        SLOW_NS.store(ns.parse().expect("ATTRIBUTE_SLOW_NS: nanoseconds"), Relaxed);
        with_host_heap(name, Attribute(params)).expect("unknown allocator");
    } else {
        with_host_heap(name, Probe(params)).expect("unknown allocator");
    }
}
