//! The UAV sliding-window and switch block-pool workloads: properties that could fail.

use std::f64::consts::FRAC_PI_2;

use alloclab_alloc_traces::switch::{self, Burst, SwitchConfig};
use alloclab_alloc_traces::uav::{self, Layer, Manoeuvre, Trajectory, UavConfig};
use alloclab_alloc_traces::workload::check_balanced;
use alloclab_core::{Checked, SystemHeap};
use alloclab_training::caching::CachingConfig;
use alloclab_training::replay::{replay_caching, replay_host};
use alloclab_training::trace::RunTrace;

/// Bytes live after each of `ends` (indices into `run.events`), from the events alone.
fn live_at(run: &RunTrace, ends: &[usize]) -> Vec<u64> {
    let mut bytes = 0u64;
    let mut at = 0;
    let mut out = Vec::with_capacity(ends.len());
    for &end in ends {
        for e in &run.events[at..end] {
            if e.alloc {
                bytes += e.size_bytes;
            } else {
                bytes -= e.size_bytes;
            }
        }
        at = end;
        out.push(bytes);
    }
    out
}

fn small_uav() -> UavConfig {
    UavConfig {
        steps: 5_000,
        ..UavConfig::default()
    }
}

#[test]
fn uav_live_set_is_exactly_the_windows() {
    for seed in 1..=4 {
        let config = UavConfig {
            seed,
            ..small_uav()
        };
        let w = uav::generate(&config).unwrap();
        let b = check_balanced(&w.run).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let window = config.window_bytes();
        assert_eq!(
            b.peak_live_bytes, window,
            "no step holds more than the windows"
        );
        assert!(w.live_bytes.iter().all(|&x| x == window));
        assert_eq!(live_at(&w.run, &w.step_ends), w.live_bytes, "events agree");
        assert!(w.tile_changes > 50, "the vehicle moves across tiles");
        let allocated: u64 = w.tiles_allocated.iter().sum();
        assert_eq!(b.allocations, allocated);
        // Turns and loiters happen, and the vehicle goes somewhere.
        assert!(
            w.manoeuvres
                .iter()
                .any(|m| matches!(m, Manoeuvre::Loiter { .. }))
        );
        assert!(
            w.manoeuvres
                .iter()
                .any(|m| matches!(m, Manoeuvre::Turn { .. }))
        );
    }
}

#[test]
fn uav_straight_flight_recycles_one_column_per_tile() {
    // Due east at one tile per 10 steps: each tile crossing frees and allocates one column
    // (2r + 1 tiles) of each layer.
    let config = UavConfig {
        tile_m: 10.0,
        speed_mps: 10.0,
        dt_s: 0.1,
        steps: 1000,
        trajectory: Trajectory::Script(vec![Manoeuvre::Straight { length_m: 1e9 }]),
        ..UavConfig::default()
    };
    let w = uav::generate(&config).unwrap();
    assert_eq!(w.tile_changes, 100);
    for (l, &n) in config.layers.iter().zip(&w.tiles_allocated) {
        let side = 2 * u64::from(l.radius_tiles) + 1;
        assert_eq!(n, side * side + 100 * side, "layer {}", l.name);
    }
    let (x, y) = *w.positions.last().unwrap();
    assert!((x - 1000.0).abs() < 1e-6 && y.abs() < 1e-9);
}

#[test]
fn uav_loiter_comes_back() {
    // One full circle of radius 50 m ends where it began, inside the first window.
    let config = UavConfig {
        speed_mps: 10.0,
        dt_s: 0.01,
        steps: (std::f64::consts::TAU * 50.0 / 0.1).round() as u32,
        trajectory: Trajectory::Script(vec![Manoeuvre::Loiter {
            radius_m: 50.0,
            laps: 1,
        }]),
        ..UavConfig::default()
    };
    let w = uav::generate(&config).unwrap();
    let (x, y) = *w.positions.last().unwrap();
    assert!(x.hypot(y) < 0.5, "back at the start: {x} {y}");
    let turn = UavConfig {
        trajectory: Trajectory::Script(vec![
            Manoeuvre::Turn {
                angle_rad: FRAC_PI_2,
                radius_m: 30.0,
            },
            Manoeuvre::Straight { length_m: 100.0 },
        ]),
        ..small_uav()
    };
    check_balanced(&uav::generate(&turn).unwrap().run).unwrap();
}

#[test]
fn uav_is_deterministic_by_seed() {
    let a = uav::generate(&small_uav()).unwrap();
    let b = uav::generate(&small_uav()).unwrap();
    assert_eq!(a, b);
    let c = uav::generate(&UavConfig {
        seed: 99,
        ..small_uav()
    })
    .unwrap();
    assert_ne!(a.positions, c.positions);
}

#[test]
fn uav_bad_parameters_are_errors() {
    let bad = |c: UavConfig, name: &str| {
        let e = uav::generate(&c).expect_err("must be refused");
        assert_eq!(e.name, name, "{e}");
        assert!(e.to_string().contains(name));
    };
    bad(
        UavConfig {
            tile_m: 0.0,
            ..small_uav()
        },
        "tile_m",
    );
    bad(
        UavConfig {
            tile_m: f64::NAN,
            ..small_uav()
        },
        "tile_m",
    );
    bad(
        UavConfig {
            layers: vec![],
            ..small_uav()
        },
        "layers",
    );
    let layer = |cells, bytes, radius| Layer {
        name: "x",
        cells_per_side: cells,
        bytes_per_cell: bytes,
        radius_tiles: radius,
    };
    bad(
        UavConfig {
            layers: vec![layer(0, 1, 1)],
            ..small_uav()
        },
        "cells_per_side",
    );
    bad(
        UavConfig {
            layers: vec![layer(8, 0, 1)],
            ..small_uav()
        },
        "bytes_per_cell",
    );
    bad(
        UavConfig {
            layers: vec![layer(8, 1, 33)],
            ..small_uav()
        },
        "radius_tiles",
    );
    bad(
        UavConfig {
            speed_mps: -1.0,
            ..small_uav()
        },
        "speed_mps",
    );
    bad(
        UavConfig {
            dt_s: f64::INFINITY,
            ..small_uav()
        },
        "dt_s",
    );
    bad(
        UavConfig {
            steps: 0,
            ..small_uav()
        },
        "steps",
    );
    // A flight across more than 2^40 tiles (tile indices would overflow).
    bad(
        UavConfig {
            tile_m: 1e-12,
            ..small_uav()
        },
        "tile_m",
    );
    bad(
        UavConfig {
            trajectory: Trajectory::Script(vec![]),
            ..small_uav()
        },
        "trajectory",
    );
    bad(
        UavConfig {
            trajectory: Trajectory::Script(vec![Manoeuvre::Turn {
                angle_rad: 0.0,
                radius_m: 10.0,
            }]),
            ..small_uav()
        },
        "trajectory",
    );
}

#[test]
fn uav_replays_on_host_heaps_and_the_caching_model() {
    let config = UavConfig {
        steps: 3_000,
        ..UavConfig::default()
    };
    let w = uav::generate(&config).unwrap();
    let checked = Checked::new(SystemHeap::new());
    let r = replay_host(&w.run, &checked, 1).unwrap();
    assert_eq!(r.peak_live_bytes, config.window_bytes());
    assert_eq!(checked.live_blocks(), 0);
    assert!(checked.violations().is_empty());
    let c = replay_caching(&w.run, CachingConfig::default(), 97).unwrap();
    assert_eq!(c.peak_requested_bytes, config.window_bytes());
}

fn small_switch() -> SwitchConfig {
    SwitchConfig {
        ticks: 4_000,
        ..SwitchConfig::default()
    }
}

#[test]
fn switch_occupancy_is_the_queues_and_within_the_buffer() {
    for burst in [Burst::OnOff, Burst::Pareto { alpha: 1.3 }] {
        for threshold_alpha in [None, Some(1.0)] {
            let config = SwitchConfig {
                burst,
                threshold_alpha,
                buffer_cells: 4096,
                ..small_switch()
            };
            let w = switch::generate(&config).unwrap();
            let b = check_balanced(&w.run).unwrap();
            let cell = u64::from(config.cell_bytes);
            let from_events = live_at(&w.run, &w.tick_ends);
            assert_eq!(
                from_events,
                w.occupancy_cells
                    .iter()
                    .map(|c| c * cell)
                    .collect::<Vec<_>>()
            );
            assert!(w.peak_cells <= u64::from(config.buffer_cells));
            assert_eq!(b.peak_live_bytes, w.peak_cells * cell);
            assert_eq!(b.allocations, w.cells_per_port.iter().sum::<u64>());
            assert!(
                w.dropped_packets > 0,
                "a 1 MiB buffer overflows at this load"
            );
            assert!(w.run.events.iter().all(|e| e.size_bytes == cell));
        }
    }
}

#[test]
fn switch_skew_and_bursts_show() {
    // Zipf s = 1.2: the first port takes far more than the last; s = 0 is roughly even.
    let skewed = switch::generate(&SwitchConfig {
        zipf_s: 1.2,
        buffer_cells: 1 << 24,
        threshold_alpha: None,
        ..small_switch()
    })
    .unwrap();
    let first = skewed.cells_per_port[0];
    let last = *skewed.cells_per_port.last().unwrap();
    assert!(first > 5 * last.max(1), "{first} vs {last}");
    assert_eq!(skewed.dropped_packets, 0, "a 4 GiB buffer never drops");
    // The hot port's queue grows (its load exceeds its line rate), a cold one stays short.
    assert!(skewed.max_queue_cells[0] > 10 * skewed.max_queue_cells[31].max(1));
    let even = switch::generate(&SwitchConfig {
        zipf_s: 0.0,
        ..small_switch()
    })
    .unwrap();
    let (lo, hi) = (
        *even.cells_per_port.iter().min().unwrap(),
        *even.cells_per_port.iter().max().unwrap(),
    );
    assert!(hi < 8 * lo, "uniform ports: {lo}..{hi}");
    // Occupancy varies over time (bursts), and the dynamic threshold keeps room free.
    let w = switch::generate(&small_switch()).unwrap();
    let occ = &w.occupancy_cells[500..];
    assert!(occ.iter().max() > occ.iter().min());
    assert!(w.peak_cells < u64::from(small_switch().buffer_cells));
    assert!(w.peak_cells >= *w.occupancy_cells.iter().max().unwrap());
}

#[test]
fn switch_is_deterministic_by_seed() {
    let a = switch::generate(&small_switch()).unwrap();
    assert_eq!(a, switch::generate(&small_switch()).unwrap());
    let b = switch::generate(&SwitchConfig {
        seed: 7,
        ..small_switch()
    })
    .unwrap();
    assert_ne!(a.occupancy_cells, b.occupancy_cells);
}

#[test]
fn switch_bad_parameters_are_errors() {
    let bad = |c: SwitchConfig, name: &str| {
        let e = switch::generate(&c).expect_err("must be refused");
        assert_eq!(e.name, name, "{e}");
    };
    let d = small_switch();
    bad(SwitchConfig { ports: 0, ..d }, "ports");
    bad(SwitchConfig { cell_bytes: 8, ..d }, "cell_bytes");
    bad(
        SwitchConfig {
            buffer_cells: 0,
            ..d
        },
        "buffer_cells",
    );
    bad(SwitchConfig { sources: 0, ..d }, "sources");
    bad(
        SwitchConfig {
            mean_on_ticks: 0.5,
            ..d
        },
        "mean_on_ticks",
    );
    bad(
        SwitchConfig {
            mean_off_ticks: f64::NAN,
            ..d
        },
        "mean_off_ticks",
    );
    bad(
        SwitchConfig {
            burst: Burst::Pareto { alpha: 1.0 },
            ..d
        },
        "alpha",
    );
    bad(SwitchConfig { zipf_s: -1.0, ..d }, "zipf_s");
    bad(
        SwitchConfig {
            threshold_alpha: Some(0.0),
            ..d
        },
        "threshold_alpha",
    );
    bad(
        SwitchConfig {
            large_share: 1.5,
            ..d
        },
        "large_share",
    );
    bad(
        SwitchConfig {
            small_packet_bytes: 0,
            ..d
        },
        "small_packet_bytes",
    );
    bad(
        SwitchConfig {
            drain_cells_per_tick: 0,
            ..d
        },
        "drain_cells_per_tick",
    );
    bad(SwitchConfig { ticks: 0, ..d }, "ticks");
}

#[test]
fn switch_replays_on_host_heaps_and_the_caching_model() {
    let w = switch::generate(&small_switch()).unwrap();
    let checked = Checked::new(SystemHeap::new());
    let r = replay_host(&w.run, &checked, 1).unwrap();
    assert_eq!(r.peak_live_bytes, w.peak_cells * 256);
    assert_eq!(checked.live_blocks(), 0);
    assert!(checked.violations().is_empty());
    let c = replay_caching(&w.run, CachingConfig::default(), 0).unwrap();
    assert_eq!(c.peak_requested_bytes, w.peak_cells * 256);
}
