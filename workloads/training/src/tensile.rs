//! A TENSILE-style scheduler (arXiv 2105.13336): several training jobs share one device, and
//! activations of any job are swapped to the host, tensor by tensor, until the *combined*
//! peak fits the device.
//!
//! **Sharing.** `J` jobs run at once with equal shares of the device: each job's steps take
//! `J` times their time alone (compute and memory bandwidth shared), and each job has `1/J`
//! of the PCIe bandwidth per direction. Each job repeats its iteration back to back from its
//! arrival offset; its own iteration is simulated by [`crate::planner::schedule`] on that
//! shared cost model, so swaps, prefetches and stalls are the planner's.
//!
//! **Combined memory.** Over a horizon (the last arrival plus [`HORIZON_ITERATIONS`] of the
//! longest iteration), every job's residency intervals, repeated each iteration and shifted
//! by its offset, are summed; the combined peak is their maximum (persistent tensors from
//! the job's arrival).
//!
//! **The scheduler.** While the combined peak is above the budget: find when it happens;
//! for each job present then, the kept activations resident at that moment of its
//! iteration are candidates; pick the one with the least estimated added time per byte
//! (the part of its out and back transfers not covered by the gap between its last forward
//! use and first backward use on the shared link, plus 5%); swap it, re-simulate its job
//! and the combined memory; keep the swap if the combined peak drops, or stays and the
//! memory above the budget integrated over the horizon drops (the same peak recurs at other
//! moments of the horizon, which the next rounds attack); otherwise undo it. A tensor is
//! tried once. Polynomial: one combined simulation per activation
//! at most.
//!
//! ```
//! use alloclab_training::cost::CostModel;
//! use alloclab_training::tensile::{self, Job};
//! use alloclab_training::{Model, ModelConfig, Precision, Trace};
//!
//! let job = |model, batch, offset_s| -> Result<Job, alloclab_training::TrainingError> {
//!     let config = ModelConfig::new(model, batch, Precision::Fp32)?;
//!     Ok(Job { trace: Trace::generate(&config), offset_s })
//! };
//! let jobs = [job(Model::ResNet50, 4, 0.0)?, job(Model::ResNet50, 8, 0.002)?];
//! let cost = CostModel::a100_40gb();
//! let free = tensile::schedule_jobs(&jobs, &cost, u64::MAX, false)?;
//! let budget = free.unscheduled_peak_bytes * 9 / 10;
//! let out = tensile::schedule_jobs(&jobs, &cost, budget, true)?;
//! if out.fits {
//!     assert!(out.peak_bytes <= budget);
//! }
//! for job in &out.jobs {
//!     assert!(job.iteration_s() >= job.unscheduled_s);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::TrainingError;
use crate::cost::CostModel;
use crate::planner::{self, Action, Item, Plan, Schedule};
use crate::trace::{TensorId, TensorKind, Trace};
use core::fmt;

/// Iterations of the longest job the combined simulation covers after the last arrival.
pub const HORIZON_ITERATIONS: f64 = 4.0;

/// Why jobs could not be scheduled.
#[derive(Clone, Debug, PartialEq)]
pub enum TensileError {
    /// No jobs were given.
    NoJobs,
    /// An arrival offset is negative or not finite.
    BadOffset {
        /// The job's index.
        job: usize,
    },
    /// The budget is below the jobs' persistent state (weights, optimizer state), which
    /// no swap of activations can move.
    BudgetBelowPersistent {
        /// The budget given.
        budget_bytes: u64,
        /// The persistent bytes of all jobs together.
        persistent_bytes: u64,
    },
    /// A cost-model error.
    Training(TrainingError),
}

impl fmt::Display for TensileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoJobs => write!(f, "at least one job is needed"),
            Self::BadOffset { job } => {
                write!(
                    f,
                    "job {job}: arrival offset must be finite and not negative"
                )
            }
            Self::BudgetBelowPersistent {
                budget_bytes,
                persistent_bytes,
            } => write!(
                f,
                "budget {budget_bytes} B is below the jobs' persistent state ({persistent_bytes} B), which swapping activations cannot move: raise the budget or drop a job"
            ),
            Self::Training(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TensileError {}

impl From<TrainingError> for TensileError {
    fn from(e: TrainingError) -> Self {
        Self::Training(e)
    }
}

/// One training job: its iteration and when it arrives.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// One iteration of the job.
    pub trace: Trace,
    /// When it starts, seconds after the first job.
    pub offset_s: f64,
}

/// What the scheduler did to one job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobOutcome {
    /// The job's plan (swaps, and recomputations when allowed).
    pub plan: Plan,
    /// Its simulated iteration on the shared device with the plan.
    pub schedule: Schedule,
    /// Its iteration time on the shared device without swaps, seconds.
    pub unscheduled_s: f64,
    /// Its iteration time alone on the device, seconds.
    pub alone_s: f64,
}

impl JobOutcome {
    /// Iteration time with the plan, seconds.
    pub fn iteration_s(&self) -> f64 {
        self.schedule.evaluation.iteration_s
    }

    /// Time the swaps add to one iteration, seconds.
    pub fn added_s(&self) -> f64 {
        self.iteration_s() - self.unscheduled_s
    }

    /// Bytes swapped out (and back) per iteration.
    pub fn bytes_swapped(&self) -> u64 {
        self.schedule.evaluation.bytes_swapped
    }
}

/// The schedule of several jobs on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct TensileOutcome {
    /// Per job, in the order given.
    pub jobs: Vec<JobOutcome>,
    /// Combined peak with every activation kept, bytes.
    pub unscheduled_peak_bytes: u64,
    /// Combined peak with the plans, bytes.
    pub peak_bytes: u64,
    /// The budget.
    pub budget_bytes: u64,
    /// Whether `peak_bytes <= budget_bytes`.
    pub fits: bool,
    /// The cost model each job ran on (shares of the device).
    pub shared_cost: CostModel,
}

/// The cost model of one of `jobs` jobs sharing `cost`'s device equally.
pub fn shared_cost(cost: &CostModel, jobs: usize) -> CostModel {
    let j = jobs.max(1) as f64;
    CostModel {
        compute_efficiency: cost.compute_efficiency / j,
        memory_efficiency: cost.memory_efficiency / j,
        pcie_bytes_per_s: cost.pcie_bytes_per_s / j,
        ..*cost
    }
}

/// The combined peak of `jobs` with `schedules` (one per job) and when it happens.
pub fn combined_peak(jobs: &[Job], schedules: &[Schedule]) -> (u64, f64) {
    let c = combined(jobs, schedules, u64::MAX);
    (c.peak_bytes, c.peak_time_s)
}

/// Combined device memory of several jobs over the horizon.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Combined {
    peak_bytes: u64,
    peak_time_s: f64,
    /// Integral of the bytes above the budget over time (byte-seconds).
    excess: f64,
}

/// One job's memory events within one iteration, in time order (frees first at equal
/// times), and its persistent bytes.
struct JobDeltas {
    events: Vec<(f64, bool, u64)>,
    persistent: u64,
}

fn job_deltas(job: &Job, sched: &Schedule) -> JobDeltas {
    let mut events = Vec::with_capacity(2 * sched.residency.len());
    let mut persistent = 0;
    for &(t, from, to) in &sched.residency {
        let size = job.trace.tensors[t].size_bytes;
        if to.is_infinite() {
            persistent += size;
            continue;
        }
        events.push((from, true, size));
        events.push((to, false, size));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    JobDeltas { events, persistent }
}

fn combined(jobs: &[Job], schedules: &[Schedule], budget: u64) -> Combined {
    let deltas: Vec<JobDeltas> = jobs
        .iter()
        .zip(schedules)
        .map(|(j, s)| job_deltas(j, s))
        .collect();
    combined_from(jobs, schedules, &deltas, budget)
}

/// Merges every job's iterations, repeated back to back from its offset over the horizon:
/// each job's stream is already in time order (an iteration ends before the next starts),
/// so the streams are merged rather than sorted.
fn combined_from(
    jobs: &[Job],
    schedules: &[Schedule],
    deltas: &[JobDeltas],
    budget: u64,
) -> Combined {
    let longest = schedules
        .iter()
        .map(|s| s.evaluation.iteration_s)
        .fold(0.0, f64::max);
    let last = jobs.iter().map(|j| j.offset_s).fold(0.0, f64::max);
    let horizon = last + HORIZON_ITERATIONS * longest;
    // Per job: (iteration, index in its events).
    let mut cursor: Vec<(f64, usize)> = vec![(0.0, 0); jobs.len()];
    let periods: Vec<f64> = schedules.iter().map(|s| s.evaluation.iteration_s).collect();
    let head = |j: usize, c: (f64, usize)| -> Option<(f64, bool, u64)> {
        let base = jobs[j].offset_s + c.0 * periods[j];
        if base >= horizon || deltas[j].events.is_empty() {
            return None;
        }
        let (t, alloc, size) = deltas[j].events[c.1];
        Some((base + t, alloc, size))
    };
    let (mut live, mut peak, mut when) = (0u64, 0u64, 0.0f64);
    let (mut excess, mut prev) = (0.0f64, 0.0f64);
    let mut arrived = vec![false; jobs.len()];
    loop {
        // The next event: earliest time, frees first; a job's arrival before its events.
        let mut next: Option<(f64, bool, usize)> = None;
        for j in 0..jobs.len() {
            let key = if arrived[j] {
                match head(j, cursor[j]) {
                    Some((t, alloc, _)) => (t, alloc, j),
                    None => continue,
                }
            } else {
                (jobs[j].offset_s, true, j)
            };
            if next.is_none_or(|n| key.0 < n.0 || (key.0 == n.0 && !key.1 && n.1)) {
                next = Some(key);
            }
        }
        let Some((time, _, j)) = next else { break };
        excess += live.saturating_sub(budget) as f64 * (time - prev);
        prev = time;
        let (alloc, size) = if arrived[j] {
            let (_, alloc, size) = head(j, cursor[j]).expect("chosen above");
            let c = &mut cursor[j];
            c.1 += 1;
            if c.1 == deltas[j].events.len() {
                *c = (c.0 + 1.0, 0);
            }
            (alloc, size)
        } else {
            arrived[j] = true;
            (true, deltas[j].persistent)
        };
        if alloc {
            live += size;
            if live > peak {
                peak = live;
                when = time;
            }
        } else {
            live -= size;
        }
    }
    Combined {
        peak_bytes: peak,
        peak_time_s: when,
        excess,
    }
}

/// Last forward use end and first backward use start of each activation in `sched`.
fn gaps(trace: &Trace, sched: &Schedule) -> Vec<(f64, f64)> {
    let n = trace.forward_ops();
    let mut step_item = vec![0usize; trace.steps.len()];
    for (i, it) in sched.items.iter().enumerate() {
        if let Item::Step(s) = it.item {
            step_item[s] = i;
        }
    }
    trace
        .tensors
        .iter()
        .map(|t| {
            if t.kind != TensorKind::Activation {
                return (0.0, 0.0);
            }
            let p = t.producer.unwrap_or(0);
            let last_fwd = t
                .used_by
                .iter()
                .copied()
                .filter(|&s| s < n)
                .max()
                .unwrap_or(p);
            let first_bwd = t.used_by.iter().copied().find(|&s| s >= n);
            (
                sched.items[step_item[last_fwd]].end_s,
                first_bwd.map_or(f64::INFINITY, |s| sched.items[step_item[s]].start_s),
            )
        })
        .collect()
}

/// Schedules `jobs` on `cost`'s device so that their combined peak is at most
/// `budget_bytes` (see the module documentation), by swapping only (TENSILE's tensor
/// swapping) or, with `allow_recompute`, also by recomputing (an option is then the cheaper
/// of the two per byte: recomputation costs its producer's step on the shared device, plus
/// the producers of inputs that are not resident). The result says whether it fits.
///
/// # Errors
///
/// [`TensileError::NoJobs`], [`TensileError::BadOffset`],
/// [`TensileError::BudgetBelowPersistent`], [`TensileError::Training`] for a bad cost model.
pub fn schedule_jobs(
    jobs: &[Job],
    cost: &CostModel,
    budget_bytes: u64,
    allow_recompute: bool,
) -> Result<TensileOutcome, TensileError> {
    cost.validate()?;
    if jobs.is_empty() {
        return Err(TensileError::NoJobs);
    }
    if let Some(job) = jobs
        .iter()
        .position(|j| !(j.offset_s.is_finite() && j.offset_s >= 0.0))
    {
        return Err(TensileError::BadOffset { job });
    }
    let persistent: u64 = jobs.iter().map(|j| j.trace.persistent_bytes()).sum();
    if budget_bytes < persistent {
        return Err(TensileError::BudgetBelowPersistent {
            budget_bytes,
            persistent_bytes: persistent,
        });
    }
    let shared = shared_cost(cost, jobs.len());
    let mut plans: Vec<Plan> = jobs.iter().map(|j| Plan::keep_all(&j.trace)).collect();
    let mut scheds: Vec<Schedule> = jobs
        .iter()
        .zip(&plans)
        .map(|(j, p)| planner::schedule(&j.trace, &shared, p))
        .collect();
    let unscheduled: Vec<f64> = scheds.iter().map(|s| s.evaluation.iteration_s).collect();
    let mut deltas: Vec<JobDeltas> = jobs
        .iter()
        .zip(&scheds)
        .map(|(j, s)| job_deltas(j, s))
        .collect();
    let first = combined_from(jobs, &scheds, &deltas, budget_bytes);
    let unscheduled_peak = first.peak_bytes;
    let mut now = first;
    let mut tried: Vec<Vec<[bool; 2]>> = jobs
        .iter()
        .map(|j| vec![[false, !allow_recompute]; j.trace.tensors.len()])
        .collect();
    let step_s: Vec<Vec<f64>> = jobs
        .iter()
        .map(|j| {
            j.trace
                .steps
                .iter()
                .map(|s| shared.step_seconds(s, j.trace.config.precision))
                .collect()
        })
        .collect();
    let mut job_gaps: Vec<Vec<(f64, f64)>> = jobs
        .iter()
        .zip(&scheds)
        .map(|(j, s)| gaps(&j.trace, s))
        .collect();
    while now.peak_bytes > budget_bytes {
        let when = now.peak_time_s;
        let mut best: Option<(f64, u64, usize, TensorId, Action)> = None;
        for (ji, job) in jobs.iter().enumerate() {
            if when < job.offset_s {
                continue;
            }
            let period = scheds[ji].evaluation.iteration_s;
            let local = (when - job.offset_s) % period;
            for &(t, from, to) in &scheds[ji].residency {
                let tensor = &job.trace.tensors[t];
                if tensor.kind != TensorKind::Activation
                    || plans[ji].action(t) != Action::Keep
                    || tried[ji][t] == [true, true]
                    || !(from <= local && local < to)
                {
                    continue;
                }
                let size = tensor.size_bytes;
                let mut consider = |c: f64, action: Action| {
                    let ratio = c / size as f64;
                    if best.is_none_or(|(r, s, ..)| ratio < r || (ratio == r && size > s)) {
                        best = Some((ratio, size, ji, t, action));
                    }
                };
                if !tried[ji][t][0] {
                    let x = shared.transfer_seconds(size);
                    let (out_end, back) = job_gaps[ji][t];
                    let gap = (back - out_end).max(0.0);
                    consider((2.0 * x - gap).max(0.0) + 0.05 * x, Action::Swap);
                }
                if !tried[ji][t][1] {
                    let p = tensor.producer.expect("activations have producers");
                    let mut c = step_s[ji][p];
                    for &u in &job.trace.op_inputs[p] {
                        let input = &job.trace.tensors[u];
                        let gone = input.kind == TensorKind::Transient
                            || (input.kind == TensorKind::Activation
                                && plans[ji].action(u) != Action::Keep);
                        if gone && let Some(q) = input.producer {
                            c += step_s[ji][q];
                        }
                    }
                    consider(c, Action::Recompute);
                }
            }
        }
        let Some((_, _, ji, t, action)) = best else {
            break;
        };
        tried[ji][t][usize::from(action == Action::Recompute)] = true;
        plans[ji].set(&jobs[ji].trace, t, action);
        let old = core::mem::replace(
            &mut scheds[ji],
            planner::schedule(&jobs[ji].trace, &shared, &plans[ji]),
        );
        let old_deltas = core::mem::replace(&mut deltas[ji], job_deltas(&jobs[ji], &scheds[ji]));
        let next = combined_from(jobs, &scheds, &deltas, budget_bytes);
        let better = next.peak_bytes < now.peak_bytes
            || (next.peak_bytes == now.peak_bytes && next.excess < now.excess);
        if better {
            now = next;
            job_gaps[ji] = gaps(&jobs[ji].trace, &scheds[ji]);
        } else {
            plans[ji].set(&jobs[ji].trace, t, Action::Keep);
            scheds[ji] = old;
            deltas[ji] = old_deltas;
        }
    }
    let outcomes = jobs
        .iter()
        .zip(plans)
        .zip(scheds)
        .zip(unscheduled)
        .map(|(((job, plan), schedule), unscheduled_s)| JobOutcome {
            alone_s: planner::evaluate(&job.trace, cost, &Plan::keep_all(&job.trace)).iteration_s,
            plan,
            schedule,
            unscheduled_s,
        })
        .collect();
    Ok(TensileOutcome {
        jobs: outcomes,
        unscheduled_peak_bytes: unscheduled_peak,
        peak_bytes: now.peak_bytes,
        budget_bytes,
        fits: now.peak_bytes <= budget_bytes,
        shared_cost: shared,
    })
}
