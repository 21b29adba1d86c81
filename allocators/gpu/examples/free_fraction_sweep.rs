//! The paper's free-fraction sweep on the CPU model: T = 2^20 pages, N = 5000 requesters,
//! A/T = 10 % .. 0.5 %, every design, 16 seeds; prints a Markdown table.
//!
//! `cargo run --release -p alloclab-gpu --example free_fraction_sweep [seeds]`

use alloclab_gpu::sim::{SweepConfig, sweep};

fn main() {
    let seeds: u64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 16,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: sweep [seeds > 0]");
            std::process::exit(2);
        }
    };
    let config = SweepConfig::paper((1..=seeds).collect());
    let points = match sweep(&config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sweep: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "T = {} pages, N = {} requesters, {} seeds\n",
        config.total_pages,
        config.requesters,
        config.seeds.len()
    );
    println!(
        "| design | A/T | TAS measured ± sd | TAS closed form | rel. err | rel. sd | TAS word-occupancy model | WAS measured ± sd | WAS closed form |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let opt = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.3}"));
    for p in &points {
        println!(
            "| {} | {:.1} % | {:.3} ± {:.3} | {} | {} | {:.2} % | {} | {:.2} ± {:.2} | {} |",
            p.design.name(),
            p.free_fraction * 100.0,
            p.tas.mean,
            p.tas.sd,
            opt(p.tas_closed_form),
            p.tas_relative_error()
                .map_or("—".to_string(), |e| format!("{:.2} %", e * 100.0)),
            100.0 * p.tas.sd / p.tas.mean,
            opt(p.tas_word_occupancy),
            p.was.mean,
            p.was.sd,
            opt(p.was_closed_form),
        );
    }
}
