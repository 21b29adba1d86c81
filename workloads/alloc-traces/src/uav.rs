//! A UAV sliding-window map: fixed-size submaps (tiles) allocated for the active area around
//! a vehicle and recycled as it flies a seeded trajectory of straight legs, turns and loiter
//! circles.
//!
//! The world is cut into square tiles of [`UavConfig::tile_m`] metres. Each map
//! [`Layer`] keeps the tiles within its own radius (a `(2r + 1)²` square of tiles centred
//! on the vehicle's tile) at its own resolution and cell size, so a layer's tiles all have one
//! size and different layers have different sizes: by default a 1 B/cell occupancy layer of
//! 128² cells (16 KiB tiles, radius 3), a 4 B/cell elevation layer (64 KiB, radius 2) and a
//! 1 B/cell fine occupancy layer at 4× the resolution (256 KiB, radius 1). When the vehicle
//! crosses into another tile, the tiles that leave a layer's window are freed and the tiles
//! that enter it are allocated (frees first, as a map would recycle them). The live set is
//! therefore always exactly the windows: [`UavConfig::window_bytes`].
//!
//! The run is one [`RunTrace`]: the first window (setup), the flight (iteration 0, batch 0),
//! and the last window freed (teardown).
//!
//! ```
//! use alloclab_alloc_traces::uav::{UavConfig, generate};
//! let config = UavConfig { steps: 2_000, ..UavConfig::default() };
//! let w = generate(&config).unwrap();
//! assert!(w.live_bytes.iter().all(|&b| b == config.window_bytes()));
//! ```

use std::collections::HashMap;
use std::f64::consts::TAU;

use crate::workload::{MAX_EVENTS, Rng, WorkloadError, check, too_long};
use alloclab_training::trace::{RunEvent, RunTrace};

/// One map layer: its tiles' resolution and cell size, and how far around the vehicle it is
/// kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layer {
    /// A name for tables.
    pub name: &'static str,
    /// Cells along a tile's side (1..=4096).
    pub cells_per_side: u32,
    /// Bytes per cell (1..=64).
    pub bytes_per_cell: u32,
    /// Tiles kept on each side of the vehicle's tile (0..=32).
    pub radius_tiles: u32,
}

impl Layer {
    /// Bytes of one tile.
    pub fn tile_bytes(&self) -> u64 {
        u64::from(self.cells_per_side).pow(2) * u64::from(self.bytes_per_cell)
    }

    /// Tiles in the layer's window.
    pub fn window_tiles(&self) -> u64 {
        (2 * u64::from(self.radius_tiles) + 1).pow(2)
    }
}

/// One leg of a trajectory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Manoeuvre {
    /// Fly straight for this many metres.
    Straight {
        /// Length in metres (> 0).
        length_m: f64,
    },
    /// Turn by this many radians (positive: left) on a circle of this radius.
    Turn {
        /// Heading change in radians (non-zero).
        angle_rad: f64,
        /// Turn radius in metres (> 0).
        radius_m: f64,
    },
    /// Circle this many times (to the left) on a circle of this radius.
    Loiter {
        /// Radius in metres (> 0).
        radius_m: f64,
        /// Full circles (≥ 1).
        laps: u32,
    },
}

/// Where the trajectory comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Trajectory {
    /// Legs drawn from the seed: straight 100–500 m (50%), a turn of 30–150° either way on a
    /// 20–80 m radius (30%), or 1–3 loiter circles of 30–80 m (20%).
    Random,
    /// These legs, repeated in order.
    Script(Vec<Manoeuvre>),
}

/// A sliding-window map workload.
#[derive(Clone, Debug, PartialEq)]
pub struct UavConfig {
    /// Tile side in metres (finite, > 0).
    pub tile_m: f64,
    /// The map layers (1..=16).
    pub layers: Vec<Layer>,
    /// Ground speed in m/s (finite, in (0, 10 000]).
    pub speed_mps: f64,
    /// Time step in seconds (finite, in (0, 60]).
    pub dt_s: f64,
    /// Steps to fly (1..=10 000 000).
    pub steps: u32,
    /// The trajectory.
    pub trajectory: Trajectory,
    /// Seed of the random trajectory.
    pub seed: u64,
}

impl Default for UavConfig {
    /// 25.6 m tiles (128 cells of 0.2 m), the three layers described in the module docs,
    /// 12 m/s, 0.1 s steps, 20 000 steps (33 min of flight), a random trajectory, seed 1.
    fn default() -> Self {
        UavConfig {
            tile_m: 25.6,
            layers: vec![
                Layer {
                    name: "occupancy",
                    cells_per_side: 128,
                    bytes_per_cell: 1,
                    radius_tiles: 3,
                },
                Layer {
                    name: "elevation",
                    cells_per_side: 128,
                    bytes_per_cell: 4,
                    radius_tiles: 2,
                },
                Layer {
                    name: "fine occupancy",
                    cells_per_side: 512,
                    bytes_per_cell: 1,
                    radius_tiles: 1,
                },
            ],
            speed_mps: 12.0,
            dt_s: 0.1,
            steps: 20_000,
            trajectory: Trajectory::Random,
            seed: 1,
        }
    }
}

impl UavConfig {
    /// Bytes live at every step: every layer's window.
    pub fn window_bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|l| l.window_tiles() * l.tile_bytes())
            .sum()
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        check(
            self.tile_m.is_finite() && self.tile_m > 0.0,
            "tile_m",
            self.tile_m,
            "a finite length > 0",
        )?;
        check(
            (1..=16).contains(&self.layers.len()),
            "layers",
            self.layers.len(),
            "1 to 16 layers",
        )?;
        for l in &self.layers {
            check(
                (1..=4096).contains(&l.cells_per_side),
                "cells_per_side",
                l.cells_per_side,
                "1..=4096",
            )?;
            check(
                (1..=64).contains(&l.bytes_per_cell),
                "bytes_per_cell",
                l.bytes_per_cell,
                "1..=64",
            )?;
            check(
                l.radius_tiles <= 32,
                "radius_tiles",
                l.radius_tiles,
                "0..=32",
            )?;
        }
        check(
            self.speed_mps.is_finite() && self.speed_mps > 0.0 && self.speed_mps <= 1e4,
            "speed_mps",
            self.speed_mps,
            "a speed in (0, 10000] m/s",
        )?;
        check(
            self.dt_s.is_finite() && self.dt_s > 0.0 && self.dt_s <= 60.0,
            "dt_s",
            self.dt_s,
            "a time step in (0, 60] s",
        )?;
        check(
            (1..=10_000_000).contains(&self.steps),
            "steps",
            self.steps,
            "1..=10000000",
        )?;
        let span_tiles = self.speed_mps * self.dt_s * f64::from(self.steps) / self.tile_m;
        check(
            span_tiles <= (1u64 << 40) as f64,
            "tile_m",
            self.tile_m,
            "tiles large enough that the flight (speed × dt × steps) spans at most 2^40 tiles",
        )?;
        if let Trajectory::Script(legs) = &self.trajectory {
            check(
                !legs.is_empty(),
                "trajectory",
                legs.len(),
                "at least one leg",
            )?;
            for &m in legs {
                let ok = match m {
                    Manoeuvre::Straight { length_m } => length_m.is_finite() && length_m > 0.0,
                    Manoeuvre::Turn {
                        angle_rad,
                        radius_m,
                    } => {
                        angle_rad.is_finite()
                            && angle_rad != 0.0
                            && radius_m.is_finite()
                            && radius_m > 0.0
                    }
                    Manoeuvre::Loiter { radius_m, laps } => {
                        radius_m.is_finite() && radius_m > 0.0 && laps >= 1
                    }
                };
                check(
                    ok,
                    "trajectory",
                    m,
                    "positive finite lengths and radii, a non-zero angle, at least one lap",
                )?;
            }
        }
        Ok(())
    }
}

/// A generated sliding-window workload.
#[derive(Clone, Debug, PartialEq)]
pub struct UavWorkload {
    /// The allocator calls: first window, flight (iteration 0), teardown.
    pub run: RunTrace,
    /// Bytes live after each step (summed over the tiles held, not assumed).
    pub live_bytes: Vec<u64>,
    /// For each step, the index in `run.events` just past its events.
    pub step_ends: Vec<usize>,
    /// The vehicle's position (metres) after each step.
    pub positions: Vec<(f64, f64)>,
    /// The legs flown, in order (the last one possibly cut short).
    pub manoeuvres: Vec<Manoeuvre>,
    /// Tile allocations per layer, in the order of [`UavConfig::layers`].
    pub tiles_allocated: Vec<u64>,
    /// Steps at which the vehicle entered another tile.
    pub tile_changes: u64,
}

/// Generates the workload of `config`.
///
/// # Errors
///
/// A [`WorkloadError`] naming the first bad parameter.
pub fn generate(config: &UavConfig) -> Result<UavWorkload, WorkloadError> {
    config.validate()?;
    let mut rng = Rng::new(config.seed);
    let mut script_at = 0usize;
    let mut next_leg = |rng: &mut Rng| -> Manoeuvre {
        match &config.trajectory {
            Trajectory::Script(legs) => {
                let m = legs[script_at % legs.len()];
                script_at += 1;
                m
            }
            Trajectory::Random => {
                let u = rng.f64();
                if u < 0.5 {
                    Manoeuvre::Straight {
                        length_m: rng.uniform(100.0, 500.0),
                    }
                } else if u < 0.8 {
                    let a = rng.uniform(30.0, 150.0).to_radians();
                    Manoeuvre::Turn {
                        angle_rad: if rng.f64() < 0.5 { a } else { -a },
                        radius_m: rng.uniform(20.0, 80.0),
                    }
                } else {
                    Manoeuvre::Loiter {
                        radius_m: rng.uniform(30.0, 80.0),
                        laps: 1 + (rng.next_u64() % 3) as u32,
                    }
                }
            }
        }
    };

    let mut events = Vec::new();
    let mut next_id = 0u64;
    // (layer, tx, ty) -> id
    let mut live: HashMap<(usize, i64, i64), u64> = HashMap::new();
    let mut tiles_allocated = vec![0u64; config.layers.len()];
    let tile_of = |x: f64, y: f64| {
        (
            (x / config.tile_m).floor() as i64,
            (y / config.tile_m).floor() as i64,
        )
    };
    let alloc_window = |centre: (i64, i64),
                        old: Option<(i64, i64)>,
                        events: &mut Vec<RunEvent>,
                        live: &mut HashMap<(usize, i64, i64), u64>,
                        next_id: &mut u64,
                        tiles_allocated: &mut [u64]| {
        let inside =
            |c: (i64, i64), r: i64, t: (i64, i64)| (t.0 - c.0).abs() <= r && (t.1 - c.1).abs() <= r;
        for (li, l) in config.layers.iter().enumerate() {
            let r = i64::from(l.radius_tiles);
            let size = l.tile_bytes();
            // Frees first: tiles of the old window that left it.
            if let Some(o) = old {
                for tx in o.0 - r..=o.0 + r {
                    for ty in o.1 - r..=o.1 + r {
                        if !inside(centre, r, (tx, ty)) {
                            let id = live.remove(&(li, tx, ty)).expect("old window is live");
                            events.push(RunEvent {
                                id,
                                size_bytes: size,
                                alloc: false,
                            });
                        }
                    }
                }
            }
            for tx in centre.0 - r..=centre.0 + r {
                for ty in centre.1 - r..=centre.1 + r {
                    if old.is_none_or(|o| !inside(o, r, (tx, ty))) {
                        live.insert((li, tx, ty), *next_id);
                        events.push(RunEvent {
                            id: *next_id,
                            size_bytes: size,
                            alloc: true,
                        });
                        *next_id += 1;
                        tiles_allocated[li] += 1;
                    }
                }
            }
        }
    };

    let (mut x, mut y, mut heading) = (0.0f64, 0.0f64, 0.0f64);
    let mut centre = tile_of(x, y);
    alloc_window(
        centre,
        None,
        &mut events,
        &mut live,
        &mut next_id,
        &mut tiles_allocated,
    );
    let flight_start = events.len();
    let steps = config.steps as usize;
    let mut live_bytes = Vec::with_capacity(steps);
    let mut step_ends = Vec::with_capacity(steps);
    let mut positions = Vec::with_capacity(steps);
    let mut manoeuvres = Vec::new();
    let mut tile_changes = 0;
    // The current leg and how much of it is left (metres of path).
    let mut leg = next_leg(&mut rng);
    manoeuvres.push(leg);
    let mut left = path_length(leg);
    for _ in 0..steps {
        let mut travel = config.speed_mps * config.dt_s;
        while travel > 0.0 {
            let d = travel.min(left);
            match leg {
                Manoeuvre::Straight { .. } => {
                    x += d * heading.cos();
                    y += d * heading.sin();
                }
                Manoeuvre::Turn {
                    angle_rad,
                    radius_m,
                } => arc(
                    &mut x,
                    &mut y,
                    &mut heading,
                    d,
                    radius_m,
                    angle_rad.signum(),
                ),
                Manoeuvre::Loiter { radius_m, .. } => {
                    arc(&mut x, &mut y, &mut heading, d, radius_m, 1.0)
                }
            }
            travel -= d;
            left -= d;
            if left <= 0.0 {
                leg = next_leg(&mut rng);
                manoeuvres.push(leg);
                left = path_length(leg);
            }
        }
        let now = tile_of(x, y);
        if now != centre {
            alloc_window(
                now,
                Some(centre),
                &mut events,
                &mut live,
                &mut next_id,
                &mut tiles_allocated,
            );
            centre = now;
            tile_changes += 1;
        }
        if events.len() > MAX_EVENTS {
            return Err(too_long("steps", config.steps));
        }
        live_bytes.push(
            live.keys()
                .map(|&(li, _, _)| config.layers[li].tile_bytes())
                .sum(),
        );
        step_ends.push(events.len());
        positions.push((x, y));
    }
    let flight_end = events.len();
    let mut rest: Vec<((usize, i64, i64), u64)> = live.into_iter().collect();
    rest.sort_unstable();
    events.extend(rest.into_iter().map(|((li, _, _), id)| RunEvent {
        id,
        size_bytes: config.layers[li].tile_bytes(),
        alloc: false,
    }));
    Ok(UavWorkload {
        run: RunTrace {
            events,
            iterations: core::iter::once(flight_start..flight_end).collect(),
            batches: vec![0],
        },
        live_bytes,
        step_ends,
        positions,
        manoeuvres,
        tiles_allocated,
        tile_changes,
    })
}

/// Metres of path of one leg.
fn path_length(m: Manoeuvre) -> f64 {
    match m {
        Manoeuvre::Straight { length_m } => length_m,
        Manoeuvre::Turn {
            angle_rad,
            radius_m,
        } => angle_rad.abs() * radius_m,
        Manoeuvre::Loiter { radius_m, laps } => TAU * radius_m * f64::from(laps),
    }
}

/// Moves `d` metres along a circle of radius `r`, turning left (`side` 1) or right (-1).
fn arc(x: &mut f64, y: &mut f64, heading: &mut f64, d: f64, r: f64, side: f64) {
    let dh = side * d / r;
    // Exact chord of the arc.
    let mid = *heading + dh / 2.0;
    let chord = 2.0 * r * (dh / 2.0).abs().sin();
    *x += chord * mid.cos();
    *y += chord * mid.sin();
    *heading = (*heading + dh).rem_euclid(TAU);
}
