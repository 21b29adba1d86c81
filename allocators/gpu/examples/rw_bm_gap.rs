//! Why RW-BM's TAS leaves the paper's closed form near a full pool: beside the form, the
//! process the form describes (free pages kept uniformly random,
//! `sim::rw_bm_uniform_claims_tas`), RW-BM itself (`sim::simulate`) and the word-occupancy
//! model, at every point of the paper's sweep and, at 0.5 % free, for several N.
//!
//! `cargo run --release -p alloclab-gpu --example rw_bm_gap [seeds]`

use alloclab_gpu::closed_form;
use alloclab_gpu::sim::{Design, SimConfig, rw_bm_uniform_claims_tas, simulate};

fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

fn row(total_pages: usize, free_pages: usize, requesters: usize, seeds: u64) {
    let configs: Vec<SimConfig> = (1..=seeds)
        .map(|seed| SimConfig {
            total_pages,
            free_pages,
            requesters,
            seed,
        })
        .collect();
    let uniform: Vec<f64> = configs
        .iter()
        .map(|c| rw_bm_uniform_claims_tas(c).expect("valid"))
        .collect();
    let rw_bm: Vec<f64> = configs
        .iter()
        .map(|c| simulate(Design::RwBm, c).expect("valid").tas)
        .collect();
    let form = closed_form::rw_bm_tas(total_pages, free_pages, requesters);
    let model = closed_form::rw_bm_tas_word_occupancy(total_pages, free_pages, requesters);
    let (um, us) = mean_sd(&uniform);
    let (rm, rs) = mean_sd(&rw_bm);
    let pct = |v: f64| 100.0 * (v - form) / form;
    println!(
        "| {:.1} % | {requesters} | {:.3} | {um:.3} ± {us:.3} ({:+.2} %) | {rm:.3} ± {rs:.3} ({:+.2} %, sd {:.2} %) | {model:.3} ({:+.2} %) |",
        100.0 * free_pages as f64 / total_pages as f64,
        form,
        pct(um),
        pct(rm),
        100.0 * rs / rm,
        pct(model),
    );
}

fn main() {
    let seeds: u64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 16,
        Some(Ok(n)) if n > 1 => n,
        Some(_) => {
            eprintln!("usage: rw_bm_gap [seeds > 1]");
            std::process::exit(2);
        }
    };
    let t = 1usize << 20;
    println!(
        "T = 2^20 pages, {seeds} seeds (mean ± sd of one kernel; % = relative to the paper's form)\n"
    );
    println!(
        "| A/T | N | paper's form | uniform claims (form's process) | RW-BM simulator | word-occupancy model |"
    );
    println!("|---|---|---|---|---|---|");
    for fraction in [0.10, 0.05, 0.02, 0.01, 0.005] {
        row(t, (fraction * t as f64).round() as usize, 5000, seeds);
    }
    let a = (0.005 * t as f64).round() as usize;
    for n in [1000, 2500, 4000, 4500, 5000, 5200] {
        row(t, a, n, seeds);
    }
}
