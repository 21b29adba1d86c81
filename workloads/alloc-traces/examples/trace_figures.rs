//! Prints every figure of the crate README.
//!
//! ```sh
//! cargo run --release -p alloclab-alloc-traces --example trace_figures           # all sections
//! cargo run --release -p alloclab-alloc-traces --example trace_figures -- uav    # one section
//! ```
//!
//! Sections: `uav`, `switch`.

use std::time::Instant;

use alloclab_alloc_traces::switch::{self, Burst, SwitchConfig};
use alloclab_alloc_traces::uav::{self, Manoeuvre, Trajectory, UavConfig};
use alloclab_alloc_traces::workload::check_balanced;
use alloclab_core::{Checked, SystemHeap};
use alloclab_training::RunTrace;
use alloclab_training::caching::CachingConfig;
use alloclab_training::replay::{HostReplay, replay_caching, replay_host};

/// Replays `run` on the system heap and on the checked system heap; one table cell each:
/// ns per allocator call and, for the checked heap, the violations found.
fn host_cells(run: &RunTrace) -> (HostReplay, String, String) {
    let calls = run.events.len().max(1) as f64;
    replay_host(run, &SystemHeap::new(), 1).expect("host memory"); // warm-up
    let t = Instant::now();
    let r = replay_host(run, &SystemHeap::new(), 1).expect("host memory");
    let system = format!("{:.0}", t.elapsed().as_nanos() as f64 / calls);
    let checked_heap = Checked::new(SystemHeap::new());
    let t = Instant::now();
    let c = replay_host(run, &checked_heap, 1).expect("host memory");
    assert_eq!(c, r, "the checked heap sees the same run");
    let checked = format!(
        "{:.0} ({} violations, {} left live)",
        t.elapsed().as_nanos() as f64 / calls,
        checked_heap.violations().len(),
        checked_heap.live_blocks()
    );
    (r, system, checked)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn uav_section() {
    println!(
        "## UAV sliding-window map (tiles: occupancy 16 KiB r=3, elevation 64 KiB r=2, fine 256 KiB r=1; 25.6 m tiles, 12 m/s, 0.1 s steps)\n"
    );
    println!(
        "| trajectory | steps | tile changes | tile allocations | peak live MiB | SystemHeap ns/call | Checked<SystemHeap> ns/call | caching model: peak reserved MiB | reserved/allocated |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let rows: Vec<(String, UavConfig)> = vec![
        ("random, seed 1".into(), UavConfig::default()),
        (
            "random, seed 2".into(),
            UavConfig {
                seed: 2,
                ..UavConfig::default()
            },
        ),
        (
            "straight 1 km legs, 90° turns (r 40 m)".into(),
            UavConfig {
                trajectory: Trajectory::Script(vec![
                    Manoeuvre::Straight { length_m: 1000.0 },
                    Manoeuvre::Turn {
                        angle_rad: std::f64::consts::FRAC_PI_2,
                        radius_m: 40.0,
                    },
                ]),
                ..UavConfig::default()
            },
        ),
        (
            "loiter r 60 m".into(),
            UavConfig {
                trajectory: Trajectory::Script(vec![Manoeuvre::Loiter {
                    radius_m: 60.0,
                    laps: 1,
                }]),
                ..UavConfig::default()
            },
        ),
    ];
    for (name, config) in rows {
        let w = uav::generate(&config).expect("valid parameters");
        let b = check_balanced(&w.run).expect("balanced");
        let (h, system, checked) = host_cells(&w.run);
        assert_eq!(h.peak_live_bytes, b.peak_live_bytes);
        let c = replay_caching(&w.run, CachingConfig::default(), 0).expect("no capacity limit");
        println!(
            "| {name} | {} | {} | {} | {:.2} | {system} | {checked} | {:.2} | {:.3} |",
            config.steps,
            w.tile_changes,
            b.allocations,
            mib(b.peak_live_bytes),
            mib(c.total.peak_reserved_bytes),
            c.total.peak_reserved_bytes as f64 / c.total.peak_allocated_bytes as f64
        );
    }
    println!();
}

fn switch_section() {
    let d = SwitchConfig::default();
    println!(
        "## Switch block pool ({} ports, {} B cells, {} cells shared, {} sources, ON {} / OFF {} ticks, {} cells/tick per port, {} ticks)\n",
        d.ports,
        d.cell_bytes,
        d.buffer_cells,
        d.sources,
        d.mean_on_ticks,
        d.mean_off_ticks,
        d.drain_cells_per_tick,
        d.ticks
    );
    println!(
        "| arrivals | zipf s | threshold | offered load | packets | dropped | cell allocations | peak cells (MiB) | mean cells | hottest port share | SystemHeap ns/call | Checked<SystemHeap> ns/call | caching model: peak reserved MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let variants = [
        (Burst::OnOff, d.zipf_s, Some(1.0)),
        (Burst::Pareto { alpha: 1.4 }, 0.0, Some(1.0)),
        (Burst::Pareto { alpha: 1.4 }, d.zipf_s, Some(1.0)),
        (Burst::Pareto { alpha: 1.4 }, d.zipf_s, None),
        (Burst::Pareto { alpha: 1.4 }, 1.2, Some(1.0)),
    ];
    for (burst, zipf_s, threshold_alpha) in variants {
        let config = SwitchConfig {
            burst,
            zipf_s,
            threshold_alpha,
            ..d
        };
        let w = switch::generate(&config).expect("valid parameters");
        let b = check_balanced(&w.run).expect("balanced");
        let (_, system, checked) = host_cells(&w.run);
        let c = replay_caching(&w.run, CachingConfig::default(), 0).expect("no capacity limit");
        let total: u64 = w.cells_per_port.iter().sum();
        let mean = w.occupancy_cells.iter().sum::<u64>() as f64 / w.occupancy_cells.len() as f64;
        println!(
            "| {} | {zipf_s} | {} | {:.2} | {} | {:.1}% | {} | {} ({:.2}) | {:.0} | {:.1}% | {system} | {checked} | {:.2} |",
            match burst {
                Burst::OnOff => "on/off (geometric)".to_string(),
                Burst::Pareto { alpha } => format!("Pareto α={alpha}"),
            },
            threshold_alpha.map_or("none".to_string(), |a| format!("DT α={a}")),
            config.offered_load(),
            w.packets,
            100.0 * w.dropped_packets as f64 / (w.packets + w.dropped_packets).max(1) as f64,
            b.allocations,
            w.peak_cells,
            mib(b.peak_live_bytes),
            mean,
            100.0 * w.cells_per_port[0] as f64 / total.max(1) as f64,
            mib(c.total.peak_reserved_bytes)
        );
    }
    println!();
    println!(
        "### Occupancy over time, default configuration (most cells held in each tenth of the run)\n"
    );
    println!("| ports | 10% | 20% | 30% | 40% | 50% | 60% | 70% | 80% | 90% | 100% |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for zipf_s in [0.0, d.zipf_s] {
        let w = switch::generate(&SwitchConfig { zipf_s, ..d }).expect("valid parameters");
        let tenth = w.occupancy_cells.len().div_ceil(10);
        let cells: Vec<String> = w
            .occupancy_cells
            .chunks(tenth)
            .map(|c| c.iter().max().expect("non-empty").to_string())
            .collect();
        println!("| Zipf {zipf_s} | {} |", cells.join(" | "));
    }
    println!();
}

fn main() {
    let only = std::env::args().nth(1);
    let want = |s: &str| only.as_deref().is_none_or(|o| o == s);
    if want("uav") {
        uav_section();
    }
    if want("switch") {
        switch_section();
    }
}
