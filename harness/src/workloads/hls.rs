//! The `hls` suite: allocation traces of accelerator kernels replayed on the simulated
//! on-chip memory of a many-accelerator FPGA (`alloclab-hls`), with and without the
//! defragmenter.
//!
//! The trace generator and the discrete-event simulator live in the `alloclab-hls` crate
//! ([`alloclab_hls_kernels::Trace`], [`alloclab_hls_kernels::simulate`], [`alloclab_hls_kernels::Experiment`]); this
//! module picks the parameters and turns the results into samples. Nothing here is timed:
//! every figure is a count or a number of simulated cycles, a deterministic function of the
//! seed, so repeated runs agree exactly and the thread count is irrelevant (the suite always
//! runs at 1).
//!
//! **`mixed-kernels`**: 7 heaps, ten accelerators per heap — one instance of each kernel
//! (histogram, k-means, PCA, matrix multiply, linear regression, string match, dfadd, dfmul,
//! dijkstra, sha) — each running `32 x scale` invocations. The *reference heap* is the
//! largest heap size (64-byte grid) at which the baseline (`hls-bitmap`) fails at least 10%
//! of its requests; every allocator is measured there and swept over half to twice that
//! size. Metrics:
//!
//! | metric | unit | what |
//! |---|---|---|
//! | `failures_total`, `failures_capacity`, `failures_fragmentation` | failures | at the reference heap, by class |
//! | `failures_rate` | % | failures per request at the reference heap |
//! | `heap_reference` | B | the reference heap (the same for every allocator) |
//! | `heap_zero_failures` | B | the smallest heap with no failure (see [`alloclab_hls_kernels::Experiment`]) |
//! | `cycles_alloc`, `cycles_free` | cycles | mean per request, defragmentation excluded |
//! | `cycles_defrag_mean`, `cycles_defrag_max` | cycles | per defragmentation call (defragmenting allocators only) |
//! | `kernels_per_mcycle` | kernels/Mcycle | invocations that got all their buffers, per million cycles |
//! | `failures_total@B`, `failures_capacity@B`, `failures_fragmentation@B` | failures | the sweep: at a heap of `B` bytes |

use alloclab_hls_kernels::{Experiment, TraceConfig};

use crate::peers::{Capability, HLS_HEAPS, on_chip_config};
use crate::report::SWEEP_SEPARATOR;
use crate::results::{Sample, sample};
use crate::workloads::{Params, WorkloadInfo};

/// Invocations per accelerator at [`Scale::Small`](crate::workloads::Scale::Small).
pub const SMALL_INVOCATIONS: u64 = 32;
/// The baseline's failure rate that defines the reference heap.
pub const TARGET_FAILURE_RATE: f64 = 0.10;
/// Grid of heap sizes, in bytes.
pub const STEP_BYTES: u64 = 64;
/// Points of the failure curve.
pub const CURVE_POINTS: usize = 13;
/// The allocator every `hls` figure is compared with.
pub const BASELINE: &str = "hls-bitmap";

/// The workloads of the `hls` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[WorkloadInfo {
    suite: "hls",
    name: "mixed-kernels",
    description: "ten HLS kernels x 7 heaps, simulated: failures, cycles and kernels/Mcycle with and without defragmentation",
    requires: Capability::OnChipModel,
    default_threads: single,
}];

/// The simulation is single-threaded: always one "thread".
fn single(_cores: usize) -> Vec<usize> {
    vec![1]
}

/// Whether `name` is a workload of this suite.
pub fn is_hls_workload(name: &str) -> bool {
    WORKLOADS.iter().any(|w| w.name == name)
}

/// Runs `workload` for the on-chip model `allocator`.
///
/// # Errors
///
/// A one-line message if a name is unknown, the experiment cannot run, or a buffer came back
/// with other bytes than were written (the model would be broken).
pub fn run(workload: &str, allocator: &str, params: &Params) -> Result<Vec<Sample>, String> {
    if !is_hls_workload(workload) {
        return Err(format!("'{workload}' is not an hls workload"));
    }
    let measured = on_chip_config(allocator)
        .ok_or_else(|| format!("allocator '{allocator}' is not an on-chip model"))?;
    let baseline = on_chip_config(BASELINE).expect("the baseline is registered");
    let invocations = u32::try_from(params.scale.scaled(SMALL_INVOCATIONS)).unwrap_or(u32::MAX);
    let experiment = Experiment {
        trace: TraceConfig::mixed(HLS_HEAPS, invocations, params.seed),
        baseline,
        measured,
        target_failure_rate: TARGET_FAILURE_RATE,
        step_bytes: STEP_BYTES,
        curve_points: CURVE_POINTS,
    };
    let result = experiment.run().map_err(|e| format!("{workload}: {e}"))?;
    let corrupted: u64 = std::iter::once(&result.at_reference)
        .chain(result.curve.iter().map(|(_, r)| r))
        .map(|r| r.corrupted_buffers)
        .sum();
    if corrupted > 0 {
        return Err(format!(
            "{workload} on {allocator}: {corrupted} buffers lost their contents"
        ));
    }
    let r = &result.at_reference;
    let mut samples = vec![
        sample("failures_total", "failures", r.failures() as f64, true),
        sample(
            "failures_capacity",
            "failures",
            r.capacity_failures as f64,
            true,
        ),
        sample(
            "failures_fragmentation",
            "failures",
            r.fragmentation_failures as f64,
            true,
        ),
        sample("failures_rate", "%", r.failure_rate() * 100.0, true),
        sample(
            "heap_reference",
            "B",
            result.reference_heap_bytes as f64,
            true,
        ),
    ];
    if let Some(bytes) = result.zero_failure_heap_bytes {
        samples.push(sample("heap_zero_failures", "B", bytes as f64, true));
    }
    samples.push(sample("cycles_alloc", "cycles", r.cycles_per_alloc(), true));
    samples.push(sample("cycles_free", "cycles", r.cycles_per_free(), true));
    if measured.defrag.is_some() {
        samples.push(sample(
            "cycles_defrag_mean",
            "cycles",
            r.cycles_per_defrag(),
            true,
        ));
        samples.push(sample(
            "cycles_defrag_max",
            "cycles",
            r.counters.defrag_cycles_max as f64,
            true,
        ));
    }
    samples.push(sample(
        "kernels_per_mcycle",
        "kernels/Mcycle",
        r.kernels_per_mcycle(),
        false,
    ));
    for (bytes, p) in &result.curve {
        for (name, value) in [
            ("failures_total", p.failures()),
            ("failures_capacity", p.capacity_failures),
            ("failures_fragmentation", p.fragmentation_failures),
        ] {
            samples.push(sample(
                &format!("{name}{SWEEP_SEPARATOR}{bytes}"),
                "failures",
                value as f64,
                true,
            ));
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sweep_point;
    use crate::workloads::Scale;

    fn params(seed: u64) -> Params {
        Params {
            threads: 1,
            scale: Scale::Tiny,
            seed,
        }
    }

    fn value(samples: &[Sample], metric: &str) -> f64 {
        samples
            .iter()
            .find(|s| s.metric == metric)
            .unwrap_or_else(|| panic!("no {metric}"))
            .value
    }

    #[test]
    fn the_defragmenter_has_no_fragmentation_failures_and_the_same_reference() {
        let bitmap = run("mixed-kernels", "hls-bitmap", &params(5)).unwrap();
        let defrag = run("mixed-kernels", "hls-defrag", &params(5)).unwrap();
        assert_eq!(value(&defrag, "failures_fragmentation"), 0.0);
        assert_eq!(
            value(&bitmap, "heap_reference"),
            value(&defrag, "heap_reference")
        );
        assert!(value(&bitmap, "failures_rate") >= TARGET_FAILURE_RATE * 100.0);
        assert!(defrag.iter().any(|s| s.metric == "cycles_defrag_max"));
        assert!(!bitmap.iter().any(|s| s.metric == "cycles_defrag_max"));
        let points: Vec<_> = defrag
            .iter()
            .filter_map(|s| sweep_point(&s.metric))
            .collect();
        assert_eq!(points.len(), 3 * CURVE_POINTS);
        assert_eq!(
            run("mixed-kernels", "hls-defrag", &params(5)).unwrap(),
            defrag
        );
    }

    #[test]
    fn unknown_names_are_one_line_errors() {
        assert!(
            run("larson", "hls-bitmap", &params(1))
                .unwrap_err()
                .contains("not an hls")
        );
        assert!(
            run("mixed-kernels", "system", &params(1))
                .unwrap_err()
                .contains("not an on-chip model")
        );
    }
}
