//! The in-process side of `alloclab percall`: the same rounds as the C++ driver's, in Rust
//! through alloclab's allocator trait, run in a fresh process of the harness (the hidden
//! `__percall` subcommand), with timed functions a profiler can collect inside.

use super::*;

use crate::peers::{MallocHeapTask, with_malloc_heap};

/// Whether the host heap `name` implements [`MallocHeap`].
pub fn is_malloc_heap(name: &str) -> bool {
    struct Probe;
    impl MallocHeapTask for Probe {
        type Output = ();
        fn run<A: MallocHeap>(self, _: &'static A) {}
    }
    with_malloc_heap(name, Probe).is_some()
}

/// The pointer a failed allocation leaves in its slot.
fn or_null(result: Result<NonNull<u8>, alloclab_core::AllocError>) -> *mut u8 {
    result.map_or(ptr::null_mut(), NonNull::as_ptr)
}

/// Makes a warm-up twin's code differ from its timed function's: LLVM merges identical
/// functions into one symbol, which callgrind would then see under one of the two names.
#[inline(always)]
fn warm_marker() {
    black_box(0u8);
}

/// Defines each measured batch twice, with one body: `percall_timed_<op>`, which the timed
/// rounds call and callgrind collects inside, and `percall_warm_<op>`, which the untimed
/// warm-up round calls.
macro_rules! batches {
    ($(
        $(#[$doc:meta])*
        fn $timed:ident / $warm:ident <$A:ident: $Bound:ident>
            ($heap:ident, $p:ident, $layout:ident, $new_size:ident) $body:block
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// `p` holds what the op's setup in [`measure_host`] leaves there: blocks of `heap`
        /// allocated with `layout` where the op frees, resizes or sizes them.
        #[inline(never)]
        unsafe fn $timed<$A: $Bound>($heap: &$A, $p: &mut [*mut u8], $layout: Layout, $new_size: usize)
            $body

        /// The warm-up round's twin of the function of the same op, with the same body.
        ///
        /// # Safety
        ///
        /// As for the timed function.
        #[inline(never)]
        unsafe fn $warm<$A: $Bound>($heap: &$A, $p: &mut [*mut u8], $layout: Layout, $new_size: usize) {
            warm_marker();
            $body
        }
    )*};
}

batches! {
    /// `allocate` into every slot.
    fn percall_timed_malloc / percall_warm_malloc<A: HostAllocator>(heap, p, layout, _n) {
        for slot in p.iter_mut() {
            *slot = or_null(heap.allocate(layout));
        }
    }
    /// `deallocate` of every block, with its layout.
    fn percall_timed_free_sized / percall_warm_free_sized<A: HostAllocator>(heap, p, layout, _n) {
        for &block in p.iter() {
            // SAFETY: the caller guarantees every block is a live block of `heap` allocated
            // with `layout`; each is freed once and never used again.
            unsafe { heap.deallocate(NonNull::new_unchecked(block), layout) };
        }
    }
    /// `deallocate_unsized` of every block.
    fn percall_timed_free_unsized / percall_warm_free_unsized<A: MallocHeap>(heap, p, _l, _n) {
        for &block in p.iter() {
            // SAFETY: as for the sized free; this one does not need the layout.
            unsafe { heap.deallocate_unsized(NonNull::new_unchecked(block)) };
        }
    }
    /// `allocate_zeroed` into every slot.
    fn percall_timed_calloc / percall_warm_calloc<A: HostAllocator>(heap, p, layout, _n) {
        for slot in p.iter_mut() {
            *slot = or_null(heap.allocate_zeroed(layout));
        }
    }
    /// `reallocate` of every block to `new_size` (a failure leaves the slot null and the
    /// block live, which the caller sees in the batch it kept).
    fn percall_timed_realloc / percall_warm_realloc<A: HostAllocator>(heap, p, layout, new_size) {
        for slot in p.iter_mut() {
            // SAFETY: the caller guarantees the block is a live block of `heap` allocated
            // with `layout`; on success it is dead and the slot holds the new one.
            *slot = or_null(unsafe {
                heap.reallocate(NonNull::new_unchecked(*slot), layout, new_size)
            });
        }
    }
    /// `usable_size` of every block.
    fn percall_timed_usable_size / percall_warm_usable_size<A: MallocHeap>(heap, p, _l, _n) {
        for &block in p.iter() {
            // SAFETY: the caller guarantees every block is a live block of `heap`.
            black_box(unsafe { heap.usable_size(NonNull::new_unchecked(block)) });
        }
    }
}

/// A measured batch and its warm-up twin, as [`batches!`] defines them.
type BatchFn<A> = unsafe fn(&A, &mut [*mut u8], Layout, usize);

/// The batch [`rounds`] calls: `timed` in the timed rounds, its twin `warm` in the warm-up.
///
/// # Safety
///
/// The slots [`rounds`] hands the closure hold what `timed` and `warm` require (the op's
/// [`Shape`] sees to it).
unsafe fn batch<'h, A>(
    timed: BatchFn<A>,
    warm: BatchFn<A>,
    heap: &'h A,
    layout: Layout,
    new_size: usize,
) -> impl FnMut(&mut [*mut u8], bool) + 'h {
    move |p, is_timed| {
        let f = if is_timed { timed } else { warm };
        // SAFETY: per this function's contract.
        unsafe { f(heap, p, layout, new_size) }
    }
}

/// The floor's callee: nothing, behind an optimisation barrier.
#[inline(never)]
fn percall_empty(size: usize) -> *mut u8 {
    ptr::without_provenance_mut(black_box(size))
}

/// The floor: the loop of the measured batches with an empty call in place of the heap's.
#[inline(never)]
fn percall_timed_floor(p: &mut [*mut u8], size: usize) {
    for slot in p.iter_mut() {
        *slot = percall_empty(size);
    }
}

/// The floor's warm-up twin.
#[inline(never)]
fn percall_warm_floor(p: &mut [*mut u8], size: usize) {
    warm_marker();
    for slot in p.iter_mut() {
        *slot = percall_empty(size);
    }
}

/// How a round makes its blocks before the measured batch and frees them after.
#[derive(Clone, Copy)]
struct Shape {
    /// Whether the setup allocates the batch (else it is empty).
    setup: bool,
    /// Whether the batch's results are blocks, to check for failure and free afterwards.
    allocates: bool,
    /// Whether what is left is freed afterwards.
    teardown: bool,
    /// Whether the batch resizes blocks (and may move them).
    resizes: bool,
}

/// Runs the rounds: one untimed, then timed ones until `iterations` calls are done.
/// `batch(p, timed)` runs the measured batch over `p`; `alloc` makes one block of the setup,
/// and `free` is given, once each, the blocks left after the batch (where the shape has a
/// teardown). Returns the nanoseconds of the timed batches and how many blocks they moved.
/// A failed allocation ends the measurement with an error, its blocks left to the process's
/// exit (the worker is a process of its own).
fn rounds(
    op: &str,
    size: usize,
    iterations: u64,
    shape: Shape,
    mut alloc: impl FnMut() -> *mut u8,
    mut free: impl FnMut(*mut u8),
    mut batch: impl FnMut(&mut [*mut u8], bool),
) -> Result<(u64, u64), String> {
    let n_max = iterations.min(driver::BATCH) as usize;
    let mut p = vec![ptr::null_mut::<u8>(); n_max];
    let mut given = vec![ptr::null_mut::<u8>(); n_max];
    let failed = || format!("in-process {op} of {size} bytes failed");
    let mut one = |n: usize, timed: bool, moved: &mut u64| -> Result<u64, String> {
        let p = &mut p[..n];
        if shape.setup {
            for slot in p.iter_mut() {
                *slot = alloc();
                if slot.is_null() {
                    return Err(failed());
                }
            }
        }
        given[..n].copy_from_slice(p);
        let ns = if timed {
            let t0 = Instant::now();
            batch(p, true);
            t0.elapsed().as_nanos() as u64
        } else {
            batch(p, false);
            0
        };
        if shape.allocates && p.iter().any(|b| b.is_null()) {
            return Err(failed());
        }
        if shape.resizes {
            *moved += p.iter().zip(&given[..n]).filter(|(a, b)| a != b).count() as u64;
        }
        if shape.teardown {
            for &block in p.iter() {
                free(block);
            }
        }
        Ok(ns)
    };
    let mut moved = 0;
    one(n_max, false, &mut moved)?;
    moved = 0;
    let mut ns_total = 0;
    let mut left = iterations;
    while left > 0 {
        let n = left.min(n_max as u64) as usize;
        ns_total += one(n, true, &mut moved)?;
        left -= n as u64;
    }
    Ok((ns_total, moved))
}

/// The layout `malloc(size)` amounts to.
fn malloc_layout(size: usize) -> Result<Layout, String> {
    Layout::from_size_align(size, malloc_align(size)).map_err(|e| format!("size {size}: {e}"))
}

/// Measures `op` (any but the two [`MallocHeap`] ones and the floor) on `heap`.
fn measure_host<A: HostAllocator>(
    heap: &A,
    op: InProcessOp,
    size: usize,
    iterations: u64,
) -> Result<PercallOutput, String> {
    let layout = malloc_layout(size)?;
    let aligned = Layout::from_size_align(size, driver::ALIGNMENT)
        .map_err(|e| format!("size {size}: {e}"))?;
    let alloc = |l: Layout| move || or_null(heap.allocate(l));
    let free = |l: Layout| {
        move |b: *mut u8| {
            // SAFETY: `rounds` hands each `free` below every block the setup or the batch
            // made with that layout, once, after the batch is done with it.
            unsafe { heap.deallocate(NonNull::new_unchecked(b), l) };
        }
    };
    let alloc_only = Shape {
        setup: false,
        allocates: true,
        teardown: true,
        resizes: false,
    };
    // The ops that allocate into every slot and free what they made after the batch.
    let allocating = |l: Layout, timed: BatchFn<A>, warm: BatchFn<A>| {
        rounds(
            op.name(),
            size,
            iterations,
            alloc_only,
            alloc(l),
            free(l),
            // SAFETY: an allocating batch reads nothing from the slots.
            unsafe { batch(timed, warm, heap, l, 0) },
        )
    };
    let (ns_total, moved) = match op {
        InProcessOp::Malloc => allocating(layout, percall_timed_malloc, percall_warm_malloc)?,
        InProcessOp::Calloc => allocating(layout, percall_timed_calloc, percall_warm_calloc)?,
        InProcessOp::PosixMemalign => {
            allocating(aligned, percall_timed_malloc, percall_warm_malloc)?
        }
        InProcessOp::FreeSized => rounds(
            op.name(),
            size,
            iterations,
            Shape {
                setup: true,
                allocates: false,
                teardown: false,
                resizes: false,
            },
            alloc(layout),
            |_| {},
            // SAFETY: the setup filled every slot with a block of `layout`.
            unsafe {
                batch(
                    percall_timed_free_sized,
                    percall_warm_free_sized,
                    heap,
                    layout,
                    0,
                )
            },
        )?,
        InProcessOp::ReallocSame | InProcessOp::ReallocGrow => {
            let new_size = if op == InProcessOp::ReallocSame {
                driver::realloc_same_size(size)
            } else {
                driver::realloc_grow_size(size)
            };
            let resized = Layout::from_size_align(new_size, layout.align())
                .map_err(|e| format!("size {new_size}: {e}"))?;
            rounds(
                op.name(),
                new_size,
                iterations,
                Shape {
                    setup: true,
                    allocates: true,
                    teardown: true,
                    resizes: true,
                },
                alloc(layout),
                free(resized),
                // SAFETY: the setup filled every slot with a block of `layout`.
                unsafe {
                    batch(
                        percall_timed_realloc,
                        percall_warm_realloc,
                        heap,
                        layout,
                        new_size,
                    )
                },
            )?
        }
        InProcessOp::FreeUnsized | InProcessOp::UsableSize | InProcessOp::Floor => {
            return Err(format!("{} is not a host heap op", op.name()));
        }
    };
    Ok(PercallOutput {
        op: op.name().to_owned(),
        size: size as u64,
        calls: iterations,
        ns_total,
        moved: matches!(op, InProcessOp::ReallocSame | InProcessOp::ReallocGrow).then_some(moved),
    })
}

/// Measures one of the two [`MallocHeap`] ops on `heap`, or any other op as
/// [`measure_host`] does.
fn measure_malloc_heap<A: MallocHeap>(
    heap: &A,
    op: InProcessOp,
    size: usize,
    iterations: u64,
) -> Result<PercallOutput, String> {
    let layout = malloc_layout(size)?;
    let alloc = || or_null(heap.allocate(layout));
    let (ns_total, _) = match op {
        InProcessOp::FreeUnsized => rounds(
            op.name(),
            size,
            iterations,
            Shape {
                setup: true,
                allocates: false,
                teardown: false,
                resizes: false,
            },
            alloc,
            |_| {},
            // SAFETY: the setup filled every slot with a live block of `heap`.
            unsafe {
                batch(
                    percall_timed_free_unsized,
                    percall_warm_free_unsized,
                    heap,
                    layout,
                    0,
                )
            },
        )?,
        InProcessOp::UsableSize => rounds(
            op.name(),
            size,
            iterations,
            Shape {
                setup: true,
                allocates: false,
                teardown: true,
                resizes: false,
            },
            alloc,
            // SAFETY: `rounds` hands over each block the setup made, once, after the batch.
            |b| unsafe { heap.deallocate(NonNull::new_unchecked(b), layout) },
            // SAFETY: the setup filled every slot with a live block of `heap`.
            unsafe {
                batch(
                    percall_timed_usable_size,
                    percall_warm_usable_size,
                    heap,
                    layout,
                    0,
                )
            },
        )?,
        _ => return measure_host(heap, op, size, iterations),
    };
    Ok(PercallOutput {
        op: op.name().to_owned(),
        size: size as u64,
        calls: iterations,
        ns_total,
        moved: None,
    })
}

/// Measures the floor.
fn measure_floor(size: usize, iterations: u64) -> Result<PercallOutput, String> {
    let (ns_total, _) = rounds(
        driver::FLOOR,
        size,
        iterations,
        Shape {
            setup: false,
            allocates: false,
            teardown: false,
            resizes: false,
        },
        ptr::null_mut,
        |_| {},
        |p, timed| {
            if timed {
                percall_timed_floor(p, size)
            } else {
                percall_warm_floor(p, size)
            }
        },
    )?;
    Ok(PercallOutput {
        op: driver::FLOOR.to_owned(),
        size: size as u64,
        calls: iterations,
        ns_total,
        moved: None,
    })
}

struct HostTask {
    op: InProcessOp,
    size: usize,
    iterations: u64,
}

impl HostHeapTask for HostTask {
    type Output = Result<PercallOutput, String>;
    fn run<A: HostAllocator>(self, heap: &'static A) -> Self::Output {
        measure_host(heap, self.op, self.size, self.iterations)
    }
}

impl MallocHeapTask for HostTask {
    type Output = Result<PercallOutput, String>;
    fn run<A: MallocHeap>(self, heap: &'static A) -> Self::Output {
        measure_malloc_heap(heap, self.op, self.size, self.iterations)
    }
}

/// Measures `op` (an [`InProcessOp`] name) on the host heap `allocator` in this process.
///
/// # Errors
///
/// An unknown heap or op, an op the heap has not (the size lookups on a heap that is not a
/// [`MallocHeap`]), a bad size or count, a failed allocation.
pub fn measure_in_process(
    allocator: &str,
    op: &str,
    size: usize,
    iterations: u64,
) -> Result<PercallOutput, String> {
    let op = InProcessOp::from_name(op).ok_or_else(|| {
        let known: Vec<&str> = InProcessOp::ALL.iter().map(|o| o.name()).collect();
        format!("unknown in-process op '{op}' (known: {})", known.join(", "))
    })?;
    parse_size(&size.to_string())?;
    parse_iterations(&iterations.to_string())?;
    if op == InProcessOp::Floor {
        return measure_floor(size, iterations);
    }
    let task = HostTask {
        op,
        size,
        iterations,
    };
    let out = if op.needs_malloc_heap() {
        with_malloc_heap(allocator, task)
    } else {
        peers::with_host_heap(allocator, task)
    };
    out.ok_or_else(|| {
        if peers::find(allocator).is_some_and(|a| a.fits(Capability::HostHeap)) {
            format!("{allocator}: {NOT_MALLOC_HEAP}")
        } else {
            format!("'{allocator}' is not a heap alloclab runs in-process")
        }
    })?
}

/// The hidden `__percall` subcommand: one in-process measurement, its line on standard
/// output.
///
/// # Errors
///
/// As [`measure_in_process`].
pub fn worker(allocator: &str, op: &str, size: usize, iterations: u64) -> Result<(), String> {
    let out = measure_in_process(allocator, op, size, iterations)?;
    println!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timed_functions_carry_the_names_callgrind_is_told() {
        type H = alloclab_core::SystemHeap;
        type W = alloclab_wfspan::WfSpan;
        let names = [
            std::any::type_name_of_val(&percall_timed_malloc::<H>),
            std::any::type_name_of_val(&percall_timed_free_sized::<H>),
            std::any::type_name_of_val(&percall_timed_free_unsized::<W>),
            std::any::type_name_of_val(&percall_timed_calloc::<H>),
            std::any::type_name_of_val(&percall_timed_realloc::<H>),
            std::any::type_name_of_val(&percall_timed_usable_size::<W>),
            std::any::type_name_of_val(&percall_timed_floor),
        ];
        for op in InProcessOp::ALL {
            let job = Job::InProcess {
                op,
                heap: "system".into(),
            };
            let pattern = job.collect_pattern();
            let inner = pattern.trim_matches('*');
            let matching: Vec<&&str> = names.iter().filter(|n| n.contains(inner)).collect();
            assert_eq!(matching.len(), 1, "{pattern} matches {matching:?}");
            // The warm-up twins never match.
            assert!(!inner.contains("warm"));
        }
        let driver_job = Job::Driver {
            op: "new",
            preload: None,
            heap: "system".into(),
        };
        assert_eq!(driver_job.collect_pattern(), "percall_timed_new");
    }
}
