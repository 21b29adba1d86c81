//! Properties of the TENSILE-style multi-job scheduler. Times are simulated, never measured.

use alloclab_training::cost::CostModel;
use alloclab_training::planner::{self, Plan};
use alloclab_training::tensile::{self, Job, TensileError};
use alloclab_training::{Model, ModelConfig, Precision, Trace, TrainingError};

fn job(model: Model, batch: u32, precision: Precision, offset_ms: f64) -> Job {
    let mut c = ModelConfig::new(model, batch, precision).unwrap();
    if c.seq_len > 0 {
        c = c.with_seq_len(128).unwrap();
    }
    Job {
        trace: Trace::generate(&c),
        offset_s: offset_ms / 1e3,
    }
}

fn jobs() -> Vec<Job> {
    vec![
        job(Model::ResNet50, 16, Precision::Fp32, 0.0),
        job(Model::ResNet101, 8, Precision::Fp32, 5.0),
        job(Model::BertLarge, 4, Precision::Mixed, 3.0),
    ]
}

fn unscheduled_peak(jobs: &[Job], cost: &CostModel) -> u64 {
    tensile::schedule_jobs(jobs, cost, u64::MAX, false)
        .unwrap()
        .unscheduled_peak_bytes
}

#[test]
fn one_job_alone_reproduces_the_traces_own_peak_and_time() {
    let cost = CostModel::a100_40gb();
    for j in jobs() {
        let trace = j.trace.clone();
        let out = tensile::schedule_jobs(&[j], &cost, u64::MAX, true).unwrap();
        assert_eq!(out.unscheduled_peak_bytes, trace.peak_live_bytes());
        assert_eq!(out.peak_bytes, out.unscheduled_peak_bytes);
        assert!(out.fits);
        let o = &out.jobs[0];
        let alone = planner::evaluate(&trace, &cost, &Plan::keep_all(&trace)).iteration_s;
        assert_eq!(o.alone_s, alone);
        assert_eq!(o.unscheduled_s, alone);
        assert_eq!(o.iteration_s(), alone);
        assert_eq!(o.bytes_swapped(), 0);
    }
}

#[test]
fn the_combined_peak_is_at_least_each_jobs_peak_and_at_most_their_sum() {
    let cost = CostModel::a100_40gb();
    let jobs = jobs();
    let peak = unscheduled_peak(&jobs, &cost);
    let peaks: Vec<u64> = jobs.iter().map(|j| j.trace.peak_live_bytes()).collect();
    assert!(peak >= *peaks.iter().max().unwrap());
    assert!(peak <= peaks.iter().sum::<u64>());
}

#[test]
fn a_schedule_that_reports_fitting_is_within_the_budget_and_uses_only_resident_tensors() {
    let cost = CostModel::a100_40gb();
    let jobs = jobs();
    let top = unscheduled_peak(&jobs, &cost);
    let persistent: u64 = jobs.iter().map(|j| j.trace.persistent_bytes()).sum();
    let mut fitted_below_top = 0;
    for recompute in [false, true] {
        for k in [1u64, 2, 4] {
            let budget = persistent + (top - persistent) * (8 - k) / 8;
            let out = tensile::schedule_jobs(&jobs, &cost, budget, recompute).unwrap();
            assert_eq!(out.fits, out.peak_bytes <= budget);
            assert!(out.peak_bytes <= out.unscheduled_peak_bytes);
            // The reported peak is the combined peak of the reported schedules.
            let scheds: Vec<_> = out.jobs.iter().map(|o| o.schedule.clone()).collect();
            assert_eq!(tensile::combined_peak(&jobs, &scheds).0, out.peak_bytes);
            if out.fits && budget < top {
                fitted_below_top += 1;
            }
            for (j, o) in jobs.iter().zip(&out.jobs) {
                // Each job's schedule is the planner's simulation of its plan.
                let again = planner::schedule(&j.trace, &out.shared_cost, &o.plan);
                assert_eq!(again, o.schedule);
                for item in &o.schedule.items {
                    for &t in &item.uses {
                        assert!(
                            o.schedule.residency.iter().any(|&(u, from, to)| u == t
                                && from <= item.start_s
                                && item.end_s <= to),
                            "tensor {t} not resident for {:?}",
                            item.item
                        );
                    }
                }
                assert!(o.iteration_s() >= o.unscheduled_s * (1.0 - 1e-12));
                if !recompute {
                    assert_eq!(o.schedule.evaluation.ops_recomputed, 0);
                }
            }
        }
    }
    assert!(
        fitted_below_top >= 2,
        "the scheduler fits some budgets below the peak"
    );
}

#[test]
fn a_budget_above_the_unscheduled_peak_changes_nothing() {
    let cost = CostModel::a100_40gb();
    let jobs = jobs();
    let top = unscheduled_peak(&jobs, &cost);
    let out = tensile::schedule_jobs(&jobs, &cost, top, true).unwrap();
    assert!(out.fits);
    for o in &out.jobs {
        assert_eq!(o.bytes_swapped(), 0);
        assert_eq!(o.added_s(), 0.0);
    }
}

#[test]
fn a_larger_budget_never_makes_the_jobs_slower_in_total() {
    let cost = CostModel::a100_40gb();
    let jobs = jobs();
    let top = unscheduled_peak(&jobs, &cost);
    let persistent: u64 = jobs.iter().map(|j| j.trace.persistent_bytes()).sum();
    for recompute in [false, true] {
        let mut prev: Option<(u64, f64)> = None;
        for k in [4u64, 3, 1, 0] {
            let budget = persistent + (top - persistent) * (10 - k) / 10;
            let out = tensile::schedule_jobs(&jobs, &cost, budget, recompute).unwrap();
            if !out.fits {
                continue;
            }
            let total: f64 = out.jobs.iter().map(|o| o.iteration_s()).sum();
            if let Some((b, t)) = prev {
                assert!(
                    total <= t * (1.0 + 1e-12),
                    "{b} B: {t} s, {budget} B: {total} s"
                );
            }
            prev = Some((budget, total));
        }
    }
}

#[test]
fn bad_inputs_are_refused_with_clear_errors() {
    let cost = CostModel::a100_40gb();
    assert_eq!(
        tensile::schedule_jobs(&[], &cost, 1 << 30, false),
        Err(TensileError::NoJobs)
    );
    let jobs = jobs();
    let persistent: u64 = jobs.iter().map(|j| j.trace.persistent_bytes()).sum();
    let e = tensile::schedule_jobs(&jobs, &cost, persistent - 1, false).unwrap_err();
    assert_eq!(
        e,
        TensileError::BudgetBelowPersistent {
            budget_bytes: persistent - 1,
            persistent_bytes: persistent
        }
    );
    assert!(e.to_string().contains("persistent state"));
    let mut late = jobs.clone();
    late[1].offset_s = -1.0;
    assert_eq!(
        tensile::schedule_jobs(&late, &cost, u64::MAX, false),
        Err(TensileError::BadOffset { job: 1 })
    );
    late[1].offset_s = f64::NAN;
    assert_eq!(
        tensile::schedule_jobs(&late, &cost, u64::MAX, false),
        Err(TensileError::BadOffset { job: 1 })
    );
    let bad = CostModel {
        compute_efficiency: 0.0,
        ..cost
    };
    assert_eq!(
        tensile::schedule_jobs(&jobs, &bad, u64::MAX, false),
        Err(TensileError::Training(TrainingError::BadCostParameter {
            name: "compute_efficiency"
        }))
    );
}
