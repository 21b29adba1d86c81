//! Bugs a mutation campaign injects (`cargo xtask mutants alloclab-wfspan --patterns`), to
//! measure which tests and loom models catch them. Each is compiled in only with `--cfg
//! alloclab_bug="NAME"`, which no build of the allocator sets: without it every item here
//! is the correct value (or the identity), and the code that uses it is the allocator as it
//! ships. The uses add no operator for cargo-mutants to mutate, and `cargo xtask mutants`
//! leaves this file out (mutating what is constant in every real build would only make
//! equivalent mutants).

use alloclab_core::sync::atomic::Ordering;

/// `class-boundary-off-by-one`: a request that fills its size class exactly gets the class
/// below. Otherwise `class` itself.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn class_for_size(class: usize, size: usize) -> usize {
    if cfg!(alloclab_bug = "class-boundary-off-by-one")
        && class > 0
        && size == crate::size_class::class_bytes(class)
    {
        class - 1
    } else {
        class
    }
}

/// What one remote free adds to its span's count: 1, or 2 with `remote-free-counted-twice`.
pub(crate) const REMOTE_FREE_STEP: u64 = if cfg!(alloclab_bug = "remote-free-counted-twice") {
    2
} else {
    1
};

/// `span-reclaimed-before-last-remote-free`: the next-to-last remote free of a discarded
/// span (`seen + 1 == target`) takes itself for the last. Otherwise `last` itself.
#[inline(always)]
pub(crate) fn is_last_free(last: bool, seen: u64, target: u64) -> bool {
    last || (cfg!(alloclab_bug = "span-reclaimed-before-last-remote-free") && seen + 1 == target)
}

/// The orderings of the remote-free push's swap of the head and store of the link:
/// `AcqRel` and `Release`, or both `Relaxed` with `remote-push-relaxed`.
pub(crate) const PUSH_ORDERINGS: (Ordering, Ordering) =
    if cfg!(alloclab_bug = "remote-push-relaxed") {
        (Ordering::Relaxed, Ordering::Relaxed)
    } else {
        (Ordering::AcqRel, Ordering::Release)
    };
