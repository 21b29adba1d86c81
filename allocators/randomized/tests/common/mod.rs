//! Helpers shared by the integration tests of `alloclab-randomized`: a small deterministic
//! generator, block patterns, a finder for blocks whose neighbours are both live, and a
//! harness that runs a misuse in a forked child and checks that it died of `SIGABRT` with
//! the expected message.

#![allow(dead_code)]

use core::alloc::Layout;
use core::ptr::NonNull;
use std::panic::AssertUnwindSafe;

use alloclab_randomized::Randomized;

/// Bytes per chunk of the heap (the crate's `CHUNK`; chunks are aligned to it).
pub const CHUNK: usize = 4 << 20;

/// A layout, unwrapped.
pub fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// The workspace's SplitMix64 (`alloclab_core::rng`) chooses the requests (the heap's own
/// randomness comes from its seed).
pub use alloclab_core::rng::SplitMix64 as Rng;

/// A size in `[lo, hi]`, log-uniformly distributed (as the harness's churn draws them).
pub fn log_uniform(rng: &mut Rng, lo: usize, hi: usize) -> usize {
    let u = rng.f64();
    let (a, b) = ((lo as f64).ln(), ((hi + 1) as f64).ln());
    ((a + u * (b - a)).exp() as usize).clamp(lo, hi)
}

/// Fills `len` bytes at `ptr` with `seed`.
pub fn fill(ptr: NonNull<u8>, len: usize, seed: u8) {
    // SAFETY: callers pass live blocks of at least `len` writable bytes.
    unsafe { ptr.as_ptr().write_bytes(seed, len) };
}

/// Asserts that the `len` bytes at `ptr` all equal `seed`.
pub fn expect_filled(ptr: NonNull<u8>, len: usize, seed: u8, what: &str) {
    // SAFETY: callers pass live blocks of at least `len` bytes that they filled.
    let bytes = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), len) };
    if let Some(i) = bytes.iter().position(|&b| b != seed) {
        panic!(
            "{what}: byte {i} of the block at {ptr:p} is {:#x}, expected {seed:#x}",
            bytes[i]
        );
    }
}

/// Among `blocks` (live blocks of `heap` of one size), a block whose left and right
/// neighbours in memory are both in `blocks`: `(p, left, right)` as indices. Neighbours
/// lie one stride apart, with no room for another block between: in a chunk of blocks the
/// stride is the usable size plus the next header's 16 bytes, in a slab the slot. Freeing
/// such a block coalesces with nothing (in a chunk of blocks, its header stays a valid
/// free-block header), so a second free of it must say "double free".
pub fn sandwiched(heap: &Randomized, blocks: &[NonNull<u8>]) -> Option<(usize, usize, usize)> {
    let usable: Vec<usize> = blocks
        .iter()
        .map(|p| heap.check_pointer(p.as_ptr()).expect("a live block"))
        .collect();
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_unstable_by_key(|&i| blocks[i].as_ptr() as usize);
    let at = |i: usize| blocks[i].as_ptr() as usize;
    order.windows(3).find_map(|w| {
        let (left, p, right) = (w[0], w[1], w[2]);
        let stride = at(p) - at(left);
        // A chunk's blocks: the header between; a slab's slots (requests under 1 KiB): up
        // to a slot's slack (128 bytes at most).
        let gap = stride.checked_sub(usable[left])?;
        let tight = gap == 16 || (usable[left] < 1024 && gap <= 128);
        (tight && at(right) - at(p) == stride).then_some((p, left, right))
    })
}

/// Allocates `count` blocks of `size` bytes (filled) until one of them has live blocks on
/// both sides; returns the blocks and the indices of [`sandwiched`].
pub fn blocks_with_a_sandwich(
    heap: &Randomized,
    size: usize,
    count: usize,
) -> (Vec<NonNull<u8>>, (usize, usize, usize)) {
    aligned_blocks_with_a_sandwich(heap, size, 16, count)
}

/// [`blocks_with_a_sandwich`] at alignment `align` (above 16: blocks with headers, in
/// chunks of blocks, whatever their size).
pub fn aligned_blocks_with_a_sandwich(
    heap: &Randomized,
    size: usize,
    align: usize,
    count: usize,
) -> (Vec<NonNull<u8>>, (usize, usize, usize)) {
    use alloclab_core::Allocator;
    let blocks: Vec<NonNull<u8>> = (0..count)
        .map(|i| {
            let p = heap.allocate(layout(size, align)).unwrap();
            fill(p, size, i as u8 | 1);
            p
        })
        .collect();
    let found = sandwiched(heap, &blocks).unwrap_or_else(|| {
        panic!("no {size}-byte block among {count} has live blocks on both sides")
    });
    (blocks, found)
}

/// Exit status of a child whose misuse returned (was not caught).
const SURVIVED: i32 = 0;
/// Exit status of a child whose misuse panicked.
const PANICKED: i32 = 101;

/// Runs `misuse` in a forked child whose standard error goes to a pipe, and asserts that
/// the child died of `SIGABRT` having written one of `expected` (and the heap's prefix);
/// returns what it wrote.
///
/// The test binary is multi-threaded (tests run on threads), so the child, a copy of this
/// thread alone, does only the misuse on heaps this test built (no other thread holds
/// their locks), with no allocation from the process's allocator on the expected path,
/// then `_exit`s if it is still alive. A child that survives (or panics, or hangs for 20 s
/// and dies of `SIGALRM`) fails the test with a message saying so.
pub fn expect_abort(expected: &[&str], misuse: impl FnOnce()) -> String {
    let (status, stderr) = run_misuse(misuse);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT,
        "the child died of signal {} instead of SIGABRT ({}); its stderr: {stderr:?}",
        libc::WTERMSIG(status),
        libc::SIGABRT
    );
    assert!(
        stderr.contains("alloclab-randomized: "),
        "the abort message lacks the heap's prefix: {stderr:?}"
    );
    assert!(
        expected.iter().any(|m| stderr.contains(m)),
        "the child aborted, but its message {stderr:?} contains none of {expected:?}"
    );
    stderr
}

/// Runs `misuse` as [`expect_abort`] does, and asserts that the child died of a memory
/// fault (`SIGSEGV` or `SIGBUS`): an access the heap made impossible.
pub fn expect_fault(misuse: impl FnOnce()) {
    let (status, stderr) = run_misuse(misuse);
    assert!(
        libc::WIFSIGNALED(status)
            && [libc::SIGSEGV, libc::SIGBUS].contains(&libc::WTERMSIG(status)),
        "the child did not fault (signal {}); its stderr: {stderr:?}",
        libc::WTERMSIG(status),
    );
}

/// Runs `misuse` in a forked child (see [`expect_abort`]); panics if it exits, else returns
/// its wait status and standard error.
fn run_misuse(misuse: impl FnOnce()) -> (i32, String) {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe failed");
    let (read_end, write_end) = (fds[0], fds[1]);
    // SAFETY: the child only uses async-signal-safe calls and memory it inherited, then
    // leaves with `_exit` (no destructors, no atexit handlers, no flushing of shared state).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: plain system calls on descriptors and limits this process owns.
        unsafe {
            libc::close(read_end);
            libc::dup2(write_end, 2);
            libc::close(write_end);
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::alarm(20);
        }
        let survived = std::panic::catch_unwind(AssertUnwindSafe(misuse)).is_ok();
        // SAFETY: ends the child without running anything of the parent's.
        unsafe { libc::_exit(if survived { SURVIVED } else { PANICKED }) }
    }
    // SAFETY: the parent's copy of the write end; the child has its own.
    unsafe { libc::close(write_end) };
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        // SAFETY: `buf` is a writable buffer of its length.
        let n = unsafe { libc::read(read_end, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            out.extend_from_slice(&buf[..n as usize]);
        } else if n == 0
            || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            break;
        }
    }
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(read_end) };
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        assert_eq!(
            std::io::Error::last_os_error().kind(),
            std::io::ErrorKind::Interrupted,
            "waitpid failed"
        );
    }
    let stderr = String::from_utf8_lossy(&out).into_owned();
    if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        let how = match code {
            SURVIVED => "survived the misuse (it was not caught)",
            PANICKED => "panicked instead of aborting",
            _ => "exited",
        };
        panic!("the child {how}: exit status {code}; its stderr: {stderr:?}");
    }
    (status, stderr)
}

/// A page of anonymous memory that no heap handed out, unmapped on drop: the "foreign
/// pointer" of the misuse and `check_pointer` tests.
pub struct ForeignPage(*mut u8);

impl ForeignPage {
    /// Bytes in the page.
    pub const LEN: usize = 4096;

    /// Maps a fresh page.
    pub fn new() -> Self {
        // SAFETY: a fresh anonymous private mapping touches no existing memory.
        let page = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED, "mmap failed");
        Self(page.cast())
    }

    /// The page's first byte.
    pub fn start(&self) -> *mut u8 {
        self.0
    }
}

impl Drop for ForeignPage {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once, here.
        unsafe { libc::munmap(self.0.cast(), Self::LEN) };
    }
}
