//! Bugs a mutation campaign injects (`cargo xtask mutants alloclab-randomized --patterns`),
//! to measure which tests catch them. Each is compiled in only with `--cfg
//! alloclab_bug="NAME"`, which no build of the allocator sets: without it every item here
//! is the correct value, and the code that uses it is the allocator as it ships. The items
//! are constants, so that the uses add no operator for cargo-mutants to mutate, and
//! `cargo xtask mutants` leaves this file out (mutating what is constant in every real
//! build would only make equivalent mutants).

/// `canary-not-checked`: a block's canary is never compared.
pub(crate) const CANARY_NOT_CHECKED: bool = cfg!(alloclab_bug = "canary-not-checked");
/// `tag-not-checked`: a header's keyed tag is never compared.
pub(crate) const TAG_NOT_CHECKED: bool = cfg!(alloclab_bug = "tag-not-checked");
/// `free-block-pushed-twice`: a freed region goes onto its free list twice.
pub(crate) const FREE_BLOCK_PUSHED_TWICE: bool = cfg!(alloclab_bug = "free-block-pushed-twice");
/// The header bytes an allocation counts in its block's size: the header's 16, or 8 with
/// `header-size-miscounted`.
pub(crate) const HEADER_COUNTED: usize = if cfg!(alloclab_bug = "header-size-miscounted") {
    8
} else {
    crate::heap::HEADER
};
