//! `liballoclab_preload_testheap.so`: `malloc` and friends backed by alloclab-preload's
//! [`TestHeap`], for `LD_PRELOAD`. Test infrastructure: it proves the C API layer and the
//! integration tests before a research heap is plugged in the same way.
//!
//! ```sh
//! cargo build --profile preload -p alloclab-preload-testheap
//! LD_PRELOAD=target/preload/liballoclab_preload_testheap.so python3 -c 'print(sum(range(10)))'
//! ```

use alloclab_preload::testheap::TestHeap;

/// The process-wide heap every exported function uses.
static HEAP: TestHeap = TestHeap::new();

// TestHeap has one lock, so it takes it around fork (ForkHooks).
alloclab_preload::export_malloc_api! {
    heap: HEAP,
    name: "testheap",
    fork_hooks: HEAP,
}
