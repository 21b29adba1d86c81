//! The C++ allocation functions (`operator new` and `operator delete`, every form) over any
//! [`MallocHeap`], for preload libraries.
//!
//! A C++ program allocates through `operator new`. libstdc++'s calls `malloc`, so a preload
//! library that exported only the C functions would still serve C++ programs, but through
//! one more call, and with every sized delete thrown away; mimalloc's and jemalloc's
//! libraries export the C++ functions themselves, and so does
//! [`export_malloc_api!`](crate::export_malloc_api), through these bodies.
//!
//! What each form does (the C++17 rules, [new.delete]):
//!
//! * **Throwing forms** (`new(size)`, `new[](size)`, `new(size, align_val_t)`, ...) try the
//!   heap; on failure they call the installed `std::new_handler` and try again, and with no
//!   handler throw `std::bad_alloc`. The exception is libstdc++'s own, thrown by its
//!   `std::__throw_bad_alloc()`, looked up in the process when first needed; it unwinds out
//!   of the exported function into the program's `catch`. On x86_64 that function and its
//!   loop are assembly ([`new_loop`]), so that no Rust frame is live while the handler runs
//!   or the exception passes, whatever the panic strategy the library is built with;
//!   elsewhere they are Rust (`extern "C-unwind"`, which needs unwinding panics). In a
//!   process without libstdc++ nothing can catch a C++ exception, and the failure aborts
//!   with a one-line message instead.
//! * **`nothrow` forms** return null on failure. They do not call the new handler (a
//!   handler may throw, and a `nothrow` form must not): a program that relies on its
//!   handler to free memory for a `nothrow` allocation sees null one handler call early.
//! * **Alignment.** The plain forms align to [`MALLOC_ALIGNMENT`](crate::MALLOC_ALIGNMENT) (16 bytes,
//!   `__STDCPP_DEFAULT_NEW_ALIGNMENT__` on x86_64 and aarch64); the `align_val_t` forms to
//!   what they are given (at least 16). Zero sizes get unique pointers.
//! * **Array or not.** The array forms (`new[]`, `delete[]`) tell the heap so
//!   ([`AllocKind`], through [`MallocHeap::allocate_as`] and [`MallocHeap::deallocate_as`]):
//!   a heap that records it may refuse a `delete` of a block from `new[]` (randomized does),
//!   one that does not frees it as any other.
//! * **Delete.** Every form frees the block whatever the size and alignment it is told;
//!   the sized forms pass the size on, which a heap may use as a hint (wfspan checks its
//!   active span by address with it), check (randomized refuses a size the block was not
//!   allocated with), and must not trust. Deleting null does nothing.

use core::ffi::{CStr, c_void};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicUsize, Ordering};

pub use alloclab_core::AllocKind;
use alloclab_core::MallocHeap;

use crate::api::{allocate_as, try_aligned_fast};

/// A throwing `operator new` (`kind` [`AllocKind::New`]) or `operator new[]`
/// ([`AllocKind::NewArray`]) of `size` bytes aligned to `alignment` (a power of two; the
/// plain forms pass [`MALLOC_ALIGNMENT`](crate::MALLOC_ALIGNMENT)).
///
/// Off x86_64: there the exported forms run [`new_loop`] instead, whose frames are not
/// Rust's (see the module's notes).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn new<H: MallocHeap>(heap: &H, size: usize, alignment: usize, kind: AllocKind) -> *mut c_void {
    if !H::RECORDS_KIND
        && let Some(block) = try_aligned_fast(heap, size, alignment)
    {
        return block.as_ptr().cast();
    }
    new_general(size, alignment, kind, heap)
}

/// [`new`] past the heap's fast path, in tail position: the general path, then the new
/// handler loop, then `std::bad_alloc` (which unwinds out of it: `C-unwind`).
#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
extern "C-unwind" fn new_general<H: MallocHeap>(
    size: usize,
    alignment: usize,
    kind: AllocKind,
    heap: &H,
) -> *mut c_void {
    if let Ok(block) = allocate_as(heap, size, alignment, kind) {
        return block.as_ptr().cast();
    }
    loop {
        match current_new_handler() {
            // SAFETY: a handler installed with `std::set_new_handler` takes no arguments
            // and may return or throw; either is what C++ expects at this point.
            Some(handler) => unsafe { handler() },
            None => throw_bad_alloc(),
        }
        if let Ok(block) = allocate_as(heap, size, alignment, kind) {
            return block.as_ptr().cast();
        }
    }
}

/// A `nothrow` `operator new` or `new[]`: null on failure.
#[inline(always)]
pub fn new_nothrow<H: MallocHeap>(
    heap: &H,
    size: usize,
    alignment: usize,
    kind: AllocKind,
) -> *mut c_void {
    if !H::RECORDS_KIND
        && let Some(block) = try_aligned_fast(heap, size, alignment)
    {
        return block.as_ptr().cast();
    }
    new_nothrow_general(heap, size, alignment, kind)
}

/// [`new_nothrow`] past the heap's fast path.
#[inline(never)]
extern "C" fn new_nothrow_general<H: MallocHeap>(
    heap: &H,
    size: usize,
    alignment: usize,
    kind: AllocKind,
) -> *mut c_void {
    match allocate_as(heap, size, alignment, kind) {
        Ok(block) => block.as_ptr().cast(),
        Err(_) => ptr::null_mut(),
    }
}

/// Any unsized `operator delete` (`kind` [`AllocKind::New`]) or `operator delete[]`
/// ([`AllocKind::NewArray`]).
///
/// # Safety
///
/// `ptr` is null or a live block of `heap` (from any `operator new` or `malloc` of it).
#[inline(always)]
pub unsafe fn delete<H: MallocHeap>(heap: &H, ptr: *mut c_void, kind: AllocKind) {
    if !H::RECORDS_KIND {
        // SAFETY: forwarded from the caller; C++ delete, like C free, keeps `errno`.
        return unsafe { crate::api::free(heap, ptr) };
    }
    let Some(block) = NonNull::new(ptr.cast::<u8>()) else {
        return;
    };
    // SAFETY: forwarded from the caller.
    unsafe { delete_general(block, NO_SIZE, kind, heap) }
}

/// A sized `operator delete` or `delete[]`: `size` is what the program says it allocated.
///
/// # Safety
///
/// As [`delete`]. A wrong `size` is the program's bug, but is not trusted.
#[inline(always)]
pub unsafe fn delete_sized<H: MallocHeap>(
    heap: &H,
    ptr: *mut c_void,
    size: usize,
    kind: AllocKind,
) {
    let Some(block) = NonNull::new(ptr.cast::<u8>()) else {
        return;
    };
    // SAFETY: forwarded from the caller.
    if !H::RECORDS_KIND && unsafe { heap.try_deallocate_fast(block) } {
        return;
    }
    // SAFETY: as above; the fast path changed nothing.
    unsafe { delete_general(block, size, kind, heap) }
}

/// The size [`delete_general`] is given for an unsized delete: no allocation can have had
/// it (sizes are at most `isize::MAX`).
const NO_SIZE: usize = usize::MAX;

/// [`delete`] and [`delete_sized`] past the heap's fast path.
///
/// # Safety
///
/// As [`delete_sized`], for a non-null `block`.
#[inline(never)]
unsafe extern "C" fn delete_general<H: MallocHeap>(
    block: NonNull<u8>,
    size: usize,
    kind: AllocKind,
    heap: &H,
) {
    let size = (size != NO_SIZE).then_some(size);
    if H::FREE_KEEPS_ERRNO {
        // SAFETY: forwarded from the caller.
        unsafe { heap.deallocate_as(block, kind, size) }
    } else {
        let _errno = crate::errno::Preserved::new();
        // SAFETY: forwarded from the caller.
        unsafe { heap.deallocate_as(block, kind, size) }
    }
}

/// `std::new_handler`.
type NewHandler = unsafe extern "C-unwind" fn();

/// The handler `std::set_new_handler` installed, if any (libstdc++'s
/// `std::get_new_handler()`, looked up once; none in a process without libstdc++).
fn current_new_handler() -> Option<NewHandler> {
    static GET: AtomicUsize = AtomicUsize::new(0);
    let get = lookup(&GET, c"_ZSt15get_new_handlerv")?;
    // SAFETY: `std::get_new_handler()` takes nothing and returns a function pointer or null
    // (the Itanium C++ ABI passes both like C); a null pointer is `None` by the niche.
    let get: unsafe extern "C" fn() -> Option<NewHandler> = unsafe { core::mem::transmute(get) };
    // SAFETY: as above.
    unsafe { get() }
}

/// Throws `std::bad_alloc` with libstdc++'s `std::__throw_bad_alloc()`; aborts with a message
/// if the process has no libstdc++ (nothing could catch it).
#[cfg(not(target_arch = "x86_64"))]
fn throw_bad_alloc() -> ! {
    let throw = bad_alloc_thrower();
    // SAFETY: `std::__throw_bad_alloc()` takes nothing and never returns: it throws, and
    // the exception unwinds through this frame (`C-unwind`) to the program.
    let throw: unsafe extern "C-unwind" fn() -> ! = unsafe { core::mem::transmute(throw) };
    // SAFETY: as above.
    unsafe { throw() }
}

/// The address of libstdc++'s `std::__throw_bad_alloc()`; aborts with a message if the
/// process has no libstdc++ (nothing could catch a C++ exception).
extern "C" fn bad_alloc_thrower() -> usize {
    static THROW: AtomicUsize = AtomicUsize::new(0);
    if let Some(throw) = lookup(&THROW, c"_ZSt17__throw_bad_allocv") {
        return throw;
    }
    let message = b"alloclab preload: operator new failed and no C++ runtime is loaded to throw std::bad_alloc\n";
    // SAFETY: writing a static buffer to standard error; `abort` has no preconditions.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::abort()
    }
}

/// The installed new handler's address, or 0 for none.
#[cfg(target_arch = "x86_64")]
extern "C" fn new_handler_address() -> usize {
    current_new_handler().map_or(0, |handler| handler as usize)
}

/// A heap's `operator new` attempt for one kind: `size` bytes aligned to `alignment`, or
/// null (the heap's fast and general paths, no new handler: [`new_nothrow`]).
#[cfg(target_arch = "x86_64")]
pub type TryNew = extern "C" fn(size: usize, alignment: usize) -> *mut c_void;

/// The body of every throwing `operator new` on x86_64: `try_new(size, alignment)` until
/// it gives a block, calling the installed new handler after each failure, and with none
/// installed jumping to `std::__throw_bad_alloc()` (aborting with a message where the
/// process has no libstdc++).
///
/// It is written in assembly so that no Rust frame is live when C++ code runs: the new
/// handler may throw, and `std::bad_alloc` has to get to the program's `catch` through this
/// frame, whose unwind information the `.cfi` directives give. A Rust function could let a
/// foreign exception pass only as `extern "C-unwind"` with unwinding panics; built with
/// `panic = "abort"` (the `preload` profile, which leaves the standard library out), Rust
/// frames abort a foreign unwind. The throw is a tail jump, from no frame of ours.
///
/// What it costs: 11 instructions per call over the Rust path it replaces (`alloclab
/// percall --ops new --instructions`, wfspan: 36 against 25 per plain `operator new`, 60
/// against 48 per aligned one; about 2% of the time per call), the stub's jump and this
/// frame's three stack slots.
///
/// # Safety
///
/// Called only by a tail jump from an exported `operator new` symbol (the stack as the C++
/// caller left it), with `try_new` one of the heap's [`TryNew`] functions.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
pub unsafe extern "C-unwind" fn new_loop(
    size: usize,
    alignment: usize,
    try_new: TryNew,
) -> *mut c_void {
    core::arch::naked_asm!(
        ".cfi_startproc",
        // The arguments stay in three stack slots across the calls (24 bytes: the stack is
        // then 16-byte aligned for them, as the ABI wants at a call).
        "sub rsp, 24",
        ".cfi_adjust_cfa_offset 24",
        "mov [rsp], rdi",
        "mov [rsp + 8], rsi",
        "mov [rsp + 16], rdx",
        "call rdx",
        "test rax, rax",
        "jz 3f",
        "add rsp, 24",
        ".cfi_adjust_cfa_offset -24",
        "ret",
        ".cfi_adjust_cfa_offset 24",
        "3:",
        "call {handler}",
        "test rax, rax",
        "jz 4f",
        // The new handler: returns to try again, or throws through this frame.
        "call rax",
        "mov rdi, [rsp]",
        "mov rsi, [rsp + 8]",
        "call [rsp + 16]",
        "test rax, rax",
        "jz 3b",
        "add rsp, 24",
        ".cfi_adjust_cfa_offset -24",
        "ret",
        ".cfi_adjust_cfa_offset 24",
        "4:",
        "call {thrower}",
        "add rsp, 24",
        ".cfi_adjust_cfa_offset -24",
        "jmp rax",
        ".cfi_endproc",
        handler = sym new_handler_address,
        thrower = sym bad_alloc_thrower,
    )
}

/// `dlsym(RTLD_DEFAULT, name)`, remembered in `cache` (1: looked up, absent).
fn lookup(cache: &AtomicUsize, name: &CStr) -> Option<usize> {
    const ABSENT: usize = 1;
    let known = cache.load(Ordering::Acquire);
    if known != 0 {
        return (known != ABSENT).then_some(known);
    }
    // SAFETY: `name` is NUL-terminated; `dlsym` has no other precondition.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
    cache.store(if found == 0 { ABSENT } else { found }, Ordering::Release);
    (found != 0).then_some(found)
}
