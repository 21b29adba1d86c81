//! Tests of the slabs' classes, layout, bytes and windows.

use super::alloc::*;
use super::bytes::*;
use super::*;

#[test]
fn every_request_takes_the_smallest_slot_that_holds_it() {
    for need in 0..=SLOT_MAX {
        let class = class_of(need).expect("a slot up to the largest");
        assert!(
            SLOT_SIZES[class] >= need,
            "{need}: slot {}",
            SLOT_SIZES[class]
        );
        if class > 0 {
            assert!(SLOT_SIZES[class - 1] < need, "{need}: a smaller slot fits");
        }
    }
    assert_eq!(class_of(SLOT_MAX + 1), None);
    assert_eq!(class_of(usize::MAX / 2), None);
}

#[test]
fn powers_of_two_and_their_half_steps_fit_a_slot_just_above_with_the_canary_byte() {
    // 128 B and below: the 16-byte steps. Above: every power of two and one and a half
    // times one up to 1 KiB, with its canary byte, takes a slot at most 16 bytes larger.
    for size in [16usize, 32, 64, 128, 192, 256, 384, 512, 768, 1024] {
        let slot = SLOT_SIZES[class_of(size + 1).expect("a slab size")];
        assert!(
            slot > size && slot <= size + 16,
            "{size} B with its canary byte takes a slot of {slot}"
        );
    }
    // From 144 B a slot is at most one and a half times the one below it, plus 16 bytes:
    // a request never takes much more than one and a half times what it needs.
    for pair in SLOT_SIZES.windows(2).filter(|p| p[0] >= 144) {
        assert!(
            pair[1] - pair[0] <= pair[0] / 2 + 16,
            "{} after {}",
            pair[1],
            pair[0]
        );
    }
}

/// A 16-byte-aligned buffer of 160 bytes, each `fill`.
#[repr(align(16))]
struct Buffer([u8; 160]);

#[test]
fn a_canary_span_is_written_and_read_exactly_over_its_bytes() {
    for n in 1..=CANARY_SPAN {
        for start in 0..16 {
            let mut buffer = Buffer([0; 160]);
            // Every access goes through this pointer, the span's as the test's.
            let base = buffer.0.as_mut_ptr() as usize + 32;
            // SAFETY: offsets -32..128 from `base` lie in the buffer, which nothing
            // else uses.
            let byte = |i: usize| unsafe { ((base + i) as *const u8).read() };
            // SAFETY: as above.
            let flip = |i: usize, bits: u8| unsafe {
                let at = (base + i) as *mut u8;
                at.write(at.read() ^ bits);
            };
            // SAFETY: as above.
            unsafe { fill_span(base + start, n, 0xa5) };
            for i in 0..32 {
                let inside = (start..start + n).contains(&i);
                assert_eq!(
                    byte(i),
                    if inside { 0xa5 } else { 0 },
                    "n {n}, start {start}, byte {i}"
                );
            }
            // SAFETY: as above.
            assert_eq!(unsafe { span_differs(base + start, n, 0xa5) }, 0);
            for at in start..start + n {
                flip(at, 0x10);
                // SAFETY: as above.
                let diff = unsafe { span_differs(base + start, n, 0xa5) };
                assert_ne!(diff, 0, "n {n}, start {start}: byte {at} changed, unseen");
                flip(at, 0x10);
            }
            // Bytes around the span are not the span's.
            flip(start + n, 1);
            if start > 0 {
                flip(start - 1, 1);
            }
            // SAFETY: as above.
            assert_eq!(unsafe { span_differs(base + start, n, 0xa5) }, 0);
        }
    }
}

#[test]
fn zeroing_granules_clears_exactly_them() {
    for len in (16..=128).step_by(16) {
        let mut buffer = Buffer([0xff; 160]);
        let base = buffer.0.as_mut_ptr() as usize;
        // SAFETY: `[16, 16 + len)` lies in the buffer, 16-byte aligned.
        unsafe { zero_granules(base + 16, len) };
        for i in 0..160 {
            let inside = (16..16 + len).contains(&i);
            // SAFETY: a byte of the buffer.
            let b = unsafe { ((base + i) as *const u8).read() };
            assert_eq!(b, if inside { 0 } else { 0xff }, "len {len}, byte {i}");
        }
    }
}

#[test]
fn the_reciprocal_divides_every_offset_of_every_slab_exactly() {
    for (class, &slot) in SLOT_SIZES.iter().enumerate() {
        let layout = Layout::of(slot);
        assert!(layout.slots + layout.capacity * slot <= SLAB, "{slot}");
        assert!(
            layout.records + 4 * layout.capacity + 16 <= layout.slots,
            "{slot}"
        );
        let header = Slab {
            arena: 0,
            slot: slot as u32,
            capacity: layout.capacity as u32,
            class: class as u32,
            records: layout.records as u32,
            slots: layout.slots as u32,
            reciprocal: (1u64 << 32).div_ceil(slot as u64) as u32,
            state: State::new(0, 0),
        };
        // Every 16-byte-aligned offset a pointer into the slab can have.
        for offset in (0..SLAB - layout.slots).step_by(16) {
            assert_eq!(
                slot_index(&header, offset),
                offset / slot,
                "{slot} B, {offset}"
            );
        }
    }
}

#[test]
fn the_untouched_count_follows_the_window_and_the_slots_handed_out() {
    let mapping = os::map_aligned(SLAB, SLAB).expect("a slab's worth of memory");
    let base = mapping.as_ptr() as usize;
    let class = class_of(272).unwrap();
    let slot = SLOT_SIZES[class];
    // SAFETY: a fresh mapping of one slab, this test's alone.
    unsafe { init_slab(base, 0, class, None) };
    // SAFETY: as above.
    let c = unsafe { header(base) };
    let page_of = |address: usize| (address - base) / fill::PAGE_MIN;
    let span = |c: &Slab, window: usize| {
        page_of(slot_address(c, 0) - 1)..=page_of(slot_address(c, window) - 1)
    };
    // SAFETY: a set-up slab, its window above 0 and within its capacity.
    unsafe { grow_window(base, c, MIN_WINDOW) };
    assert_eq!(c.state.untouched as usize, span(c, MIN_WINDOW).count());
    // Slots handed out from the top: the count falls as their pages are touched, and
    // reaches 0 when every page of the window is.
    let mut last = c.state.untouched;
    for index in (0..MIN_WINDOW).rev() {
        // SAFETY: a free slot of the slab, in its window.
        unsafe { touch_slot(base, c, slot_address(c, index), slot) };
        assert!(c.state.untouched <= last, "slot {index}");
        last = c.state.untouched;
    }
    assert_eq!(c.state.untouched, 0);
    // A wider window counts only its new pages.
    let old = span(c, MIN_WINDOW);
    // SAFETY: as above.
    unsafe { grow_window(base, c, 2 * MIN_WINDOW) };
    let new = span(c, 2 * MIN_WINDOW)
        .filter(|page| !old.contains(page))
        .count();
    assert_eq!(c.state.untouched as usize, new);
    // SAFETY: the slab's slots were never handed to anyone.
    unsafe { os::unmap(mapping, SLAB) };
}

#[test]
fn a_window_always_leaves_room_for_a_draw_among_many() {
    // The growth rule of `slab_refill`, for every live count a slab can hold: the
    // window it grows to has room (or is the whole slab).
    for &slot in &SLOT_SIZES {
        let capacity = Layout::of(slot).capacity;
        for live in 0..capacity {
            let want = (live + MIN_FREE as usize)
                .max(live * 8 / 7 + 64)
                .max(MIN_WINDOW);
            let window = want.next_multiple_of(64).min(capacity);
            let header = Slab {
                arena: 0,
                slot: slot as u32,
                capacity: capacity as u32,
                class: 0,
                records: 0,
                slots: 0,
                reciprocal: 0,
                state: State::new(window as u32, live as u32),
            };
            if window < capacity {
                assert!(has_room(&header), "{slot} B, {live} live: window {window}");
            }
        }
    }
}

#[test]
fn the_free_list_names_each_free_slot_of_the_window_once() {
    let mapping = os::map_aligned(SLAB, SLAB).expect("a slab's worth of memory");
    let base = mapping.as_ptr() as usize;
    let class = class_of(64).unwrap();
    // SAFETY: a fresh mapping of one slab, this test's alone.
    unsafe { init_slab(base, 0, class, None) };
    // SAFETY: as above.
    let c = unsafe { header(base) };
    // SAFETY: a set-up slab, its window above 0 and within its capacity.
    unsafe { grow_window(base, c, MIN_WINDOW) };
    // SAFETY: a set-up slab, nobody else's.
    let matches = |c: &Slab| unsafe { walk::free_list_matches(base, c) };
    let entries = |c: &Slab| -> Vec<u16> {
        let free = (c.state.window - c.state.live) as usize;
        // SAFETY: entries in use, below the capacity.
        (0..free)
            .map(|at| unsafe { free_entry(c, at).read() })
            .collect()
    };
    let mut listed = entries(c);
    listed.sort_unstable();
    assert_eq!(listed, (0..MIN_WINDOW as u16).collect::<Vec<_>>());
    assert!(matches(c).is_ok());
    // A wider window lists its new slots too, after the ones listed.
    // SAFETY: as above.
    unsafe { grow_window(base, c, 2 * MIN_WINDOW) };
    let mut listed = entries(c);
    listed.sort_unstable();
    assert_eq!(listed, (0..2 * MIN_WINDOW as u16).collect::<Vec<_>>());
    // An entry written over with another free slot's index names that slot twice, and
    // one with a slot past the window names none of the window's: the walk reports both.
    // SAFETY: an entry in use of this test's slab.
    unsafe {
        let first = free_entry(c, 0).read();
        free_entry(c, 0).write(free_entry(c, 1).read());
        assert!(matches(c).is_err(), "a slot named twice");
        free_entry(c, 0).write(2 * MIN_WINDOW as u16);
        assert!(matches(c).is_err(), "a slot past the window");
        free_entry(c, 0).write(first);
    }
    assert!(matches(c).is_ok());
    // SAFETY: the slab's slots were never handed to anyone.
    unsafe { os::unmap(mapping, SLAB) };
}
