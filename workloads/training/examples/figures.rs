//! Prints the figures of the crate README. `cargo run --release -p alloclab-training --example figures`
use alloclab_training::cost::CostModel;
use alloclab_training::planner::{self, Goal, Plan};
use alloclab_training::{Model, ModelConfig, Precision, Trace};

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn main() {
    let cost = CostModel::a100_40gb();
    println!("cost model: {}", cost.describe());
    for (model, batch, prec) in [
        (Model::ResNet50, 64, Precision::Fp32),
        (Model::ResNet101, 64, Precision::Fp32),
        (Model::BertLarge, 16, Precision::Mixed),
        (Model::Gpt2Large, 4, Precision::Mixed),
        (Model::Gpt2Xl, 2, Precision::Mixed),
    ] {
        let config = ModelConfig::new(model, batch, prec).unwrap();
        let net = config.network();
        let trace = Trace::generate(&config);
        trace.validate().unwrap();
        let base = planner::evaluate(&trace, &cost, &Plan::keep_all(&trace));
        println!(
            "{model} b={batch} {prec}: params {:.1} M, fwd {:.1} GFLOP/sample, ops {}, tensors {}, persistent {:.2} GiB, peak {:.2} GiB, iter {:.1} ms",
            net.params() as f64 / 1e6,
            net.forward_flops() / 1e9 / f64::from(batch),
            trace.forward_ops(),
            trace.tensors.len(),
            gib(trace.persistent_bytes()),
            gib(base.peak_bytes),
            base.iteration_s * 1e3
        );
        let t0 = std::time::Instant::now();
        let out = planner::plan(&trace, &cost, Goal::min_memory_within(1.2)).unwrap();
        let e = out.evaluation;
        println!(
            "  planned: peak {:.2} GiB ({:.1}% saved), time x{:.3}, swapped {:.2} GiB, recomputed {} ops, stall {:.1} ms, keep/swap/recompute {}/{}/{} [{:.1}s]",
            gib(e.peak_bytes),
            100.0 * out.memory_saved(),
            out.slowdown(),
            gib(e.bytes_swapped),
            e.ops_recomputed,
            e.stall_s * 1e3,
            out.plan.count(planner::Action::Keep),
            out.plan.count(planner::Action::Swap),
            out.plan.count(planner::Action::Recompute),
            t0.elapsed().as_secs_f64()
        );
    }
}
