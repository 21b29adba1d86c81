//! `liballoclab_preload_randomized.so`: `malloc` and friends backed by [`Randomized`], for
//! `LD_PRELOAD` — any C or C++ program gets random placement and checked frees without
//! relinking.
//!
//! ```sh
//! cargo build --profile preload -p alloclab-preload-randomized
//! LD_PRELOAD=target/preload/liballoclab_preload_randomized.so python3 -c 'print(sum(range(10)))'
//! ```
//!
//! The heap has one lock, so it takes it around `fork` ([`ForkHooks`]); the child also
//! reseeds its generator, so parent and child do not place objects alike.
//!
//! [`ForkHooks`]: alloclab_preload::ForkHooks

use alloclab_randomized::Randomized;

/// The process-wide heap every exported function uses.
static HEAP: Randomized = Randomized::new();

alloclab_preload::export_malloc_api! {
    heap: HEAP,
    name: "randomized",
    fork_hooks: HEAP,
}
