//! The simulation and the sweeps: deterministic per seed, the same requests for every
//! configuration, data intact, the defragmenter free of fragmentation failures.

use alloclab_hls::{DefragConfig, OnChipConfig};
use alloclab_hls_kernels::{Experiment, Trace, TraceConfig, simulate, simulate_at};

fn baseline() -> OnChipConfig {
    OnChipConfig {
        heaps: 3,
        ..OnChipConfig::default()
    }
}

#[test]
fn a_trace_and_its_simulation_are_functions_of_the_seed() {
    let a = Trace::generate(&TraceConfig::mixed(3, 6, 11));
    assert_eq!(a, Trace::generate(&TraceConfig::mixed(3, 6, 11)));
    assert_ne!(a, Trace::generate(&TraceConfig::mixed(3, 6, 12)));
    let config = OnChipConfig {
        heap_words: 1024,
        ..baseline()
    };
    let one = simulate(&a, config).unwrap();
    assert_eq!(one, simulate(&a, config).unwrap());
    assert_eq!(one.requests, a.requests());
    assert!(
        one.failures() > 0,
        "a 4 KiB heap is too small for ten kernels"
    );
}

#[test]
fn every_configuration_sees_the_same_requests_and_keeps_the_data() {
    let trace = Trace::generate(&TraceConfig::mixed(3, 8, 5));
    for bytes in [2048, 4096, 8192] {
        let plain = simulate_at(&trace, baseline(), bytes).unwrap();
        let defrag = simulate_at(
            &trace,
            baseline().with_defrag(DefragConfig::default()),
            bytes,
        )
        .unwrap();
        assert_eq!(plain.requests, defrag.requests);
        assert_eq!((plain.corrupted_buffers, defrag.corrupted_buffers), (0, 0));
        assert_eq!(defrag.fragmentation_failures, 0, "at {bytes} B");
        assert_eq!(
            plain.completed_invocations + plain.failed_invocations,
            defrag.completed_invocations + defrag.failed_invocations
        );
        assert!(defrag.counters.words_moved_max <= 4096);
    }
}

#[test]
fn the_reference_heap_brackets_the_target_failure_rate() {
    let e = Experiment {
        trace: TraceConfig::mixed(3, 4, 9),
        baseline: baseline(),
        measured: baseline().with_defrag(DefragConfig::default()),
        target_failure_rate: 0.10,
        step_bytes: 64,
        curve_points: 5,
    };
    let trace = Trace::generate(&e.trace);
    let reference = e.reference_heap_bytes(&trace).unwrap();
    let at = |bytes| {
        simulate_at(&trace, e.baseline, bytes)
            .unwrap()
            .failure_rate()
    };
    assert!(at(reference) >= 0.10);
    assert!(at(reference + 64) < 0.10);
    let result = e.run().unwrap();
    assert_eq!(result.reference_heap_bytes, reference);
    let zero = result.zero_failure_heap_bytes.expect("fits the model");
    assert_eq!(simulate_at(&trace, e.measured, zero).unwrap().failures(), 0);
    assert!(
        simulate_at(&trace, e.measured, zero - 64)
            .unwrap()
            .failures()
            > 0
    );
    assert_eq!(result.curve.len(), 5);
    let bad = Experiment { step_bytes: 6, ..e };
    assert!(bad.run().unwrap_err().to_string().contains("grid step"));
}
