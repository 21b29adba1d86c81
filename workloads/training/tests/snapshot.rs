//! Importing a PyTorch memory snapshot: the fixture written by `fixtures/make_snapshot.py`
//! (plain pickle, the shape `torch.cuda.memory._dump_snapshot` writes) into a replayable run.

use alloclab_core::{Checked, SystemHeap};
use alloclab_training::caching::CachingConfig;
use alloclab_training::pickle::PickleError;
use alloclab_training::replay::{replay_caching, replay_host};
use alloclab_training::snapshot::{FreeAt, ImportOptions, Snapshot, SnapshotError, peak_of};

const P4: &[u8] = include_bytes!("fixtures/snapshot_p4.pickle");
const P2: &[u8] = include_bytes!("fixtures/snapshot_p2.pickle");
/// The same snapshot at the other protocols.
const OTHERS: [(u8, &[u8]); 4] = [
    (0, include_bytes!("fixtures/snapshot_p0.pickle")),
    (1, include_bytes!("fixtures/snapshot_p1.pickle")),
    (2, P2),
    (5, include_bytes!("fixtures/snapshot_p5.pickle")),
];
const MIB: u64 = 1 << 20;

fn import(bytes: &[u8], free_at: FreeAt) -> Snapshot {
    let options = ImportOptions {
        free_at,
        ..ImportOptions::default()
    };
    Snapshot::from_pickle_bytes(bytes, &options).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn fixture_imports_with_the_right_counts_and_peak() {
    let s = import(P4, FreeAt::Completed);
    let st = &s.stats;
    // The numbers printed by make_snapshot.py.
    assert_eq!(st.events, 65);
    assert_eq!(st.allocs, 21);
    assert_eq!(st.free_requested, 20);
    assert_eq!(st.free_completed, 20);
    assert_eq!(st.live_at_end, 3);
    assert_eq!(
        st.active_blocks_in_segments, 3,
        "the segments agree with the trace"
    );
    assert_eq!(st.reserved_bytes_in_segments, 20 * MIB);
    assert_eq!(st.pre_window_blocks, 2);
    assert_eq!(st.deferred_frees, 1);
    assert_eq!((st.segment_grows, st.segment_shrinks), (1, 1));
    assert_eq!((st.ooms, st.other_actions, st.streams), (1, 1, 2));
    // Weights 1.5 MiB + input 0.25 + two activations and a gradient of 2 MiB each.
    assert_eq!(st.peak_live_bytes, 7 * MIB + 3 * MIB / 4);
    // 23 blocks in all (21 allocated in the window, 2 before it), each freed exactly once.
    let run = &s.run;
    assert_eq!(run.events.iter().filter(|e| e.alloc).count(), 23);
    assert_eq!(run.events.iter().filter(|e| !e.alloc).count(), 23);
    let mut seen = std::collections::HashMap::new();
    for e in &run.events {
        let n = seen.entry(e.id).or_insert(0);
        *n += if e.alloc { 1 } else { -1 };
        assert!(
            (0..=1).contains(n),
            "block {} freed before allocated or twice",
            e.id
        );
    }
    assert!(seen.values().all(|&n| n == 0));
    assert_eq!(run.iterations, vec![2..43]);
    assert_eq!(peak_of(&run.events), st.peak_live_bytes);
}

#[test]
fn protocols_and_free_points_agree() {
    let a = import(P4, FreeAt::Completed);
    for (protocol, bytes) in OTHERS {
        let b = import(bytes, FreeAt::Completed);
        assert_eq!(a, b, "protocol {protocol} and 4 files import the same");
    }
    let r = import(P4, FreeAt::Requested);
    assert_eq!(r.stats.peak_live_bytes, a.stats.peak_live_bytes);
    assert_eq!(r.run.events.len(), a.run.events.len());
    // The deferred free happens earlier under Requested: the input's free moves before the
    // `snapshot` marker, so the event order differs but not the counts.
    assert_eq!(r.stats.deferred_frees, 1);
}

#[test]
fn imported_run_replays_on_the_caching_model_and_host_heaps() {
    let s = import(P4, FreeAt::Completed);
    let c = replay_caching(&s.run, CachingConfig::default(), 1).unwrap();
    assert_eq!(c.peak_requested_bytes, s.stats.peak_live_bytes);
    assert!(c.total.peak_allocated_bytes >= s.stats.peak_live_bytes);
    assert!(c.total.peak_reserved_bytes >= c.total.peak_allocated_bytes);
    assert_eq!(c.total.alloc_calls, 21, "the window's allocations");
    let h = replay_host(&s.run, &SystemHeap::new(), 1).unwrap();
    assert_eq!(h.allocations, 23);
    assert_eq!(h.peak_live_bytes, s.stats.peak_live_bytes);
    let checked = Checked::new(SystemHeap::new());
    replay_host(&s.run, &checked, 64).unwrap();
    assert_eq!(checked.live_blocks(), 0);
    assert!(checked.violations().is_empty());
}

#[test]
fn bad_snapshots_are_errors() {
    let opts = ImportOptions::default();
    // Not a dict; no device_traces; a device that is not there.
    assert!(matches!(
        Snapshot::from_pickle_bytes(b"].", &opts),
        Err(SnapshotError::Shape { .. })
    ));
    assert!(matches!(
        Snapshot::from_pickle_bytes(b"}.", &opts),
        Err(SnapshotError::Shape { .. })
    ));
    let far = ImportOptions {
        device: 5,
        ..ImportOptions::default()
    };
    assert_eq!(
        Snapshot::from_pickle_bytes(P4, &far),
        Err(SnapshotError::NoSuchDevice {
            device: 5,
            devices: 2
        })
    );
    // A truncated fixture and a tampered one (the first SHORT_BINUNICODE turned into GLOBAL).
    assert!(matches!(
        Snapshot::from_pickle_bytes(&P4[..P4.len() / 2], &opts),
        Err(SnapshotError::Pickle(PickleError::Truncated { .. }))
    ));
    let mut evil = P4.to_vec();
    let at = evil.iter().position(|&b| b == 0x8c).unwrap();
    evil[at] = b'c';
    assert!(matches!(
        Snapshot::from_pickle_bytes(&evil, &opts),
        Err(SnapshotError::Pickle(PickleError::Forbidden {
            opcode: "GLOBAL",
            ..
        }))
    ));
    // {"device_traces": [[{"action": "alloc", "addr": 1, "size": 8},
    //                     {"action": "alloc", "addr": 1, "size": 8}]]}: allocated twice
    // (pickle.dumps(..., protocol=4)).
    let twice = b"\x80\x04\x95R\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\rdevice_traces\x94]\x94]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94K\x01\x8c\x04size\x94K\x08u}\x94(h\x05h\x06h\x07K\x01h\x08K\x08ueas.";
    let e = Snapshot::from_pickle_bytes(twice, &opts).unwrap_err();
    assert!(
        matches!(e, SnapshotError::Inconsistent { index: 1, .. }),
        "{e}"
    );
    // An event without a size.
    let nosize = b"\x80\x04\x958\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\rdevice_traces\x94]\x94]\x94}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94K\x01uaas.";
    let e = Snapshot::from_pickle_bytes(nosize, &opts).unwrap_err();
    assert!(e.to_string().contains("device_traces[0][0].size"), "{e}");
}

#[test]
fn damaged_fixtures_never_panic() {
    // Every prefix, and 2 500 single-byte corruptions, of the protocol 4 (binary) and 0 (text)
    // files: an error or a snapshot, never a panic.
    let opts = ImportOptions::default();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for file in [P4, OTHERS[0].1] {
        for n in 0..file.len() {
            assert!(
                Snapshot::from_pickle_bytes(&file[..n], &opts).is_err(),
                "prefix {n}"
            );
        }
        let mut ok = 0;
        for _ in 0..2_500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = file.to_vec();
            let at = (x % b.len() as u64) as usize;
            b[at] = (x >> 32) as u8;
            if Snapshot::from_pickle_bytes(&b, &opts).is_ok() {
                ok += 1;
            }
        }
        assert!(ok < 2_500, "some corruptions must be caught");
    }
}
