//! Properties of the generated traces.

use alloclab_training::trace::{Event, TensorKind};
use alloclab_training::{Model, ModelConfig, Precision, RunTrace, Trace, TrainingError};

fn small(model: Model, batch: u32, precision: Precision) -> ModelConfig {
    let c = ModelConfig::new(model, batch, precision).unwrap();
    match model {
        Model::ResNet50 | Model::ResNet101 => c,
        _ => c.with_seq_len(64).unwrap(),
    }
}

fn all_small_configs() -> Vec<ModelConfig> {
    let mut v = Vec::new();
    for model in Model::ALL {
        for precision in [Precision::Fp32, Precision::Fp16, Precision::Mixed] {
            for batch in [1, 3] {
                v.push(small(model, batch, precision));
            }
        }
    }
    v
}

#[test]
fn parameter_counts_match_the_published_models() {
    for (model, published, tolerance) in [
        (Model::ResNet50, 25.557e6, 0.01),
        (Model::ResNet101, 44.549e6, 0.01),
        (Model::BertLarge, 335.1e6, 0.01),
        (Model::Gpt2Large, 774.0e6, 0.01),
        (Model::Gpt2Xl, 1557.6e6, 0.01),
    ] {
        let params = ModelConfig::new(model, 1, Precision::Fp32)
            .unwrap()
            .network()
            .params() as f64;
        assert!(
            (params / published - 1.0).abs() < tolerance,
            "{model}: {params} parameters, published {published}"
        );
    }
}

#[test]
fn resnet_forward_flops_match_the_published_multiply_adds() {
    // 4.1 and 7.8 GMACs per 224×224 image (torchvision).
    for (model, gmacs) in [(Model::ResNet50, 4.11), (Model::ResNet101, 7.83)] {
        let flops = ModelConfig::new(model, 1, Precision::Fp32)
            .unwrap()
            .network()
            .forward_flops();
        let ratio = flops / (2.0 * gmacs * 1e9);
        assert!((0.97..1.05).contains(&ratio), "{model}: {flops} FLOPs");
    }
}

#[test]
fn every_generated_trace_is_valid() {
    for c in all_small_configs() {
        Trace::generate(&c)
            .validate()
            .unwrap_or_else(|e| panic!("{c:?}: {e:?}"));
    }
}

#[test]
fn every_tensor_is_allocated_once_then_freed_once() {
    for c in all_small_configs() {
        let trace = Trace::generate(&c);
        let mut state = vec![0u8; trace.tensors.len()];
        for e in trace.all_events() {
            match e {
                Event::Alloc(id) => {
                    assert_eq!(state[id], 0, "{}: allocated twice", trace.tensors[id].name);
                    state[id] = 1;
                }
                Event::Free(id) => {
                    assert_eq!(
                        state[id], 1,
                        "{}: freed while not live",
                        trace.tensors[id].name
                    );
                    state[id] = 2;
                }
            }
        }
        assert!(
            state.iter().all(|&s| s == 2),
            "{c:?}: a tensor is never freed"
        );
    }
}

#[test]
fn activations_live_from_their_forward_step_to_the_backward_steps_that_need_them() {
    for c in all_small_configs() {
        let trace = Trace::generate(&c);
        let n = trace.forward_ops();
        let mut kept = 0;
        for (op, saved) in trace.op_saved.iter().enumerate() {
            let back = trace.backward_step(op);
            assert!(n <= back && back < 2 * n);
            for &t in saved {
                let tensor = &trace.tensors[t];
                assert!(
                    matches!(tensor.kind, TensorKind::Activation | TensorKind::Input),
                    "{}: saved but {:?}",
                    tensor.name,
                    tensor.kind
                );
                assert!(
                    tensor.alloc_step < n,
                    "{}: not from the forward pass",
                    tensor.name
                );
                assert!(
                    tensor.alloc_step <= back && back <= tensor.free_step,
                    "{}",
                    tensor.name
                );
                kept += 1;
            }
        }
        assert!(kept > n / 2, "{c:?}: too few saved tensors");
        for t in &trace.tensors {
            if t.kind == TensorKind::Transient {
                assert!(
                    t.free_step < n,
                    "{}: transient outlives the forward pass",
                    t.name
                );
            }
        }
    }
}

#[test]
fn activation_bytes_scale_linearly_with_the_batch_and_weights_do_not() {
    for model in Model::ALL {
        let one = Trace::generate(&small(model, 1, Precision::Fp32));
        let four = Trace::generate(&small(model, 4, Precision::Fp32));
        assert_eq!(
            4 * one.bytes_by_kind(TensorKind::Activation),
            four.bytes_by_kind(TensorKind::Activation),
            "{model}"
        );
        assert_eq!(one.persistent_bytes(), four.persistent_bytes(), "{model}");
    }
}

#[test]
fn mixed_precision_halves_activations_and_adds_fp32_master_weights() {
    let fp32 = Trace::generate(&small(Model::Gpt2Large, 2, Precision::Fp32));
    let mixed = Trace::generate(&small(Model::Gpt2Large, 2, Precision::Mixed));
    assert_eq!(
        fp32.bytes_by_kind(TensorKind::Activation),
        2 * mixed.bytes_by_kind(TensorKind::Activation)
    );
    assert_eq!(
        fp32.bytes_by_kind(TensorKind::Weight),
        mixed.bytes_by_kind(TensorKind::MasterWeight)
    );
    assert_eq!(fp32.bytes_by_kind(TensorKind::MasterWeight), 0);
    // Adam: two fp32 moments per parameter in both.
    assert_eq!(
        fp32.bytes_by_kind(TensorKind::OptimizerState),
        mixed.bytes_by_kind(TensorKind::OptimizerState)
    );
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    assert_eq!(
        ModelConfig::new(Model::ResNet50, 0, Precision::Fp32),
        Err(TrainingError::ZeroBatch)
    );
    let err = "vgg16".parse::<Model>().unwrap_err();
    assert!(err.to_string().contains("vgg16"));
    assert!(err.to_string().contains("resnet50"));
    assert_eq!("GPT2-XL".parse::<Model>(), Ok(Model::Gpt2Xl));
    assert_eq!("bert_large".parse::<Model>(), Ok(Model::BertLarge));
    assert!("int8".parse::<Precision>().is_err());
    let bert = ModelConfig::new(Model::BertLarge, 1, Precision::Mixed).unwrap();
    assert_eq!(
        bert.with_seq_len(513),
        Err(TrainingError::BadSequenceLength {
            seq_len: 513,
            max: 512
        })
    );
    assert!(bert.with_seq_len(0).is_err());
    assert_eq!(RunTrace::new(&bert, &[]), Err(TrainingError::NoIterations));
    assert_eq!(RunTrace::new(&bert, &[2, 0]), Err(TrainingError::ZeroBatch));
}

#[test]
fn a_run_allocates_persistent_tensors_once_and_every_id_is_balanced() {
    let c = small(Model::ResNet50, 2, Precision::Mixed);
    let run = RunTrace::new(&c, &[2, 3, 2]).unwrap();
    let mut live = std::collections::HashMap::new();
    for e in &run.events {
        if e.alloc {
            assert!(
                live.insert(e.id, e.size_bytes).is_none(),
                "id {} reused",
                e.id
            );
        } else {
            assert_eq!(
                live.remove(&e.id),
                Some(e.size_bytes),
                "id {} freed wrongly",
                e.id
            );
        }
    }
    assert!(live.is_empty());
    let one = Trace::generate(&c);
    let persistent = one
        .tensors
        .iter()
        .filter(|t| t.kind.is_persistent())
        .count();
    assert_eq!(run.iterations[0].start, persistent);
    assert_eq!(run.iterations.len(), 3);
}
