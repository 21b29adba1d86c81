//! [`export_malloc_api!`](crate::export_malloc_api): the C symbols a preload library exports.

/// Exports the C allocation API, bound to one heap, from the crate that invokes it (a
/// `cdylib` built for `LD_PRELOAD`).
///
/// ```ignore
/// static HEAP: MyHeap = MyHeap::new();
///
/// alloclab_preload::export_malloc_api! {
///     heap: HEAP,            // a `static` (any place expression of `'static` lifetime)
///                            //   whose type implements `MallocHeap`
///     name: "myheap",        // what `alloclab_preload_heap_name()` returns
///     fork_hooks: HEAP,      // optional: a `'static` place implementing `ForkHooks`,
///                            //   registered with `pthread_atfork` at the first allocation
/// }
/// ```
///
/// Exported (unmangled, `extern "C"`): `malloc`, `free`, `calloc`, `realloc`,
/// `reallocarray`, `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
/// `malloc_usable_size`, `malloc_trim`, `malloc_stats`, `mallinfo`, `mallinfo2`, each with the
/// semantics of the function of the same name in
/// [`api`](crate::api); on glibc, its `__libc_malloc`, `__libc_calloc`, `__libc_realloc`,
/// `__libc_free`, `__libc_memalign`, `__libc_valloc` and `__libc_pvalloc`, the same
/// functions under the names that reach the C library's allocator directly; C++'s
/// `operator new` and `operator delete` in every form (plain, array, sized, aligned,
/// `nothrow`; see [`cxx`](crate::cxx)); and
/// `const char *alloclab_preload_heap_name(void)`, which a
/// program (or a test) can look up with `dlsym(RTLD_DEFAULT, ...)` to see which heap, if
/// any, is preloaded.
///
/// Built with aborting panics (the workspace's `preload` profile) and with alloclab-core
/// without its `std` feature, the library links no standard library, and the macro also
/// defines what that would have: the panic handler
/// ([`panic::abort_with_message`](crate::panic::abort_with_message)), a hidden `rust_eh_personality` that is never called,
/// and the link to the C library. On x86_64 the throwing `operator new` forms are assembly
/// ([`cxx::new_loop`](crate::cxx::new_loop)), so that C++ exceptions never unwind a Rust
/// frame.
///
/// Invoke it once per library, and only in a `cdylib`: in an executable or a library
/// linked into one, it replaces `malloc` for the whole process, Rust's global allocator
/// included. (A preload package is also an `rlib`, so that `cargo test` builds it before
/// its integration tests; nothing may link that `rlib`.)
#[macro_export]
macro_rules! export_malloc_api {
    (heap: $heap:expr, name: $name:literal $(,)?) => {
        const _: () = {
            #[inline(always)]
            fn __alloclab_before_allocation() {}
    $crate::export_malloc_api!(@symbols $heap, $name);
        };
    };
    (heap: $heap:expr, name: $name:literal, fork_hooks: $hooks:expr $(,)?) => {
        const _: () = {
            static __ALLOCLAB_AT_FORK: $crate::fork::AtFork = $crate::fork::AtFork::new();

            unsafe extern "C" fn __alloclab_prepare_fork() {
                $crate::fork::ForkHooks::prepare_fork(&$hooks)
            }
            unsafe extern "C" fn __alloclab_after_fork_in_parent() {
                $crate::fork::ForkHooks::after_fork_in_parent(&$hooks)
            }
            unsafe extern "C" fn __alloclab_after_fork_in_child() {
                $crate::fork::ForkHooks::after_fork_in_child(&$hooks)
            }

            #[inline(always)]
            fn __alloclab_before_allocation() {
                __ALLOCLAB_AT_FORK.ensure_registered(
                    __alloclab_prepare_fork,
                    __alloclab_after_fork_in_parent,
                    __alloclab_after_fork_in_child,
                );
            }
    $crate::export_malloc_api!(@symbols $heap, $name);
        };
    };
    (@symbols $heap:expr, $name:literal) => {
        // Built with `panic = "abort"` and nothing in the build linking the standard
        // library: the panic handler is the library's own.
        #[cfg(panic = "abort")]
        $crate::__core::without_std! {
            #[panic_handler]
            fn __alloclab_panic(info: &::core::panic::PanicInfo<'_>) -> ! {
                $crate::panic::abort_with_message(info)
            }

            // The personality routine of Rust frames, which the standard library would
            // provide: `core` is built with unwinding panics, and its unwind tables name
            // it. Nothing unwinds through a Rust frame of this library (its panics abort,
            // and C++ exceptions pass only through `new_loop`'s assembly), so it is never
            // called; if it were, the process aborts. Hidden: a program's own Rust code
            // keeps its own.
            #[cfg(target_arch = "x86_64")]
            mod __alloclab_personality {
                ::core::arch::global_asm!(
                    ".pushsection .text.rust_eh_personality,\"ax\",@progbits",
                    ".globl rust_eh_personality",
                    ".hidden rust_eh_personality",
                    ".type rust_eh_personality,@function",
                    "rust_eh_personality:",
                    "jmp {abort}",
                    ".size rust_eh_personality, .-rust_eh_personality",
                    ".popsection",
                    abort = sym $crate::panic::abort_unexpected_unwind,
                );
            }

            // The C library, which the standard library would link.
            #[link(name = "c")]
            unsafe extern "C" {}
        }

        /// C `malloc`; see `alloclab_preload::api::malloc`.
        #[unsafe(no_mangle)]
        pub extern "C" fn malloc(size: usize) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            $crate::api::malloc(&$heap, size)
        }

        /// C `free`; see `alloclab_preload::api::free`.
        ///
        /// # Safety
        ///
        /// `ptr` is NULL or a live block of this heap.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn free(ptr: *mut ::core::ffi::c_void) {
            // SAFETY: forwarded from the C caller.
            unsafe { $crate::api::free(&$heap, ptr) }
        }

        /// C `calloc`; see `alloclab_preload::api::calloc`.
        #[unsafe(no_mangle)]
        pub extern "C" fn calloc(count: usize, size: usize) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            $crate::api::calloc(&$heap, count, size)
        }

        /// C `realloc`; see `alloclab_preload::api::realloc`.
        ///
        /// # Safety
        ///
        /// `ptr` is NULL or a live block of this heap.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn realloc(
            ptr: *mut ::core::ffi::c_void,
            size: usize,
        ) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            // SAFETY: forwarded from the C caller.
            unsafe { $crate::api::realloc(&$heap, ptr, size) }
        }

        /// C `reallocarray`; see `alloclab_preload::api::reallocarray`.
        ///
        /// # Safety
        ///
        /// `ptr` is NULL or a live block of this heap.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn reallocarray(
            ptr: *mut ::core::ffi::c_void,
            count: usize,
            size: usize,
        ) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            // SAFETY: forwarded from the C caller.
            unsafe { $crate::api::reallocarray(&$heap, ptr, count, size) }
        }

        /// C `posix_memalign`; see `alloclab_preload::api::posix_memalign`.
        ///
        /// # Safety
        ///
        /// `memptr` is valid for a write of one pointer.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn posix_memalign(
            memptr: *mut *mut ::core::ffi::c_void,
            alignment: usize,
            size: usize,
        ) -> ::core::ffi::c_int {
            __alloclab_before_allocation();
            // SAFETY: forwarded from the C caller.
            unsafe { $crate::api::posix_memalign(&$heap, memptr, alignment, size) }
        }

        /// C `aligned_alloc`; see `alloclab_preload::api::aligned_alloc`.
        #[unsafe(no_mangle)]
        pub extern "C" fn aligned_alloc(alignment: usize, size: usize) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            $crate::api::aligned_alloc(&$heap, alignment, size)
        }

        /// C `memalign`; see `alloclab_preload::api::memalign`.
        #[unsafe(no_mangle)]
        pub extern "C" fn memalign(alignment: usize, size: usize) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            $crate::api::memalign(&$heap, alignment, size)
        }

        /// C `valloc`; see `alloclab_preload::api::valloc`.
        #[unsafe(no_mangle)]
        pub extern "C" fn valloc(size: usize) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            $crate::api::valloc(&$heap, size)
        }

        /// C `pvalloc`; see `alloclab_preload::api::pvalloc`.
        #[unsafe(no_mangle)]
        pub extern "C" fn pvalloc(size: usize) -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            $crate::api::pvalloc(&$heap, size)
        }

        /// C `malloc_usable_size`; see `alloclab_preload::api::malloc_usable_size`.
        ///
        /// # Safety
        ///
        /// `ptr` is NULL or a live block of this heap.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn malloc_usable_size(ptr: *mut ::core::ffi::c_void) -> usize {
            // SAFETY: forwarded from the C caller.
            unsafe { $crate::api::malloc_usable_size(&$heap, ptr) }
        }

        /// C `malloc_trim` (glibc); see `alloclab_preload::api::malloc_trim`.
        #[unsafe(no_mangle)]
        pub extern "C" fn malloc_trim(pad: usize) -> ::core::ffi::c_int {
            $crate::api::malloc_trim(&$heap, pad)
        }

        /// C `malloc_stats` (glibc); see `alloclab_preload::api::malloc_stats`.
        #[unsafe(no_mangle)]
        pub extern "C" fn malloc_stats() {
            $crate::api::malloc_stats(&$heap, $name)
        }

        /// C `mallinfo2` (glibc); see `alloclab_preload::api::mallinfo2`.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        #[unsafe(no_mangle)]
        pub extern "C" fn mallinfo2() -> $crate::__libc::mallinfo2 {
            $crate::api::mallinfo2(&$heap)
        }

        /// C `mallinfo` (glibc); see `alloclab_preload::api::mallinfo`.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        #[unsafe(no_mangle)]
        pub extern "C" fn mallinfo() -> $crate::__libc::mallinfo {
            $crate::api::mallinfo(&$heap)
        }

        // glibc's `__libc_*` names of the same functions, which a program (or a library
        // that wraps `malloc`) may call to reach the C library's allocator directly: they
        // reach this heap too, so that no block is handed out by one heap and freed into
        // the other.
        $crate::export_malloc_api!(@glibc_aliases
            __libc_malloc malloc (size: usize) -> *mut ::core::ffi::c_void,
            __libc_calloc calloc (count: usize, size: usize) -> *mut ::core::ffi::c_void,
            __libc_memalign memalign (alignment: usize, size: usize) -> *mut ::core::ffi::c_void,
            __libc_valloc valloc (size: usize) -> *mut ::core::ffi::c_void,
            __libc_pvalloc pvalloc (size: usize) -> *mut ::core::ffi::c_void);
        $crate::export_malloc_api!(@glibc_unsafe_aliases
            __libc_free free (ptr: *mut ::core::ffi::c_void) -> (),
            __libc_realloc realloc (ptr: *mut ::core::ffi::c_void, size: usize)
                -> *mut ::core::ffi::c_void);

        $crate::export_malloc_api!(@cxx $heap);

        /// The name of the preloaded heap, NUL-terminated, for `dlsym(RTLD_DEFAULT, ...)`.
        #[unsafe(no_mangle)]
        pub extern "C" fn alloclab_preload_heap_name() -> *const ::core::ffi::c_char {
            ::core::concat!($name, "\0").as_ptr().cast()
        }
    };
    // glibc's `__libc_<name>` for each safe function given, calling `<name>` above.
    (@glibc_aliases $($alias:ident $target:ident ($($arg:ident: $ty:ty),*) -> $ret:ty),+) => {$(
        #[doc = ::core::concat!("glibc's `", ::core::stringify!($alias), "`: `",
            ::core::stringify!($target), "` of this heap.")]
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        #[unsafe(no_mangle)]
        pub extern "C" fn $alias($($arg: $ty),*) -> $ret {
            $target($($arg),*)
        }
    )+};
    // The same for the functions that take a block (`free`, `realloc`).
    (@glibc_unsafe_aliases $($alias:ident $target:ident ($($arg:ident: $ty:ty),*) -> $ret:ty),+) => {$(
        #[doc = ::core::concat!("glibc's `", ::core::stringify!($alias), "`: `",
            ::core::stringify!($target), "` of this heap.")]
        ///
        /// # Safety
        ///
        /// `ptr` is NULL or a live block of this heap.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $alias($($arg: $ty),*) -> $ret {
            // SAFETY: forwarded from the C caller.
            unsafe { $target($($arg),*) }
        }
    )+};
    // C++'s operator new and delete, every form, under their Itanium ABI names (`m` is
    // `std::size_t` as `unsigned long`: 64-bit Linux). `std::align_val_t` is passed as a
    // `std::size_t`, `const std::nothrow_t&` as a pointer, never read. The array forms
    // (`_Zna`, `_Zda`) do what the single-object ones do, and say so to the heap
    // (`AllocKind::NewArray`), which may check that `delete[]` frees what `new[]` gave.
    // Each body is a closure of the kind, called with the kind of the symbol it is
    // exported as.
    (@cxx $heap:expr) => {
        #[cfg(target_arch = "x86_64")]
        $crate::export_malloc_api!(@throwing_new $heap);
        #[cfg(not(target_arch = "x86_64"))]
        $crate::export_malloc_api!(@new $heap, "C-unwind",
            [_Znwm "new" New, _Znam "new[]" NewArray],
            "(std::size_t)", (size: usize),
            |kind| $crate::cxx::new(&$heap, size, $crate::MALLOC_ALIGNMENT, kind));
        $crate::export_malloc_api!(@new $heap, "C",
            [_ZnwmRKSt9nothrow_t "new" New, _ZnamRKSt9nothrow_t "new[]" NewArray],
            "(std::size_t, const std::nothrow_t&)",
            (size: usize, _nothrow: *const ::core::ffi::c_void),
            |kind| $crate::cxx::new_nothrow(&$heap, size, $crate::MALLOC_ALIGNMENT, kind));
        #[cfg(not(target_arch = "x86_64"))]
        $crate::export_malloc_api!(@new $heap, "C-unwind",
            [_ZnwmSt11align_val_t "new" New, _ZnamSt11align_val_t "new[]" NewArray],
            "(std::size_t, std::align_val_t)", (size: usize, alignment: usize),
            |kind| $crate::cxx::new(&$heap, size, alignment, kind));
        $crate::export_malloc_api!(@new $heap, "C",
            [_ZnwmSt11align_val_tRKSt9nothrow_t "new" New,
             _ZnamSt11align_val_tRKSt9nothrow_t "new[]" NewArray],
            "(std::size_t, std::align_val_t, const std::nothrow_t&)",
            (size: usize, alignment: usize, _nothrow: *const ::core::ffi::c_void),
            |kind| $crate::cxx::new_nothrow(&$heap, size, alignment, kind));
        $crate::export_malloc_api!(@delete [_ZdlPv "delete" New, _ZdaPv "delete[]" NewArray],
            "(void*)", (ptr: *mut ::core::ffi::c_void),
            |kind| $crate::cxx::delete(&$heap, ptr, kind));
        $crate::export_malloc_api!(@delete [_ZdlPvm "delete" New, _ZdaPvm "delete[]" NewArray],
            "(void*, std::size_t)", (ptr: *mut ::core::ffi::c_void, size: usize),
            |kind| $crate::cxx::delete_sized(&$heap, ptr, size, kind));
        $crate::export_malloc_api!(@delete
            [_ZdlPvRKSt9nothrow_t "delete" New, _ZdaPvRKSt9nothrow_t "delete[]" NewArray],
            "(void*, const std::nothrow_t&)",
            (ptr: *mut ::core::ffi::c_void, _nothrow: *const ::core::ffi::c_void),
            |kind| $crate::cxx::delete(&$heap, ptr, kind));
        $crate::export_malloc_api!(@delete
            [_ZdlPvSt11align_val_t "delete" New, _ZdaPvSt11align_val_t "delete[]" NewArray],
            "(void*, std::align_val_t)",
            (ptr: *mut ::core::ffi::c_void, _alignment: usize),
            |kind| $crate::cxx::delete(&$heap, ptr, kind));
        $crate::export_malloc_api!(@delete
            [_ZdlPvmSt11align_val_t "delete" New, _ZdaPvmSt11align_val_t "delete[]" NewArray],
            "(void*, std::size_t, std::align_val_t)",
            (ptr: *mut ::core::ffi::c_void, size: usize, _alignment: usize),
            |kind| $crate::cxx::delete_sized(&$heap, ptr, size, kind));
        $crate::export_malloc_api!(@delete
            [_ZdlPvSt11align_val_tRKSt9nothrow_t "delete" New,
             _ZdaPvSt11align_val_tRKSt9nothrow_t "delete[]" NewArray],
            "(void*, std::align_val_t, const std::nothrow_t&)",
            (ptr: *mut ::core::ffi::c_void, _alignment: usize, _nothrow: *const ::core::ffi::c_void),
            |kind| $crate::cxx::delete(&$heap, ptr, kind));
    };
    // x86_64: the four throwing forms, each a tail jump into `cxx::new_loop` with the
    // heap's attempt for its kind and form.
    (@throwing_new $heap:expr) => {
        $crate::export_malloc_api!(@try_new $heap, __alloclab_try_new, New);
        $crate::export_malloc_api!(@try_new $heap, __alloclab_try_new_array, NewArray);
        $crate::export_malloc_api!(@try_new $heap, __alloclab_try_new_plain, New,
            $crate::MALLOC_ALIGNMENT);
        $crate::export_malloc_api!(@try_new $heap, __alloclab_try_new_array_plain, NewArray,
            $crate::MALLOC_ALIGNMENT);
        $crate::export_malloc_api!(@jump_to_new_loop _Znwm "new" "(std::size_t)",
            __alloclab_try_new_plain);
        $crate::export_malloc_api!(@jump_to_new_loop _Znam "new[]" "(std::size_t)",
            __alloclab_try_new_array_plain);
        $crate::export_malloc_api!(@jump_to_new_loop _ZnwmSt11align_val_t "new"
            "(std::size_t, std::align_val_t)", __alloclab_try_new);
        $crate::export_malloc_api!(@jump_to_new_loop _ZnamSt11align_val_t "new[]"
            "(std::size_t, std::align_val_t)", __alloclab_try_new_array);
    };
    // The heap's attempt for one throwing form (`cxx::TryNew`): with the alignment it is
    // given, or with a fixed one (the plain forms, whose alignment then folds away).
    (@try_new $heap:expr, $name:ident, $kind:ident $(, $fixed:expr)?) => {
        extern "C" fn $name(size: usize, alignment: usize) -> *mut ::core::ffi::c_void {
            $(let _ = alignment; let alignment = $fixed;)?
            __alloclab_before_allocation();
            $crate::cxx::new_nothrow(&$heap, size, alignment, $crate::cxx::AllocKind::$kind)
        }
    };
    (@jump_to_new_loop $sym:ident $op:literal $sig:literal, $try:ident) => {
        #[doc = ::core::concat!("C++ `operator ", $op, $sig,
            "`: a tail jump into `alloclab_preload::cxx::new_loop`.")]
        ///
        /// # Safety
        ///
        /// Called from C++ with its arguments (a size, and an alignment where the form has
        /// one); nothing else.
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C-unwind" fn $sym() -> *mut ::core::ffi::c_void {
            ::core::arch::naked_asm!(
                ".cfi_startproc",
                "lea rdx, [rip + {try_new}]",
                "jmp {new_loop}",
                ".cfi_endproc",
                try_new = sym $try,
                new_loop = sym $crate::cxx::new_loop,
            )
        }
    };
    // One `operator new` form, exported under each name given, with its kind.
    (@new $heap:expr, $abi:literal, [$($sym:ident $op:literal $kind:ident),+], $sig:literal,
        $params:tt, $body:expr) => {$(
        #[doc = ::core::concat!("C++ `operator ", $op, $sig, "`; see `alloclab_preload::cxx`.")]
        #[unsafe(no_mangle)]
        #[cfg(target_pointer_width = "64")]
        pub extern $abi fn $sym $params -> *mut ::core::ffi::c_void {
            __alloclab_before_allocation();
            ($body)($crate::cxx::AllocKind::$kind)
        }
    )+};
    // One `operator delete` form, exported under each name given, with its kind.
    (@delete [$($sym:ident $op:literal $kind:ident),+], $sig:literal, $params:tt,
        $body:expr) => {$(
        #[doc = ::core::concat!("C++ `operator ", $op, $sig, "`; see `alloclab_preload::cxx`.")]
        ///
        /// # Safety
        ///
        /// `ptr` is null or a live block of this heap.
        #[unsafe(no_mangle)]
        #[cfg(target_pointer_width = "64")]
        pub unsafe extern "C" fn $sym $params {
            // SAFETY: forwarded from the C++ caller.
            unsafe { ($body)($crate::cxx::AllocKind::$kind) }
        }
    )+};
}
