//! The `misuse` workload: each heap-misuse case in a forked child, classified by how the
//! child ended (see [`Verdict`]).

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use std::time::Duration;

use alloclab_core::HostAllocator;
use rand::Rng;

use super::analysis::Verdict;
use super::child::{self, DataPipe};
use crate::results::Sample;
use crate::workloads::cpu::common;

/// How long a misuse child may run before it counts as [`Verdict::Hung`].
pub const CASE_TIMEOUT: Duration = Duration::from_secs(2);
/// The byte written over metadata and neighbours.
const PATTERN: u8 = 0x41;
/// The large block of the large-block cases: above every heap's size classes and runs, so
/// that each heap serves it as it serves its largest blocks (its own mapping, in most).
const LARGE: usize = 4 << 20;
/// How many blocks a write-after-free case allocates after the write, all live at once
/// (16, 32, 48 and 64 bytes in turn, 2.5 MiB): a heap that checks freed memory when it
/// hands it out again, but places blocks at random, reaches the memory written within this
/// many (randomized did in 300 seeds of 300), as a program that goes on allocating would.
/// The smaller sizes matter: a random cut can leave the word written in a slack too small
/// for the freed block's own size.
const AFTER_FREE_ALLOCATIONS: usize = 65_536;
/// The byte a child writes to its data pipe once the bad access of an access case is done:
/// a child that died of a memory fault without writing it faulted at the access itself.
const ACCESS_DONE: u8 = b'A';

/// A misuse case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// `free(p); free(p)`.
    DoubleFreeImmediate,
    /// `free(p)`, 1000 other allocations and frees, `free(p)`.
    DoubleFreeDelayed,
    /// `free(p); free(q); free(p)`.
    DoubleFreeInterleaved,
    /// Free of the address of a stack array.
    InvalidFreeStack,
    /// Free of `p + 1`.
    InvalidFreeUnaligned,
    /// Free of `p + 16` inside a 256-byte block.
    InvalidFreeInterior,
    /// Free of a pointer into a page mapped with `mmap`.
    InvalidFreeMmap,
    /// Free of a pointer into a static array.
    InvalidFreeStatic,
    /// The 16 bytes before `p` overwritten, then `free(p)`.
    OverwriteHeader,
    /// An overflow from a block over everything up to 16 bytes into the block above it,
    /// then that block freed.
    OverwriteNeighbour,
    /// `free(p)`, then 8 bytes written into the middle of the freed 64-byte block, then
    /// 65 536 allocations of 16 to 64 bytes (some may be handed the memory written, or
    /// blocks carved from it).
    WriteAfterFree,
    /// `free(p)` of a 4 MiB block, then 8 bytes written 1 MiB into it.
    WriteAfterFreeLarge,
    /// One byte written just past the end of a 64-byte block, then the block freed.
    Overflow1,
    /// 32 bytes written just past the end of a 64-byte block, then the block freed.
    Overflow32,
    /// One byte written just before a 64-byte block, then the block freed.
    Underflow1,
    /// 32 bytes written just before a 64-byte block, then the block freed.
    Underflow32,
    /// `memcpy` of 96 bytes into a 64-byte block, then the block freed.
    OverflowMemcpy,
    /// A zero byte written just past the end of a 60-byte block (a string copy's
    /// terminator, one past a length that is not a multiple of 16), then the block freed.
    OverflowTerminator,
    /// A linear overflow of 1 MiB past the end of a 4 MiB block.
    OverflowLarge,
    /// One byte written through the pointer a zero-size request returned (`malloc(0)`),
    /// then the pointer freed.
    ZeroSizeWrite,
    /// One byte read through the pointer a zero-size request returned, then the pointer
    /// freed.
    ZeroSizeRead,
    /// A 64-byte block grown to 64 KiB (a larger block was allocated just after it, so
    /// that it moves), then 8 bytes written through the old pointer, then allocations of
    /// 16 to 64 bytes as after [`WriteAfterFree`](Self::WriteAfterFree).
    ReallocWriteAfterMove,
    /// A 96-byte block shrunk to 64 bytes by `realloc` (in place, as every heap here keeps
    /// a block that shrinks by a third), then one byte written just past its new end, then
    /// the block freed.
    ReallocOverflowAfterShrink,
}

impl Case {
    /// Every case, in report order.
    pub const ALL: [Case; 23] = [
        Self::DoubleFreeImmediate,
        Self::DoubleFreeDelayed,
        Self::DoubleFreeInterleaved,
        Self::InvalidFreeStack,
        Self::InvalidFreeUnaligned,
        Self::InvalidFreeInterior,
        Self::InvalidFreeMmap,
        Self::InvalidFreeStatic,
        Self::OverwriteHeader,
        Self::OverwriteNeighbour,
        Self::WriteAfterFree,
        Self::WriteAfterFreeLarge,
        Self::Overflow1,
        Self::Overflow32,
        Self::Underflow1,
        Self::Underflow32,
        Self::OverflowMemcpy,
        Self::OverflowTerminator,
        Self::OverflowLarge,
        Self::ZeroSizeWrite,
        Self::ZeroSizeRead,
        Self::ReallocWriteAfterMove,
        Self::ReallocOverflowAfterShrink,
    ];

    /// The metric name of the case.
    pub fn name(self) -> &'static str {
        match self {
            Self::DoubleFreeImmediate => "double_free_immediate",
            Self::DoubleFreeDelayed => "double_free_delayed",
            Self::DoubleFreeInterleaved => "double_free_interleaved",
            Self::InvalidFreeStack => "invalid_free_stack",
            Self::InvalidFreeUnaligned => "invalid_free_unaligned",
            Self::InvalidFreeInterior => "invalid_free_interior",
            Self::InvalidFreeMmap => "invalid_free_mmap",
            Self::InvalidFreeStatic => "invalid_free_static",
            Self::OverwriteHeader => "overwrite_header",
            Self::OverwriteNeighbour => "overwrite_neighbour",
            Self::WriteAfterFree => "write_after_free",
            Self::WriteAfterFreeLarge => "write_after_free_large",
            Self::Overflow1 => "overflow_1",
            Self::Overflow32 => "overflow_32",
            Self::Underflow1 => "underflow_1",
            Self::Underflow32 => "underflow_32",
            Self::OverflowMemcpy => "overflow_memcpy",
            Self::OverflowTerminator => "overflow_terminator",
            Self::OverflowLarge => "overflow_large",
            Self::ZeroSizeWrite => "zero_size_write",
            Self::ZeroSizeRead => "zero_size_read",
            Self::ReallocWriteAfterMove => "realloc_write_after_move",
            Self::ReallocOverflowAfterShrink => "realloc_overflow_after_shrink",
        }
    }

    /// Whether the misuse is a bad memory access (not a call): a heap that made the memory
    /// inaccessible stops it with a fault at the access, which counts as caught.
    pub fn is_access(self) -> bool {
        matches!(
            self,
            Self::WriteAfterFree
                | Self::WriteAfterFreeLarge
                | Self::Overflow1
                | Self::Overflow32
                | Self::Underflow1
                | Self::Underflow32
                | Self::OverflowMemcpy
                | Self::OverflowTerminator
                | Self::OverflowLarge
                | Self::ZeroSizeWrite
                | Self::ZeroSizeRead
                | Self::ReallocWriteAfterMove
                | Self::ReallocOverflowAfterShrink
        )
    }

    /// Looks a case up by metric name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// What one case did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The case.
    pub case: Case,
    /// How the child ended.
    pub verdict: Verdict,
    /// How it ended in a few words (`signal 6 (SIGABRT)`).
    pub ended: String,
    /// The first line the child wrote to stderr (the allocator's message, if any).
    pub evidence: String,
}

/// A 16-byte aligned static array no heap ever handed out.
#[repr(align(16))]
struct Foreign(UnsafeCell<[u8; 256]>);

// SAFETY: only a forked child touches the array, through a raw pointer, once.
unsafe impl Sync for Foreign {}

static FOREIGN: Foreign = Foreign(UnsafeCell::new([0; 256]));

/// Allocates `size` bytes. The pointer goes through `black_box`, here and before every
/// free: the compiler knows `malloc` and `free`, and would otherwise drop an allocation
/// that is only freed (or freed twice) and never used — and with it the measurement.
fn alloc_block<A: HostAllocator>(alloc: &A, size: usize) -> NonNull<u8> {
    let ptr = alloc
        .allocate(common::layout(size))
        .unwrap_or_else(|e| panic!("{e}"));
    core::hint::black_box(ptr)
}

/// Frees `ptr` as if it were a `size`-byte block: the misuse itself, in a child.
fn free_as<A: HostAllocator>(alloc: &A, ptr: *mut u8, size: usize) {
    let ptr = core::hint::black_box(NonNull::new(ptr).expect("misuse pointers are not null"));
    // SAFETY: none: this is the misuse the case is about, run in a disposable child that
    // is expected to crash or abort.
    unsafe { alloc.deallocate(ptr, common::layout(size)) };
}

/// Writes [`PATTERN`] over `len` bytes at `at`.
fn smear(at: *mut u8, len: usize) {
    // SAFETY: none in general: the case overwrites heap metadata on purpose, in a
    // disposable child; the bytes are next to live blocks and usually mapped, and a fault
    // is a verdict like any other.
    unsafe { at.write_bytes(PATTERN, len) };
}

/// Tells the parent that the bad access is done (see [`ACCESS_DONE`]).
fn access_done(pipe: &mut DataPipe) {
    // A pipe that cannot be written only costs the fault its attribution.
    let _ = pipe.write_all(&[ACCESS_DONE]);
}

/// A zero-size block, as C's `malloc(0)` gets one: the heap's zero-size layout, or one byte
/// where the heap refuses zero sizes (as their C layers ask for). Returns the block and the
/// size to free it with.
fn zero_size_block<A: HostAllocator>(alloc: &A) -> (NonNull<u8>, usize) {
    let zero = core::alloc::Layout::from_size_align(0, 1).expect("a valid layout");
    match alloc.allocate(zero) {
        Ok(p) => (core::hint::black_box(p), 0),
        Err(_) => (alloc_block(alloc, 1), 1),
    }
}

/// After a write through a dangling pointer: allocates [`AFTER_FREE_ALLOCATIONS`] blocks
/// of 16 to 64 bytes, all live at once, then frees them.
fn allocate_after_free<A: HostAllocator>(alloc: &A) {
    let size = |i: usize| 16 * (1 + i % 4);
    let again: Vec<NonNull<u8>> = (0..AFTER_FREE_ALLOCATIONS)
        .map(|i| alloc_block(alloc, size(i)))
        .collect();
    for (i, q) in again.into_iter().enumerate() {
        free_as(alloc, q.as_ptr(), size(i));
    }
}

/// Performs `case` on `alloc`, then a few ordinary allocations. An access case writes
/// [`ACCESS_DONE`] to `pipe` right after its bad access.
fn perform<A: HostAllocator>(alloc: &A, case: Case, seed: u64, pipe: &mut DataPipe) {
    const S: usize = 64;
    match case {
        Case::DoubleFreeImmediate => {
            let p = alloc_block(alloc, S);
            free_as(alloc, p.as_ptr(), S);
            free_as(alloc, p.as_ptr(), S);
        }
        Case::DoubleFreeDelayed => {
            let p = alloc_block(alloc, S);
            free_as(alloc, p.as_ptr(), S);
            let mut rng = common::rng(seed, 0xdf);
            let mut others: Vec<(NonNull<u8>, usize)> = Vec::with_capacity(500);
            for _ in 0..500 {
                let size = common::log_uniform_size(&mut rng, 16, 1024);
                others.push((alloc_block(alloc, size), size));
            }
            for (q, size) in others {
                free_as(alloc, q.as_ptr(), size);
            }
            free_as(alloc, p.as_ptr(), S);
        }
        Case::DoubleFreeInterleaved => {
            let p = alloc_block(alloc, S);
            let q = alloc_block(alloc, S);
            free_as(alloc, p.as_ptr(), S);
            free_as(alloc, q.as_ptr(), S);
            free_as(alloc, p.as_ptr(), S);
        }
        Case::InvalidFreeStack => {
            #[repr(align(16))]
            struct OnStack([u8; 256]);
            let mut local = OnStack([0; 256]);
            let p = core::hint::black_box(local.0.as_mut_ptr());
            free_as(alloc, p.wrapping_add(64), S);
            core::hint::black_box(&local);
        }
        Case::InvalidFreeUnaligned => {
            let p = alloc_block(alloc, S);
            free_as(alloc, p.as_ptr().wrapping_add(1), S);
        }
        Case::InvalidFreeInterior => {
            let p = alloc_block(alloc, 256);
            free_as(alloc, p.as_ptr().wrapping_add(16), 256);
        }
        Case::InvalidFreeMmap => {
            // SAFETY: an anonymous private mapping of two pages, no address hint.
            let page = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    8192,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(page, libc::MAP_FAILED, "mmap failed");
            free_as(alloc, page.cast::<u8>().wrapping_add(64), S);
        }
        Case::InvalidFreeStatic => {
            free_as(alloc, FOREIGN.0.get().cast::<u8>().wrapping_add(64), S);
        }
        Case::OverwriteHeader => {
            let _before = alloc_block(alloc, S);
            let p = alloc_block(alloc, S);
            smear(p.as_ptr().wrapping_sub(16), 16);
            free_as(alloc, p.as_ptr(), S);
        }
        Case::OverwriteNeighbour => {
            // Of a few blocks, the two closest in address order: the overflow runs from the
            // end of the lower one over whatever lies between to 16 bytes into the upper.
            let mut blocks: Vec<usize> = (0..8)
                .map(|_| alloc_block(alloc, S).as_ptr() as usize)
                .collect();
            blocks.sort_unstable();
            let (low, high) = blocks
                .windows(2)
                .map(|w| (w[0], w[1]))
                .min_by_key(|&(a, b)| b - (a + S))
                .expect("eight blocks");
            let end = (low + S) as *mut u8;
            let len = (high - (low + S)).min(4096) + 16;
            smear(end, len);
            free_as(alloc, high as *mut u8, S);
        }
        Case::WriteAfterFree => {
            let p = alloc_block(alloc, S);
            free_as(alloc, p.as_ptr(), S);
            smear(p.as_ptr().wrapping_add(S / 2), 8);
            access_done(pipe);
            allocate_after_free(alloc);
        }
        Case::WriteAfterFreeLarge => {
            let p = alloc_block(alloc, LARGE);
            free_as(alloc, p.as_ptr(), LARGE);
            smear(p.as_ptr().wrapping_add(1 << 20), 8);
            access_done(pipe);
        }
        Case::Overflow1 | Case::Overflow32 => {
            let p = alloc_block(alloc, S);
            let len = if case == Case::Overflow1 { 1 } else { 32 };
            smear(p.as_ptr().wrapping_add(S), len);
            access_done(pipe);
            free_as(alloc, p.as_ptr(), S);
        }
        Case::Underflow1 | Case::Underflow32 => {
            let p = alloc_block(alloc, S);
            let len = if case == Case::Underflow1 { 1 } else { 32 };
            smear(p.as_ptr().wrapping_sub(len), len);
            access_done(pipe);
            free_as(alloc, p.as_ptr(), S);
        }
        Case::OverflowMemcpy => {
            let p = alloc_block(alloc, S);
            let source = [PATTERN; S + 32];
            // SAFETY: none: 32 bytes past the block are overwritten on purpose, in a
            // disposable child.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    core::hint::black_box(source.as_ptr()),
                    p.as_ptr(),
                    source.len(),
                )
            };
            access_done(pipe);
            free_as(alloc, p.as_ptr(), S);
        }
        Case::OverflowTerminator => {
            const ODD: usize = 60;
            let p = alloc_block(alloc, ODD);
            // SAFETY: none: one byte past the block, on purpose.
            unsafe { core::ptr::write_volatile(p.as_ptr().add(ODD), 0) };
            access_done(pipe);
            free_as(alloc, p.as_ptr(), ODD);
        }
        Case::OverflowLarge => {
            let p = alloc_block(alloc, LARGE);
            smear(p.as_ptr().wrapping_add(LARGE), 1 << 20);
            access_done(pipe);
            free_as(alloc, p.as_ptr(), LARGE);
        }
        Case::ZeroSizeWrite | Case::ZeroSizeRead => {
            let (p, size) = zero_size_block(alloc);
            if case == Case::ZeroSizeWrite {
                // SAFETY: none: a write to a block of no bytes, on purpose.
                unsafe { core::ptr::write_volatile(p.as_ptr(), PATTERN) };
            } else {
                // SAFETY: none: a read of a block of no bytes, on purpose.
                core::hint::black_box(unsafe { core::ptr::read_volatile(p.as_ptr()) });
            }
            access_done(pipe);
            free_as(alloc, p.as_ptr(), size);
        }
        Case::ReallocWriteAfterMove => {
            const GROWN: usize = 64 << 10;
            let p = alloc_block(alloc, S);
            let after = alloc_block(alloc, 256);
            // SAFETY: `p` is a live block of `S` bytes; it is dead once moved.
            let q = unsafe { alloc.reallocate(p, common::layout(S), GROWN) }
                .unwrap_or_else(|e| panic!("{e}"));
            if q != p {
                smear(p.as_ptr().wrapping_add(S / 2), 8);
            }
            access_done(pipe);
            allocate_after_free(alloc);
            free_as(alloc, q.as_ptr(), GROWN);
            free_as(alloc, after.as_ptr(), 256);
        }
        Case::ReallocOverflowAfterShrink => {
            const BEFORE: usize = 96;
            let p = alloc_block(alloc, BEFORE);
            // SAFETY: `p` is a live block of `BEFORE` bytes.
            let q = unsafe { alloc.reallocate(p, common::layout(BEFORE), S) }
                .unwrap_or_else(|e| panic!("{e}"));
            smear(q.as_ptr().wrapping_add(S), 1);
            access_done(pipe);
            free_as(alloc, q.as_ptr(), S);
        }
    }
    // Carry on as a program would.
    let mut rng = common::rng(seed, 0xaf7e);
    let mut kept = Vec::with_capacity(16);
    for i in 0..16 {
        let size = if i % 2 == 0 {
            S
        } else {
            rng.random_range(16..=1024)
        };
        let p = alloc_block(alloc, size);
        // SAFETY: `p` is a live block of `size >= 16` bytes.
        unsafe { p.as_ptr().write_bytes(i as u8, size) };
        kept.push((p, size));
    }
    for (p, size) in kept.into_iter().step_by(2) {
        free_as(alloc, p.as_ptr(), size);
    }
}

/// Runs every case in its own forked child and classifies how each ended.
///
/// # Panics
///
/// If the process has more than one thread, or a child cannot be forked.
pub fn measure<A: HostAllocator>(alloc: &A, seed: u64) -> Vec<Outcome> {
    child::ensure_single_threaded("misuse");
    Case::ALL
        .into_iter()
        .map(|case| {
            // SAFETY: single-threaded (checked above); the child writes only to stderr.
            let ended = unsafe {
                child::run_child(CASE_TIMEOUT, true, |pipe| perform(alloc, case, seed, pipe))
            }
            .unwrap_or_else(|e| panic!("misuse case {}: cannot fork: {e}", case.name()));
            let mut verdict = Verdict::from_wait_status(ended.status, ended.timed_out);
            let mut how = ended.describe(CASE_TIMEOUT);
            if verdict == Verdict::Crashed && faulted_at_the_access(case, &ended) {
                verdict = Verdict::Caught;
                how.push_str(" at the bad access");
            }
            Outcome {
                case,
                verdict,
                ended: how,
                evidence: ended.first_stderr_line(),
            }
        })
        .collect()
}

/// Whether a child of an access case died of a memory fault at the bad access itself (it
/// never reported the access done): the heap made that memory inaccessible, which stops the
/// misuse on the spot, as an abort does.
fn faulted_at_the_access(case: Case, ended: &child::Ended) -> bool {
    fault_at_access(case, ended.status, ended.data.contains(&ACCESS_DONE))
}

/// Whether a run of `case` that ended with the wait status `status` died of a memory fault
/// at the bad access itself: an access case, `SIGSEGV` or `SIGBUS`, and the access not
/// reported done (`access_done` false).
pub(super) fn fault_at_access(case: Case, status: i32, access_done: bool) -> bool {
    let fault = libc::WIFSIGNALED(status)
        && [libc::SIGSEGV, libc::SIGBUS].contains(&libc::WTERMSIG(status));
    case.is_access() && fault && !access_done
}

/// The `misuse` workload's samples: one per case, the [`Verdict::score`] (1 caught, 0.5
/// crashed, 0.25 hung, 0 silent; higher is better), and `caught` (cases caught) and
/// `silent` (cases that went unnoticed). Each case's evidence goes to the worker's stderr.
pub fn misuse<A: HostAllocator>(alloc: &A, seed: u64) -> Vec<Sample> {
    samples("misuse", alloc.name(), &measure(alloc, seed))
}

/// The samples of a misuse workload (`workload`, on the heap `heap`) from its cases'
/// outcomes, as [`misuse`] describes them; each case's line goes to the worker's stderr.
pub(super) fn samples(workload: &str, heap: &str, outcomes: &[Outcome]) -> Vec<Sample> {
    let mut samples = Vec::new();
    for o in outcomes {
        eprintln!(
            "{workload}/{} on {heap}: {} ({}){}{}",
            o.case.name(),
            o.verdict,
            o.ended,
            if o.evidence.is_empty() { "" } else { ": " },
            o.evidence
        );
        samples.push(Sample {
            metric: o.case.name().to_owned(),
            unit: "score".to_owned(),
            value: o.verdict.score(),
            lower_is_better: false,
        });
    }
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count() as f64;
    samples.push(Sample {
        metric: "caught".to_owned(),
        unit: "cases".to_owned(),
        value: count(Verdict::Caught),
        lower_is_better: false,
    });
    samples.push(Sample {
        metric: "silent".to_owned(),
        unit: "cases".to_owned(),
        value: count(Verdict::Silent),
        lower_is_better: true,
    });
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(status: i32, data: &[u8]) -> child::Ended {
        child::Ended {
            status,
            timed_out: false,
            data: data.to_vec(),
            stderr: Vec::new(),
        }
    }

    #[test]
    fn only_a_fault_at_the_bad_access_of_an_access_case_counts_as_caught() {
        // A raw wait status of a signal death is the signal's number.
        let at_access = ended(libc::SIGSEGV, b"");
        let after_access = ended(libc::SIGSEGV, &[ACCESS_DONE]);
        assert!(faulted_at_the_access(Case::OverflowLarge, &at_access));
        assert!(faulted_at_the_access(
            Case::ZeroSizeRead,
            &ended(libc::SIGBUS, b"")
        ));
        assert!(!faulted_at_the_access(Case::OverflowLarge, &after_access));
        // A free that faults is a crash inside the allocator, not a guard.
        assert!(!faulted_at_the_access(Case::InvalidFreeStack, &at_access));
        // An abort is not a fault.
        assert!(!faulted_at_the_access(
            Case::Overflow1,
            &ended(libc::SIGABRT, b"")
        ));
    }

    #[test]
    fn every_case_has_a_unique_name_that_finds_it() {
        for case in Case::ALL {
            assert_eq!(Case::from_name(case.name()), Some(case));
        }
        let mut names: Vec<&str> = Case::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Case::ALL.len());
    }
}
