//! A switch data-plane block pool: per-port output queues of fixed-size cells (256 B by
//! default) in a shared buffer, filled by bursty sources with a skewed choice of output
//! port and drained at line rate.
//!
//! Each tick:
//! 1. every *source* that is ON sends one packet to the output port it chose when its burst
//!    began (a Zipf(`zipf_s`) draw over the ports, so a few ports take most bursts). A
//!    packet is `small_packet_bytes` or, with probability `large_share`,
//!    `large_packet_bytes`, cut into `ceil(bytes / cell_bytes)` cells, each one block of
//!    `cell_bytes`. If the shared buffer lacks room for the whole packet, or the port's
//!    queue would pass its dynamic threshold (`threshold_alpha` × the free buffer), it is
//!    dropped (tail drop) and counted. Sources alternate ON and OFF periods of mean lengths
//!    `mean_on_ticks` / `mean_off_ticks`, either geometric ([`Burst::OnOff`], a Markov
//!    on/off source) or Pareto with shape `alpha` ([`Burst::Pareto`], heavy-tailed: the
//!    self-similar traffic of LAN measurements);
//! 2. every port sends up to `drain_cells_per_tick` cells from the head of its queue
//!    (each a free), its line rate.
//!
//! After the last tick the queues drain at line rate (the teardown). The run is one
//! [`RunTrace`] whose iteration 0 (batch 0) is the ticks.
//!
//! ```
//! use alloclab_alloc_traces::switch::{SwitchConfig, generate};
//! let config = SwitchConfig { ticks: 2_000, ..SwitchConfig::default() };
//! let w = generate(&config).unwrap();
//! assert!(w.peak_cells <= u64::from(config.buffer_cells));
//! ```

use std::collections::VecDeque;

use crate::workload::{MAX_EVENTS, Rng, WorkloadError, check, too_long};
use alloclab_training::trace::{RunEvent, RunTrace};

/// How long ON and OFF periods last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Burst {
    /// Geometric periods (each tick ends the period with probability 1 / mean).
    OnOff,
    /// Pareto periods with this shape (finite, in (1, 10]); the lower the shape, the heavier
    /// the tail.
    Pareto {
        /// The shape α.
        alpha: f64,
    },
}

/// A block-pool workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchConfig {
    /// Output ports (1..=4096).
    pub ports: u32,
    /// Bytes per cell (16..=65536).
    pub cell_bytes: u32,
    /// Cells in the shared buffer (1..=2^26).
    pub buffer_cells: u32,
    /// Traffic sources (1..=65536).
    pub sources: u32,
    /// Dynamic threshold (Choudhury–Hahne): a port may hold at most `α ×` the free buffer,
    /// so that one hot port cannot take all of it; `None`: only the shared buffer limits.
    /// α finite, in (0, 64].
    pub threshold_alpha: Option<f64>,
    /// Mean ON period in ticks (finite, ≥ 1).
    pub mean_on_ticks: f64,
    /// Mean OFF period in ticks (finite, ≥ 1).
    pub mean_off_ticks: f64,
    /// Period distribution.
    pub burst: Burst,
    /// Zipf exponent of the output-port choice (finite, 0..=10; 0 is uniform).
    pub zipf_s: f64,
    /// Bytes of a small packet (1..=65536).
    pub small_packet_bytes: u32,
    /// Bytes of a large packet (1..=65536).
    pub large_packet_bytes: u32,
    /// Share of large packets (0..=1).
    pub large_share: f64,
    /// Cells each port sends per tick (1..=1024).
    pub drain_cells_per_tick: u32,
    /// Ticks to simulate (1..=10 000 000).
    pub ticks: u32,
    /// Seed.
    pub seed: u64,
}

impl Default for SwitchConfig {
    /// 32 ports, 256 B cells, a 16 Ki-cell (4 MiB) shared buffer with dynamic thresholds
    /// (α = 1); 64 sources, Pareto α = 1.4 periods of mean 20 ON / 60 OFF ticks; Zipf
    /// s = 0.8 across ports; 64 B or 1500 B packets (40% large: 1 or 6 cells); each port
    /// sends 4 cells a tick; 20 000 ticks; seed 1. Offered load about 0.38 of the total line
    /// rate, above it on the hot ports.
    fn default() -> Self {
        SwitchConfig {
            ports: 32,
            cell_bytes: 256,
            buffer_cells: 16 << 10,
            sources: 64,
            threshold_alpha: Some(1.0),
            mean_on_ticks: 20.0,
            mean_off_ticks: 60.0,
            burst: Burst::Pareto { alpha: 1.4 },
            zipf_s: 0.8,
            small_packet_bytes: 64,
            large_packet_bytes: 1500,
            large_share: 0.4,
            drain_cells_per_tick: 4,
            ticks: 20_000,
            seed: 1,
        }
    }
}

impl SwitchConfig {
    /// Cells of a small and of a large packet.
    pub fn packet_cells(&self) -> (u32, u32) {
        (
            self.small_packet_bytes.div_ceil(self.cell_bytes),
            self.large_packet_bytes.div_ceil(self.cell_bytes),
        )
    }

    /// Mean offered cells per tick over the total drain rate of all ports.
    pub fn offered_load(&self) -> f64 {
        let (s, l) = self.packet_cells();
        let cells = f64::from(s) * (1.0 - self.large_share) + f64::from(l) * self.large_share;
        let on = self.mean_on_ticks / (self.mean_on_ticks + self.mean_off_ticks);
        f64::from(self.sources) * on * cells
            / (f64::from(self.ports) * f64::from(self.drain_cells_per_tick))
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        check(
            (1..=4096).contains(&self.ports),
            "ports",
            self.ports,
            "1..=4096",
        )?;
        check(
            (16..=65536).contains(&self.cell_bytes),
            "cell_bytes",
            self.cell_bytes,
            "16..=65536",
        )?;
        check(
            (1..=1 << 26).contains(&self.buffer_cells),
            "buffer_cells",
            self.buffer_cells,
            "1..=67108864",
        )?;
        check(
            (1..=65536).contains(&self.sources),
            "sources",
            self.sources,
            "1..=65536",
        )?;
        check(
            self.mean_on_ticks.is_finite() && self.mean_on_ticks >= 1.0,
            "mean_on_ticks",
            self.mean_on_ticks,
            "a finite mean >= 1 tick",
        )?;
        check(
            self.mean_off_ticks.is_finite() && self.mean_off_ticks >= 1.0,
            "mean_off_ticks",
            self.mean_off_ticks,
            "a finite mean >= 1 tick",
        )?;
        if let Some(a) = self.threshold_alpha {
            check(
                a.is_finite() && a > 0.0 && a <= 64.0,
                "threshold_alpha",
                a,
                "a finite factor in (0, 64]",
            )?;
        }
        if let Burst::Pareto { alpha } = self.burst {
            check(
                alpha.is_finite() && alpha > 1.0 && alpha <= 10.0,
                "alpha",
                alpha,
                "a shape in (1, 10] (the mean is infinite at 1 and below)",
            )?;
        }
        check(
            self.zipf_s.is_finite() && (0.0..=10.0).contains(&self.zipf_s),
            "zipf_s",
            self.zipf_s,
            "a finite exponent in 0..=10",
        )?;
        for (name, b) in [
            ("small_packet_bytes", self.small_packet_bytes),
            ("large_packet_bytes", self.large_packet_bytes),
        ] {
            check((1..=65536).contains(&b), name, b, "1..=65536")?;
        }
        check(
            (0.0..=1.0).contains(&self.large_share),
            "large_share",
            self.large_share,
            "a share in 0..=1",
        )?;
        check(
            (1..=1024).contains(&self.drain_cells_per_tick),
            "drain_cells_per_tick",
            self.drain_cells_per_tick,
            "1..=1024",
        )?;
        check(
            (1..=10_000_000).contains(&self.ticks),
            "ticks",
            self.ticks,
            "1..=10000000",
        )?;
        Ok(())
    }
}

/// A generated block-pool workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchWorkload {
    /// The allocator calls: the ticks (iteration 0), then the final drain.
    pub run: RunTrace,
    /// Cells held after each tick's drain (all queues).
    pub occupancy_cells: Vec<u64>,
    /// The most cells held at once, within a tick (after its arrivals, before its drain).
    pub peak_cells: u64,
    /// For each tick, the index in `run.events` just past its events.
    pub tick_ends: Vec<usize>,
    /// Cells accepted per port.
    pub cells_per_port: Vec<u64>,
    /// The longest each port's queue got, in cells.
    pub max_queue_cells: Vec<u64>,
    /// Packets accepted.
    pub packets: u64,
    /// Packets dropped for want of buffer.
    pub dropped_packets: u64,
    /// Ticks of the final drain.
    pub drain_ticks: u64,
}

/// A source's state.
#[derive(Clone, Copy)]
struct Source {
    on: bool,
    left: u64,
    port: usize,
}

/// Generates the workload of `config`.
///
/// # Errors
///
/// A [`WorkloadError`] naming the first bad parameter.
pub fn generate(config: &SwitchConfig) -> Result<SwitchWorkload, WorkloadError> {
    config.validate()?;
    let mut rng = Rng::new(config.seed);
    let ports = config.ports as usize;
    // Zipf CDF over ports: weight of port k is 1 / (k + 1)^s.
    let mut cdf: Vec<f64> = (0..ports)
        .scan(0.0, |acc, k| {
            *acc += ((k + 1) as f64).powf(-config.zipf_s);
            Some(*acc)
        })
        .collect();
    let total = cdf[ports - 1];
    for c in &mut cdf {
        *c /= total;
    }
    let zipf = |rng: &mut Rng| {
        let u = rng.f64();
        cdf.partition_point(|&c| c <= u).min(ports - 1)
    };
    let period = |rng: &mut Rng, mean: f64| -> u64 {
        match config.burst {
            Burst::OnOff => {
                // Geometric on 1, 2, ...: P(end each tick) = 1 / mean.
                let p = 1.0 / mean;
                if p >= 1.0 {
                    1
                } else {
                    let u = 1.0 - rng.f64();
                    (u.ln() / (1.0 - p).ln()).floor() as u64 + 1
                }
            }
            Burst::Pareto { alpha } => {
                // Scale so that the continuous mean is `mean`; at least one tick, capped at
                // 10^7 ticks so a far tail cannot stall a source forever.
                let xm = mean * (alpha - 1.0) / alpha;
                let u = 1.0 - rng.f64();
                (xm / u.powf(1.0 / alpha)).round().clamp(1.0, 1e7) as u64
            }
        }
    };
    let p_on = config.mean_on_ticks / (config.mean_on_ticks + config.mean_off_ticks);
    let mut sources: Vec<Source> = (0..config.sources)
        .map(|_| {
            let on = rng.f64() < p_on;
            let left = period(
                &mut rng,
                if on {
                    config.mean_on_ticks
                } else {
                    config.mean_off_ticks
                },
            );
            let port = zipf(&mut rng);
            Source { on, left, port }
        })
        .collect();
    let (small, large) = config.packet_cells();
    let cell = u64::from(config.cell_bytes);
    let mut queues: Vec<VecDeque<u64>> = vec![VecDeque::new(); ports];
    let mut held = 0u64;
    let mut next_id = 0u64;
    let mut events = Vec::new();
    let mut occupancy = Vec::with_capacity(config.ticks as usize);
    let mut tick_ends = Vec::with_capacity(config.ticks as usize);
    let mut cells_per_port = vec![0u64; ports];
    let mut max_queue = vec![0u64; ports];
    let (mut packets, mut dropped, mut peak) = (0u64, 0u64, 0u64);
    let drain = |queues: &mut [VecDeque<u64>], events: &mut Vec<RunEvent>, held: &mut u64| {
        for q in queues.iter_mut() {
            for _ in 0..config.drain_cells_per_tick {
                let Some(id) = q.pop_front() else { break };
                events.push(RunEvent {
                    id,
                    size_bytes: cell,
                    alloc: false,
                });
                *held -= 1;
            }
        }
    };
    for _ in 0..config.ticks {
        for s in &mut sources {
            if s.on {
                let cells = if rng.f64() < config.large_share {
                    large
                } else {
                    small
                };
                let free = u64::from(config.buffer_cells) - held;
                let fits = u64::from(cells) <= free
                    && config.threshold_alpha.is_none_or(|a| {
                        (queues[s.port].len() as u64 + u64::from(cells)) as f64 <= a * free as f64
                    });
                if fits {
                    for _ in 0..cells {
                        events.push(RunEvent {
                            id: next_id,
                            size_bytes: cell,
                            alloc: true,
                        });
                        queues[s.port].push_back(next_id);
                        next_id += 1;
                    }
                    held += u64::from(cells);
                    peak = peak.max(held);
                    cells_per_port[s.port] += u64::from(cells);
                    max_queue[s.port] = max_queue[s.port].max(queues[s.port].len() as u64);
                    packets += 1;
                } else {
                    dropped += 1;
                }
            }
            s.left -= 1;
            if s.left == 0 {
                s.on = !s.on;
                s.left = period(
                    &mut rng,
                    if s.on {
                        config.mean_on_ticks
                    } else {
                        config.mean_off_ticks
                    },
                );
                if s.on {
                    s.port = zipf(&mut rng);
                }
            }
        }
        drain(&mut queues, &mut events, &mut held);
        if events.len() > MAX_EVENTS {
            return Err(too_long("ticks", config.ticks));
        }
        occupancy.push(held);
        tick_ends.push(events.len());
    }
    let ticks_end = events.len();
    let mut drain_ticks = 0;
    while held > 0 {
        drain(&mut queues, &mut events, &mut held);
        drain_ticks += 1;
    }
    Ok(SwitchWorkload {
        run: RunTrace {
            events,
            iterations: core::iter::once(0..ticks_end).collect(),
            batches: vec![0],
        },
        occupancy_cells: occupancy,
        peak_cells: peak,
        tick_ends,
        cells_per_port,
        max_queue_cells: max_queue,
        packets,
        dropped_packets: dropped,
        drain_ticks,
    })
}
