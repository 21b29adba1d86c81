//! `liballoclab_preload_wfspan.so`: `malloc` and friends backed by [`WfSpan`], for
//! `LD_PRELOAD` — any C or C++ program gets the wait-free span allocator without relinking.
//!
//! ```sh
//! cargo build --profile preload -p alloclab-preload-wfspan
//! LD_PRELOAD=target/preload/liballoclab_preload_wfspan.so python3 -c 'print(sum(range(10)))'
//! ```
//!
//! The `preload` profile is `release` with `panic = "abort"`, and the library is then
//! `no_std`: neither it nor its dependencies link the standard library, whose panic and
//! backtrace machinery would be most of its code (in a program, its resident memory). Built
//! with unwinding panics (`--release`), it links the standard library, as any Rust library.
//!
//! wfspan holds no lock on any path, so `fork` needs no hooks: the child keeps the heaps of
//! the parent's other threads (they are never adopted while marked owned) and allocates
//! from its own, and frees of the other threads' blocks take the remote path.

#![cfg_attr(panic = "abort", no_std)]

use alloclab_wfspan::{Config, WfSpan};

/// The process-wide heap every exported function uses: the default configuration, with
/// the pages of the free span runs a thread publishes for others given back to the OS
/// (`Config::purge_published`): programs run for hours, and memory a thread let go of
/// should not stay resident; a real-time program, which wants no system call on a free
/// path, uses the crate with the default configuration instead.
static HEAP: WfSpan = WfSpan::with_config(Config {
    purge_published: true,
    ..Config::DEFAULT
});

alloclab_preload::export_malloc_api! {
    heap: HEAP,
    name: "wfspan",
}
