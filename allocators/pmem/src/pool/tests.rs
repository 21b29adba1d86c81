//! The pool format's specification, as tests: create/open, every refusal (and that it
//! writes nothing), header repair, crashes during create, relocation, roots and pointers.

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::header::{
    BACKUP_OFFSET, FORMAT_VERSION, HEADER_AREA_BYTES, HEADER_COPY_BYTES, HeaderBytes,
    PRIMARY_OFFSET, reseal,
};
use super::testing::TestMedium;
use super::*;
use crate::Medium;

const POOL_BYTES: usize = 64 * 1024;

fn fresh_pool_bytes(root_size: usize) -> Vec<u8> {
    let medium = TestMedium::new(POOL_BYTES);
    Pool::create(&medium, root_size).unwrap();
    medium.bytes()
}

fn copy_at(bytes: &[u8], offset: usize) -> HeaderBytes {
    bytes[offset..offset + HEADER_COPY_BYTES]
        .try_into()
        .unwrap()
}

/// The pool's bytes with both header copies replaced by `edit`ed, validly sealed ones.
fn with_header(mut bytes: Vec<u8>, edit: impl Fn(&mut Header)) -> Vec<u8> {
    let mut header = Header::decode(&copy_at(&bytes, PRIMARY_OFFSET)).unwrap();
    edit(&mut header);
    let image = header.encode();
    for copy in [PRIMARY_OFFSET, BACKUP_OFFSET] {
        bytes[copy..copy + HEADER_COPY_BYTES].copy_from_slice(&image);
    }
    bytes
}

/// Opening `bytes` fails with `expected`, and not one byte is written or flushed.
fn assert_refused(bytes: &[u8], expected: PoolError) {
    let medium = TestMedium::from_bytes(bytes);
    let error = Pool::open(&medium).expect_err("open accepted a bad pool");
    assert_eq!(error, expected);
    assert!(medium.bytes() == bytes, "a refused open changed the bytes");
    let stats = medium.stats();
    assert_eq!(
        (stats.flushes, stats.fences),
        (0, 0),
        "a refused open flushed"
    );
}

#[test]
fn create_then_open_round_trips_header_layout_and_root() {
    let medium = TestMedium::new(POOL_BYTES);
    let pool = Pool::create(&medium, 100).unwrap();
    let created = *pool.header();
    assert_eq!(
        medium.stats().fences,
        4,
        "create: erase, body, primary magic, backup"
    );
    assert_eq!(created.pool_size, POOL_BYTES as u64);
    assert_eq!(
        pool.root_range(),
        Region {
            offset: 256,
            len: 100
        }
    );
    assert!(pool.metadata_range().offset >= 256 + 128);
    assert!(pool.heap_range().end() <= POOL_BYTES);
    let root = pool.root::<[u8; 100]>().unwrap();
    // SAFETY: the root is 100 bytes inside the mapping, not otherwise referenced.
    unsafe { root.write([7; 100]) };
    pool.medium().persist(pool.root_range().offset, 100);
    let _closed: &TestMedium = pool.into_medium();

    let flushes_before = medium.stats().flushes;
    let pool = Pool::open(&medium).unwrap();
    assert_eq!(*pool.header(), created);
    assert_ne!(created.pool_id, [0; 16]);
    // SAFETY: as above.
    assert_eq!(unsafe { *pool.root::<[u8; 100]>().unwrap() }, [7; 100]);
    assert_eq!(
        medium.stats().flushes,
        flushes_before,
        "open of a healthy pool wrote"
    );
}

#[test]
fn two_pools_get_different_ids() {
    let a = Pool::create(TestMedium::new(POOL_BYTES), 0).unwrap();
    let b = Pool::create(TestMedium::new(POOL_BYTES), 0).unwrap();
    assert_ne!(a.pool_id(), b.pool_id());
}

#[test]
fn create_zeroes_root_and_metadata_and_leaves_no_other_header_bytes() {
    // A roomy pool, and the smallest ones (whose metadata is a single cache line).
    for (size, root) in [
        (POOL_BYTES, 200),
        (min_pool_size(200).unwrap(), 200),
        (min_pool_size(0).unwrap(), 0),
    ] {
        let medium = TestMedium::from_bytes(&vec![0x5a; size]);
        let pool = Pool::create(&medium, root).unwrap();
        let bytes = medium.bytes();
        let meta = pool.metadata_range();
        assert!(bytes[256..meta.offset].iter().all(|&b| b == 0));
        assert!(bytes[meta.offset..meta.end()].iter().all(|&b| b == 0));
        assert_eq!(copy_at(&bytes, PRIMARY_OFFSET), pool.header().encode());
        assert_eq!(copy_at(&bytes, BACKUP_OFFSET), pool.header().encode());
        // The heap is the allocator's: create leaves it.
        assert!(
            bytes[pool.heap_range().offset..].iter().all(|&b| b == 0x5a),
            "a pool of {size} bytes, root {root}: create wrote into the heap"
        );
        // Everything create wrote is durable.
        assert!(medium.durable_image() == bytes);
    }
}

#[test]
fn create_refuses_a_medium_too_small_for_its_root_and_writes_nothing() {
    let min = min_pool_size(1000).unwrap();
    let medium = TestMedium::from_bytes(&vec![0x11; min - 1]);
    let error = Pool::create(&medium, 1000).unwrap_err();
    assert_eq!(
        error,
        PoolError::TooSmall {
            size: (min - 1) as u64,
            min: min as u64
        }
    );
    assert_eq!(
        error.to_string(),
        format!("size too small: {} bytes, at least {min} needed", min - 1)
    );
    assert!(medium.bytes().iter().all(|&b| b == 0x11));
    assert!(Pool::create(TestMedium::new(min), 1000).is_ok());
}

#[test]
fn open_refuses_a_medium_smaller_than_the_header() {
    let bytes = fresh_pool_bytes(64)[..HEADER_AREA_BYTES - 1].to_vec();
    assert_refused(
        &bytes,
        PoolError::TooSmall {
            size: 255,
            min: 256,
        },
    );
    assert_eq!(
        PoolError::TooSmall {
            size: 255,
            min: 256
        }
        .to_string(),
        "size too small: 255 bytes, at least 256 needed"
    );
}

#[test]
fn open_refuses_what_is_not_a_pool() {
    let mut bytes = vec![0u8; POOL_BYTES];
    bytes[..16].copy_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    assert_refused(
        &bytes,
        PoolError::NotAPool {
            found: bytes[..16].try_into().unwrap(),
        },
    );
    assert_refused(
        &vec![0u8; POOL_BYTES],
        PoolError::NotAPool { found: [0; 16] },
    );
    // A medium exactly as long as the header area is read: what it lacks is a pool, not
    // room for a header.
    assert_refused(
        &vec![0u8; HEADER_AREA_BYTES],
        PoolError::NotAPool { found: [0; 16] },
    );
}

#[test]
fn open_refuses_another_format_version() {
    let bytes = with_header(fresh_pool_bytes(64), |h| h.version = 7);
    let expected = PoolError::UnsupportedVersion {
        found: 7,
        supported: FORMAT_VERSION,
    };
    assert_eq!(
        expected.to_string(),
        "pool format version 7, this build reads 1"
    );
    assert_refused(&bytes, expected.clone());

    // Half-way through an upgrade (primary rewritten by a newer build, backup still ours):
    // refused, not "repaired" back to version 1.
    let mut half = fresh_pool_bytes(64);
    let newer = copy_at(
        &with_header(half.clone(), |h| h.version = 7),
        PRIMARY_OFFSET,
    );
    half[..HEADER_COPY_BYTES].copy_from_slice(&newer);
    assert_refused(&half, expected);
}

#[test]
fn open_refuses_a_header_whose_copies_both_fail_their_checksum() {
    let mut bytes = fresh_pool_bytes(64);
    bytes[PRIMARY_OFFSET + 30] ^= 0x40; // pool_size, high bytes
    bytes[BACKUP_OFFSET + 50] ^= 0x01; // root_offset
    let error = Pool::open(TestMedium::from_bytes(&bytes)).unwrap_err();
    let PoolError::BadChecksum { stored, computed } = error else {
        panic!("expected BadChecksum, got {error:?}");
    };
    assert_ne!(stored, computed);
    assert_refused(&bytes, PoolError::BadChecksum { stored, computed });
}

#[test]
fn open_refuses_a_truncated_pool() {
    let bytes = fresh_pool_bytes(64);
    assert_refused(
        &bytes[..POOL_BYTES - 4096],
        PoolError::Truncated {
            recorded: POOL_BYTES as u64,
            actual: (POOL_BYTES - 4096) as u64,
        },
    );
    // A damaged backup is not repaired when the pool is refused anyway.
    let mut damaged_backup = bytes[..POOL_BYTES - 4096].to_vec();
    damaged_backup[BACKUP_OFFSET + 40] ^= 0xff;
    assert_refused(
        &damaged_backup,
        PoolError::Truncated {
            recorded: POOL_BYTES as u64,
            actual: (POOL_BYTES - 4096) as u64,
        },
    );
}

#[test]
fn open_accepts_a_medium_longer_than_the_pool() {
    let mut bytes = fresh_pool_bytes(64);
    bytes.extend_from_slice(&[0xcc; 4096]);
    let pool = Pool::open(TestMedium::from_bytes(&bytes)).unwrap();
    assert_eq!(pool.size_bytes(), POOL_BYTES);
}

#[test]
fn open_refuses_a_root_out_of_bounds() {
    let fresh = fresh_pool_bytes(64);
    let past_end = with_header(fresh.clone(), |h| h.root_size = h.pool_size);
    assert_refused(
        &past_end,
        PoolError::RootOutOfBounds {
            offset: 256,
            size: POOL_BYTES as u64,
            pool_size: POOL_BYTES as u64,
        },
    );
    let overflowing = with_header(fresh.clone(), |h| h.root_size = u64::MAX - 100);
    assert_refused(
        &overflowing,
        PoolError::RootOutOfBounds {
            offset: 256,
            size: u64::MAX - 100,
            pool_size: POOL_BYTES as u64,
        },
    );
    let over_header = with_header(fresh, |h| h.root_offset = 64);
    assert_refused(
        &over_header,
        PoolError::RootOutOfBounds {
            offset: 64,
            size: 64,
            pool_size: POOL_BYTES as u64,
        },
    );
}

#[test]
fn open_refuses_contradicting_layout_fields() {
    let fresh = fresh_pool_bytes(64);
    type HeaderEdit = Box<dyn Fn(&mut Header)>;
    // (what, the edit, what the refusal's reason says)
    let cases: [(&str, HeaderEdit, &str); 8] = [
        (
            "heap overlaps metadata",
            Box::new(|h| h.heap_offset -= 64),
            "overlaps the metadata",
        ),
        (
            "metadata overlaps root",
            Box::new(|h| h.metadata_offset = 256),
            "overlaps the root's lines",
        ),
        (
            "a root in bounds, up to the pool's last byte, under the metadata",
            Box::new(|h| h.root_size = h.pool_size - h.root_offset),
            "overlaps the root's lines",
        ),
        (
            "heap past the end",
            Box::new(|h| h.heap_size += 64),
            "ends past the pool",
        ),
        (
            "misaligned heap",
            Box::new(|h| h.heap_offset += 8),
            "not cache-line aligned",
        ),
        (
            "misaligned heap size",
            Box::new(|h| h.heap_size -= 8),
            "not cache-line aligned",
        ),
        (
            "misaligned metadata size",
            Box::new(|h| h.metadata_size -= 8),
            "not cache-line aligned",
        ),
        (
            "heap too small",
            Box::new(|h| h.heap_size = 64),
            "smaller than the minimum",
        ),
    ];
    for (what, edit, says) in cases {
        let bytes = with_header(fresh.clone(), edit);
        let error = Pool::open(TestMedium::from_bytes(&bytes)).unwrap_err();
        let PoolError::InconsistentHeader { reason } = &error else {
            panic!("{what}: expected InconsistentHeader, got {error:?}");
        };
        assert!(reason.contains(says), "{what}: {reason}");
        assert_refused(
            &bytes,
            PoolError::InconsistentHeader {
                reason: reason.clone(),
            },
        );
    }
}

#[test]
fn open_refuses_unknown_flags_and_reserved_bytes() {
    let fresh = fresh_pool_bytes(64);
    assert_refused(
        &with_header(fresh.clone(), |h| h.flags = 0x10),
        PoolError::UnknownFlags { flags: 0x10 },
    );
    let mut reserved = fresh;
    for copy in [PRIMARY_OFFSET, BACKUP_OFFSET] {
        let mut image = copy_at(&reserved, copy);
        image[100] = 1;
        reseal(&mut image);
        reserved[copy..copy + HEADER_COPY_BYTES].copy_from_slice(&image);
    }
    assert_refused(
        &reserved,
        PoolError::InconsistentHeader {
            reason: "reserved header bytes 96..120 are not zero".into(),
        },
    );
}

#[test]
fn a_mapping_not_on_a_cache_line_is_refused() {
    let medium = TestMedium::shifted(POOL_BYTES, 8);
    let base = medium.base() as usize;
    assert_eq!(
        Pool::create(&medium, 64).unwrap_err(),
        PoolError::MisalignedMapping { base }
    );
    medium.write(0, &fresh_pool_bytes(64));
    let before = medium.bytes();
    assert_eq!(
        Pool::open(&medium).unwrap_err(),
        PoolError::MisalignedMapping { base }
    );
    assert!(medium.bytes() == before);
}

#[test]
fn a_damaged_copy_is_repaired_from_the_other_with_one_persist() {
    let fresh = fresh_pool_bytes(64);
    let header = Header::decode(&copy_at(&fresh, PRIMARY_OFFSET)).unwrap();
    for damaged_copy in [PRIMARY_OFFSET, BACKUP_OFFSET] {
        let mut bytes = fresh.clone();
        bytes[damaged_copy + 40] ^= 0xff; // pool_id
        let medium = TestMedium::from_bytes(&bytes);
        let pool = Pool::open(&medium).unwrap();
        assert_eq!(*pool.header(), header);
        assert!(
            medium.bytes() == fresh,
            "copy at {damaged_copy} not repaired"
        );
        assert!(medium.durable_image() == fresh, "repair not persisted");
        assert_eq!(medium.stats().fences, 1);
    }
}

#[test]
fn a_wiped_backup_is_rewritten_and_when_both_copies_are_valid_the_primary_wins() {
    let fresh = fresh_pool_bytes(64);
    let mut wiped = fresh.clone();
    wiped[BACKUP_OFFSET..BACKUP_OFFSET + HEADER_COPY_BYTES].fill(0);
    let medium = TestMedium::from_bytes(&wiped);
    Pool::open(&medium).unwrap();
    assert!(medium.bytes() == fresh);

    // The primary is written first, so it is the newer of two valid copies.
    let older = with_header(fresh.clone(), |h| h.pool_id = [9; 16]);
    let mut mixed = fresh.clone();
    mixed[BACKUP_OFFSET..BACKUP_OFFSET + HEADER_COPY_BYTES]
        .copy_from_slice(&copy_at(&older, BACKUP_OFFSET));
    let medium = TestMedium::from_bytes(&mixed);
    let pool = Pool::open(&medium).unwrap();
    assert_eq!(
        pool.pool_id(),
        Header::decode(&copy_at(&fresh, 0)).unwrap().pool_id
    );
    assert!(medium.bytes() == fresh);
}

/// What a crash image of `create` opened as.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum CrashOutcome {
    NewEmptyPool,
    OldPoolIntact,
    NotAPool,
}

fn open_crash_image(image: &[u8], new: &Header, old: Option<(&Header, &[u8])>) -> CrashOutcome {
    let medium = TestMedium::from_bytes(image);
    let pool = match Pool::open(&medium) {
        Ok(pool) => pool,
        Err(PoolError::NotAPool { .. }) => {
            assert!(medium.bytes() == image);
            return CrashOutcome::NotAPool;
        }
        Err(other) => panic!("a crash during create left {other:?}"),
    };
    // Whatever opened, both copies are whole and identical now.
    let bytes = medium.bytes();
    assert_eq!(
        copy_at(&bytes, PRIMARY_OFFSET),
        copy_at(&bytes, BACKUP_OFFSET)
    );
    let root = pool.root_range();
    if pool.header() == new {
        let meta = pool.metadata_range();
        assert!(
            bytes[root.offset..root.end()].iter().all(|&b| b == 0),
            "garbage root"
        );
        assert!(
            bytes[meta.offset..meta.end()].iter().all(|&b| b == 0),
            "garbage metadata"
        );
        return CrashOutcome::NewEmptyPool;
    }
    let (old_header, old_root) = old.expect("opened as a pool that was never created");
    assert_eq!(pool.header(), old_header, "opened as a third pool");
    assert_eq!(
        &bytes[root.offset..root.end()],
        old_root,
        "old pool's root changed"
    );
    CrashOutcome::OldPoolIntact
}

fn crash_outcomes_of_create(
    medium: &TestMedium,
    old: Option<(&Header, &[u8])>,
) -> Vec<CrashOutcome> {
    medium.record_crash_images(40, 0x5eed);
    let pool = Pool::create(medium, 200).unwrap();
    let new = *pool.header();
    let images = medium.take_crash_images();
    assert!(images.len() > 4 * 40);
    let mut outcomes: Vec<_> = images
        .iter()
        .map(|image| open_crash_image(image, &new, old))
        .collect();
    outcomes.sort();
    outcomes.dedup();
    outcomes
}

#[test]
fn a_crash_during_create_over_garbage_leaves_an_empty_pool_or_no_pool() {
    let mut garbage = vec![0u8; POOL_BYTES];
    StdRng::seed_from_u64(1).fill_bytes(&mut garbage);
    let medium = TestMedium::from_bytes(&garbage);
    assert_eq!(
        crash_outcomes_of_create(&medium, None),
        [CrashOutcome::NewEmptyPool, CrashOutcome::NotAPool]
    );
}

#[test]
fn a_crash_during_create_over_an_old_pool_never_mixes_the_two() {
    let medium = TestMedium::new(POOL_BYTES);
    let old = Pool::create(&medium, 64).unwrap();
    let old_header = *old.header();
    let root = old.root_range();
    medium.write(root.offset, &[0xab; 64]);
    medium.persist(root.offset, 64);
    let old_root = vec![0xab; 64];
    assert_eq!(
        crash_outcomes_of_create(&medium, Some((&old_header, &old_root))),
        [
            CrashOutcome::NewEmptyPool,
            CrashOutcome::OldPoolIntact,
            CrashOutcome::NotAPool
        ]
    );
}

/// A list node in the heap, linked by offsets.
#[repr(C)]
struct Node {
    value: u64,
    next: PPtr<Node>,
}

#[test]
fn persistent_pointers_survive_a_move_to_another_address() {
    let original = TestMedium::new(POOL_BYTES);
    let pool = Pool::create(&original, size_of::<PPtr<Node>>()).unwrap();
    let heap = pool.heap_range();
    // Three nodes, at the heap's end, middle and start, linked in that order.
    let offsets = [heap.end() - 64, heap.offset + 1024, heap.offset];
    let mut next = PPtr::<Node>::null();
    for (i, &offset) in offsets.iter().enumerate().rev() {
        let p = PPtr::<Node>::from_offset(offset as u64);
        let node = pool.resolve(p).unwrap();
        // SAFETY: `resolve` checked the node lies in the heap, aligned; nothing else uses it.
        unsafe {
            node.write(Node {
                value: 100 + i as u64,
                next,
            })
        };
        next = p;
    }
    // SAFETY: the root holds a PPtr (checked by `root`), aligned to 8.
    unsafe { PPtr::store(pool.root::<PPtr<Node>>().unwrap(), next) };

    let moved = TestMedium::from_bytes(&original.bytes());
    assert_ne!(moved.base(), original.base());
    let pool = Pool::open(&moved).unwrap();
    let range = moved.base() as usize..moved.base() as usize + POOL_BYTES;
    // SAFETY: as above.
    let mut p = unsafe { PPtr::load(pool.root::<PPtr<Node>>().unwrap()) };
    let mut seen = Vec::new();
    while let Some(node) = pool.resolve(p) {
        assert!(
            range.contains(&(node as usize)),
            "resolved outside the moved pool"
        );
        // SAFETY: resolved in the heap, aligned, written above (through the copy).
        let node = unsafe { node.read() };
        seen.push(node.value);
        p = node.next;
    }
    assert!(p.is_null());
    assert_eq!(seen, [100, 101, 102]);
}

#[test]
fn resolve_checks_null_bounds_and_alignment_against_the_heap() {
    let pool = Pool::create(TestMedium::new(POOL_BYTES), 64).unwrap();
    let heap = pool.heap_range();
    let at = |offset: usize| PPtr::<u64>::from_offset(offset as u64);
    assert_eq!(pool.resolve(PPtr::<u64>::null()), None);
    assert_eq!(
        pool.resolve(at(pool.root_range().offset)),
        None,
        "root is not heap"
    );
    assert_eq!(pool.resolve(at(heap.offset - 8)), None);
    assert_eq!(pool.resolve(at(heap.end())), None);
    assert_eq!(pool.resolve(at(heap.end() - 4)), None, "straddles the end");
    assert_eq!(pool.resolve(at(heap.offset + 4)), None, "misaligned");
    assert_eq!(pool.resolve(PPtr::<u64>::from_offset(u64::MAX)), None);
    let last = pool.resolve(at(heap.end() - 8)).unwrap();
    // SAFETY: in bounds of the mapping (heap end - 8).
    assert_eq!(last, unsafe { pool.base().add(heap.end() - 8) }.cast());
    assert_eq!(pool.pptr_of(last), Some(at(heap.end() - 8)));
    assert_eq!(
        pool.pptr_of(pool.base().cast::<u64>()),
        None,
        "header is not heap"
    );
    assert_eq!(pool.pptr_of(std::ptr::null::<u64>()), None);
    // A zero-sized `T` fits anywhere in the heap, but not at its end: nothing there is
    // the heap's.
    let unit = |offset: usize| PPtr::<()>::from_offset(offset as u64);
    assert!(pool.resolve(unit(heap.end() - 8)).is_some());
    assert_eq!(pool.resolve(unit(heap.end())), None);
    assert_eq!(pool.resolve(PPtr::<()>::null()), None);
}

#[test]
fn persistent_pointers_print_and_hash_as_their_offsets() {
    let p = PPtr::<u64>::from_offset(0x1040);
    assert_eq!(format!("{p:?}"), "PPtr(0x1040)");
    assert_eq!(format!("{:?}", PPtr::<u64>::null()), "PPtr(0x0)");
    let hash = |p: PPtr<u64>| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        p.hash(&mut h);
        h.finish()
    };
    // Equal pointers hash alike; a thousand different ones spread over a thousand hashes.
    assert_eq!(hash(p), hash(PPtr::from_offset(0x1040)));
    let hashes: std::collections::HashSet<u64> = (0..1000u64)
        .map(|i| hash(PPtr::from_offset(i * 64)))
        .collect();
    assert_eq!(hashes.len(), 1000);
}

#[test]
fn root_checks_the_type_fits_and_is_aligned() {
    #[repr(C, align(512))]
    struct Aligned512([u8; 16]);

    let pool = Pool::create(TestMedium::new(POOL_BYTES), 40).unwrap();
    assert!(pool.root::<[u64; 5]>().is_ok());
    assert_eq!(
        pool.root::<[u64; 6]>(),
        Err(PoolError::RootTooSmall {
            type_size: 48,
            root_size: 40
        })
    );
    // The root is at offset 256 of a page-aligned mapping.
    let pool = Pool::create(TestMedium::new(POOL_BYTES), 512).unwrap();
    assert_eq!(
        pool.root::<Aligned512>().unwrap_err(),
        PoolError::RootMisaligned {
            type_align: 512,
            offset: 256
        }
    );
    // SAFETY: the root is 512 zeroed bytes, and zero is a valid [u64; 64].
    assert_eq!(unsafe { *pool.root::<[u64; 64]>().unwrap() }, [0; 64]);
}

#[test]
fn a_pptr_is_one_little_endian_u64_written_in_place() {
    assert_eq!(size_of::<PPtr<Node>>(), 8);
    assert_eq!(PPtr::<Node>::default(), PPtr::null());
    let mut words = [u64::MAX; 3];
    let p = PPtr::<Node>::from_offset(0x0102_0304_0506_0708);
    let dest = words[1..].as_mut_ptr().cast::<PPtr<Node>>();
    // SAFETY: `words[1]` is a u64: valid for 8 bytes, 8-aligned, not otherwise used.
    unsafe { PPtr::store(dest, p) };
    // SAFETY: as above.
    let loaded = unsafe { PPtr::load(dest) };
    assert_eq!(loaded, p);
    assert_eq!(words, [u64::MAX, 0x0102_0304_0506_0708, u64::MAX]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A single damaged header byte is always caught, and the pool that opens is the one
    /// that was created, byte for byte, never another.
    #[test]
    fn one_damaged_header_byte_is_repaired_never_accepted_as_another_pool(
        at in 0..HEADER_AREA_BYTES,
        flip in 1u8..=255,
    ) {
        let fresh = fresh_pool_bytes(64);
        let mut bytes = fresh.clone();
        bytes[at] ^= flip;
        let copy = at - at % HEADER_COPY_BYTES;
        prop_assert!(Header::decode(&copy_at(&bytes, copy)).is_err());
        let medium = TestMedium::from_bytes(&bytes);
        let pool = Pool::open(&medium).unwrap();
        prop_assert_eq!(pool.header().encode(), copy_at(&fresh, PRIMARY_OFFSET));
        prop_assert!(medium.bytes() == fresh);
    }

    /// The same damage in both copies: refused, and nothing written.
    #[test]
    fn the_same_damage_in_both_copies_is_refused_untouched(
        at in 0..HEADER_COPY_BYTES,
        flip in 1u8..=255,
    ) {
        let mut bytes = fresh_pool_bytes(64);
        bytes[PRIMARY_OFFSET + at] ^= flip;
        bytes[BACKUP_OFFSET + at] ^= flip;
        let medium = TestMedium::from_bytes(&bytes);
        let error = Pool::open(&medium).unwrap_err();
        prop_assert!(matches!(
            error,
            PoolError::NotAPool { .. }
                | PoolError::BadChecksum { .. }
                | PoolError::UnsupportedVersion { .. }
        ), "{error:?}");
        prop_assert!(medium.bytes() == bytes);
        prop_assert_eq!(medium.stats().flushes, 0);
    }
}

#[test]
fn a_pools_debug_form_names_its_mapping_and_header() {
    let pool = Pool::create(TestMedium::new(POOL_BYTES), 64).unwrap();
    let text = format!("{pool:?}");
    assert!(text.starts_with("Pool {"), "{text}");
    assert!(text.contains("base"), "{text}");
    assert!(text.contains(&format!("{:?}", pool.header())), "{text}");
}

#[test]
fn the_smallest_pool_opens_with_the_smallest_heap() {
    for root in [0, 64, 1000] {
        let medium = TestMedium::new(min_pool_size(root).unwrap());
        let created = Pool::create(&medium, root).unwrap();
        assert_eq!(created.heap_range().len, MIN_HEAP_BYTES, "root {root}");
        let opened = Pool::open(&medium).unwrap();
        assert_eq!(opened.header(), created.header());
    }
}
