//! The on-chip models: `alloclab-hls` configured as the paper's baseline (Memluv's bitmap
//! first fit, no defragmentation) and with alloclab's defragmenter.
//!
//! Both share everything but the defragmenter: 7 heaps of 32-bit words, a bit per byte,
//! 4-byte alignment, first fit from the heap base, one cycle per BRAM access and FSM step.
//! The heap size is what the `hls` suite sweeps, so `heap_words` here is only a default.

use alloclab_hls::{DefragConfig, OnChipConfig};

/// Heaps of the `hls` suite's memory (ten accelerators share each).
pub const HLS_HEAPS: usize = 7;

/// The paper's baseline: Memluv's bitmap first fit over [`HLS_HEAPS`] heaps, no
/// defragmentation (`hls-bitmap`).
pub fn bitmap() -> OnChipConfig {
    OnChipConfig {
        heaps: HLS_HEAPS,
        ..OnChipConfig::default()
    }
}

/// The baseline with alloclab's defragmenter (`hls-defrag`).
pub fn defrag() -> OnChipConfig {
    bitmap().with_defrag(DefragConfig::default())
}
