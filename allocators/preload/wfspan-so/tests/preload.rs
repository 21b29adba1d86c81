//! The shared preload tests (`alloclab_preload::driver`) against wfspan's `.so`: a
//! multi-threaded C program checking every rule of the C API and forking, `python3`, and
//! `sqlite3`, each under `LD_PRELOAD`; once for the library `cargo test` builds (with the
//! standard library), once for the one the harness runs programs on (the `preload` profile,
//! without it).

alloclab_preload::preload_tests!(lib: "alloclab_preload_wfspan", heap: "wfspan");

/// The library of the `preload` profile: `no_std`, its own panic handler, C++'s throwing
/// `operator new` through assembly.
mod built_without_std {
    alloclab_preload::preload_tests!(
        lib: "alloclab_preload_wfspan",
        heap: "wfspan",
        profile: "preload",
        package: "alloclab-preload-wfspan",
    );
}
