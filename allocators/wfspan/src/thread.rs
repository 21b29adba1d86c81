//! Binding threads to heaps, without ever allocating.
//!
//! A thread finds its heap through a thread-local pointer (`tls`): the head of a short chain
//! of the heaps it owns, one per allocator instance it has used (usually one). The
//! thread-local is one zero-initialised word with no destructor, so touching it neither
//! allocates nor registers anything — essential inside `malloc`.
//!
//! Thread exit is caught with a `pthread` key destructor (the key is created once per
//! process; `pthread_setspecific` stores into the thread descriptor, no allocation for the
//! first 32 keys of a process). The destructor marks every heap of the chain free; the next
//! thread that needs a heap adopts one, spans and all, so a program that starts and joins
//! 10,000 threads uses as many heaps as it ever had threads alive at once. Frees that arrive
//! after the destructor (from later destructors) take the remote path, which needs no heap.

use core::ptr;

use alloclab_core::sync::atomic::{AtomicUsize, Ordering};

use crate::heap::Heap;
use crate::tls::BOUND;

/// The process's pthread key plus one (0: not created yet).
static EXIT_KEY: AtomicUsize = AtomicUsize::new(0);

/// An identifier of the calling thread, unique among live threads.
#[inline]
pub fn current_tid() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// The head of the calling thread's chain of heaps: its heap of the instance it bound last,
/// or null. A span owned by it is the caller's, whichever instance the caller asks about.
#[inline(always)]
pub fn head() -> *mut Heap {
    BOUND.get()
}

/// The calling thread's heap for allocator `instance`, or null.
#[inline]
pub fn lookup(instance: u64) -> *mut Heap {
    let mut heap = BOUND.get();
    while !heap.is_null() {
        // SAFETY: heaps on this thread's chain are owned by this thread and never unmapped.
        unsafe {
            if (*heap).instance == instance {
                return heap;
            }
            heap = (*heap).local().bound_next;
        }
    }
    heap
}

/// Binds `heap`, just adopted by the calling thread, to it.
///
/// # Safety
///
/// The calling thread owns `heap` (its `owner_tid` is this thread's).
pub unsafe fn bind(heap: *mut Heap) {
    // SAFETY: the heap is ours per the contract.
    unsafe { (*heap).local().bound_next = BOUND.get() };
    BOUND.set(heap);
    // The key's value only has to be non-null for the destructor to run.
    if let Some(key) = exit_key() {
        // SAFETY: `key` is a valid key; storing a pointer has no other precondition.
        unsafe { libc::pthread_setspecific(key, heap.cast()) };
    }
}

fn exit_key() -> Option<libc::pthread_key_t> {
    let known = EXIT_KEY.load(Ordering::Acquire);
    if known != 0 {
        return Some((known - 1) as libc::pthread_key_t);
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the destructor is an `extern "C"` function that
    // lives for the whole process.
    if unsafe { libc::pthread_key_create(&mut key, Some(release_thread_heaps)) } != 0 {
        return None;
    }
    match EXIT_KEY.compare_exchange(0, key as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(key),
        Err(winner) => {
            // Another thread created the key first: use theirs.
            // SAFETY: `key` was created above and never handed out.
            unsafe { libc::pthread_key_delete(key) };
            Some((winner - 1) as libc::pthread_key_t)
        }
    }
}

/// Runs at thread exit: frees every heap the thread owned for adoption.
extern "C" fn release_thread_heaps(_: *mut libc::c_void) {
    let mut heap = BOUND.replace(ptr::null_mut());
    while !heap.is_null() {
        // SAFETY: heaps on the chain are this thread's until the store below, which
        // (`Release`) hands their owner-only state to the adopter's `Acquire` CAS.
        unsafe {
            let next = (*heap).local().bound_next;
            (*heap).local().bound_next = ptr::null_mut();
            (*heap).owner_tid.store(0, Ordering::Release);
            heap = next;
        }
    }
}
