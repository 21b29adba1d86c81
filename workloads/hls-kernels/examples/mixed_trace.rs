//! Prints the `hls` suite's comparison for the mixed trace, without the harness:
//! `cargo run --release -p alloclab-hls-kernels --example mixed_trace [invocations] [seed]`.
//!
//! Environment knobs (all optional): `HEAPS` (7), `IDLE` (2000), `EARLY=1` (early release),
//! `SKIP=1` (skip the computation on a failure) change the trace or the memory for both
//! allocators; `WINDOW` (`from-base`, `cheapest`, `whole`), `BUDGET` (4096 words),
//! `THRESHOLD` (bytes; a free-run threshold trigger), `WORD_ACCESS` (cycles per heap word
//! access, 1) and `DEFRAG_STEPS` (FSM steps per call, 4) change the defragmenter only. The
//! last two exist to measure how much the failure figures depend on the defragmenter's
//! latency (see the crate's README); the suite keeps the defaults.

use alloclab_hls::{CompactWindow, DefragConfig, OnChipConfig};
use alloclab_hls_kernels::{Experiment, TraceConfig};

fn main() {
    let mut args = std::env::args().skip(1);
    let invocations: u32 = args.next().map_or(64, |a| a.parse().expect("invocations"));
    let seed: u64 = args.next().map_or(42, |a| a.parse().expect("seed"));
    let env = |k: &str, d: u64| std::env::var(k).map_or(d, |v| v.parse().expect(k));
    let baseline = OnChipConfig {
        heaps: env("HEAPS", 7) as usize,
        ..OnChipConfig::default()
    };
    let mut trace = TraceConfig::mixed(baseline.heaps, invocations, seed);
    trace.max_idle_cycles = env("IDLE", 2000);
    trace.early_release = env("EARLY", 0) == 1;
    if env("SKIP", 0) == 1 {
        trace.on_failure = alloclab_hls_kernels::OnFailure::Skip;
    }
    let window = match std::env::var("WINDOW").as_deref() {
        Err(_) | Ok("from-base") => CompactWindow::FromBase,
        Ok("cheapest") => CompactWindow::Cheapest,
        Ok("whole") => CompactWindow::Whole,
        Ok(other) => panic!("WINDOW={other}: expected from-base, cheapest or whole"),
    };
    let mut defrag = baseline.with_defrag(DefragConfig {
        window,
        budget_words: env("BUDGET", 4096) as u32,
        free_run_threshold_bytes: std::env::var("THRESHOLD")
            .ok()
            .map(|v| v.parse().expect("THRESHOLD")),
        ..DefragConfig::default()
    });
    defrag.costs.heap_word_access = env("WORD_ACCESS", 1);
    defrag.costs.defrag_fsm_steps = env("DEFRAG_STEPS", 4);
    let started = std::time::Instant::now();
    let mut baseline_failures = None;
    for (name, measured) in [("hls-bitmap", baseline), ("hls-defrag", defrag)] {
        let e = Experiment {
            trace: trace.clone(),
            baseline,
            measured,
            target_failure_rate: 0.10,
            step_bytes: 64,
            curve_points: 17,
        };
        let r = e.run().expect("experiment");
        let m = &r.at_reference;
        println!(
            "{name}: ref {} B/heap; requests {}; failures {} (capacity {}, fragmentation {}); rate {:.2}%; zero-failure heap {:?}; cycles/alloc {:.1} /free {:.1}; defrag calls {} mean {:.1} max {} words moved {}; kernels/Mcycle {:.1}; corrupted {}",
            r.reference_heap_bytes,
            m.requests,
            m.failures(),
            m.capacity_failures,
            m.fragmentation_failures,
            m.failure_rate() * 100.0,
            r.zero_failure_heap_bytes,
            m.cycles_per_alloc(),
            m.cycles_per_free(),
            m.counters.defrag_calls,
            m.cycles_per_defrag(),
            m.counters.defrag_cycles_max,
            m.counters.words_moved,
            m.kernels_per_mcycle(),
            m.corrupted_buffers,
        );
        for (bytes, p) in &r.curve {
            print!("{bytes}:{}/{} ", p.failures(), p.fragmentation_failures);
        }
        println!();
        match baseline_failures {
            None => baseline_failures = Some((m.failures(), r.zero_failure_heap_bytes)),
            Some((failures, zero)) => println!(
                "cut at the reference heap: {:.1}%; zero-failure heap: {:.1}% smaller",
                100.0 * (1.0 - m.failures() as f64 / failures as f64),
                match (zero, r.zero_failure_heap_bytes) {
                    (Some(b), Some(d)) => 100.0 * (1.0 - d as f64 / b as f64),
                    _ => f64::NAN,
                }
            ),
        }
    }
    eprintln!("{:.2?}", started.elapsed());
}
