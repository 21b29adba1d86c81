//! What the allocator asks of the operating system: address space, page release, entropy,
//! and a way to die loudly.
//!
//! Nothing here allocates, so every function may run inside `malloc`.

use alloclab_core::errno::Preserved;
use core::ptr::{self, NonNull};

/// Maps `len` bytes of fresh, zeroed, read-write memory aligned to `align` (a power of two,
/// at least the page size). `None` if the OS refuses.
///
/// The mapping is over-reserved by `align` and trimmed on both sides, so the returned range
/// is exactly `len` bytes that [`unmap`] can return as a whole.
pub(crate) fn map_aligned(len: usize, align: usize) -> Option<NonNull<u8>> {
    debug_assert!(align.is_power_of_two() && len.is_multiple_of(page_size()));
    let reserve = len.checked_add(align)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
    // existing memory.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            reserve,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(align);
    let head = aligned - start;
    let tail = reserve - head - len;
    // SAFETY: both ranges lie inside the mapping just made and outside the part kept.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    NonNull::new(aligned as *mut u8)
}

/// Returns a mapping made by [`map_aligned`] to the OS. `errno` is left as it was (a free
/// calls this, and C's `free` keeps `errno`).
///
/// # Safety
///
/// `base` and `len` are exactly a live mapping of [`map_aligned`]; nothing uses it after.
pub(crate) unsafe fn unmap(base: NonNull<u8>, len: usize) {
    let _errno = Preserved::new();
    // SAFETY: forwarded from the caller.
    unsafe { libc::munmap(base.as_ptr().cast(), len) };
}

/// Makes `[start, start + len)` inaccessible (a guard); whether the OS agreed.
///
/// # Safety
///
/// The range is whole pages of a mapping of [`map_aligned`] that hold nothing anyone uses.
pub(crate) unsafe fn protect_none(start: usize, len: usize) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { libc::mprotect(start as *mut libc::c_void, len, libc::PROT_NONE) == 0 }
}

/// Gives the whole pages of `[start, end)` back to the OS: they stay mapped and read as
/// zero when next touched. Pages only partly inside the range are kept. Returns the pages
/// given back (empty if none). `errno` is left as it was (a free calls this).
///
/// # Safety
///
/// The range lies in a mapping of [`map_aligned`] and holds nothing the caller needs.
pub(crate) unsafe fn release_pages(start: usize, end: usize) -> core::ops::Range<usize> {
    let page = page_size();
    let first = start.next_multiple_of(page);
    let last = end & !(page - 1);
    if last <= first {
        return 0..0;
    }
    let _errno = Preserved::new();
    // SAFETY: forwarded from the caller; MADV_DONTNEED on private anonymous memory only
    // discards contents.
    unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_DONTNEED,
        )
    };
    first..last
}

/// The page size (4 KiB on the machines this targets; asked of the OS once).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096)
}

/// 32 bytes from the OS's entropy source (the `getrandom` system call; it does not
/// allocate). Aborts if the OS has none to give: a randomized allocator that silently ran on
/// a predictable seed would be worse than none.
pub(crate) fn entropy() -> [u8; 32] {
    let mut seed = [0u8; 32];
    if getrandom::fill(&mut seed).is_err() {
        fatal("cannot read the OS entropy source (getrandom failed)", 0);
    }
    seed
}

/// Writes `alloclab-randomized: <message> (pointer 0x<address>)` to standard error and
/// aborts the process, as glibc does when it finds its heap corrupted: after a double free
/// or a corrupted header, going on would hand the attacker the heap.
///
/// Uses only `write(2)` and `abort(3)`, so it is safe with the heap lock held and in a
/// half-updated heap.
#[cold]
pub(crate) fn fatal(message: &str, address: usize) -> ! {
    say(message, "", address);
    // SAFETY: aborting touches no heap.
    unsafe { libc::abort() }
}

/// Writes `alloclab-randomized: <message>` to standard error and goes on.
#[cold]
pub(crate) fn warn(message: &str) {
    say(message, "", 0);
}

/// Writes `alloclab-randomized: <message><detail>` to standard error and goes on.
#[cold]
pub(crate) fn warn_with(message: &str, detail: &str) {
    say(message, detail, 0);
}

/// One line to standard error, built on the stack and written with one `write(2)`.
fn say(message: &str, detail: &str, address: usize) {
    let mut line = [0u8; 256];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        let n = bytes.len().min(line.len() - 1 - len);
        line[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    push(b"alloclab-randomized: ");
    push(message.as_bytes());
    push(detail.as_bytes());
    if address != 0 {
        push(b" (pointer 0x");
        let mut hex = [0u8; 16];
        for (i, digit) in hex.iter_mut().enumerate() {
            let nibble = (address >> (60 - 4 * i)) & 0xf;
            *digit = b"0123456789abcdef"[nibble];
        }
        let first = hex.iter().position(|&d| d != b'0').unwrap_or(15);
        push(&hex[first..]);
        push(b")");
    }
    line[len] = b'\n';
    len += 1;
    // SAFETY: writing a local buffer to fd 2 touches no heap.
    unsafe { libc::write(2, line.as_ptr().cast(), len) };
}
