//! The traces replayed on the harness's two non-host allocators, where sizes fit: the GPU
//! page pool (`alloclab-gpu`, 512-byte pages) and the on-chip FPGA memory model
//! (`alloclab-hls`), through the same `replay_host` as the host heaps.

use alloclab_alloc_traces::switch::{self, SwitchConfig};
use alloclab_alloc_traces::uav::{self, UavConfig};
use alloclab_core::{Allocator, SystemHeap};
use alloclab_gpu::PagePool;
use alloclab_hls::{OnChipConfig, SharedOnChip};
use alloclab_training::replay::{HostReplay, replay_aligned, replay_host};

#[test]
fn the_switch_trace_replays_on_the_gpu_page_pool_cell_per_page_and_leaves_it_empty() {
    let w = switch::generate(&SwitchConfig::default()).unwrap();
    let host = replay_host(&w.run, &SystemHeap::new(), 1).unwrap();
    // 256-byte cells: one 512-byte page each; room for twice the peak.
    let pool = PagePool::with_default_page_size((w.peak_cells as usize * 2).max(64)).unwrap();
    let on_pool = replay_host(&w.run, &pool, 1).unwrap();
    assert_eq!(
        same_run(on_pool),
        same_run(host),
        "the pool sees the run the host heap sees"
    );
    assert_eq!(on_pool.peak_live_bytes, w.peak_cells * 256);
    let stats = pool.stats();
    assert_eq!(stats.allocations, Some(on_pool.allocations));
    assert_eq!(
        stats.allocations, stats.deallocations,
        "every cell given back"
    );
}

#[test]
fn the_uav_trace_scaled_to_bram_replays_on_the_on_chip_model() {
    let w = uav::generate(&UavConfig::default()).unwrap();
    // Tiles of 16-256 KiB scaled by 1/1024 to 16-256 bytes: about 4.6 KiB live at once,
    // in one 16 KiB heap of 32-bit words.
    let scale = 1024;
    let host = replay_host(&w.run, &SystemHeap::new(), scale).unwrap();
    let config = OnChipConfig {
        heap_words: 4096,
        ..OnChipConfig::default()
    };
    let chip = SharedOnChip::new("onchip-uav", config).unwrap();
    // The model's words are 4 bytes: blocks 4-byte aligned, as its accelerators ask.
    let on_chip = replay_aligned(&w.run, &chip, scale, 4).unwrap();
    assert_eq!(
        same_run(on_chip),
        same_run(host),
        "the model sees the run the host heap sees"
    );
    assert!(on_chip.peak_live_bytes <= 16 * 1024);
    let stats = chip.stats();
    assert_eq!(
        stats.allocations, stats.deallocations,
        "every tile given back"
    );
}

/// What any allocator that serves the whole run must agree on (footprints differ).
fn same_run(r: HostReplay) -> (u64, u64) {
    (r.peak_live_bytes, r.allocations)
}
