//! The workspace's SplitMix64 (`alloclab_core::rng`): a small, fixed generator, so that a
//! trace depends on its seed alone (not on the version of a random-number crate).

pub(crate) use alloclab_core::rng::SplitMix64;
