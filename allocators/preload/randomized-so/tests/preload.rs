//! The shared preload tests (`alloclab_preload::driver`) against the randomized heap's `.so`:
//! a multi-threaded C program checking every rule of the C API and forking, `python3`, and
//! `sqlite3`, each under `LD_PRELOAD`.

alloclab_preload::preload_tests!(lib: "alloclab_preload_randomized", heap: "randomized");
