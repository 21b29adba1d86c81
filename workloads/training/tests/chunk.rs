//! Properties of the PatrickStar-style chunk manager. Times are simulated, never measured.

use alloclab_training::chunk::{
    self, ChunkConfig, ChunkError, ChunkLayout, WarmUp, default_candidates, search_chunk_size,
};
use alloclab_training::cost::CostModel;
use alloclab_training::trace::{Phase, TensorKind};
use alloclab_training::{Model, ModelConfig, Precision, Trace, TrainingError};

fn transformer(model: Model, batch: u32, seq: u32) -> Trace {
    let c = ModelConfig::new(model, batch, Precision::Mixed)
        .unwrap()
        .with_seq_len(seq)
        .unwrap();
    Trace::generate(&c)
}

fn small_traces() -> Vec<Trace> {
    vec![
        transformer(Model::BertLarge, 2, 128),
        transformer(Model::Gpt2Large, 1, 128),
        transformer(Model::Gpt2Xl, 1, 128),
    ]
}

fn device(gib_tenths: u64) -> CostModel {
    CostModel {
        capacity_bytes: (gib_tenths << 30) / 10,
        ..CostModel::a100_40gb()
    }
}

#[test]
fn the_layout_covers_every_parameter_tensor_once_within_its_chunk() {
    for trace in small_traces() {
        let largest = chunk::largest_param_elems(&trace);
        for size in [largest, largest + 1000, largest * 3 / 2, largest * 4] {
            let layout = ChunkLayout::new(&trace, size).unwrap();
            let weights: Vec<usize> = trace
                .tensors
                .iter()
                .enumerate()
                .filter(|(_, t)| t.kind == TensorKind::Weight)
                .map(|(i, _)| i)
                .collect();
            let mut slotted: Vec<usize> = layout.slots.iter().map(|s| s.tensor).collect();
            slotted.sort_unstable();
            assert_eq!(slotted, weights, "every weight exactly once");
            let act = trace.config.precision.activation_bytes();
            for s in &layout.slots {
                assert!(s.chunk < layout.chunks);
                assert!(s.offset + s.elems <= size, "slot ends inside its chunk");
                assert_eq!(s.elems * act, trace.tensors[s.tensor].size_bytes);
                assert_eq!(layout.op_chunk[s.op], Some(s.chunk));
            }
            // No two slots of a chunk overlap.
            for k in 0..layout.chunks {
                let mut spans: Vec<(u64, u64)> = layout
                    .slots
                    .iter()
                    .filter(|s| s.chunk == k)
                    .map(|s| (s.offset, s.offset + s.elems))
                    .collect();
                spans.sort_unstable();
                assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
                assert!(layout.used_elems(k) <= size);
            }
            let total: u64 = layout.slots.iter().map(|s| s.elems).sum();
            assert_eq!(total, trace.config.network().params());
            assert_eq!(layout.wasted_elems(), layout.chunks as u64 * size - total);
        }
    }
}

#[test]
fn the_search_picks_the_least_wasteful_candidate_that_holds_the_largest_tensor() {
    for trace in small_traces() {
        let candidates = default_candidates(&trace);
        let best = search_chunk_size(&trace, &candidates).unwrap();
        assert!(best >= chunk::largest_param_elems(&trace));
        let waste = ChunkLayout::new(&trace, best).unwrap().wasted_elems();
        for &c in &candidates {
            if let Ok(l) = ChunkLayout::new(&trace, c) {
                assert!(waste <= l.wasted_elems());
            }
        }
    }
    let trace = &small_traces()[0];
    assert_eq!(
        search_chunk_size(trace, &[1, 2, 3]),
        Err(ChunkError::EmptySearch)
    );
}

#[test]
fn the_warm_up_reproduces_the_traces_own_peak() {
    for model in Model::ALL {
        let mut c = ModelConfig::new(model, 2, Precision::Mixed).unwrap();
        if c.seq_len > 0 {
            c = c.with_seq_len(128).unwrap();
        }
        let trace = Trace::generate(&c);
        let warm = WarmUp::measure(&trace);
        assert_eq!(warm.peak_bytes(), trace.peak_live_bytes(), "{model}");
        assert_eq!(warm.non_model_bytes.len(), trace.steps.len());
        // The model data of the last step is the persistent state plus every weight gradient.
        let last = trace.steps.len() - 1;
        assert_eq!(
            warm.model_bytes[last],
            trace.persistent_bytes() + trace.bytes_by_kind(TensorKind::WeightGradient)
        );
    }
}

#[test]
fn with_room_for_everything_nothing_moves_and_the_iteration_is_the_traces() {
    for trace in small_traces() {
        let size = search_chunk_size(&trace, &default_candidates(&trace)).unwrap();
        let o = chunk::plan_chunks(&trace, &device(800), ChunkConfig::new(size)).unwrap();
        assert_eq!(o.groups_on_gpu, o.layout.chunks);
        assert_eq!(o.pcie_bytes(), 0);
        assert_eq!(o.stall_s, 0.0);
        assert!((o.iteration_s - o.baseline_iteration_s).abs() <= 1e-9 * o.baseline_iteration_s);
        assert_eq!(o.baseline_peak_bytes, trace.peak_live_bytes());
        // Every chunk resident all along: the peak is the non-model peak plus all chunks.
        let warm = WarmUp::measure(&trace);
        let all = o.layout.chunks as u64 * (o.fp16_chunk_bytes + o.os_group_bytes);
        assert_eq!(
            o.peak_bytes,
            warm.non_model_bytes.iter().max().unwrap() + all
        );
    }
}

#[test]
fn a_fitting_plan_stays_within_the_device_and_every_step_finds_its_chunk() {
    for trace in small_traces() {
        let size = search_chunk_size(&trace, &default_candidates(&trace)).unwrap();
        let mut fitted = 0;
        for tenths in (10..=200).step_by(5) {
            let cost = device(tenths);
            let Ok(o) = chunk::plan_chunks(&trace, &cost, ChunkConfig::new(size)) else {
                continue;
            };
            fitted += 1;
            assert!(o.peak_bytes <= cost.capacity_bytes, "{tenths}: {o:?}");
            for (s, step) in trace.steps.iter().enumerate() {
                if step.phase == Phase::Optimizer {
                    continue;
                }
                if let Some(k) = step.op.and_then(|op| o.layout.op_chunk[op]) {
                    assert!(o.resident[s].contains(&k), "step {s} without chunk {k}");
                }
            }
            assert!(o.iteration_s >= o.baseline_iteration_s * (1.0 - 1e-12));
            assert_eq!(
                o.h2d_bytes, o.d2h_bytes,
                "steady state: what leaves comes back"
            );
        }
        assert!(fitted > 5, "{:?}", trace.config);
    }
}

#[test]
fn more_device_memory_never_makes_the_iteration_slower() {
    for trace in small_traces() {
        let size = search_chunk_size(&trace, &default_candidates(&trace)).unwrap();
        let mut prev: Option<(u64, f64, u64)> = None;
        for tenths in (10..=200).step_by(2) {
            let Ok(o) = chunk::plan_chunks(&trace, &device(tenths), ChunkConfig::new(size)) else {
                assert!(prev.is_none(), "fitted at less memory but not at {tenths}");
                continue;
            };
            if let Some((at, t, _)) = prev {
                assert!(
                    o.iteration_s <= t * (1.0 + 1e-12),
                    "{:?}: {at} -> {tenths} tenths of GiB: {t} -> {}",
                    trace.config,
                    o.iteration_s
                );
            }
            prev = Some((tenths, o.iteration_s, o.peak_bytes));
        }
    }
}

#[test]
fn bad_inputs_are_refused_with_clear_errors() {
    let trace = &small_traces()[0];
    let cost = CostModel::a100_40gb();
    assert_eq!(
        chunk::plan_chunks(trace, &cost, ChunkConfig::new(0)),
        Err(ChunkError::ZeroChunkSize)
    );
    let largest = chunk::largest_param_elems(trace);
    let e = chunk::plan_chunks(trace, &cost, ChunkConfig::new(largest - 1)).unwrap_err();
    assert!(matches!(e, ChunkError::ChunkTooSmall { .. }));
    assert!(
        e.to_string()
            .contains("cannot hold the largest parameter tensor")
    );
    let tiny = CostModel {
        capacity_bytes: 1 << 20,
        ..cost
    };
    let e = chunk::plan_chunks(trace, &tiny, ChunkConfig::new(largest)).unwrap_err();
    let ChunkError::BudgetTooSmall {
        needed_bytes,
        capacity_bytes,
    } = e
    else {
        panic!("{e:?}");
    };
    assert_eq!(capacity_bytes, 1 << 20);
    assert!(needed_bytes > capacity_bytes);
    // Just enough for the tightest step fits (possibly slowly).
    let enough = CostModel {
        capacity_bytes: needed_bytes,
        ..cost
    };
    let o = chunk::plan_chunks(trace, &enough, ChunkConfig::new(largest)).unwrap();
    assert!(o.peak_bytes <= needed_bytes);
    let fp32 = Trace::generate(&ModelConfig::new(Model::ResNet50, 2, Precision::Fp32).unwrap());
    assert!(matches!(
        chunk::plan_chunks(&fp32, &cost, ChunkConfig::new(1 << 24)),
        Err(ChunkError::NeedsMixedPrecision { .. })
    ));
    let bad_cpu = ChunkConfig {
        cpu_optimizer_bytes_per_s: 0.0,
        ..ChunkConfig::new(largest)
    };
    assert_eq!(
        chunk::plan_chunks(trace, &cost, bad_cpu),
        Err(ChunkError::BadCpuThroughput)
    );
    let bad_cost = CostModel {
        pcie_bytes_per_s: f64::NAN,
        ..cost
    };
    assert_eq!(
        chunk::plan_chunks(trace, &bad_cost, ChunkConfig::new(largest)),
        Err(ChunkError::Training(TrainingError::BadCostParameter {
            name: "pcie_bytes_per_s"
        }))
    );
}

#[test]
fn chunking_fits_a_model_that_does_not_fit_whole_and_never_a_smaller_batch() {
    let c = ModelConfig::new(Model::Gpt2Large, 1, Precision::Mixed)
        .unwrap()
        .with_seq_len(256)
        .unwrap();
    // GPT-2 Large's persistent state alone is about 10 GiB.
    for gib in [8u64, 12, 16] {
        let cost = CostModel {
            capacity_bytes: gib << 30,
            ..CostModel::a100_40gb()
        };
        let keep = chunk::largest_batch_chunked(&c, &cost, false, 64).unwrap();
        let chunked = chunk::largest_batch_chunked(&c, &cost, true, 64).unwrap();
        assert!(chunked >= keep, "{gib} GiB: {keep} vs {chunked}");
        if gib == 8 {
            assert_eq!(keep, 0);
            assert!(chunked >= 1);
        }
    }
}
