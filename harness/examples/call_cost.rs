//! Instructions per call of the `realtime` workload, for `valgrind --tool=callgrind`: runs
//! the suite's `latency` workload once on one allocator, with every `allocate` and
//! `deallocate` going through a wrapper function that is never inlined, so that callgrind's
//! inclusive cost of `call_cost::Counted::<A>::alloc_call` (and `free_call`) divided by its
//! call count is the allocator's mean cost per call on exactly the suite's requests.
//!
//! ```text
//! cargo build --release -p alloclab-harness --example call_cost
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/call_cost ALLOC [THREADS] [SCALE]
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'alloc_call|free_call'
//! ```
//!
//! Defaults: 2 threads, `tiny` scale. The wrapper adds a call and a return to each figure.
//! Without valgrind it just runs the workload (and prints nothing but the totals).

use core::alloc::Layout;
use core::ptr::NonNull;

use alloclab_core::{AllocError, Allocator, HostAllocator, Stats};
use alloclab_harness::peers::{HostHeapTask, with_host_heap};
use alloclab_harness::workloads::realtime::measure;
use alloclab_harness::workloads::{Params, Scale};

/// Forwards every call through a function of its own.
struct Counted<A: 'static>(&'static A);

impl<A: HostAllocator> Counted<A> {
    #[inline(never)]
    fn alloc_call(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.0.allocate(layout)
    }

    /// # Safety
    ///
    /// As [`Allocator::deallocate`].
    #[inline(never)]
    unsafe fn free_call(&self, h: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded with the caller's promise.
        unsafe { self.0.deallocate(h, layout) }
    }
}

impl<A: HostAllocator> Allocator for Counted<A> {
    type Handle = NonNull<u8>;
    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.alloc_call(layout)
    }
    unsafe fn deallocate(&self, h: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded with the caller's promise.
        unsafe { self.free_call(h, layout) }
    }
    fn name(&self) -> &str {
        self.0.name()
    }
    fn stats(&self) -> Stats {
        self.0.stats()
    }
}
impl<A: HostAllocator> HostAllocator for Counted<A> {}

struct Run(Params);

impl HostHeapTask for Run {
    type Output = ();
    fn run<A: HostAllocator>(self, alloc: &'static A) {
        let wrapped: &'static Counted<A> = Box::leak(Box::new(Counted(alloc)));
        let lat = measure(wrapped, &self.0);
        println!(
            "{}: {} allocations, {} frees ({} remote)",
            alloc.name(),
            lat.alloc.len(),
            lat.free.len(),
            lat.remote_free.len()
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else {
        eprintln!("usage: call_cost ALLOC [THREADS] [SCALE]");
        std::process::exit(2)
    };
    let threads = match args.next().map(|t| t.parse::<usize>()) {
        None => 2,
        Some(Ok(t)) if t > 0 => t,
        Some(_) => {
            eprintln!("error: THREADS must be a positive integer");
            std::process::exit(2)
        }
    };
    let scale = match args.next().map(|s| s.parse::<Scale>()) {
        None => Scale::Tiny,
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            eprintln!("error: {e}");
            std::process::exit(2)
        }
    };
    let params = Params {
        threads,
        scale,
        seed: 1,
    };
    if with_host_heap(&name, Run(params)).is_none() {
        eprintln!("error: no host heap named '{name}'");
        std::process::exit(2)
    }
}
