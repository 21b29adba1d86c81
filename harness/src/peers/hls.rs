//! The on-chip models: `alloclab-hls` configured as the paper's baseline (Memluv's bitmap
//! first fit, no defragmentation) and with alloclab's defragmenter.
//!
//! Both share everything but the defragmenter: 7 heaps of 32-bit words, a bit per byte,
//! 4-byte alignment, first fit from the heap base, one cycle per BRAM access and FSM step.
//! The heap size is what the `hls` suite sweeps, so `heap_words` here is only a default.

use alloclab_hls::{DefragConfig, OnChipConfig};

/// Heaps of the `hls` suite's memory (ten accelerators share each).
pub const HLS_HEAPS: usize = 7;

/// The configuration of the on-chip model registered as `name`; `None` for other names.
pub fn on_chip_config(name: &str) -> Option<OnChipConfig> {
    let baseline = OnChipConfig {
        heaps: HLS_HEAPS,
        ..OnChipConfig::default()
    };
    match name {
        "hls-bitmap" => Some(baseline),
        "hls-defrag" => Some(baseline.with_defrag(DefragConfig::default())),
        _ => None,
    }
}
