//! The crash simulator's model, as a specification: what a crash keeps and loses.

use std::sync::{Arc, Mutex};

use alloclab_pmem::persist::{CACHE_LINE, SimMedium, SplitMix64};
use alloclab_pmem::{Medium, MediumKind, PersistStats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Images drawn per property: with 2 or 3 choices per line, the chance that one outcome
/// never shows in this many draws is below 2^-60.
const IMAGES: usize = 64;

fn store_u64(medium: &SimMedium, offset: usize, value: u64) {
    assert!(offset.is_multiple_of(8) && offset + 8 <= medium.len());
    // SAFETY: aligned, in bounds, and the test is single-threaded.
    unsafe { medium.base().add(offset).cast::<u64>().write(value) };
}

fn load_u64(image: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(image[offset..offset + 8].try_into().unwrap())
}

fn images(medium: &SimMedium, seed: u64, count: usize) -> Vec<Box<[u8]>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| medium.crash_image(&mut || rng.random()))
        .collect()
}

#[test]
fn new_medium_is_zeroed_page_aligned_and_simulated() {
    let medium = SimMedium::new(10_000);
    assert_eq!(medium.len(), 10_000);
    assert_eq!(medium.base() as usize % 4096, 0);
    assert_eq!(medium.kind(), MediumKind::Simulated);
    assert!(medium.working_image().iter().all(|&b| b == 0));
    assert!(medium.durable_image().iter().all(|&b| b == 0));
    assert_eq!(medium.unpersisted_lines(), 0);
}

#[test]
fn a_flushed_and_fenced_store_survives_every_crash() {
    let medium = SimMedium::new(4096);
    store_u64(&medium, 128, 0xDEAD_BEEF_0123_4567);
    medium.persist(128, 8);
    // Other lines in flight, so the images do differ from one another.
    store_u64(&medium, 512, 1);
    store_u64(&medium, 1024, 2);
    medium.flush(1024, 8);
    for image in images(&medium, 1, IMAGES) {
        assert_eq!(load_u64(&image, 128), 0xDEAD_BEEF_0123_4567);
    }
    assert_eq!(
        load_u64(&medium.durable_image(), 128),
        0xDEAD_BEEF_0123_4567
    );
}

#[test]
fn an_unflushed_store_survives_some_crashes_and_is_lost_in_others() {
    let medium = SimMedium::new(4096);
    store_u64(&medium, 256, 42);
    let survived = images(&medium, 2, IMAGES)
        .iter()
        .filter(|image| load_u64(image, 256) == 42)
        .count();
    assert!(
        0 < survived && survived < IMAGES,
        "survived {survived} of {IMAGES}"
    );
    assert_eq!(load_u64(&medium.durable_image(), 256), 0);
    assert_eq!(medium.unpersisted_lines(), 1);
}

#[test]
fn a_flush_without_a_fence_may_or_may_not_survive() {
    let medium = SimMedium::new(4096);
    store_u64(&medium, 0, 7);
    medium.flush(0, 8);
    assert_eq!(medium.pending_lines(), 1);
    let survived = images(&medium, 3, IMAGES)
        .iter()
        .filter(|image| load_u64(image, 0) == 7)
        .count();
    assert!(
        0 < survived && survived < IMAGES,
        "survived {survived} of {IMAGES}"
    );
    assert_eq!(load_u64(&medium.durable_image(), 0), 0);
}

#[test]
fn a_line_stored_after_its_flush_can_crash_to_old_flushed_or_newest_contents() {
    let medium = SimMedium::new(4096);
    store_u64(&medium, 64, 1);
    medium.flush(64, 8);
    store_u64(&medium, 64, 2);
    let mut seen = [false; 3];
    for image in images(&medium, 4, IMAGES) {
        let value = load_u64(&image, 64);
        assert!(value <= 2, "crash invented {value}");
        seen[value as usize] = true;
    }
    assert_eq!(seen, [true; 3]);
}

#[test]
fn a_fence_makes_durable_the_contents_at_the_flush_not_later_stores() {
    let medium = SimMedium::new(4096);
    store_u64(&medium, 64, 1);
    medium.flush(64, 8);
    store_u64(&medium, 64, 2);
    medium.fence();
    assert_eq!(load_u64(&medium.durable_image(), 64), 1);
    assert_eq!(medium.pending_lines(), 0);
    assert_eq!(medium.unpersisted_lines(), 1);
    for image in images(&medium, 5, IMAGES) {
        assert!(matches!(load_u64(&image, 64), 1 | 2));
    }
}

#[test]
fn a_store_undone_before_the_crash_can_still_leave_its_flushed_snapshot() {
    // Working contents equal the durable ones again, but a flushed snapshot of the
    // intermediate value may have reached the media.
    let medium = SimMedium::new(4096);
    store_u64(&medium, 0, 9);
    medium.flush(0, 8);
    store_u64(&medium, 0, 0);
    let nines = images(&medium, 6, IMAGES)
        .iter()
        .filter(|image| load_u64(image, 0) == 9)
        .count();
    assert!(0 < nines && nines < IMAGES, "{nines} of {IMAGES}");
}

#[test]
fn aligned_8_byte_stores_are_never_torn_and_a_line_survives_whole() {
    let medium = SimMedium::new(8 * CACHE_LINE);
    let old = |line: usize, word: usize| (line * 8 + word) as u64 * 0x0101_0101_0101_0101;
    let new = |line: usize, word: usize| !old(line, word);
    for line in 0..8 {
        for word in 0..8 {
            store_u64(&medium, line * CACHE_LINE + word * 8, old(line, word));
        }
    }
    medium.persist(0, medium.len());
    for line in 0..8 {
        for word in 0..8 {
            store_u64(&medium, line * CACHE_LINE + word * 8, new(line, word));
        }
        if line % 2 == 0 {
            medium.flush(line * CACHE_LINE, CACHE_LINE);
        }
    }
    let mut lines_new = 0;
    for image in images(&medium, 7, IMAGES) {
        for line in 0..8 {
            let words: Vec<u64> = (0..8)
                .map(|word| load_u64(&image, line * CACHE_LINE + word * 8))
                .collect();
            let all_old = (0..8).all(|w| words[w] == old(line, w));
            let all_new = (0..8).all(|w| words[w] == new(line, w));
            assert!(all_old || all_new, "line {line} torn: {words:x?}");
            lines_new += usize::from(all_new);
        }
    }
    assert!(0 < lines_new && lines_new < IMAGES * 8);
}

#[test]
fn persisting_everything_leaves_one_possible_crash_image() {
    let medium = SimMedium::new(3000);
    for offset in (0..2992).step_by(40) {
        store_u64(&medium, offset, offset as u64 + 1);
    }
    medium.persist(0, medium.len());
    assert_eq!(medium.unpersisted_lines(), 0);
    let working = medium.working_image();
    for image in images(&medium, 8, 8) {
        assert_eq!(image, working);
    }
    assert_eq!(medium.durable_image(), working);
}

#[test]
fn the_same_seed_draws_the_same_crash_images() {
    let medium = SimMedium::new(4096);
    for line in 0..64 {
        store_u64(&medium, line * CACHE_LINE, line as u64 + 1);
    }
    medium.flush(0, 2048);
    let draw = |seed| {
        let mut rng = SplitMix64::new(seed);
        medium.crash_image(&mut || rng.next_u64())
    };
    assert_eq!(draw(11), draw(11));
    assert_ne!(draw(11), draw(12));
}

#[test]
fn a_crash_image_reopens_as_working_and_durable_contents() {
    let medium = SimMedium::new(4096);
    store_u64(&medium, 8, 5);
    store_u64(&medium, 2048, 6);
    medium.persist(8, 8);
    let image = images(&medium, 9, 1).pop().unwrap();
    let reopened = SimMedium::from_image(image.clone());
    assert_eq!(reopened.len(), 4096);
    assert_eq!(reopened.working_image(), image);
    assert_eq!(reopened.durable_image(), image);
    assert_eq!(reopened.unpersisted_lines(), 0);
    assert_eq!(reopened.stats(), PersistStats::default());
    // A `Vec` reopens too, and lengths that are not whole lines keep their length.
    let odd = SimMedium::from_image(vec![3u8; 100]);
    assert_eq!(odd.len(), 100);
    assert_eq!(&*odd.durable_image(), &[3u8; 100][..]);
}

#[test]
fn counters_count_flushes_lines_bytes_and_fences() {
    let medium = SimMedium::new(4096);
    medium.flush(60, 8); // straddles lines 0 and 1
    medium.flush(128, 64); // exactly line 2
    medium.flush(0, 0); // a call, no lines
    medium.fence();
    medium.persist(4000, 96); // lines 62 and 63
    assert_eq!(
        medium.stats(),
        PersistStats {
            lines_flushed: 2 + 1 + 2,
            flushes: 4,
            fences: 2,
            bytes_flushed: 8 + 64 + 96,
        }
    );
    assert_eq!(medium.fences(), 2);
}

#[test]
#[should_panic(expected = "outside a medium")]
fn a_flush_past_the_end_is_a_bug() {
    SimMedium::new(4096).flush(4090, 8);
}

/// A trace of five persisted stores, one per line.
fn five_persisted_stores(medium: &SimMedium) {
    for i in 0..5 {
        store_u64(medium, i * CACHE_LINE, i as u64 + 100);
        medium.persist(i * CACHE_LINE, 8);
    }
}

#[test]
fn a_capture_at_fence_k_is_the_state_just_before_fence_k() {
    let k = 3;
    let medium = SimMedium::new(4096);
    medium.capture_at_fence(k, IMAGES, 13);
    five_persisted_stores(&medium);
    let captures = medium.take_captures();
    assert_eq!(captures.len(), IMAGES);
    let mut third_survived = 0;
    for capture in &captures {
        assert_eq!(capture.fence, k);
        // Stores persisted by fences 1 and 2 survive; the third was flushed, its fence
        // not yet done; the fourth and fifth were not yet made.
        assert_eq!(load_u64(&capture.image, 0), 100);
        assert_eq!(load_u64(&capture.image, CACHE_LINE), 101);
        let third = load_u64(&capture.image, 2 * CACHE_LINE);
        assert!(third == 0 || third == 102);
        third_survived += usize::from(third == 102);
        assert_eq!(load_u64(&capture.image, 3 * CACHE_LINE), 0);
        assert_eq!(load_u64(&capture.image, 4 * CACHE_LINE), 0);
    }
    assert!(0 < third_survived && third_survived < IMAGES);
    assert!(medium.take_captures().is_empty(), "taken once");
}

#[test]
fn a_crash_test_can_rerun_its_trace_once_per_fence_until_no_capture() {
    let mut fences_seen = Vec::new();
    for k in 1.. {
        let medium = SimMedium::new(4096);
        medium.capture_at_fence(k, 2, k);
        five_persisted_stores(&medium);
        let captures = medium.take_captures();
        if captures.is_empty() {
            break;
        }
        assert!(captures.iter().all(|c| c.fence == k));
        // Everything fenced before fence k survives.
        for capture in &captures {
            for i in 0..(k - 1) as usize {
                assert_eq!(load_u64(&capture.image, i * CACHE_LINE), i as u64 + 100);
            }
        }
        fences_seen.push(k);
    }
    assert_eq!(fences_seen, [1, 2, 3, 4, 5]);
}

#[test]
fn capture_at_every_fence_takes_images_at_each_fence_in_order() {
    let medium = SimMedium::new(4096);
    medium.capture_at_every_fence(3, 21);
    five_persisted_stores(&medium);
    let fences: Vec<u64> = medium.take_captures().iter().map(|c| c.fence).collect();
    assert_eq!(fences, [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]);
}

#[test]
fn the_fence_hook_runs_before_its_fence_takes_effect() {
    let medium = SimMedium::new(4096);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    medium.set_fence_hook(Some(Box::new(move |fence, medium: &SimMedium| {
        let durable = medium.durable_image();
        let mut rng = SplitMix64::new(fence);
        let image = medium.crash_image(&mut || rng.next_u64());
        log.lock().unwrap().push((
            fence,
            medium.pending_lines(),
            load_u64(&durable, (fence as usize - 1) * CACHE_LINE),
            image.len(),
        ));
    })));
    five_persisted_stores(&medium);
    medium.set_fence_hook(None);
    medium.fence();
    let seen = seen.lock().unwrap();
    // Each hook saw its own line pending and not yet durable.
    let expected: Vec<_> = (1..=5).map(|k| (k, 1, 0, 4096)).collect();
    assert_eq!(*seen, expected);
    assert_eq!(medium.fences(), 6);
}

#[test]
fn flushes_and_fences_from_many_threads_are_all_counted_and_applied() {
    let medium = Arc::new(SimMedium::new(64 * CACHE_LINE));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let medium = Arc::clone(&medium);
            std::thread::spawn(move || {
                // Each thread owns lines t, t + 4, t + 8, ….
                for line in (t..64).step_by(4) {
                    store_u64(&medium, line * CACHE_LINE, line as u64 + 1);
                    medium.persist(line * CACHE_LINE, 8);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let stats = medium.stats();
    assert_eq!(
        (stats.flushes, stats.fences, stats.lines_flushed),
        (64, 64, 64)
    );
    assert_eq!(medium.unpersisted_lines(), 0);
    let durable = medium.durable_image();
    for line in 0..64 {
        assert_eq!(load_u64(&durable, line * CACHE_LINE), line as u64 + 1);
    }
}
