//! `liballoclab_preload_randomized.so`: `malloc` and friends backed by [`Randomized`], for
//! `LD_PRELOAD` — any C or C++ program gets random placement and checked frees without
//! relinking.
//!
//! ```sh
//! cargo build --profile preload -p alloclab-preload-randomized
//! LD_PRELOAD=target/preload/liballoclab_preload_randomized.so python3 -c 'print(sum(range(10)))'
//! ```
//!
//! The `preload` profile is `release` with `panic = "abort"`, and the library is then
//! `no_std`: neither it nor its dependencies link the standard library, whose panic and
//! backtrace machinery would be most of its code, and with it most of what the library
//! adds to a program's resident memory. Built with unwinding panics (`--release`), it links
//! the standard library, as any Rust library.
//!
//! The heap has locks, so it takes them around `fork` ([`ForkHooks`]); the child also
//! reseeds its generators, so parent and child do not place objects alike.
//!
//! [`ForkHooks`]: alloclab_preload::ForkHooks

#![cfg_attr(panic = "abort", no_std)]

use alloclab_randomized::Randomized;

/// The process-wide heap every exported function uses.
static HEAP: Randomized = Randomized::new();

alloclab_preload::export_malloc_api! {
    heap: HEAP,
    name: "randomized",
    fork_hooks: HEAP,
}
