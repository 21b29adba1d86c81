//! The workspace's SplitMix64 (`alloclab_core::rng`), so every simulation and every probe
//! sequence is reproducible from one `u64`.

pub use alloclab_core::rng::{SplitMix64, mix};
