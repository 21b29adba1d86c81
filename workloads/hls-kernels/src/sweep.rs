//! Heap-size sweeps: the figures of the `hls` suite.
//!
//! * **Reference heap**: the largest heap size on the grid at which the *baseline* fails at
//!   least `target_failure_rate` of its requests (10% in the suite), found by doubling then
//!   bisection on the grid. Every configuration is compared there.
//! * **Smallest zero-failure heap**: climb from the reference in steps of an eighth of it
//!   until a size has no failure (the *top*), then walk down the grid until one fails: the
//!   answer is the smallest size `S` such that every grid size from `S` to the top has no
//!   failure. (Failures are not strictly monotone in the heap size, so "smallest with zero
//!   failures" alone would pick lucky sizes.)
//! * **Curve**: failures by class at `points` sizes spread over `[ref / 2, 2 * ref]`, the same
//!   sizes for every configuration with the same baseline.
//!
//! Sizes are per heap, in bytes, on a grid of `step_bytes`.

use crate::sim::{SimReport, simulate};
use crate::trace::{Trace, TraceConfig};
use alloclab_hls::{ConfigError, MAX_HEAP_BYTES, OnChipConfig};

/// One comparison: a trace, the baseline, the configuration measured, and the grid.
#[derive(Clone, Debug, PartialEq)]
pub struct Experiment {
    /// The trace.
    pub trace: TraceConfig,
    /// The baseline memory (its `heap_words` is ignored: the sweep sets it).
    pub baseline: OnChipConfig,
    /// The memory measured (its `heap_words` is ignored too).
    pub measured: OnChipConfig,
    /// Failure rate that defines the reference heap (0.10 in the suite).
    pub target_failure_rate: f64,
    /// Grid step, in bytes: a multiple of the word and of the allocation unit.
    pub step_bytes: u64,
    /// Points of the failure curve.
    pub curve_points: usize,
}

/// What an [`Experiment`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct ExperimentResult {
    /// Bytes per heap at which the baseline fails about the target rate.
    pub reference_heap_bytes: u64,
    /// The baseline at the reference heap.
    pub baseline_at_reference: SimReport,
    /// The measured configuration at the reference heap.
    pub at_reference: SimReport,
    /// The measured configuration's smallest zero-failure heap, if one fits the model.
    pub zero_failure_heap_bytes: Option<u64>,
    /// (bytes per heap, report) along the curve.
    pub curve: Vec<(u64, SimReport)>,
}

/// Why an experiment could not run.
#[derive(Clone, Debug, PartialEq)]
pub enum ExperimentError {
    /// A configuration is invalid at some heap size.
    Config(ConfigError),
    /// The grid step is not a positive multiple of the word and the unit of both
    /// configurations.
    Step {
        /// The step given.
        step_bytes: u64,
    },
    /// The baseline never fails the target rate, or always does, within the model's heap
    /// sizes.
    NoReference,
}

impl core::fmt::Display for ExperimentError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Config(e) => write!(f, "{e}"),
            Self::Step { step_bytes } => write!(
                f,
                "grid step of {step_bytes} bytes is not a positive multiple of the word and the allocation unit"
            ),
            Self::NoReference => f.write_str(
                "the baseline's failure rate never crosses the target within the heap sizes the model allows",
            ),
        }
    }
}

impl std::error::Error for ExperimentError {}

impl From<ConfigError> for ExperimentError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

/// Simulates `trace` on `template` with heaps of `heap_bytes` bytes.
///
/// # Errors
///
/// If the configuration is invalid at that size.
pub fn simulate_at(
    trace: &Trace,
    template: OnChipConfig,
    heap_bytes: u64,
) -> Result<SimReport, ConfigError> {
    let words = heap_bytes / u64::from(template.word_bytes().max(1));
    let config = OnChipConfig {
        heap_words: u32::try_from(words).unwrap_or(u32::MAX),
        ..template
    };
    simulate(trace, config)
}

impl Experiment {
    fn check_step(&self) -> Result<(), ExperimentError> {
        let ok = |c: &OnChipConfig| {
            c.validate().map(|()| {
                self.step_bytes > 0
                    && self.step_bytes.is_multiple_of(u64::from(c.word_bytes()))
                    && self.step_bytes.is_multiple_of(u64::from(c.unit_bytes()))
            })
        };
        if ok(&self.baseline)? && ok(&self.measured)? {
            Ok(())
        } else {
            Err(ExperimentError::Step {
                step_bytes: self.step_bytes,
            })
        }
    }

    /// The largest grid size at which the baseline fails at least the target rate.
    ///
    /// # Errors
    ///
    /// [`ExperimentError::NoReference`] if there is none.
    pub fn reference_heap_bytes(&self, trace: &Trace) -> Result<u64, ExperimentError> {
        self.check_step()?;
        let step = self.step_bytes;
        let max_steps = MAX_HEAP_BYTES / step;
        let fails = |steps: u64| -> Result<bool, ExperimentError> {
            let r = simulate_at(trace, self.baseline, steps * step)?;
            Ok(r.failure_rate() >= self.target_failure_rate)
        };
        if !fails(1)? {
            return Err(ExperimentError::NoReference);
        }
        // Invariant: fails(lo) and !fails(hi).
        let (mut lo, mut hi) = (1u64, 2u64);
        while fails(hi)? {
            lo = hi;
            hi *= 2;
            if hi > max_steps {
                return Err(ExperimentError::NoReference);
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fails(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo * step)
    }

    /// The measured configuration's smallest zero-failure heap (see the module docs),
    /// climbing from `from_bytes` by an eighth of it; `None` if even the model's largest
    /// heap fails.
    ///
    /// # Errors
    ///
    /// If a configuration is invalid.
    pub fn zero_failure_heap_bytes(
        &self,
        trace: &Trace,
        from_bytes: u64,
    ) -> Result<Option<u64>, ExperimentError> {
        self.check_step()?;
        let step = self.step_bytes;
        let max_steps = MAX_HEAP_BYTES / step;
        let zero = |steps: u64| -> Result<bool, ExperimentError> {
            Ok(simulate_at(trace, self.measured, steps * step)?.failures() == 0)
        };
        let mut hi = (from_bytes / step).clamp(1, max_steps);
        let climb = (hi / 8).max(1);
        while !zero(hi)? {
            if hi == max_steps {
                return Ok(None);
            }
            hi = (hi + climb).min(max_steps);
        }
        while hi > 1 && zero(hi - 1)? {
            hi -= 1;
        }
        Ok(Some(hi * step))
    }

    /// The heap sizes of the failure curve around `reference_bytes`.
    pub fn curve_sizes(&self, reference_bytes: u64) -> Vec<u64> {
        let step = self.step_bytes.max(1);
        let n = self.curve_points.max(2) as u64;
        let (lo, hi) = (reference_bytes / 2, reference_bytes * 2);
        let mut sizes: Vec<u64> = (0..n)
            .map(|k| {
                let bytes = lo + (hi - lo) * k / (n - 1);
                ((bytes + step / 2) / step).max(1) * step
            })
            .filter(|&b| b <= MAX_HEAP_BYTES)
            .collect();
        sizes.dedup();
        sizes
    }

    /// Runs the whole experiment.
    ///
    /// # Errors
    ///
    /// As [`reference_heap_bytes`](Self::reference_heap_bytes) and
    /// [`zero_failure_heap_bytes`](Self::zero_failure_heap_bytes).
    pub fn run(&self) -> Result<ExperimentResult, ExperimentError> {
        let trace = Trace::generate(&self.trace);
        let reference = self.reference_heap_bytes(&trace)?;
        let baseline_at_reference = simulate_at(&trace, self.baseline, reference)?;
        let at_reference = simulate_at(&trace, self.measured, reference)?;
        let zero = self.zero_failure_heap_bytes(&trace, reference)?;
        let curve = self
            .curve_sizes(reference)
            .into_iter()
            .map(|bytes| Ok((bytes, simulate_at(&trace, self.measured, bytes)?)))
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(ExperimentResult {
            reference_heap_bytes: reference,
            baseline_at_reference,
            at_reference,
            zero_failure_heap_bytes: zero,
            curve,
        })
    }
}
