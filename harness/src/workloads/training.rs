//! The `training` suite: DNN training memory, modelled in process by `alloclab-training`:
//! per-iteration tensor traces replayed on a model of PyTorch's CUDA caching
//! allocator, with and without expandable segments, and a DELTA-style swap/recompute
//! planner on a cost model.
//!
//! The "allocators" are the two configurations of the caching-allocator model,
//! `pytorch-caching` (the default `CUDACachingAllocator`) and `pytorch-caching-expandable`
//! (`expandable_segments:True`). Nothing here is timed: every figure is a byte count, a
//! call count or a simulated time, a deterministic function of the configuration, so runs
//! agree exactly, the seed is unused, the thread count is irrelevant (the suite always runs
//! at 1) and the suite runs once unless `--runs` says otherwise.
//!
//! | workload | what | metrics (prefixed `<model>_` where there are several) |
//! |---|---|---|
//! | `training-caching` | ResNet-50 b=64 fp32 and BERT-Large b=16 mixed, 3 iterations at a fixed batch | `peak_reserved`, `peak_allocated` (GiB), `fragmentation` (peak reserved / peak allocated), `malloc_calls`, `segment_calls` (per iteration, the last one: a warm cache), `segment_calls_first` (the first, cold iteration) |
//! | `training-growing-batch` | ResNet-50 fp32, batch 32, 33, … (one more each iteration) | `reserved_end`, `allocated_end` (GiB, the last iteration's peaks), `fragmentation_end`, `fragmentation` (whole run), `segment_calls`; sweep `reserved@batch`, `fragmentation@batch` |
//! | `training-delta` | the DELTA-style planner (lowest peak within 1.2× of keep-all time) on ResNet-50 b=64 fp32 and BERT-Large b=16 mixed; GPT-2 Large's largest batch | `keep_all_peak`, `planned_peak` (GiB), `saved` (%), `slowdown` (×), `swapped` (GiB), `recomputed_ops`, `planned_reserved` (GiB, the planned iteration on this allocator); `gpt2-large_batch_keep_all`, `gpt2-large_batch_planned`, `gpt2-large_batch_growth` (exact bytes), `gpt2-large_batch_planned_on_model` (the schedule must also replay on this allocator); sweep `bert-large_keep_all@%`, `bert-large_planned@%`: GiB live over one iteration |
//!
//! The cost model is [`CostModel::a100_40gb`]; its parameters ([`cost_model_note`]) are a
//! suite note of the report; the suite's targets are in [`crate::targets::training`].
//!
//! The suite `training-replay` ([`REPLAY_WORKLOADS`], [`ReplayWorkload`]) replays a trace of
//! the same crate and two of `alloclab-alloc-traces` on the host heaps, timed: a suite of its
//! own, so that its ratios are to a host heap while the `training` suite's are to
//! `pytorch-caching`.

use alloclab_training::caching::CachingConfig;
use alloclab_training::cost::CostModel;
use alloclab_training::planner::{self, Goal, Plan};
use alloclab_training::replay::{CachingReplay, replay_caching};
use alloclab_training::{Model, ModelConfig, Precision, RunTrace, Trace};

use crate::peers::{Capability, caching_config};
use crate::report::SWEEP_SEPARATOR;
use crate::results::{Sample, sample};
use crate::workloads::{Params, Scale, WorkloadInfo};

/// The suite's name.
pub const SUITE: &str = "training";
/// The default caching allocator (the suite's reference).
pub const CACHING: &str = "pytorch-caching";
/// The caching allocator with expandable segments.
pub const CACHING_EXPANDABLE: &str = "pytorch-caching-expandable";
/// The planner's time limit, as a factor of the keep-all iteration time.
pub const TIME_LIMIT: f64 = 1.2;
/// Points of the memory curve over one iteration (one per 2% of it).
pub const CURVE_POINTS: u32 = 50;
/// Iterations of the growing-batch run at [`Scale::Small`].
pub const GROWING_ITERATIONS: u64 = 16;
/// The batch the growing-batch run starts at.
pub const GROWING_FIRST_BATCH: u32 = 32;
/// The largest batch the GPT-2 Large search tries.
pub const MAX_BATCH: u32 = 256;

/// The workloads of the `training` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        suite: SUITE,
        name: "training-caching",
        description: "caching-allocator model on ResNet-50 and BERT-Large traces at a fixed batch: peak reserved/allocated, fragmentation, calls per iteration",
        requires: Capability::CachingModel,
        default_threads: single,
    },
    WorkloadInfo {
        suite: SUITE,
        name: "training-growing-batch",
        description: "caching-allocator model, ResNet-50 with the batch growing by one every iteration: the fragmentation expandable segments fix",
        requires: Capability::CachingModel,
        default_threads: single,
    },
    WorkloadInfo {
        suite: SUITE,
        name: "training-delta",
        description: "DELTA-style swap/recompute planner on ResNet-50 and BERT-Large (peak saved, simulated slowdown) and GPT-2 Large's largest batch",
        requires: Capability::CachingModel,
        default_threads: single,
    },
];

/// The models are single-threaded: always one "thread".
fn single(_cores: usize) -> Vec<usize> {
    vec![1]
}

/// Whether `name` is a workload of this suite.
pub fn is_training_workload(name: &str) -> bool {
    WORKLOADS.iter().any(|w| w.name == name)
}

/// PyTorch's caching allocator as configured by default ([`CACHING`]).
pub fn plain_caching() -> CachingConfig {
    CachingConfig::default()
}

/// The same with `expandable_segments:True` ([`CACHING_EXPANDABLE`]).
pub fn expandable_caching() -> CachingConfig {
    CachingConfig {
        expandable_segments: true,
        ..CachingConfig::default()
    }
}

/// The cost model every planner figure is simulated on.
pub fn cost_model() -> CostModel {
    CostModel::a100_40gb()
}

/// The suite note: the cost-model parameters.
pub fn cost_model_note() -> String {
    format!(
        "Simulated, not measured: every figure is deterministic (one run). Cost model of the \
         planner (`CostModel::a100_40gb`): {}.",
        cost_model().describe()
    )
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// The fixed-batch configurations of `training-caching` and `training-delta`; smaller
/// batches at [`Scale::Tiny`] (tests).
fn fixed_configs(scale: Scale) -> Result<Vec<ModelConfig>, String> {
    let (resnet, bert) = if scale == Scale::Tiny {
        (8, 2)
    } else {
        (64, 16)
    };
    [
        (Model::ResNet50, resnet, Precision::Fp32),
        (Model::BertLarge, bert, Precision::Mixed),
    ]
    .into_iter()
    .map(|(m, b, p)| ModelConfig::new(m, b, p).map_err(|e| e.to_string()))
    .collect()
}

fn replay(run: &RunTrace, config: CachingConfig, what: &str) -> Result<CachingReplay, String> {
    replay_caching(run, config, 0).map_err(|e| format!("{what}: {e}"))
}

/// Runs `workload` on the caching-allocator model `allocator`.
///
/// # Errors
///
/// A one-line message if a name is unknown or the model rejects a configuration.
pub fn run(workload: &str, allocator: &str, params: &Params) -> Result<Vec<Sample>, String> {
    if !is_training_workload(workload) {
        return Err(format!("'{workload}' is not a training workload"));
    }
    let config = caching_config(allocator)
        .ok_or_else(|| format!("allocator '{allocator}' is not a caching-allocator model"))?;
    match workload {
        "training-caching" => caching(config, params.scale),
        "training-growing-batch" => growing(config, params.scale),
        "training-delta" => delta(config, params.scale),
        _ => Err("not a caching-model workload".to_owned()),
    }
    .map_err(|e| format!("{workload} on {allocator}: {e}"))
}

fn caching(config: CachingConfig, scale: Scale) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for c in fixed_configs(scale)? {
        let run = RunTrace::new(&c, &[c.batch; 3]).map_err(|e| e.to_string())?;
        let r = replay(&run, config, &c.model.to_string())?;
        let (Some(first), Some(last)) = (r.iterations.first(), r.iterations.last()) else {
            return Err("no iteration replayed".to_owned());
        };
        let m = c.model;
        let t = &r.total;
        samples.extend([
            sample(
                &format!("{m}_peak_reserved"),
                "GiB",
                gib(t.peak_reserved_bytes),
                true,
            ),
            sample(
                &format!("{m}_peak_allocated"),
                "GiB",
                gib(t.peak_allocated_bytes),
                true,
            ),
            sample(
                &format!("{m}_fragmentation"),
                "x",
                t.peak_reserved_bytes as f64 / t.peak_allocated_bytes.max(1) as f64,
                true,
            ),
            sample(
                &format!("{m}_malloc_calls"),
                "calls/iter",
                last.stats.alloc_calls as f64,
                true,
            ),
            sample(
                &format!("{m}_segment_calls"),
                "calls/iter",
                last.stats.segment_allocs as f64,
                true,
            ),
            sample(
                &format!("{m}_segment_calls_first"),
                "calls/iter",
                first.stats.segment_allocs as f64,
                true,
            ),
        ]);
    }
    Ok(samples)
}

fn growing(config: CachingConfig, scale: Scale) -> Result<Vec<Sample>, String> {
    let iterations = u32::try_from(scale.scaled(GROWING_ITERATIONS).max(4)).unwrap_or(u32::MAX);
    let first = if scale == Scale::Tiny {
        8
    } else {
        GROWING_FIRST_BATCH
    };
    let c = ModelConfig::new(Model::ResNet50, first, Precision::Fp32).map_err(|e| e.to_string())?;
    let batches: Vec<u32> = (0..iterations).map(|i| first + i).collect();
    let run = RunTrace::new(&c, &batches).map_err(|e| e.to_string())?;
    let r = replay(&run, config, "resnet50")?;
    let last = r.iterations.last().ok_or("no iteration replayed")?;
    let t = &r.total;
    let mut samples = vec![
        sample(
            "reserved_end",
            "GiB",
            gib(last.stats.peak_reserved_bytes),
            true,
        ),
        sample(
            "allocated_end",
            "GiB",
            gib(last.stats.peak_allocated_bytes),
            true,
        ),
        sample("fragmentation_end", "x", last.fragmentation(), true),
        sample(
            "fragmentation",
            "x",
            t.peak_reserved_bytes as f64 / t.peak_allocated_bytes.max(1) as f64,
            true,
        ),
        sample("segment_calls", "calls", t.segment_allocs as f64, true),
    ];
    for it in &r.iterations {
        samples.push(sample(
            &format!("reserved{SWEEP_SEPARATOR}{}", it.batch),
            "GiB",
            gib(it.stats.peak_reserved_bytes),
            true,
        ));
        samples.push(sample(
            &format!("fragmentation{SWEEP_SEPARATOR}{}", it.batch),
            "x",
            it.fragmentation(),
            true,
        ));
    }
    Ok(samples)
}

/// The most bytes live in each of [`CURVE_POINTS`] equal parts of an iteration, by the
/// share of the iteration (%) at which the part ends.
fn curve_points(curve: &[(f64, u64)], end_s: f64) -> Vec<(f64, u64)> {
    (1..=CURVE_POINTS)
        .map(|k| {
            let share = f64::from(k) / f64::from(CURVE_POINTS);
            let (from, to) = (
                end_s * (share - 1.0 / f64::from(CURVE_POINTS)),
                end_s * share,
            );
            let level = curve
                .iter()
                .filter(|p| p.0 > from && p.0 <= to)
                .map(|p| p.1)
                .max()
                .or_else(|| curve.iter().rev().find(|p| p.0 <= to).map(|p| p.1))
                .unwrap_or(0);
            // k × 100 / points: an exact number, so the metric names stay short.
            (f64::from(k) * 100.0 / f64::from(CURVE_POINTS), level)
        })
        .collect()
}

fn delta(config: CachingConfig, scale: Scale) -> Result<Vec<Sample>, String> {
    let cost = cost_model();
    let mut samples = Vec::new();
    for c in fixed_configs(scale)? {
        let m = c.model;
        let trace = Trace::generate(&c);
        let out = planner::plan(&trace, &cost, Goal::min_memory_within(TIME_LIMIT))
            .map_err(|e| e.to_string())?;
        let (b, e) = (out.baseline, out.evaluation);
        let schedule = planner::schedule(&trace, &cost, &out.plan);
        let reserved = replay(&schedule.run_trace(&trace), config, &m.to_string())?;
        samples.extend([
            sample(
                &format!("{m}_keep_all_peak"),
                "GiB",
                gib(b.peak_bytes),
                true,
            ),
            sample(&format!("{m}_planned_peak"), "GiB", gib(e.peak_bytes), true),
            sample(
                &format!("{m}_saved"),
                "%",
                100.0 * out.memory_saved(),
                false,
            ),
            sample(&format!("{m}_slowdown"), "x", out.slowdown(), true),
            sample(&format!("{m}_swapped"), "GiB", gib(e.bytes_swapped), true),
            sample(
                &format!("{m}_recomputed_ops"),
                "ops",
                e.ops_recomputed as f64,
                true,
            ),
            sample(
                &format!("{m}_planned_reserved"),
                "GiB",
                gib(reserved.total.peak_reserved_bytes),
                true,
            ),
        ]);
        if m == Model::BertLarge {
            for (name, plan) in [
                ("keep_all", Plan::keep_all(&trace)),
                ("planned", out.plan.clone()),
            ] {
                let s = planner::schedule(&trace, &cost, &plan);
                let curve = s.memory_curve(&trace);
                for (share, level) in curve_points(&curve, s.evaluation.iteration_s) {
                    samples.push(sample(
                        &format!("{m}_{name}{SWEEP_SEPARATOR}{share}"),
                        "GiB",
                        gib(level),
                        true,
                    ));
                }
            }
        }
    }
    // GPT-2 Large's largest batch. At the tiny scale (tests) on a 16 GiB device.
    let cost = if scale == Scale::Tiny {
        CostModel {
            capacity_bytes: 16 << 30,
            ..cost
        }
    } else {
        cost
    };
    let gpt2 =
        ModelConfig::new(Model::Gpt2Large, 1, Precision::Mixed).map_err(|e| e.to_string())?;
    let fit = |planned| {
        planner::largest_batch(&gpt2, &cost, planned, None, MAX_BATCH).map_err(|e| e.to_string())
    };
    let keep = fit(false)?.batch;
    let planned = fit(true)?.batch;
    let on_model = planner::largest_batch_on(&gpt2, &cost, true, None, MAX_BATCH, config)
        .map_err(|e| e.to_string())?
        .batch;
    samples.extend([
        sample(
            "gpt2-large_batch_keep_all",
            "samples",
            f64::from(keep),
            false,
        ),
        sample(
            "gpt2-large_batch_planned",
            "samples",
            f64::from(planned),
            false,
        ),
        sample(
            "gpt2-large_batch_planned_on_model",
            "samples",
            f64::from(on_model),
            false,
        ),
    ]);
    // No growth factor when not even one sample fits without the planner.
    if keep > 0 {
        samples.push(sample(
            "gpt2-large_batch_growth",
            "x",
            f64::from(planned) / f64::from(keep),
            false,
        ));
    }
    Ok(samples)
}

/// The suite of the host-heap replays: the traces of [`ReplayWorkload`] replayed on every
/// host heap (timed; five runs by default like any timed suite).
pub const REPLAY_SUITE: &str = "training-replay";

/// The workloads of the `training-replay` suite.
pub const REPLAY_WORKLOADS: &[WorkloadInfo] = &[
    replay_info(
        "training-replay-uav",
        "UAV sliding-window map (submaps recycled along a random trajectory, 20 000 steps) replayed on a host heap: ns per call, peak live",
    ),
    replay_info(
        "training-replay-switch",
        "switch data-plane block pool (per-port queues of fixed cells, bursty skewed traffic) replayed on a host heap: ns per call, peak live",
    ),
    replay_info(
        "training-replay-resnet50",
        "ResNet-50 b=8 fp32 tensor trace, two iterations, sizes / 1024, replayed on a host heap: ns per call, peak live",
    ),
];

const fn replay_info(name: &'static str, description: &'static str) -> WorkloadInfo {
    WorkloadInfo {
        suite: REPLAY_SUITE,
        name,
        description,
        requires: Capability::HostHeap,
        default_threads: single,
    }
}

/// Ticks of the switch trace the `training-replay-switch` workload replays: half the
/// trace's default, so that five runs on each of seven heaps stay within the default suite's
/// time (glibc's malloc takes about 2 s for a warm-up and four timed replays of it).
pub const SWITCH_REPLAY_TICKS: u32 = 10_000;

/// A trace of `alloclab-alloc-traces` or `alloclab-training` replayed on a host heap with
/// [`replay_host`](alloclab_training::replay::replay_host).
///
/// Metrics: `ns_per_call` (wall time of the timed replays over their allocator calls),
/// `time` (ms, all timed replays), `peak_live` (MiB requested live at once), and from the
/// worker `peak_footprint` and `timer_overhead`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayWorkload {
    /// The UAV sliding-window map.
    Uav,
    /// The switch block pool.
    Switch,
    /// A ResNet-50 training trace.
    ResNet50,
}

impl ReplayWorkload {
    const ALL: [Self; 3] = [Self::Uav, Self::Switch, Self::ResNet50];

    /// The workload registered under `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// The registry name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uav => "training-replay-uav",
            Self::Switch => "training-replay-switch",
            Self::ResNet50 => "training-replay-resnet50",
        }
    }

    /// The run and the divisor of its sizes.
    fn trace(self) -> Result<(RunTrace, u64), String> {
        use alloclab_alloc_traces::{switch, uav};
        Ok(match self {
            Self::Uav => (
                uav::generate(&uav::UavConfig::default())
                    .map_err(|e| e.to_string())?
                    .run,
                1,
            ),
            Self::Switch => (
                switch::generate(&switch::SwitchConfig {
                    ticks: SWITCH_REPLAY_TICKS,
                    ..switch::SwitchConfig::default()
                })
                .map_err(|e| e.to_string())?
                .run,
                1,
            ),
            Self::ResNet50 => {
                let c = ModelConfig::new(Model::ResNet50, 8, Precision::Fp32)
                    .map_err(|e| e.to_string())?;
                (RunTrace::new(&c, &[8, 8]).map_err(|e| e.to_string())?, 1024)
            }
        })
    }

    /// Replays the trace once untimed (warm-up), then `scale.scaled(4)` times timed.
    ///
    /// # Panics
    ///
    /// If the trace cannot be generated or the heap fails an allocation.
    pub fn run<A: alloclab_core::HostAllocator>(
        self,
        alloc: &A,
        params: &Params,
    ) -> crate::workloads::Outcome {
        use alloclab_training::replay::replay_host;
        let (run, divisor) = self
            .trace()
            .unwrap_or_else(|e| panic!("{}: {e}", self.name()));
        let replay = || {
            replay_host(&run, alloc, divisor)
                .unwrap_or_else(|e| panic!("{}: the heap failed: {e:?}", self.name()))
        };
        let warm = replay();
        let reps = params.scale.scaled(4);
        let start = std::time::Instant::now();
        for _ in 0..reps {
            // What the trace asks is the same every time; the heap's footprint need not be
            // (memory it kept from an earlier replay serves the next).
            let again = replay();
            assert_eq!(
                (again.peak_live_bytes, again.allocations),
                (warm.peak_live_bytes, warm.allocations),
                "a replay is deterministic"
            );
        }
        let elapsed = start.elapsed();
        let calls = (run.events.len() as u64 * reps).max(1);
        crate::workloads::Outcome {
            samples: vec![
                sample(
                    "ns_per_call",
                    "ns",
                    elapsed.as_nanos() as f64 / calls as f64,
                    true,
                ),
                sample("time", "ms", elapsed.as_secs_f64() * 1e3, true),
                sample(
                    "peak_live",
                    "MiB",
                    warm.peak_live_bytes as f64 / f64::from(1u32 << 20),
                    true,
                ),
            ],
            min_sample: elapsed,
            times_single_operations: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            threads: 1,
            scale: Scale::Tiny,
            seed: 1,
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
    fn every_workload_runs_on_both_models_with_sane_metrics() {
        for w in WORKLOADS {
            for a in [CACHING, CACHING_EXPANDABLE] {
                let samples = run(w.name, a, &params()).unwrap();
                assert!(!samples.is_empty(), "{}/{a}", w.name);
                for s in &samples {
                    assert!(
                        s.value.is_finite() && s.value >= 0.0,
                        "{}/{a}: {} = {}",
                        w.name,
                        s.metric,
                        s.value
                    );
                }
            }
        }
    }

    #[test]
    fn caching_figures_are_consistent() {
        let s = run("training-caching", CACHING, &params()).unwrap();
        for m in ["resnet50", "bert-large"] {
            assert!(
                value(&s, &format!("{m}_peak_reserved"))
                    >= value(&s, &format!("{m}_peak_allocated"))
            );
            assert!(value(&s, &format!("{m}_fragmentation")) >= 1.0);
            assert!(value(&s, &format!("{m}_malloc_calls")) > 0.0);
        }
    }

    #[test]
    fn the_planner_saves_memory_and_the_batch_grows() {
        let s = run("training-delta", CACHING, &params()).unwrap();
        for m in ["resnet50", "bert-large"] {
            assert!(
                value(&s, &format!("{m}_planned_peak")) <= value(&s, &format!("{m}_keep_all_peak"))
            );
            assert!(value(&s, &format!("{m}_slowdown")) <= TIME_LIMIT + 1e-9);
        }
        let keep = value(&s, "gpt2-large_batch_keep_all");
        assert!(keep >= 1.0, "one GPT-2 Large sample fits in 16 GiB");
        assert!(value(&s, "gpt2-large_batch_planned") >= keep);
        assert!(value(&s, "gpt2-large_batch_growth") >= 1.0);
        let curve = s
            .iter()
            .filter(|s| s.metric.starts_with("bert-large_planned@"))
            .count();
        assert_eq!(curve, CURVE_POINTS as usize);
        assert_eq!(run("training-delta", CACHING, &params()).unwrap(), s);
    }

    #[test]
    fn every_replay_runs_on_the_system_heap_with_sane_metrics() {
        for w in REPLAY_WORKLOADS {
            let code = ReplayWorkload::from_name(w.name).expect("registered");
            assert_eq!(code.name(), w.name);
            let out = code.run(&alloclab_core::SystemHeap::new(), &params());
            for metric in ["ns_per_call", "time", "peak_live"] {
                let v = value(&out.samples, metric);
                assert!(v.is_finite() && v > 0.0, "{}: {metric} = {v}", w.name);
            }
        }
        assert!(
            run("training-replay-uav", CACHING, &params())
                .unwrap_err()
                .contains("not a training workload")
        );
    }

    #[test]
    fn unknown_names_are_one_line_errors() {
        assert!(
            run("larson", CACHING, &params())
                .unwrap_err()
                .contains("not a training")
        );
        assert!(
            run("training-caching", "system", &params())
                .unwrap_err()
                .contains("not a caching-allocator model")
        );
    }
}
