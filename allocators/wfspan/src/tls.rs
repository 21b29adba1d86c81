//! The one thread-local word wfspan keeps: the head of the calling thread's chain of heaps.
//!
//! Every allocation and free reads it, so how it is reached matters. Rust's `thread_local!`
//! compiled into a shared object (the `LD_PRELOAD` library is a `cdylib`) uses the ELF
//! *general-dynamic* TLS model: each access calls `__tls_get_addr`, a function call plus a
//! lookup in the thread's dynamic thread vector — about a tenth of the instructions of a
//! C program's malloc/free pair here, measured with callgrind. glibc's, mimalloc's and
//! jemalloc's libraries use the *initial-exec* model instead: the variable lives in the
//! static TLS block at a fixed offset from the thread pointer, known once the library is
//! loaded, so an access is two instructions: the offset from the GOT, then a load through
//! `%fs`. Stable Rust cannot ask for a TLS model, so on x86_64 Linux the word is an ELF TLS
//! symbol of our own, defined in assembly, and reached through its initial-exec GOT entry
//! (`@GOTTPOFF`) relative to `%fs`.
//!
//! Why this is sound:
//!
//! * **The thread pointer.** The x86_64 TLS ABI (Drepper, "ELF Handling For Thread-Local
//!   Storage", section 4.3) puts the thread control block at the `%fs` base and static TLS
//!   at negative offsets from it, in glibc and musl; the initial-exec GOT entry holds that
//!   offset, so `%fs:offset` is the word (the sequence C compilers emit for
//!   `-ftls-model=initial-exec`). The ABI also makes the block's first word its own
//!   address (`%fs:0`), which the test below uses to check where the word lies.
//! * **Threads alloclab never saw start.** The dynamic loader allocates and zero-fills
//!   every thread's static TLS block (`.tbss`) when the thread is created, whoever creates
//!   it; a zero word is "no heap yet", which is what [`crate::thread`] expects.
//! * **`LD_PRELOAD` and linking into a program.** Libraries loaded at start-up and the
//!   executable get static TLS by construction; in an executable the linker may turn the
//!   GOT load into an immediate (initial-exec to local-exec), with the same result.
//! * **`dlopen`.** A library with initial-exec TLS loaded later takes its block from the
//!   static TLS surplus glibc reserves for that purpose (about 1.6 KiB by default; the
//!   `glibc.rtld.optional_static_tls` tunable); eight bytes fit. If none were left, `dlopen`
//!   would fail cleanly ("cannot allocate memory in static TLS block"), never corrupt. This
//!   is the same requirement glibc's own `libc.so` and mimalloc's and jemalloc's libraries
//!   make.
//! * **One symbol per linked object.** The symbol is `.hidden`: each executable or shared
//!   object that links wfspan has its own word, none is exported or interposed, so a
//!   program that both preloads the wfspan library and links wfspan (an alloclab harness
//!   run under the preload) keeps two independent bindings, as it keeps two heaps.
//!
//! Elsewhere (other architectures, Miri) the word is a `thread_local!` `Cell` with a
//! constant initialiser, which needs no destructor and no allocation either.

use crate::heap::Heap;

/// The calling thread's chain of heaps (null: none).
pub static BOUND: Slot = Slot;

/// Access to the calling thread's word: [`get`](Slot::get), [`set`](Slot::set) and
/// [`replace`](Slot::replace), like a `Cell<*mut Heap>` of the calling thread.
pub struct Slot;

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
mod word {
    use super::Heap;

    // The word, in the thread-local BSS (`.tbss`: zero-filled for every thread). `awT`:
    // allocatable, writable, TLS.
    core::arch::global_asm!(
        ".pushsection .tbss.alloclab_wfspan_thread_heaps,\"awT\",@nobits",
        ".p2align 3",
        ".globl alloclab_wfspan_thread_heaps",
        ".hidden alloclab_wfspan_thread_heaps",
        ".type alloclab_wfspan_thread_heaps,@object",
        ".size alloclab_wfspan_thread_heaps,8",
        "alloclab_wfspan_thread_heaps:",
        ".zero 8",
        ".popsection",
    );

    /// The calling thread's word: the standard initial-exec sequence, its offset from the
    /// thread pointer (its GOT entry) and a load through `%fs`.
    #[inline(always)]
    pub fn get() -> *mut Heap {
        let value: usize;
        // SAFETY: loads the word's offset from its initial-exec GOT entry (filled in by the
        // loader before any code of ours runs, constant for the process) and the word at
        // that offset from the thread's TLS base (`%fs`, set up for every thread before it
        // runs). Reads memory only, touches no stack and no flags; not `nomem`, so it is
        // not moved across a `set`.
        unsafe {
            core::arch::asm!(
                "mov {value}, qword ptr [rip + alloclab_wfspan_thread_heaps@GOTTPOFF]",
                "mov {value}, qword ptr fs:[{value}]",
                value = out(reg) value,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        value as *mut Heap
    }

    /// Sets the calling thread's word.
    #[inline(always)]
    pub fn set(heap: *mut Heap) {
        // SAFETY: as in `get`, a store instead of a load: the word is the calling thread's
        // own, eight bytes, aligned.
        unsafe {
            core::arch::asm!(
                "mov {offset}, qword ptr [rip + alloclab_wfspan_thread_heaps@GOTTPOFF]",
                "mov qword ptr fs:[{offset}], {heap}",
                offset = out(reg) _,
                heap = in(reg) heap,
                options(nostack, preserves_flags),
            );
        }
    }

    /// The address of the calling thread's word (the thread pointer, `%fs:0`, which the
    /// x86_64 TLS ABI makes the TCB's pointer to itself, plus the word's offset).
    #[cfg(test)]
    pub fn address() -> *mut *mut Heap {
        let address: usize;
        // SAFETY: reads `%fs:0` and the GOT entry, as `get` does.
        unsafe {
            core::arch::asm!(
                "mov {address}, qword ptr fs:[0]",
                "add {address}, qword ptr [rip + alloclab_wfspan_thread_heaps@GOTTPOFF]",
                address = out(reg) address,
                options(pure, readonly, nostack),
            );
        }
        address as *mut *mut Heap
    }
}

#[cfg(all(
    not(all(target_arch = "x86_64", target_os = "linux", not(miri))),
    not(feature = "std"),
    not(test)
))]
compile_error!(
    "wfspan needs its `std` feature off x86_64 Linux: its thread-local word is a `thread_local!` there"
);

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
mod word {
    use core::cell::Cell;
    use core::ptr;

    use super::Heap;

    std::thread_local! {
        static WORD: Cell<*mut Heap> = const { Cell::new(ptr::null_mut()) };
    }

    /// The calling thread's word.
    #[inline(always)]
    pub fn get() -> *mut Heap {
        WORD.get()
    }

    /// Sets the calling thread's word.
    #[inline(always)]
    pub fn set(heap: *mut Heap) {
        WORD.set(heap);
    }
}

impl Slot {
    /// The calling thread's chain head. The word is the calling thread's own, initialised
    /// (zero-filled at thread creation) and only ever accessed by this thread.
    #[inline(always)]
    pub fn get(&self) -> *mut Heap {
        word::get()
    }

    /// Sets the calling thread's chain head.
    #[inline(always)]
    pub fn set(&self, heap: *mut Heap) {
        word::set(heap);
    }

    /// Sets the calling thread's chain head and returns the old one.
    #[inline(always)]
    pub fn replace(&self, heap: *mut Heap) -> *mut Heap {
        let old = self.get();
        self.set(heap);
        old
    }
}

#[cfg(test)]
mod tests {
    use core::ptr;

    use super::*;

    #[test]
    fn each_thread_has_its_own_zero_initialised_word() {
        let here = 0x1000 as *mut Heap;
        BOUND.set(here);
        assert_eq!(BOUND.get(), here);
        let seen = std::thread::spawn(|| {
            let first = BOUND.get() as usize;
            BOUND.set(0x2000 as *mut Heap);
            (first, BOUND.replace(ptr::null_mut()) as usize)
        })
        .join()
        .unwrap();
        assert_eq!(seen, (0, 0x2000), "a new thread starts with no heap");
        assert_eq!(
            BOUND.get(),
            here,
            "another thread's writes are not seen here"
        );
        assert_eq!(BOUND.replace(ptr::null_mut()), here);
    }

    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
    fn the_word_lies_in_the_threads_static_tls_block() {
        // Static TLS on x86_64 sits just below the thread pointer (variant II), within a
        // few MiB; a general-dynamic block from `__tls_get_addr` could be anywhere.
        let word = word::address() as usize;
        let thread_pointer: usize;
        // SAFETY: reads `%fs:0`, as `word::address` does.
        unsafe {
            core::arch::asm!("mov {tp}, qword ptr fs:[0]", tp = out(reg) thread_pointer,
                options(pure, readonly, nostack));
        }
        assert!(word < thread_pointer && thread_pointer - word < (4 << 20));
        assert_eq!(word % 8, 0);
    }
}
