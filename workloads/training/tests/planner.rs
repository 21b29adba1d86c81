//! Properties of the planner and its simulator. Times here are simulated, never measured.

use alloclab_training::cost::CostModel;
use alloclab_training::planner::{self, Action, Goal, Item, Plan};
use alloclab_training::trace::TensorKind;
use alloclab_training::{Model, ModelConfig, Precision, Trace, TrainingError};

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn small_traces() -> Vec<Trace> {
    let mut v = Vec::new();
    for model in Model::ALL {
        let mut c = ModelConfig::new(model, 2, Precision::Mixed).unwrap();
        if c.seq_len > 0 {
            c = c.with_seq_len(128).unwrap();
        }
        v.push(Trace::generate(&c));
    }
    v.push(Trace::generate(
        &ModelConfig::new(Model::ResNet50, 4, Precision::Fp32).unwrap(),
    ));
    v
}

fn random_plan(trace: &Trace, rng: &mut Rng) -> Plan {
    let mut plan = Plan::keep_all(trace);
    for t in 0..trace.tensors.len() {
        let action = match rng.below(3) {
            0 => Action::Keep,
            1 => Action::Swap,
            _ => Action::Recompute,
        };
        plan.set(trace, t, action);
    }
    plan
}

#[test]
fn the_keep_all_plan_reproduces_the_traces_own_peak() {
    let cost = CostModel::a100_40gb();
    for trace in small_traces() {
        let e = planner::evaluate(&trace, &cost, &Plan::keep_all(&trace));
        assert_eq!(e.peak_bytes, trace.peak_live_bytes(), "{:?}", trace.config);
        assert_eq!(e.bytes_swapped, 0);
        assert_eq!(e.ops_recomputed, 0);
        assert_eq!(e.stall_s, 0.0);
        let compute: f64 = trace
            .steps
            .iter()
            .map(|s| cost.step_seconds(s, trace.config.precision))
            .sum();
        assert!((e.iteration_s - compute).abs() <= 1e-9 * compute);
    }
}

#[test]
fn every_item_finds_the_tensors_it_uses_resident_under_any_plan() {
    let cost = CostModel::a100_40gb();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for trace in small_traces() {
        for round in 0..4 {
            let plan = if round == 0 {
                Plan::keep_all(&trace)
            } else {
                random_plan(&trace, &mut rng)
            };
            let schedule = planner::schedule(&trace, &cost, &plan);
            for item in &schedule.items {
                for &t in &item.uses {
                    let resident = schedule
                        .residency
                        .iter()
                        .any(|&(u, from, to)| u == t && from <= item.start_s && item.end_s <= to);
                    assert!(
                        resident,
                        "{:?}: {:?} uses {} ({:?}, {:?}) while it is not resident",
                        trace.config,
                        item.item,
                        trace.tensors[t].name,
                        trace.tensors[t].kind,
                        plan.action(t)
                    );
                }
                if let Item::Recompute(t) = item.item {
                    let tensor = &trace.tensors[t];
                    assert!(matches!(
                        tensor.kind,
                        TensorKind::Activation | TensorKind::Transient
                    ));
                    assert!(
                        tensor.kind == TensorKind::Transient || plan.action(t) == Action::Recompute,
                        "{} recomputed though planned {:?}",
                        tensor.name,
                        plan.action(t)
                    );
                    let producer = tensor.producer.unwrap();
                    assert_eq!(item.uses, trace.op_inputs[producer]);
                }
            }
            // Each recomputed activation is recomputed exactly once.
            for t in 0..trace.tensors.len() {
                if trace.tensors[t].kind == TensorKind::Activation
                    && plan.action(t) == Action::Recompute
                {
                    let times = schedule
                        .items
                        .iter()
                        .filter(|i| i.item == Item::Recompute(t))
                        .count();
                    assert_eq!(times, 1, "{}", trace.tensors[t].name);
                }
            }
        }
    }
}

#[test]
fn moving_activations_never_makes_an_iteration_faster_and_swaps_are_charged_to_pcie() {
    let cost = CostModel::a100_40gb();
    let mut rng = Rng(77);
    for trace in small_traces() {
        let base = planner::evaluate(&trace, &cost, &Plan::keep_all(&trace));
        for _ in 0..3 {
            let plan = random_plan(&trace, &mut rng);
            let e = planner::evaluate(&trace, &cost, &plan);
            assert!(e.iteration_s >= base.iteration_s - 1e-12);
            assert!(e.iteration_s >= base.iteration_s + e.recompute_s + e.stall_s - 1e-9);
        }
        // Everything swapped: the iteration cannot beat the link.
        let mut all_swapped = Plan::keep_all(&trace);
        for t in 0..trace.tensors.len() {
            all_swapped.set(&trace, t, Action::Swap);
        }
        let e = planner::evaluate(&trace, &cost, &all_swapped);
        assert!(e.bytes_swapped > 0);
        assert!(e.iteration_s >= cost.transfer_seconds(e.bytes_swapped));
        assert_eq!(
            e.ops_recomputed, 0,
            "swapping needs no recomputation of kept inputs"
        );
    }
}

#[test]
fn recomputing_one_activation_whose_input_is_kept_reruns_one_operator() {
    let cost = CostModel::a100_40gb();
    let c = ModelConfig::new(Model::Gpt2Large, 1, Precision::Mixed)
        .unwrap()
        .with_seq_len(128)
        .unwrap();
    let trace = Trace::generate(&c);
    let gelu = trace
        .tensors
        .iter()
        .position(|t| t.name == "h.5.mlp.gelu:out")
        .unwrap();
    let mut plan = Plan::keep_all(&trace);
    plan.set(&trace, gelu, Action::Recompute);
    let e = planner::evaluate(&trace, &cost, &plan);
    assert_eq!(e.ops_recomputed, 1);
    let producer = trace.tensors[gelu].producer.unwrap();
    let expected = cost.step_seconds(&trace.steps[producer], c.precision);
    assert!((e.recompute_s - expected).abs() < 1e-15);
    // The softmax output needs the scores, which no backward keeps: two operators.
    let softmax = trace
        .tensors
        .iter()
        .position(|t| t.name == "h.5.attn.softmax:out")
        .unwrap();
    let mut plan = Plan::keep_all(&trace);
    plan.set(&trace, softmax, Action::Recompute);
    assert_eq!(planner::evaluate(&trace, &cost, &plan).ops_recomputed, 2);
}

#[test]
fn a_plan_that_reports_fitting_has_its_peak_within_the_budget() {
    let cost = CostModel::a100_40gb();
    let mut saved_somewhere = 0;
    for trace in small_traces() {
        let base = planner::evaluate(&trace, &cost, &Plan::keep_all(&trace));
        let unlimited = Goal {
            time_limit_factor: None,
            ..Goal::min_memory_within(1.0)
        };
        let best = planner::plan(&trace, &cost, unlimited)
            .unwrap()
            .evaluation
            .peak_bytes;
        // At batch 2 a transformer's peak can be at the end of the backward pass (every
        // weight gradient live, activations gone), where no activation helps.
        if best < base.peak_bytes {
            saved_somewhere += 1;
        }
        for fraction in [1.0, 0.7, 0.3, 0.0] {
            // Between the lowest peak the heuristic reaches and keep-all: the budgeted run
            // takes the same greedy path and stops as soon as it fits.
            let budget = best + ((base.peak_bytes - best) as f64 * fraction) as u64;
            let out = planner::plan(&trace, &cost, Goal::fit_in(budget)).unwrap();
            assert!(out.fits, "{:?} at {fraction}", trace.config);
            assert!(out.evaluation.peak_bytes <= budget);
            // The reported evaluation is the plan's.
            assert_eq!(planner::evaluate(&trace, &cost, &out.plan), out.evaluation);
        }
        // Below the persistent state nothing fits, and the outcome says so.
        let out = planner::plan(&trace, &cost, Goal::fit_in(trace.persistent_bytes())).unwrap();
        assert!(!out.fits);
        assert!(out.evaluation.peak_bytes > trace.persistent_bytes());
    }
    assert!(
        saved_somewhere >= 3,
        "the planner saved memory on {saved_somewhere} traces"
    );
}

#[test]
fn a_plan_with_nothing_allowed_is_keep_all() {
    let cost = CostModel::a100_40gb();
    let trace = &small_traces()[0];
    let goal = Goal {
        memory_budget_bytes: Some(1),
        time_limit_factor: None,
        allow_swap: false,
        allow_recompute: false,
    };
    let out = planner::plan(trace, &cost, goal).unwrap();
    assert_eq!(out.plan, Plan::keep_all(trace));
    assert_eq!(out.evaluation, out.baseline);
}

#[test]
fn the_time_limit_is_respected() {
    let cost = CostModel::a100_40gb();
    for trace in small_traces() {
        for factor in [1.0, 1.05, 1.2] {
            let out = planner::plan(&trace, &cost, Goal::min_memory_within(factor)).unwrap();
            assert!(out.slowdown() <= factor + 1e-12, "{:?}", trace.config);
        }
    }
}

#[test]
fn bad_cost_parameters_are_refused() {
    let trace = &small_traces()[0];
    let cost = CostModel {
        pcie_bytes_per_s: 0.0,
        ..CostModel::a100_40gb()
    };
    assert_eq!(
        planner::plan(trace, &cost, Goal::min_memory_within(1.2)).unwrap_err(),
        TrainingError::BadCostParameter {
            name: "pcie_bytes_per_s"
        }
    );
    let cost = CostModel {
        compute_efficiency: f64::NAN,
        ..CostModel::a100_40gb()
    };
    assert!(cost.validate().is_err());
}

/// The DELTA paper's memory claim (≥ 40% of the peak saved within 1.2× the time), on the
/// A100-40GB-like cost model.
#[test]
fn bert_large_and_resnet50_save_40_percent_of_peak_within_1_2x_time() {
    let cost = CostModel::a100_40gb();
    for c in [
        ModelConfig::new(Model::ResNet50, 64, Precision::Fp32).unwrap(),
        ModelConfig::new(Model::BertLarge, 16, Precision::Mixed).unwrap(),
    ] {
        let trace = Trace::generate(&c);
        let out = planner::plan(&trace, &cost, Goal::min_memory_within(1.2)).unwrap();
        assert!(
            out.memory_saved() >= 0.4,
            "{c:?}: saved {}",
            out.memory_saved()
        );
        assert!(out.slowdown() <= 1.2);
    }
}

/// The DELTA paper's batch claim, as alloclab states it: 5x the keep-all batch of GPT-2 Large
/// fits 40 GiB.
#[test]
fn gpt2_large_fits_five_times_the_keep_all_batch() {
    let cost = CostModel::a100_40gb();
    let c = ModelConfig::new(Model::Gpt2Large, 1, Precision::Mixed).unwrap();
    let keep = planner::largest_batch(&c, &cost, false, None, 256).unwrap();
    assert!(keep.batch >= 1);
    let trace = Trace::generate(&c.with_batch(5 * keep.batch).unwrap());
    let out = planner::plan(&trace, &cost, Goal::fit_in(cost.capacity_bytes)).unwrap();
    assert!(
        out.fits,
        "peak {} at batch {}",
        out.evaluation.peak_bytes,
        5 * keep.batch
    );
}

#[test]
fn a_schedule_replayed_on_the_caching_model_peaks_where_the_simulation_says() {
    use alloclab_training::caching::CachingConfig;
    use alloclab_training::replay::replay_caching;
    let cost = CostModel::a100_40gb();
    let mut rng = Rng(4242);
    for trace in small_traces() {
        for round in 0..3 {
            let plan = if round == 0 {
                Plan::keep_all(&trace)
            } else {
                random_plan(&trace, &mut rng)
            };
            let schedule = planner::schedule(&trace, &cost, &plan);
            let run = schedule.run_trace(&trace);
            let r = replay_caching(&run, CachingConfig::default(), 0).unwrap();
            assert_eq!(r.peak_requested_bytes, schedule.evaluation.peak_bytes);
            assert!(r.total.peak_reserved_bytes >= r.total.peak_allocated_bytes);
        }
    }
}

#[test]
fn fitting_on_the_caching_model_never_allows_a_larger_batch_than_exact_bytes() {
    use alloclab_training::caching::CachingConfig;
    let cost = CostModel {
        capacity_bytes: 1 << 30,
        ..CostModel::a100_40gb()
    };
    let c = ModelConfig::new(Model::ResNet50, 1, Precision::Fp32).unwrap();
    let exact = planner::largest_batch(&c, &cost, false, None, 64).unwrap();
    assert!(exact.batch >= 4, "{exact:?}");
    for expandable_segments in [false, true] {
        let allocator = CachingConfig {
            expandable_segments,
            ..CachingConfig::default()
        };
        let on = planner::largest_batch_on(&c, &cost, false, None, 64, allocator).unwrap();
        assert!(on.batch <= exact.batch);
        assert!(on.batch >= 1);
        let planned = planner::largest_batch_on(&c, &cost, true, None, 64, allocator).unwrap();
        assert!(planned.batch >= on.batch);
    }
}

#[test]
fn the_memory_curve_peaks_at_the_simulated_peak_and_ends_with_the_persistent_state() {
    let cost = CostModel::a100_40gb();
    let mut rng = Rng(99);
    for trace in small_traces() {
        let plan = random_plan(&trace, &mut rng);
        let schedule = planner::schedule(&trace, &cost, &plan);
        let curve = schedule.memory_curve(&trace);
        let max = curve.iter().map(|p| p.1).max().unwrap();
        assert_eq!(max, schedule.evaluation.peak_bytes);
        assert!(curve.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(curve.last().unwrap().1, trace.persistent_bytes());
    }
}
