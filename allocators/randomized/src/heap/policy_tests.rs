//! The placement policy (see the module documentation of [`heap`](super)), checked against
//! a model of it: before every allocation of a long churn the test reads the arena's free
//! lists and wilderness, works out from them alone which blocks the policy allows, and
//! checks where the object went.
//!
//! The model states the policy as the documentation does, not as the code computes it:
//!
//! - the candidates of a request of block size `want` are the blocks of the classes that
//!   fit it, up to the class of `max(RANGE_MIN, RANGE * want)` bytes for requests of at
//!   most 1056 bytes (a 1 KiB payload, its header and an alignment's worth), and of
//!   `2 * want + WINDOW` above;
//! - there are enough candidates when there are at least `RESERVE_BLOCKS` of them, or when
//!   they hold `RESERVE_REQUESTS` requests' worth of bytes (clamped to `RESERVE_MIN ..=
//!   RESERVE_MAX`);
//! - with enough, the object goes in the oldest block of a class drawn with probability
//!   proportional to the class's number of candidates, at most `WINDOW` bytes in if the
//!   block is over `SPREAD_MAX` bytes;
//! - with too few, within the first `WINDOW` bytes of the oldest block of the smallest
//!   non-empty larger class, or else of the wilderness, or else in a drawn candidate, or
//!   else in the first block of the partly fitting class that fits, or else a new chunk.
//!
//! Membership and the order of the fallbacks are checked on every allocation. That the
//! class is drawn in proportion to the counts is checked over all of them: the class drawn,
//! as a position in the candidates' cumulative distribution (the midpoint of its step), has
//! mean exactly 1/2 whatever the counts; a policy that leaves out the largest or the
//! smallest candidates moves the mean away from it.

use alloclab_core::Allocator;
use core::alloc::Layout;

use super::class::*;
use super::header::*;
use super::*;
use crate::Randomized;
use crate::rng::Rng;

/// A free block as the snapshot saw it.
#[derive(Clone, Copy, Debug)]
struct Free {
    h: usize,
    size: usize,
    /// Whether it was the oldest block of its class.
    oldest: bool,
}

/// The arena's free blocks (class by class, oldest first) and its wilderness, before an
/// allocation.
struct Snapshot {
    by_class: Vec<Vec<Free>>,
    wild: Option<(usize, usize)>,
}

impl Snapshot {
    fn of(arena: &Arena) -> Self {
        let mut by_class = vec![Vec::new(); CLASSES];
        for (class, blocks) in by_class.iter_mut().enumerate() {
            let s = arena.sentinel(class);
            // SAFETY: the arena's lock is held (the caller's guard); its lists are rings of
            // its free blocks through their sentinels.
            let mut h = unsafe { rd(s + NEXT) };
            while h != s {
                // SAFETY: as above: `h` is a free block of this arena.
                let (w0, _) = unsafe { arena.get_or_die(h) };
                blocks.push(Free {
                    h,
                    size: w0 & !FLAGS,
                    oldest: blocks.is_empty(),
                });
                // SAFETY: as above.
                h = unsafe { rd(h + NEXT) };
            }
        }
        let wild = (arena.wild != 0).then_some((arena.wild, arena.wild_end));
        Snapshot { by_class, wild }
    }

    /// The free block holding the header at `at`, with its class.
    fn holding(&self, at: usize) -> Option<(usize, Free)> {
        self.by_class
            .iter()
            .enumerate()
            .find_map(|(class, blocks)| {
                blocks
                    .iter()
                    .find(|b| b.h <= at && at < b.h + b.size)
                    .map(|b| (class, *b))
            })
    }
}

/// What the policy says of a request, from a snapshot alone.
struct Expected {
    want: usize,
    first: usize,
    partial: Option<usize>,
    last: usize,
    blocks: usize,
    enough: bool,
}

fn expected(snap: &Snapshot, size: usize, align: usize) -> Expected {
    let need = (size.next_multiple_of(GRANULE) + HEADER).max(MIN_BLOCK);
    // The first aligned place of a block may be 16 bytes in, too close for the slack
    // before it to stand as a block: room for the alignment twice over, less that.
    let want = if align > GRANULE {
        need + align + GRANULE
    } else {
        need
    };
    let (first, partial) = fitting_classes(want);
    let cap = if want <= 1056 {
        RANGE_MIN.max(RANGE * want)
    } else {
        2 * want + WINDOW
    };
    let last = class_of(cap.min(CHUNK)).max(first);
    let candidates = snap.by_class[first..=last].iter().flatten();
    let (blocks, bytes) = candidates.fold((0, 0), |(n, b), f| (n + 1, b + f.size as u64));
    let reserve = (RESERVE_REQUESTS * want as u64).clamp(RESERVE_MIN, RESERVE_MAX);
    let enough = blocks as u64 >= RESERVE_BLOCKS || (blocks > 0 && bytes >= reserve);
    Expected {
        want,
        first,
        partial,
        last,
        blocks,
        enough,
    }
}

/// Running sums of the class drawn's position in the candidates' distribution.
#[derive(Default)]
struct Draws {
    n: usize,
    sum: f64,
    variance: f64,
}

impl Draws {
    /// Adds a draw of class `class` among the candidates of `e`.
    fn add(&mut self, snap: &Snapshot, e: &Expected, class: usize) {
        let total = e.blocks as f64;
        let (mut below, mut mid, mut second_moment) = (0.0, None, 0.0);
        for c in e.first..=e.last {
            let n = snap.by_class[c].len() as f64;
            let m = (below + n / 2.0) / total;
            second_moment += n / total * m * m;
            if c == class {
                mid = Some(m);
            }
            below += n;
        }
        self.n += 1;
        self.sum += mid.expect("the class drawn is a candidate class");
        self.variance += second_moment - 0.25;
    }

    /// How many standard deviations the sum lies from its mean.
    fn z(&self) -> f64 {
        (self.sum - self.n as f64 / 2.0) / self.variance.sqrt()
    }
}

/// A random request: log-uniform sizes from 16 B to 64 KiB, one in eight with an
/// alignment of 64 B to 4 KiB.
fn request(rng: &mut Rng) -> Layout {
    let e = 4 + rng.below(12) as u32;
    let size = (1usize << e) + rng.below(1 << e) as usize;
    let align = if rng.below(8) == 0 {
        64 << (2 * rng.below(4))
    } else {
        8
    };
    Layout::from_size_align(size, align).unwrap()
}

/// Checks where the object at `payload` went against what `e` allows; counts the draws.
fn check_placement(
    snap: &Snapshot,
    e: &Expected,
    layout: Layout,
    payload: usize,
    draws: &mut Draws,
) -> Result<(), String> {
    let align = layout.align().max(GRANULE);
    let window = WINDOW.max(align + GRANULE);
    let h = payload - HEADER;
    let source = snap.holding(h);
    let what = format!(
        "{} B aligned {align} (want {}, classes {}..={}, {} candidates, enough {}): header {h:#x} in {source:?}",
        layout.size(),
        e.want,
        e.first,
        e.last,
        e.blocks,
        e.enough,
    );
    // A drawn candidate: the oldest of a candidate class, anywhere in it (within WINDOW of
    // its front if it is over SPREAD_MAX).
    let drawn = |draws: &mut Draws| match source {
        Some((class, b)) if (e.first..=e.last).contains(&class) && b.oldest => {
            let max = if b.size > SPREAD_MAX { window } else { b.size };
            if h - b.h > max {
                return Err(format!("{what}: {} bytes in, past {max}", h - b.h));
            }
            draws.add(snap, e, class);
            Ok(())
        }
        _ => Err(format!("{what}: not the oldest block of a candidate class")),
    };
    if e.enough {
        return drawn(draws);
    }
    let larger = (e.last + 1..CLASSES).find(|&c| !snap.by_class[c].is_empty());
    if let Some(class) = larger {
        let b = snap.by_class[class][0];
        return if h >= b.h && h - b.h <= window {
            Ok(())
        } else {
            Err(format!(
                "{what}: not within {window} B of the front of the oldest block of class {class}, the smallest larger one ({b:?})"
            ))
        };
    }
    if let Some((wild, end)) = snap.wild
        && end - wild >= e.want + MIN_BLOCK
    {
        return if h >= wild && h - wild <= window {
            Ok(())
        } else {
            Err(format!(
                "{what}: not within {window} B of the wilderness front {wild:#x}"
            ))
        };
    }
    if e.blocks > 0 {
        return drawn(draws);
    }
    if let Some(b) = e
        .partial
        .and_then(|c| snap.by_class[c].iter().find(|b| b.size >= e.want))
    {
        return if h >= b.h && h < b.h + b.size {
            Ok(())
        } else {
            Err(format!(
                "{what}: not in the first fitting block of the partly fitting class ({b:?})"
            ))
        };
    }
    // A new chunk: the first block after its header, within the window.
    let start = (h & !(CHUNK - 1)) + CHUNK_HEADER;
    if source.is_none() && h >= start && h - start <= window {
        Ok(())
    } else {
        Err(format!(
            "{what}: not within {window} B of the front of a new chunk"
        ))
    }
}

#[test]
fn every_allocation_of_a_churn_lands_where_the_placement_policy_allows() {
    let heap = Randomized::with_seed(0x9011_c1e5).unwrap();
    let root = heap.existing_root().expect("built by with_seed");
    let mut rng = Rng::from_seed_stream([0x51; 32], 0);
    let mut live: Vec<(core::ptr::NonNull<u8>, Layout)> = Vec::new();
    let mut draws = Draws::default();
    let (mut fallbacks, mut failures) = (0, Vec::new());
    for step in 0..6000 {
        // Grow to 600 live blocks, then replace one at random per step.
        if live.len() >= 600 {
            let (p, l) = live.swap_remove(rng.below(live.len() as u64) as usize);
            // SAFETY: allocated below with `l`, freed once.
            unsafe { heap.deallocate(p, l) };
        }
        let layout = request(&mut rng);
        // One thread, its own heap: the arena `lock_any` picks now is the one the
        // allocation locks next.
        let (snap, e) = {
            let arena = root.lock_any();
            let snap = Snapshot::of(&arena);
            let e = expected(&snap, layout.size(), layout.align().max(GRANULE));
            (snap, e)
        };
        let p = heap.allocate(layout).unwrap();
        let align = layout.align().max(GRANULE);
        if crate::randomized::slab_class(heap.checks(), layout.size(), align).is_some() {
            // A slab slot: not placed by this policy (see `slab/`).
            live.push((p, layout));
            continue;
        }
        fallbacks += usize::from(!e.enough);
        if let Err(why) = check_placement(&snap, &e, layout, p.as_ptr() as usize, &mut draws) {
            failures.push(format!("step {step}: {why}"));
        }
        live.push((p, layout));
    }
    heap.check().unwrap();
    for (p, l) in live {
        // SAFETY: live, allocated with `l`.
        unsafe { heap.deallocate(p, l) };
    }
    assert!(
        failures.is_empty(),
        "{} of 6000 allocations broke the policy; the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Both sides of the reserve decision are exercised.
    assert!(
        fallbacks > 100 && draws.n > 2000,
        "{fallbacks} fallbacks, {} draws",
        draws.n
    );
    let z = draws.z();
    println!(
        "{} draws (z = {z:.2}), {fallbacks} fallbacks to fresh slack",
        draws.n
    );
    assert!(
        z.abs() < 5.0,
        "the classes drawn sit {z:.1} standard deviations from where draws in proportion to the counts would ({} draws)",
        draws.n
    );
}
