//! Prints the `hls` suite's comparison for the mixed trace, without the harness:
//! `cargo run --release -p alloclab-hls --example sweep [invocations] [seed]`.

use alloclab_hls::{DefragConfig, Experiment, OnChipConfig, TraceConfig};

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
        trace.on_failure = alloclab_hls::OnFailure::Skip;
    }
    let started = std::time::Instant::now();
    for (name, measured) in [
        ("hls-bitmap", baseline),
        ("hls-defrag", baseline.with_defrag(DefragConfig::default())),
    ] {
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
            "{name}: ref {} B/heap; requests {}; failures {} (capacity {}, fragmentation {}); rate {:.2}%; zero-failure heap {:?}; cycles/alloc {:.1} /free {:.1}; defrag calls {} mean {:.1} max {}; kernels/Mcycle {:.1}; corrupted {}",
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
            m.kernels_per_mcycle(),
            m.corrupted_buffers,
        );
        for (bytes, p) in &r.curve {
            print!("{bytes}:{}/{} ", p.failures(), p.fragmentation_failures);
        }
        println!();
    }
    eprintln!("{:.2?}", started.elapsed());
}
