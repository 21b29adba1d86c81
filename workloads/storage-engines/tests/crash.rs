//! Crash tests of the storage engines on the pmem simulator: every committed operation
//! survives every crash image, nothing uncommitted or deleted comes back, no transaction is
//! half applied, and no block leaks (see `alloclab_storage_engines::crash`).

use alloclab_pmem::{PersistentHeap, SimMedium};
use alloclab_storage_engines::crash::{CrashTestConfig, CrashTestReport, run_crash_test};
use alloclab_storage_engines::engines::inp::Inp;
use alloclab_storage_engines::engines::lsm::Lsm;

type Heap = PersistentHeap<SimMedium>;

fn check(name: &str, reports: &[CrashTestReport], min_images: usize) {
    let images: usize = reports.iter().map(|r| r.images).sum();
    for r in reports {
        println!(
            "{name}: {} ops, {} commits, {} fences, {} images: {} lost, {} resurrected, {} torn, {} leaked",
            r.ops,
            r.commits,
            r.fences,
            r.images,
            r.lost_committed,
            r.resurrected,
            r.torn,
            r.leaked_blocks
        );
        assert!(r.leaks_checked, "{name} does not name its blocks");
        assert!(r.clean(), "{name}: {:#?}", r.failures);
    }
    assert!(images >= min_images, "{name}: only {images} crash images");
}

#[test]
fn inp_loses_no_committed_operation_and_leaks_nothing_at_any_fence() {
    let reports: Vec<_> = (1..=3)
        .map(|seed| {
            let cfg = CrashTestConfig {
                seed,
                ops: 220,
                keys: 96,
                ..CrashTestConfig::default()
            };
            run_crash_test::<Inp<Heap>>(&cfg).unwrap()
        })
        .collect();
    check("inp", &reports, 1200);
}

#[test]
fn lsm_loses_no_committed_operation_and_leaks_nothing_at_any_fence() {
    let reports: Vec<_> = (1..=3)
        .map(|seed| {
            let cfg = CrashTestConfig {
                seed: seed + 100,
                ops: 220,
                keys: 48,
                ..CrashTestConfig::default()
            };
            // A memtable of 8 entries: flushes every few writes, a merge every fifth flush.
            run_crash_test::<Lsm<Heap, 8>>(&cfg).unwrap()
        })
        .collect();
    check("lsm", &reports, 1200);
}

#[test]
fn inp_on_a_deeper_tree_survives_crashes_in_splits_of_inner_nodes() {
    // 560 keys loaded first: a root of about 30 leaves, which splits during the trace (an
    // inner node copied on write into two fresh ones and a fresh root).
    let cfg = CrashTestConfig {
        seed: 7,
        ops: 150,
        keys: 900,
        preload: 560,
        max_value: 64,
        pool_bytes: 2 << 20,
        exercise_every: 32,
        ..CrashTestConfig::default()
    };
    check(
        "inp (deep)",
        &[run_crash_test::<Inp<Heap>>(&cfg).unwrap()],
        300,
    );
}
