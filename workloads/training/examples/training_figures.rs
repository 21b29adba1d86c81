//! Prints every figure of the crate README.
//!
//! ```sh
//! cargo run --release -p alloclab-training --example training_figures            # all sections
//! cargo run --release -p alloclab-training --example training_figures -- batch    # one section
//! ```
//!
//! Sections: `traces`, `caching`, `growing`, `planner`, `curve`, `sweep`, `sensitivity`, `batch`,
//! `snapshot`, `chunk`, `tensile`.

use alloclab_core::SystemHeap;
use alloclab_training::caching::CachingConfig;
use alloclab_training::chunk::{self, ChunkConfig, ChunkError};
use alloclab_training::cost::CostModel;
use alloclab_training::planner::{self, Action, Goal, Plan};
use alloclab_training::replay::{CachingReplay, replay_caching, replay_host};
use alloclab_training::snapshot::{FreeAt, ImportOptions, Snapshot};
use alloclab_training::tensile::{self, Job};
use alloclab_training::trace::TensorKind;
use alloclab_training::{Model, ModelConfig, Precision, RunTrace, Trace};

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// The caching allocator's replay of `run` without and with expandable segments, no
/// capacity limit.
fn replay_without_and_with_expandable(run: &RunTrace) -> (CachingReplay, CachingReplay) {
    let replay = |expandable_segments| {
        let config = CachingConfig {
            expandable_segments,
            ..CachingConfig::default()
        };
        replay_caching(run, config, 0).expect("no capacity limit")
    };
    (replay(false), replay(true))
}

/// The configurations of the trace and planner tables.
fn configs() -> Vec<ModelConfig> {
    [
        (Model::ResNet50, 64, Precision::Fp32),
        (Model::ResNet101, 64, Precision::Fp32),
        (Model::BertLarge, 16, Precision::Mixed),
        (Model::Gpt2Large, 4, Precision::Mixed),
        (Model::Gpt2Xl, 2, Precision::Mixed),
    ]
    .into_iter()
    .map(|(m, b, p)| ModelConfig::new(m, b, p).expect("batch is not zero"))
    .collect()
}

/// Peak reserved GiB of a run on the caching model.
fn reserved_gib(run: &RunTrace, expandable_segments: bool) -> f64 {
    let config = CachingConfig {
        expandable_segments,
        ..CachingConfig::default()
    };
    let r = replay_caching(run, config, 0).expect("no capacity limit");
    gib(r.total.peak_reserved_bytes)
}

fn label(c: &ModelConfig) -> String {
    if c.seq_len > 0 {
        format!("{} b={} s={} {}", c.model, c.batch, c.seq_len, c.precision)
    } else {
        format!("{} b={} {}", c.model, c.batch, c.precision)
    }
}

fn traces(cost: &CostModel) {
    println!("## Traces (one iteration; keep every activation)\n");
    println!(
        "| config | params (M) | fwd GFLOP/sample | fwd ops | tensors | persistent GiB | activations GiB | peak GiB | iteration ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for c in configs() {
        let net = c.network();
        let trace = Trace::generate(&c);
        trace.validate().expect("generated traces are valid");
        let e = planner::evaluate(&trace, cost, &Plan::keep_all(&trace));
        println!(
            "| {} | {:.1} | {:.1} | {} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
            label(&c),
            net.params() as f64 / 1e6,
            net.forward_flops() / 1e9 / f64::from(c.batch),
            trace.forward_ops(),
            trace.tensors.len(),
            gib(trace.persistent_bytes()),
            gib(trace.bytes_by_kind(TensorKind::Activation)),
            gib(e.peak_bytes),
            e.iteration_s * 1e3
        );
    }
    println!();
}

fn caching() {
    println!("## Caching-allocator model, 3 iterations at a fixed batch (third iteration)\n");
    println!(
        "| config | expandable | peak allocated GiB | peak reserved GiB | reserved/allocated | malloc calls/iter | segment calls/iter | exact peak GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for c in configs() {
        let run = RunTrace::new(&c, &[c.batch; 3]).expect("batches are not zero");
        for expandable in [false, true] {
            let config = CachingConfig {
                expandable_segments: expandable,
                ..CachingConfig::default()
            };
            let r = replay_caching(&run, config, 0).expect("no capacity limit");
            let it = r.iterations[2];
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.3} | {} | {} | {:.2} |",
                label(&c),
                if expandable { "yes" } else { "no" },
                gib(r.total.peak_allocated_bytes),
                gib(r.total.peak_reserved_bytes),
                r.total.peak_reserved_bytes as f64 / r.total.peak_allocated_bytes as f64,
                it.stats.alloc_calls,
                it.stats.segment_allocs,
                gib(r.peak_requested_bytes)
            );
        }
    }
    println!();
    let c = ModelConfig::new(Model::ResNet50, 8, Precision::Fp32).expect("batch is not zero");
    let run = RunTrace::new(&c, &[8, 8]).expect("batches are not zero");
    let r = replay_host(&run, &SystemHeap::new(), 1024).expect("the host heap has 50 MiB");
    println!(
        "Host replay (alloclab_core::SystemHeap, sizes / 1024): {} b=8 two iterations: {} allocations, peak live {:.1} MiB, peak footprint {}\n",
        c.model,
        r.allocations,
        r.peak_live_bytes as f64 / (1 << 20) as f64,
        r.peak_footprint_bytes
            .map_or("not reported".into(), |b| format!(
                "{:.1} MiB",
                b as f64 / (1 << 20) as f64
            ))
    );
}

fn growing() {
    println!("## Batch size N -> N+1 every iteration (the case expandable segments fix)\n");
    for (model, n0, precision, seq) in [
        (Model::ResNet50, 32, Precision::Fp32, 0),
        (Model::BertLarge, 8, Precision::Mixed, 128),
    ] {
        let mut config = ModelConfig::new(model, n0, precision).expect("batch is not zero");
        if seq > 0 {
            config = config.with_seq_len(seq).expect("valid sequence length");
        }
        let batches: Vec<u32> = (0..16).map(|i| n0 + i).collect();
        let run = RunTrace::new(&config, &batches).expect("batches are not zero");
        let (without, with) = replay_without_and_with_expandable(&run);
        println!(
            "### {} ({}), batch {}..={}\n",
            model,
            precision,
            n0,
            n0 + 15
        );
        println!(
            "| batch | peak allocated GiB | reserved GiB (no expandable) | reserved/allocated | segment calls | reserved GiB (expandable) | reserved/allocated | segment calls |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for (a, b) in without.iterations.iter().zip(&with.iterations) {
            println!(
                "| {} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {} |",
                a.batch,
                gib(a.stats.peak_allocated_bytes),
                gib(a.stats.peak_reserved_bytes),
                a.fragmentation(),
                a.stats.segment_allocs,
                gib(b.stats.peak_reserved_bytes),
                b.fragmentation(),
                b.stats.segment_allocs
            );
        }
        println!();
    }
    // Other ways for the batch to change, 16 iterations each.
    let config = ModelConfig::new(Model::ResNet50, 32, Precision::Fp32).expect("batch is not zero");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u32> = (0..16)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            32 + (state % 16) as u32
        })
        .collect();
    let patterns: [(&str, Vec<u32>); 3] = [
        ("growing N, N+1, N+2, ...", (32..48).collect()),
        ("alternating N, N+1", (0..16).map(|i| 32 + i % 2).collect()),
        ("random in N..N+16", random),
    ];
    println!("### resnet50 (fp32), how the batch changes (16 iterations from N = 32)\n");
    println!(
        "| pattern | peak allocated GiB | peak reserved GiB (no expandable) | ratio | peak reserved GiB (expandable) | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, batches) in patterns {
        let run = RunTrace::new(&config, &batches).expect("batches are not zero");
        let (without, with) = replay_without_and_with_expandable(&run);
        let allocated = without.total.peak_allocated_bytes;
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            name,
            gib(allocated),
            gib(without.total.peak_reserved_bytes),
            without.total.peak_reserved_bytes as f64 / allocated as f64,
            gib(with.total.peak_reserved_bytes),
            with.total.peak_reserved_bytes as f64 / with.total.peak_allocated_bytes as f64
        );
    }
    println!();
    // The same growth on a 40 GiB device, for longer: without expandable segments the
    // device fills with cached slivers and the allocator must flush its cache (a device
    // synchronisation and a cudaFree of every free segment) to go on.
    let config = ModelConfig::new(Model::ResNet50, 32, Precision::Fp32).expect("batch is not zero");
    let batches: Vec<u32> = (32..96).collect();
    let run = RunTrace::new(&config, &batches).expect("batches are not zero");
    println!("### resnet50 (fp32), batch 32..=95 on a 40 GiB device\n");
    println!(
        "| expandable | cache flushes | segment calls (alloc/free) | peak reserved GiB | peak allocated GiB | outcome |"
    );
    println!("|---|---|---|---|---|---|");
    for expandable in [false, true] {
        let config = CachingConfig {
            expandable_segments: expandable,
            capacity_bytes: Some(40 << 30),
            ..CachingConfig::default()
        };
        match replay_caching(&run, config, 0) {
            Ok(r) => println!(
                "| {} | {} | {}/{} | {:.2} | {:.2} | completed |",
                if expandable { "yes" } else { "no" },
                r.total.cache_flushes,
                r.total.segment_allocs,
                r.total.segment_frees,
                gib(r.total.peak_reserved_bytes),
                gib(r.total.peak_allocated_bytes)
            ),
            Err(e) => println!(
                "| {} | - | - | - | - | {e} |",
                if expandable { "yes" } else { "no" }
            ),
        }
    }
    println!();
}

fn planner_table(cost: &CostModel) {
    println!("## DELTA-style planner: lowest peak within 1.2x of the keep-all iteration time\n");
    println!(
        "| config | keep-all peak GiB | planned peak GiB | saved | time keep-all ms | time planned ms | slowdown | swapped GiB | recomputed ops | stall ms | swap/recompute tensors | planned, reserved by the caching model GiB (plain / expandable) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for c in configs() {
        let trace = Trace::generate(&c);
        let out =
            planner::plan(&trace, cost, Goal::min_memory_within(1.2)).expect("valid cost model");
        let (b, e) = (out.baseline, out.evaluation);
        let run = planner::schedule(&trace, cost, &out.plan).run_trace(&trace);
        println!(
            "| {} | {:.2} | {:.2} | {:.1}% | {:.1} | {:.1} | {:.3} | {:.2} | {} | {:.1} | {}/{} | {:.2} / {:.2} |",
            label(&c),
            gib(b.peak_bytes),
            gib(e.peak_bytes),
            100.0 * out.memory_saved(),
            b.iteration_s * 1e3,
            e.iteration_s * 1e3,
            out.slowdown(),
            gib(e.bytes_swapped),
            e.ops_recomputed,
            e.stall_s * 1e3,
            out.plan.count(Action::Swap),
            out.plan.count(Action::Recompute),
            reserved_gib(&run, false),
            reserved_gib(&run, true)
        );
    }
    println!();
}

fn curve(cost: &CostModel) {
    let c = configs()[2];
    let trace = Trace::generate(&c);
    let out = planner::plan(&trace, cost, Goal::min_memory_within(1.2)).expect("valid cost model");
    println!(
        "## Device memory over one iteration, {} (most GiB live in each tenth of the plan's own iteration)\n",
        label(&c)
    );
    print!("| plan | iteration ms |");
    for k in 1..=10 {
        print!(" {}% |", 10 * k);
    }
    println!();
    println!("|---|---|{}", "---|".repeat(10));
    for (name, plan) in [
        ("keep all", Plan::keep_all(&trace)),
        ("planned", out.plan.clone()),
    ] {
        let schedule = planner::schedule(&trace, cost, &plan);
        let curve = schedule.memory_curve(&trace);
        let end = schedule.evaluation.iteration_s;
        print!("| {name} | {:.1} |", end * 1e3);
        for k in 1..=10 {
            let t = end * f64::from(k) / 10.0;
            // The most memory live in the tenth that ends at t.
            let from = t - end / 10.0;
            let level = curve
                .iter()
                .filter(|p| p.0 <= t && p.0 > from)
                .map(|p| p.1)
                .max()
                .or_else(|| curve.iter().rev().find(|p| p.0 <= t).map(|p| p.1))
                .unwrap_or(0);
            print!(" {:.2} |", gib(level));
        }
        println!();
    }
    println!();
}

fn sweep(cost: &CostModel) {
    println!("## Planner across batch sizes (lowest peak within 1.2x)\n");
    println!(
        "| config | keep-all peak GiB | planned peak GiB | saved | slowdown | keep-all peak at (share of the iteration) |"
    );
    println!("|---|---|---|---|---|---|");
    let runs = [
        (Model::ResNet50, Precision::Fp32, vec![8, 16, 32, 64, 128]),
        (Model::BertLarge, Precision::Mixed, vec![2, 4, 8, 16, 32]),
    ];
    for (model, precision, batches) in runs {
        for b in batches {
            let c = ModelConfig::new(model, b, precision).expect("batch is not zero");
            let trace = Trace::generate(&c);
            let out = planner::plan(&trace, cost, Goal::min_memory_within(1.2))
                .expect("valid cost model");
            let forward_s: f64 = trace
                .steps
                .iter()
                .take(trace.forward_ops())
                .map(|s| cost.step_seconds(s, c.precision))
                .sum();
            let place = format!(
                "{:.0}% (forward ends at {:.0}%)",
                100.0 * out.baseline.peak_time_s / out.baseline.iteration_s,
                100.0 * forward_s / out.baseline.iteration_s
            );
            println!(
                "| {} | {:.2} | {:.2} | {:.1}% | {:.3} | {} |",
                label(&c),
                gib(out.baseline.peak_bytes),
                gib(out.evaluation.peak_bytes),
                100.0 * out.memory_saved(),
                out.slowdown(),
                place
            );
        }
    }
    println!();
}

fn sensitivity(cost: &CostModel) {
    println!("## Sensitivity of the target configurations (lowest peak within 1.2x)\n");
    println!("| config | variant | saved | slowdown | swapped GiB | recomputed ops |");
    println!("|---|---|---|---|---|---|");
    let slow_link = CostModel {
        pcie_bytes_per_s: 12e9,
        ..*cost
    };
    let fast_compute = CostModel {
        compute_efficiency: 0.8,
        ..*cost
    };
    for c in [configs()[0], configs()[2]] {
        let trace = Trace::generate(&c);
        let variants: [(&str, &CostModel, bool, bool); 5] = [
            ("default", cost, true, true),
            ("PCIe 12 GB/s", &slow_link, true, true),
            ("80% compute efficiency", &fast_compute, true, true),
            ("recompute only", cost, false, true),
            ("swap only", cost, true, false),
        ];
        for (name, model, allow_swap, allow_recompute) in variants {
            let goal = Goal {
                allow_swap,
                allow_recompute,
                ..Goal::min_memory_within(1.2)
            };
            let out = planner::plan(&trace, model, goal).expect("valid cost model");
            println!(
                "| {} | {} | {:.1}% | {:.3} | {:.2} | {} |",
                label(&c),
                name,
                100.0 * out.memory_saved(),
                out.slowdown(),
                gib(out.evaluation.bytes_swapped),
                out.evaluation.ops_recomputed
            );
        }
    }
    println!();
}

fn batch(cost: &CostModel) {
    println!(
        "## Largest batch in {:.0} GiB (mixed precision, seq 1024)\n",
        gib(cost.capacity_bytes)
    );
    println!(
        "Fits in: *exact bytes* (the simulated peak), or the schedule replayed on the caching-allocator model (plain or expandable segments) without running out. Planner without time limit, and within 1.2x of keep-all at the same batch.\n"
    );
    println!(
        "| model | fits in | keep-all batch | samples/s | planned batch | growth | samples/s | planned within 1.2x | growth | samples/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for model in [Model::Gpt2Large, Model::Gpt2Xl] {
        let c = ModelConfig::new(model, 1, Precision::Mixed).expect("batch is not zero");
        for criterion in ["exact bytes", "caching model", "caching model, expandable"] {
            let search = |planned: bool, limit: Option<f64>| {
                let fit = match criterion {
                    "exact bytes" => planner::largest_batch(&c, cost, planned, limit, 1024),
                    _ => planner::largest_batch_on(
                        &c,
                        cost,
                        planned,
                        limit,
                        1024,
                        CachingConfig {
                            expandable_segments: criterion.ends_with("expandable"),
                            ..CachingConfig::default()
                        },
                    ),
                };
                fit.expect("valid cost model")
            };
            let keep = search(false, None);
            let planned = search(true, None);
            let bounded = search(true, Some(1.2));
            let growth = |b: u32| {
                if keep.batch == 0 {
                    "-".to_string()
                } else {
                    format!("{:.2}x", f64::from(b) / f64::from(keep.batch))
                }
            };
            println!(
                "| {} | {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {:.1} |",
                model,
                criterion,
                keep.batch,
                keep.samples_per_s(),
                planned.batch,
                growth(planned.batch),
                planned.samples_per_s(),
                bounded.batch,
                growth(bounded.batch),
                bounded.samples_per_s()
            );
        }
    }
    println!();
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// The fixture, or the `_dump_snapshot` file named after the section name
/// (`figures -- snapshot PATH`).
fn snapshot_section() {
    let fixture = include_bytes!("../tests/fixtures/snapshot_p4.pickle");
    let (name, bytes) = match std::env::args().nth(2) {
        Some(path) => {
            let b = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
            (path, b)
        }
        None => (
            "tests/fixtures/snapshot_p4.pickle".to_string(),
            fixture.to_vec(),
        ),
    };
    println!("## PyTorch memory snapshot ({name}, device 0)\n");
    println!(
        "| free at | events | alloc / free_requested / free_completed | pre-window blocks | deferred frees | live at end (segments say) | peak live MiB | caching model: peak allocated / reserved MiB | SystemHeap: allocations, peak live MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for free_at in [FreeAt::Completed, FreeAt::Requested] {
        let options = ImportOptions {
            free_at,
            ..ImportOptions::default()
        };
        let s = match Snapshot::from_pickle_bytes(&bytes, &options) {
            Ok(s) => s,
            Err(e) => {
                println!("{name}: {e}\n");
                return;
            }
        };
        let st = &s.stats;
        let c = replay_caching(&s.run, CachingConfig::default(), 0).expect("no capacity limit");
        // A real snapshot can hold gigabytes: on the host, sizes are divided by 1024 above 1 GiB.
        let scale = if st.peak_live_bytes > 1 << 30 {
            1024
        } else {
            1
        };
        let h = replay_host(&s.run, &SystemHeap::new(), scale).expect("host memory");
        println!(
            "| {free_at:?} | {} | {} / {} / {} | {} | {} | {} ({}) | {:.2} | {:.2} / {:.2} | {}, {:.2} |",
            st.events,
            st.allocs,
            st.free_requested,
            st.free_completed,
            st.pre_window_blocks,
            st.deferred_frees,
            st.live_at_end,
            st.active_blocks_in_segments,
            mib(st.peak_live_bytes),
            mib(c.total.peak_allocated_bytes),
            mib(c.total.peak_reserved_bytes),
            h.allocations,
            mib(h.peak_live_bytes)
        );
    }
    println!();
}

fn chunks(cost: &CostModel) {
    println!(
        "## PatrickStar-style chunk manager (chunk size searched; CPU optimizer {:.0} GB/s)\n",
        chunk::CPU_OPTIMIZER_BYTES_PER_S / 1e9
    );
    println!(
        "| config | device GiB | keep-all peak GiB | chunk M elems | chunks | unused | groups with Adam on GPU | chunked peak GiB | keep-all ms | chunked ms | slowdown | H2D GiB | D2H GiB | stall ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let configs = [
        ModelConfig::new(Model::BertLarge, 16, Precision::Mixed).expect("batch is not zero"),
        ModelConfig::new(Model::Gpt2Large, 4, Precision::Mixed).expect("batch is not zero"),
        ModelConfig::new(Model::Gpt2Xl, 2, Precision::Mixed).expect("batch is not zero"),
    ];
    for c in configs {
        let trace = Trace::generate(&c);
        let size = chunk::search_chunk_size(&trace, &chunk::default_candidates(&trace))
            .expect("a candidate holds the largest tensor");
        for capacity_gib in [40u64, 24, 16, 12] {
            let device = CostModel {
                capacity_bytes: capacity_gib << 30,
                ..*cost
            };
            match chunk::plan_chunks(&trace, &device, ChunkConfig::new(size)) {
                Ok(o) => println!(
                    "| {} | {} | {:.2} | {:.1} | {} | {:.1}% | {}/{} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} |",
                    label(&c),
                    capacity_gib,
                    gib(o.baseline_peak_bytes),
                    size as f64 / 1e6,
                    o.layout.chunks,
                    100.0 * o.layout.wasted_elems() as f64
                        / (o.layout.chunks as u64 * o.layout.chunk_elems) as f64,
                    o.groups_on_gpu,
                    o.layout.chunks,
                    gib(o.peak_bytes),
                    o.baseline_iteration_s * 1e3,
                    o.iteration_s * 1e3,
                    o.slowdown(),
                    gib(o.h2d_bytes),
                    gib(o.d2h_bytes),
                    o.stall_s * 1e3
                ),
                Err(ChunkError::BudgetTooSmall { needed_bytes, .. }) => println!(
                    "| {} | {} | {:.2} | {:.1} | - | - | - | does not fit: the tightest step needs {:.2} GiB | - | - | - | - | - | - |",
                    label(&c),
                    capacity_gib,
                    gib(trace.peak_live_bytes()),
                    size as f64 / 1e6,
                    gib(needed_bytes)
                ),
                Err(e) => panic!("{e}"),
            }
        }
    }
    println!();
    println!("### Largest batch that fits (keep everything on the device vs chunk manager)\n");
    println!("| model | device GiB | keep-all batch | chunked batch |");
    println!("|---|---|---|---|");
    for model in [Model::BertLarge, Model::Gpt2Large, Model::Gpt2Xl] {
        let c = ModelConfig::new(model, 1, Precision::Mixed).expect("batch is not zero");
        for capacity_gib in [40u64, 24, 16, 12] {
            let device = CostModel {
                capacity_bytes: capacity_gib << 30,
                ..*cost
            };
            let keep = chunk::largest_batch_chunked(&c, &device, false, 1024).expect("valid");
            let chunked = chunk::largest_batch_chunked(&c, &device, true, 1024).expect("valid");
            println!("| {model} | {capacity_gib} | {keep} | {chunked} |");
        }
    }
    println!();
}

fn tensile_table(cost: &CostModel) {
    println!("## TENSILE-style scheduler: jobs sharing one device\n");
    let job = |model, batch, precision, seq: u32, offset_ms: f64| {
        let mut c = ModelConfig::new(model, batch, precision).expect("batch is not zero");
        if seq > 0 {
            c = c.with_seq_len(seq).expect("valid sequence length");
        }
        Job {
            trace: Trace::generate(&c),
            offset_s: offset_ms / 1e3,
        }
    };
    let scenarios: [(&str, Vec<Job>, Vec<u64>); 2] = [
        (
            "A: resnet50 b=64 fp32 @0 ms, bert-large b=16 s=512 mixed @50 ms, gpt2-large b=4 mixed @100 ms",
            vec![
                job(Model::ResNet50, 64, Precision::Fp32, 0, 0.0),
                job(Model::BertLarge, 16, Precision::Mixed, 512, 50.0),
                job(Model::Gpt2Large, 4, Precision::Mixed, 1024, 100.0),
            ],
            vec![40, 32, 28],
        ),
        (
            "B: bert-large b=32 s=512 mixed @0 ms, bert-large b=16 s=512 mixed @120 ms",
            vec![
                job(Model::BertLarge, 32, Precision::Mixed, 512, 0.0),
                job(Model::BertLarge, 16, Precision::Mixed, 512, 120.0),
            ],
            vec![32, 24, 16],
        ),
    ];
    for (name, jobs, budgets) in scenarios {
        println!("### {name}\n");
        println!(
            "| budget GiB | actions | combined peak GiB unscheduled | scheduled | fits | job | alone ms | shared ms | scheduled ms | added ms | swapped GiB | tensors swapped | ops recomputed |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (budget, recompute) in budgets.iter().flat_map(|&b| [(b, false), (b, true)]) {
            let out =
                tensile::schedule_jobs(&jobs, cost, budget << 30, recompute).expect("valid jobs");
            for (k, (j, o)) in jobs.iter().zip(&out.jobs).enumerate() {
                let head = if k == 0 {
                    format!(
                        "| {} | {} | {:.2} | {:.2} | {} |",
                        budget,
                        if recompute {
                            "swap + recompute"
                        } else {
                            "swap"
                        },
                        gib(out.unscheduled_peak_bytes),
                        gib(out.peak_bytes),
                        if out.fits { "yes" } else { "no" }
                    )
                } else {
                    "| | | | | |".to_string()
                };
                println!(
                    "{head} {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {} |",
                    label(&j.trace.config),
                    o.alone_s * 1e3,
                    o.unscheduled_s * 1e3,
                    o.iteration_s() * 1e3,
                    o.added_s() * 1e3,
                    gib(o.bytes_swapped()),
                    o.plan.count(Action::Swap),
                    o.schedule.evaluation.ops_recomputed
                );
            }
        }
        println!();
    }
}

fn main() {
    let cost = CostModel::a100_40gb();
    let only = std::env::args().nth(1);
    let want = |s: &str| only.as_deref().is_none_or(|o| o == s);
    println!("Cost model: {}\n", cost.describe());
    if want("traces") {
        traces(&cost);
    }
    if want("caching") {
        caching();
    }
    if want("growing") {
        growing();
    }
    if want("planner") {
        planner_table(&cost);
    }
    if want("curve") {
        curve(&cost);
    }
    if want("sweep") {
        sweep(&cost);
    }
    if want("sensitivity") {
        sensitivity(&cost);
    }
    if want("batch") {
        batch(&cost);
    }
    if want("snapshot") {
        snapshot_section();
    }
    if want("chunk") {
        chunks(&cost);
    }
    if want("tensile") {
        tensile_table(&cost);
    }
}
