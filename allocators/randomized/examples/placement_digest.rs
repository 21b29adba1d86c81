//! Prints a digest of where a seeded heap places a fixed mix of allocations and frees
//! (offsets within their chunks), to check that a change meant to leave placement alone
//! did: build it before and after, and compare.
//!
//! Run it with address-space randomization off (`setarch -R
//! target/release/examples/placement_digest`): the arena a thread uses comes from its
//! stack's address, and each arena draws from its own stream of the seed.
use alloclab_core::Allocator;
use alloclab_randomized::Randomized;
use core::alloc::Layout;

fn main() {
    let heap = Randomized::with_seed(42).unwrap();
    let mut live: Vec<(core::ptr::NonNull<u8>, Layout)> = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..400_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if live.len() < 3000 && (!x.is_multiple_of(3) || live.is_empty()) {
            let size = 1 + ((x >> 8) % (1 << (4 + (x >> 40) % 12))) as usize;
            let layout = Layout::from_size_align(size, 16).unwrap();
            let p = heap.allocate(layout).unwrap();
            let off = (p.as_ptr() as u64) & ((4 << 20) - 1);
            digest = (digest ^ off).wrapping_mul(0x100_0000_01b3);
            live.push((p, layout));
        } else {
            let i = ((x >> 16) as usize) % live.len();
            let (p, layout) = live.swap_remove(i);
            // SAFETY: `p` came from this heap with this layout and is freed once.
            unsafe { heap.deallocate(p, layout) };
        }
    }
    println!(
        "{digest:016x} {:?}",
        heap.check().map(|s| (s.live_blocks, s.free_blocks))
    );
}
