//! Tests of the host heaps' targets.

use super::lookup::*;
use super::*;
use crate::results::{Record, ResultsFile};
use crate::testing::record;

fn results(records: Vec<Record>) -> ResultsFile {
    ResultsFile::of_records(records)
}

/// `cpu` records: (workload, allocator, time, footprint) at 2 threads.
fn cpu(rows: &[(&str, &str, f64, f64)]) -> Vec<Record> {
    rows.iter()
        .flat_map(|&(w, a, time, peak)| {
            [
                record(CPU, w, a, 2, "time", time),
                record(CPU, w, a, 2, "peak_footprint", peak),
            ]
        })
        .collect()
}

/// The targets about `title`, alloclab's first, then the paper's.
fn goal(goals: &[Goal], title: &str) -> Goal {
    let of = |by: fn(&Claimant) -> bool| {
        goals
            .iter()
            .filter(|g| g.title == title && by(&g.by))
            .flat_map(|g| g.checks.iter().cloned())
            .collect::<Vec<_>>()
    };
    let mut checks = of(|c| *c == Claimant::Alloclab);
    checks.extend(of(|c| *c != Claimant::Alloclab));
    assert!(!checks.is_empty(), "no goal about {title}");
    Goal {
        title: "merged",
        by: Claimant::Alloclab,
        checks,
    }
}

#[test]
fn cpu_checks_are_decided_by_the_mean_and_by_the_worst_workload() {
    let recs = cpu(&[
        ("a", WFSPAN, 90.0, 3.0),
        ("a", MIMALLOC, 100.0, 2.0),
        ("a", SYSTEM, 100.0, 1.0),
        ("b", WFSPAN, 120.0, 1.0),
        ("b", MIMALLOC, 100.0, 1.0),
        ("b", SYSTEM, 100.0, 1.0),
    ]);
    let goals = host_heap_goals(&results(recs));
    let checks = goal(&goals, WFSPAN).checks;
    // Geometric mean of 0.9 and 1.2 is 1.04: over 1.0.
    assert_eq!(checks[0].verdict, Verdict::Fail, "{}", checks[0].line);
    assert!(checks[0].line.contains("1.04"), "{}", checks[0].line);
    // b is 1.2x glibc's time: over 1.1.
    assert_eq!(checks[1].verdict, Verdict::Fail, "{}", checks[1].line);
    assert!(checks[1].line.contains("b 1.20"), "{}", checks[1].line);
    // a's footprint is 1.5x mimalloc's: at the limit, met.
    assert_eq!(checks[2].verdict, Verdict::Pass, "{}", checks[2].line);
    // No realtime or programs suite: not decided, and said why.
    assert_eq!(checks[FIFO_CHECK].verdict, Verdict::NotHere);
    assert!(
        checks[FIFO_CHECK].line.contains("suite `realtime` not run"),
        "{}",
        checks[FIFO_CHECK].line
    );
    for check in &checks[PROGRAMS_WALL_CHECK..=REDIS_CHECK] {
        assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
        assert!(
            check.line.contains("suite `programs` not run"),
            "{}",
            check.line
        );
    }
    // The randomized allocator did not run: no goal for it.
    assert!(goals.iter().all(|g| !g.title.starts_with(RANDOMIZED)));
}

#[test]
fn a_missing_peer_leaves_a_check_undecided_instead_of_passing_it() {
    let recs = cpu(&[("a", WFSPAN, 90.0, 1.0), ("a", SYSTEM, 100.0, 1.0)]);
    let goals = host_heap_goals(&results(recs));
    let mean = &goal(&goals, WFSPAN).checks[0];
    assert_eq!(mean.verdict, Verdict::NotHere);
    assert!(mean.line.contains("mimalloc"), "{}", mean.line);
}

/// `latency-fifo` records at `threads`: (allocator, [alloc p99.999, free p99.999]), every
/// thread under SCHED_FIFO, wfspan's floor and step counts.
fn realtime(threads: usize, rows: &[(&str, [f64; 2])]) -> Vec<Record> {
    let mut out = Vec::new();
    for (a, values) in rows {
        for (call, v) in REALTIME_FIFO_CALLS.iter().zip(values) {
            let metric = format!("{call}_p99.999");
            out.push(record(REALTIME, "latency-fifo", a, threads, &metric, *v));
        }
        out.push(record(
            REALTIME,
            "latency-fifo",
            a,
            threads,
            "sched_fifo",
            1.0,
        ));
        if *a == WFSPAN {
            for (metric, v) in [
                ("floor_p99.999", 2.0),
                ("alloc_max_steps", 40.0),
                ("free_max_steps", 3.0),
            ] {
                out.push(record(REALTIME, "latency-fifo", a, threads, metric, v));
            }
        }
    }
    out
}

/// Indices of the wfspan checks in [`goal`]'s order: alloclab's, then the paper's.
const PROGRAMS_WALL_CHECK: usize = 3;
const PROGRAMS_WORST_CHECK: usize = 4;
const PROGRAMS_RSS_CHECK: usize = 5;
const REDIS_CHECK: usize = 6;
const FIFO_CHECK: usize = 7;
const LOCK_CHECK: usize = 8;
const STEP_CHECK: usize = 9;
const PROGRESS_CHECK: usize = 10;

#[test]
fn fifo_check_names_the_allocator_that_was_lower_and_the_floor() {
    let mut rows = vec![(WFSPAN, [10.0, 10.0])];
    for peer in REALTIME_PEERS {
        rows.push((peer, [20.0, 20.0]));
    }
    let goals = host_heap_goals(&results(realtime(2, &rows)));
    let check = &goal(&goals, WFSPAN).checks[FIFO_CHECK];
    assert_eq!(check.verdict, Verdict::Pass, "{}", check.line);
    assert!(check.line.contains("the floor 2 ns"), "{}", check.line);

    rows[3].1[1] = 9.0; // jemalloc's free p99.999 below wfspan's
    let goals = host_heap_goals(&results(realtime(2, &rows)));
    let check = &goal(&goals, WFSPAN).checks[FIFO_CHECK];
    assert_eq!(check.verdict, Verdict::Fail);
    assert!(
        check
            .line
            .contains(&format!("free_p99.999 10 ns vs {} 9 ns", rows[3].0)),
        "{}",
        check.line
    );

    // Where an empty call's p99.999 is the host's interrupts (20 µs), p99.99 decides.
    let mut recs = realtime(2, &rows);
    for r in recs.iter_mut().filter(|r| r.metric == "floor_p99.999") {
        r.median = 20e3;
    }
    for (a, _) in &rows {
        let ours = if *a == WFSPAN { 1e3 } else { 5e3 };
        for call in REALTIME_FIFO_CALLS {
            let metric = format!("{call}_p99.99");
            recs.push(record(REALTIME, "latency-fifo", a, 2, &metric, ours));
        }
    }
    recs.push(record(
        REALTIME,
        "latency-fifo",
        WFSPAN,
        2,
        "floor_p99.99",
        300.0,
    ));
    let goals = host_heap_goals(&results(recs.clone()));
    let check = &goal(&goals, WFSPAN).checks[FIFO_CHECK];
    assert_eq!(check.verdict, Verdict::Pass, "{}", check.line);
    assert!(
        check.line.contains("alloc_p99.99 1.00 µs")
            && check
                .line
                .contains("at p99.999 20.0 µs: the host's interrupts"),
        "{}",
        check.line
    );
    // Interrupted at every percentile compared: undecided.
    for r in recs.iter_mut().filter(|r| r.metric == "floor_p99.99") {
        r.median = 2e3;
    }
    let goals = host_heap_goals(&results(recs));
    let check = &goal(&goals, WFSPAN).checks[FIFO_CHECK];
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);

    // Threads that did not run under SCHED_FIFO decide nothing.
    let mut recs = realtime(2, &rows);
    for r in recs.iter_mut().filter(|r| r.metric == "sched_fifo") {
        r.median = 0.0;
    }
    let goals = host_heap_goals(&results(recs));
    let check = &goal(&goals, WFSPAN).checks[FIFO_CHECK];
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(check.line.contains("SCHED_FIFO"), "{}", check.line);
    // Without rlsf: not decided either.
    rows.retain(|(a, _)| *a != "rlsf");
    let goals = host_heap_goals(&results(realtime(2, &rows)));
    let check = &goal(&goals, WFSPAN).checks[FIFO_CHECK];
    assert_eq!(check.verdict, Verdict::NotHere);
    assert!(check.line.contains("rlsf"), "{}", check.line);
}

#[test]
fn step_check_compares_the_most_steps_with_the_documented_bound() {
    let rows = [(WFSPAN, [1.0; 2])];
    let mut recs = realtime(2, &rows);
    let bound = alloclab_wfspan::step_bound(alloclab_wfspan::Config::DEFAULT.span_bytes, 3);
    let goals = host_heap_goals(&results(recs.clone()));
    let check = &goal(&goals, WFSPAN).checks[STEP_CHECK];
    assert!(
        bound.alloc >= 40,
        "the recorded 40 steps are within the bound"
    );
    assert_eq!(check.verdict, Verdict::Pass, "{}", check.line);
    // One run over the bound fails the check even if the median is within it.
    let steps = recs
        .iter_mut()
        .find(|r| r.metric == "alloc_max_steps")
        .unwrap();
    steps.max = bound.alloc as f64 + 1.0;
    let goals = host_heap_goals(&results(recs));
    assert_eq!(
        goal(&goals, WFSPAN).checks[STEP_CHECK].verdict,
        Verdict::Fail
    );
}

/// `progress` records at 2 threads: (allocator, blocked freezes, blocked fraction, others'
/// longest call during freezes in ns), 200 freezes each, the longest gap between calls
/// during freezes 1.5 ms.
fn progress(rows: &[(&str, f64, f64, f64)]) -> Vec<Record> {
    rows.iter()
        .flat_map(|&(a, blocked, fraction, others)| {
            [
                record(REALTIME, "progress", a, 2, "freezes", 200.0),
                record(REALTIME, "progress", a, 2, "blocked_freezes", blocked),
                record(REALTIME, "progress", a, 2, "blocked_fraction", fraction),
                record(
                    REALTIME,
                    "progress",
                    a,
                    2,
                    "others_max_during_freeze",
                    others,
                ),
                record(REALTIME, "progress", a, 2, "floor_max_during_freeze", 3e5),
                record(REALTIME, "progress", a, 2, "gaps_max_during_freeze", 1.5e6),
                record(REALTIME, "progress", a, 2, "gap_blocked_freezes", 0.0),
            ]
        })
        .collect()
}

/// Asserts that wfspan's progress check passes on `recs` and that its line says `says`.
fn progress_passes_saying(recs: Vec<Record>, says: &str) {
    let checks = goal(&host_heap_goals(&results(recs)), WFSPAN).checks;
    let check = &checks[PROGRESS_CHECK];
    assert_eq!(check.verdict, Verdict::Pass, "{}", check.line);
    assert!(check.line.contains(says), "{}", check.line);
}

#[test]
fn progress_checks_want_no_blocked_freeze_of_wfspan_and_some_of_the_lock() {
    let mut recs = progress(&[(WFSPAN, 0.0, 0.0, 400e3), ("rlsf", 40.0, 0.2, 20e6)]);
    let goals = host_heap_goals(&results(recs.clone()));
    let checks = goal(&goals, WFSPAN).checks;
    assert_eq!(
        checks[PROGRESS_CHECK].verdict,
        Verdict::Pass,
        "{}",
        checks[PROGRESS_CHECK].line
    );
    assert!(
        checks[PROGRESS_CHECK].line.contains("blocked on 0 of 200"),
        "{}",
        checks[PROGRESS_CHECK].line
    );
    assert!(
        checks[PROGRESS_CHECK]
            .line
            .contains("an empty call's longest during freezes 300 µs"),
        "{}",
        checks[PROGRESS_CHECK].line
    );
    assert_eq!(
        checks[LOCK_CHECK].verdict,
        Verdict::Pass,
        "{}",
        checks[LOCK_CHECK].line
    );
    assert!(
        checks[LOCK_CHECK].line.contains("20.0%"),
        "{}",
        checks[LOCK_CHECK].line
    );

    // One run in which wfspan blocked once fails it, whatever the median.
    let blocked = recs
        .iter_mut()
        .find(|r| r.allocator == WFSPAN && r.metric == "blocked_freezes")
        .unwrap();
    blocked.max = 1.0;
    let goals = host_heap_goals(&results(recs.clone()));
    assert_eq!(
        goal(&goals, WFSPAN).checks[PROGRESS_CHECK].verdict,
        Verdict::Fail
    );
    // Unless the gaps between calls, which wait for no thread, lined up with as many
    // freezes: the machine's pauses.
    let mut lined_up = recs.clone();
    for r in lined_up
        .iter_mut()
        .filter(|r| r.allocator == WFSPAN && r.metric == "gap_blocked_freezes")
    {
        r.max = 1.0;
    }
    let checks = goal(&host_heap_goals(&results(lined_up)), WFSPAN).checks;
    assert_eq!(
        checks[PROGRESS_CHECK].verdict,
        Verdict::Pass,
        "{}",
        checks[PROGRESS_CHECK].line
    );
    // A call of the others of 1 ms or more during a freeze passes when the harness's own
    // code between calls met a pause less than 1 ms shorter in the same windows (the
    // machine's) ...
    progress_passes_saying(
        progress(&[(WFSPAN, 0.0, 0.0, 2.4e6)]),
        "the longest gap between their calls during freezes 1.50 ms",
    );
    // ... and fails when it is 1 ms longer than any gap.
    let mut recs = progress(&[(WFSPAN, 0.0, 0.0, 2.5e6), ("rlsf", 1.0, 0.01, 20e6)]);
    let goals = host_heap_goals(&results(recs.clone()));
    let checks = goal(&goals, WFSPAN).checks;
    assert_eq!(checks[PROGRESS_CHECK].verdict, Verdict::Fail);
    // A lock seen on 1% of the freezes: below what the measure must see.
    assert_eq!(checks[LOCK_CHECK].verdict, Verdict::Fail);
    // A pause the gaps during freezes missed but that the same runs show elsewhere (here a
    // call while no thread was frozen) is the machine's too: with it, the same call passes.
    let mut paused = progress(&[(WFSPAN, 0.0, 0.0, 2.5e6)]);
    paused.push(record(
        REALTIME,
        "progress",
        WFSPAN,
        2,
        "others_max_outside_freeze",
        1.9e6,
    ));
    progress_passes_saying(
        paused,
        "the machine's longest pause in the same runs 1.90 ms",
    );
    // Without a run of two or more threads, neither is decided.
    for r in &mut recs {
        r.threads = 1;
    }
    let goals = host_heap_goals(&results(recs));
    let checks = goal(&goals, WFSPAN).checks;
    assert_eq!(checks[PROGRESS_CHECK].verdict, Verdict::NotHere);
    assert_eq!(checks[LOCK_CHECK].verdict, Verdict::NotHere);
}

/// `programs` records of one program: (allocator, wall, peak RSS) at one thread.
fn program(workload: &str, rows: &[(&str, f64, f64)]) -> Vec<Record> {
    rows.iter()
        .flat_map(|&(a, wall, rss)| {
            [
                record(PROGRAMS, workload, a, 1, "wall", wall),
                record(PROGRAMS, workload, a, 1, "peak_rss", rss),
            ]
        })
        .collect()
}

#[test]
fn programs_checks_compare_with_the_peers_shared_libraries() {
    let mut recs = program(
        "sqlite",
        &[
            (WFSPAN, 80.0, 11.0),
            (LIBMIMALLOC, 100.0, 10.0),
            (SYSTEM, 90.0, 8.0),
        ],
    );
    recs.extend(program(
        "lua",
        &[
            (WFSPAN, 130.0, 9.0),
            (LIBMIMALLOC, 100.0, 10.0),
            (SYSTEM, 90.0, 8.0),
        ],
    ));
    let mut redis = program(
        "redis",
        &[
            (WFSPAN, 100.0, 60.0),
            (LIBMIMALLOC, 100.0, 60.0),
            (LIBJEMALLOC, 100.0, 64.0),
        ],
    );
    for command in alloclab_programs::redis::COMMANDS {
        let metric = format!("{command}_rps");
        redis.push(record(PROGRAMS, "redis", WFSPAN, 1, &metric, 1000.0));
        redis.push(record(PROGRAMS, "redis", LIBJEMALLOC, 1, &metric, 900.0));
    }
    recs.extend(redis.iter().cloned());
    let checks = goal(&host_heap_goals(&results(recs.clone())), WFSPAN).checks;
    // Wall: 0.8, 1.3 and 1.0, geometric mean 1.013: over 0.95; lua 1.3 is over 1.25.
    let wall = &checks[PROGRAMS_WALL_CHECK];
    assert_eq!(wall.verdict, Verdict::Fail, "{}", wall.line);
    assert!(wall.line.contains("1.013 (3 workloads)"), "{}", wall.line);
    let worst = &checks[PROGRAMS_WORST_CHECK];
    assert_eq!(worst.verdict, Verdict::Fail, "{}", worst.line);
    assert!(worst.line.contains("lua 1.30"), "{}", worst.line);
    // Peak RSS: 1.1, 0.9 and 1.0, geometric mean 0.997: met.
    let rss = &checks[PROGRAMS_RSS_CHECK];
    assert_eq!(rss.verdict, Verdict::Pass, "{}", rss.line);
    // redis: every command 1.11x jemalloc's, peak RSS 0.94.
    let redis_check = &checks[REDIS_CHECK];
    assert_eq!(redis_check.verdict, Verdict::Pass, "{}", redis_check.line);
    assert!(
        redis_check.line.contains("SET 1.11"),
        "{}",
        redis_check.line
    );
    assert!(
        redis_check.line.contains("peak RSS 0.94"),
        "{}",
        redis_check.line
    );

    // A command slower in every run decides the redis check; slower on the median but
    // faster in some run decides nothing. Value `i` of both heaps is run `i`.
    let get_rps = |ours: [f64; 3], theirs: [f64; 3]| -> Vec<Record> {
        recs.iter()
            .cloned()
            .map(|mut r| {
                if r.metric == "get_rps" {
                    r.values = (if r.allocator == WFSPAN { ours } else { theirs }).to_vec();
                    let mut sorted = r.values.clone();
                    sorted.sort_by(f64::total_cmp);
                    (r.min, r.median, r.max) = (sorted[0], sorted[1], sorted[2]);
                }
                r
            })
            .collect()
    };
    let all_runs = get_rps([800.0, 700.0, 850.0], [900.0, 800.0, 880.0]);
    let checks = goal(&host_heap_goals(&results(all_runs)), WFSPAN).checks;
    let check = &checks[REDIS_CHECK];
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.line);
    // Run by run 0.889, 0.875, 0.966: the median 0.89 (the ratio of the medians is 0.91).
    assert!(check.line.contains("GET 0.89"), "{}", check.line);
    assert!(
        check.line.contains("on the wrong side: GET (in every run)"),
        "{}",
        check.line
    );
    // Run by run 0.889, 1.139, 0.944.
    let one_faster = get_rps([800.0, 900.0, 850.0], [900.0, 790.0, 900.0]);
    let checks = goal(&host_heap_goals(&results(one_faster)), WFSPAN).checks;
    let check = &checks[REDIS_CHECK];
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(
        check
            .line
            .contains("on the wrong side on GET (runs 0.89–1.14, not in every run)"),
        "{}",
        check.line
    );
    // Records without per-run values: wfspan's median below every jemalloc run is slower.
    let unpaired = |their_min: f64| -> Vec<Record> {
        recs.iter()
            .cloned()
            .map(|mut r| {
                if r.metric == "get_rps" && r.allocator == WFSPAN {
                    (r.median, r.min, r.max) = (800.0, 720.0, 880.0);
                } else if r.metric == "get_rps" && r.allocator == LIBJEMALLOC {
                    r.min = their_min;
                }
                r
            })
            .collect()
    };
    let checks = goal(&host_heap_goals(&results(unpaired(850.0))), WFSPAN).checks;
    assert_eq!(
        checks[REDIS_CHECK].verdict,
        Verdict::Fail,
        "{}",
        checks[REDIS_CHECK].line
    );
    let checks = goal(&host_heap_goals(&results(unpaired(700.0))), WFSPAN).checks;
    assert_eq!(
        checks[REDIS_CHECK].verdict,
        Verdict::NotHere,
        "{}",
        checks[REDIS_CHECK].line
    );

    // Without mimalloc's library (not installed), the comparisons are undecided.
    let without: Vec<Record> = recs
        .into_iter()
        .filter(|r| r.allocator != LIBMIMALLOC)
        .collect();
    let checks = goal(&host_heap_goals(&results(without)), WFSPAN).checks;
    for check in &checks[PROGRAMS_WALL_CHECK..=PROGRAMS_RSS_CHECK] {
        assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
        assert!(check.line.contains(LIBMIMALLOC), "{}", check.line);
    }
    assert_eq!(checks[REDIS_CHECK].verdict, Verdict::Pass);
}

/// redis records of one metric for `(allocator, run-by-run values)`.
fn redis_runs(metric: &str, rows: &[(&str, &[f64])]) -> Vec<Record> {
    rows.iter()
        .map(|&(allocator, values)| {
            let samples: Vec<crate::results::Sample> = values
                .iter()
                .map(|&v| crate::results::sample(metric, "", v, metric == "peak_rss"))
                .collect();
            Record::summarise(PROGRAMS, "redis", allocator, 1, &samples)
        })
        .collect()
}

#[test]
fn the_redis_check_reads_jemalloc_against_itself_as_its_control() {
    use alloclab_programs::redis::{COMMANDS, MAPS_LIBJEMALLOC};
    // `system` maps libjemalloc.so (`maps`: 1) or runs on something else (0); every command
    // but GET at 1000 requests/s for all three heaps, peak RSS 70 MiB.
    let recs = |wfspan_get: &[f64],
                system_get: &[f64],
                wfspan_rss: &[f64],
                system_rss: &[f64],
                maps: &[f64]| {
        let mut recs = Vec::new();
        for command in COMMANDS.iter().filter(|&&c| c != "get") {
            let flat: &[f64] = &[1000.0; 5];
            recs.extend(redis_runs(
                &format!("{command}_rps"),
                &[(WFSPAN, flat), (LIBJEMALLOC, flat), (SYSTEM, flat)],
            ));
        }
        let jemalloc: &[f64] = &[1000.0; 5];
        recs.extend(redis_runs(
            "get_rps",
            &[
                (WFSPAN, wfspan_get),
                (LIBJEMALLOC, jemalloc),
                (SYSTEM, system_get),
            ],
        ));
        let rss: &[f64] = &[70.0; 5];
        recs.extend(redis_runs(
            "peak_rss",
            &[
                (WFSPAN, wfspan_rss),
                (LIBJEMALLOC, rss),
                (SYSTEM, system_rss),
            ],
        ));
        recs.extend(redis_runs(
            MAPS_LIBJEMALLOC,
            &[(WFSPAN, maps), (LIBJEMALLOC, maps), (SYSTEM, maps)],
        ));
        goal(&host_heap_goals(&results(recs)), WFSPAN).checks[REDIS_CHECK].clone()
    };
    let rss: &[f64] = &[70.0; 5];
    let (mapped, not_mapped): (&[f64], &[f64]) = (&[1.0; 5], &[0.0; 5]);
    // GET slower in every run (0.90–0.98), but jemalloc against itself read 0.85–1.10:
    // within the control, undecided.
    let slower: &[f64] = &[900.0, 920.0, 950.0, 960.0, 980.0];
    let control: &[f64] = &[850.0, 950.0, 1000.0, 1050.0, 1100.0];
    let check = recs(slower, control, rss, rss, mapped);
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(check.line.contains("GET 0.95"), "{}", check.line);
    assert!(
        check.line.contains("runs: SET 1.00–1.00, GET 0.85–1.10"),
        "{}",
        check.line
    );
    assert!(
        check.line.contains(
            "on the wrong side on GET (runs 0.90–0.98, within jemalloc's swing against itself)"
        ),
        "{}",
        check.line
    );
    // The same figures where `system` is not libjemalloc: no control, and slower in every
    // run decides.
    let check = recs(slower, control, rss, rss, not_mapped);
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.line);
    assert!(!check.line.contains("against itself"), "{}", check.line);
    assert!(check.line.contains("GET (in every run)"), "{}", check.line);
    // A server that ran on something else in one run of five: no control either.
    let check = recs(slower, control, rss, rss, &[1.0, 1.0, 0.0, 1.0, 1.0]);
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.line);
    assert!(!check.line.contains("against itself"), "{}", check.line);
    // A median below the control's slowest run decides, even with one run faster.
    let past: &[f64] = &[700.0, 750.0, 800.0, 820.0, 1010.0];
    let check = recs(past, control, rss, rss, mapped);
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.line);
    assert!(
        check
            .line
            .contains("on the wrong side: GET (past jemalloc's swing against itself)"),
        "{}",
        check.line
    );
    // A control on one side of 1 (jemalloc faster against itself in every run, 1.02–1.10)
    // swung as far as 1 / 1.10 the other way: a median of 0.99 is within it.
    let one_sided: &[f64] = &[1020.0, 1040.0, 1050.0, 1080.0, 1100.0];
    let almost: &[f64] = &[950.0, 980.0, 990.0, 1005.0, 1010.0];
    let check = recs(almost, one_sided, rss, rss, mapped);
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(check.line.contains("GET 0.99"), "{}", check.line);
    // Peak RSS 1.02 in four runs of five: within a control that reached 1.05, undecided;
    // past one that stayed at 1.00, a failure.
    let fast: &[f64] = &[1000.0; 5];
    let larger: &[f64] = &[71.4, 71.4, 71.4, 71.4, 69.0];
    let check = recs(fast, fast, larger, &[70.0, 70.0, 73.5, 70.0, 70.0], mapped);
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(check.line.contains("peak RSS 1.02"), "{}", check.line);
    assert!(check.line.contains("peak RSS 1.00–1.05"), "{}", check.line);
    let check = recs(fast, fast, larger, rss, mapped);
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.line);
    assert!(
        check
            .line
            .contains("on the wrong side: peak RSS (past jemalloc's swing against itself)"),
        "{}",
        check.line
    );
    // Without the control, peak RSS above in every run decides; above on the median only,
    // not.
    let check = recs(fast, fast, &[71.4; 5], rss, not_mapped);
    assert_eq!(check.verdict, Verdict::Fail, "{}", check.line);
    assert!(
        check.line.contains("peak RSS (in every run)"),
        "{}",
        check.line
    );
    let check = recs(fast, fast, larger, rss, not_mapped);
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(
        check
            .line
            .contains("peak RSS (runs 0.99–1.02, not in every run)"),
        "{}",
        check.line
    );
}

/// `programs` wall records of `workload` for wfspan and libmimalloc, run by run.
fn paired_walls(workload: &str, ours: &[f64], theirs: &[f64]) -> Vec<Record> {
    [(WFSPAN, ours), (LIBMIMALLOC, theirs)]
        .into_iter()
        .map(|(allocator, values)| {
            let samples: Vec<crate::results::Sample> = values
                .iter()
                .map(|&v| crate::results::sample("wall", "ms", v, true))
                .collect();
            Record::summarise(PROGRAMS, workload, allocator, 1, &samples)
        })
        .collect()
}

/// [`realtime`] with per-run values: each allocator's alloc and free p99.999, run by run.
fn realtime_runs(rows: &[(&str, [&[f64]; 2])]) -> Vec<Record> {
    let mut out = realtime(
        2,
        &rows.iter().map(|(a, _)| (*a, [0.0; 2])).collect::<Vec<_>>(),
    );
    out.retain(|r| !r.metric.ends_with("_p99.999") || r.metric == "floor_p99.999");
    for (a, calls) in rows {
        for (call, values) in REALTIME_FIFO_CALLS.iter().zip(calls) {
            let metric = format!("{call}_p99.999");
            let samples: Vec<crate::results::Sample> = values
                .iter()
                .map(|&v| crate::results::sample(&metric, "ns", v, true))
                .collect();
            out.push(Record::summarise(REALTIME, "latency-fifo", a, 2, &samples));
        }
    }
    out
}

#[test]
fn fifo_tails_are_compared_run_by_run_and_undecided_where_the_runs_reach_both_sides() {
    let check = |ours: &[f64], peer_free: &[f64]| {
        let slow: &[f64] = &[5000.0, 5000.0, 5000.0];
        let mut rows = vec![(WFSPAN, [ours, ours])];
        for peer in REALTIME_PEERS {
            rows.push((peer, [slow, slow]));
        }
        rows[1].1[1] = peer_free;
        let goals = host_heap_goals(&results(realtime_runs(&rows)));
        (rows[1].0, goal(&goals, WFSPAN).checks[FIFO_CHECK].clone())
    };
    // Runs as a default suite measured them on the 2-core VM: each one's median says the
    // peer is lower (661 against 671), run by run it is 1.11x, 1.36x and 0.86x ours: a
    // pause in one tail and not in the other, on both sides. Undecided.
    let (peer, straddles) = check(&[551.0, 671.0, 771.0], &[611.0, 911.0, 661.0]);
    assert_eq!(straddles.verdict, Verdict::NotHere, "{}", straddles.line);
    assert!(
        straddles.line.contains("not decided by this run")
            && straddles
                .line
                .contains(&format!("next {peer} 1.11x run by run")),
        "{}",
        straddles.line
    );
    // Higher in every run: ours is the lowest.
    let ours: &[f64] = &[500.0, 700.0, 600.0];
    let (_, higher) = check(ours, &[600.0, 900.0, 800.0]);
    assert_eq!(higher.verdict, Verdict::Pass, "{}", higher.line);
    // Lower in every run: missed, naming it.
    let (peer, lower) = check(ours, &[400.0, 600.0, 500.0]);
    assert_eq!(lower.verdict, Verdict::Fail, "{}", lower.line);
    assert!(
        lower
            .line
            .contains(&format!("free_p99.999 600 ns vs {peer} 500 ns")),
        "{}",
        lower.line
    );
}

#[test]
fn a_mean_whose_resampled_runs_reach_both_sides_of_the_limit_is_undecided() {
    let check = |spread: f64| {
        let mut recs = Vec::new();
        for (i, w) in ["lua", "perl", "sqlite", "cc"].into_iter().enumerate() {
            // Every run 0.9x, but for one program one run of five `spread` times that.
            let mut ours = vec![90.0; 5];
            ours[i] *= spread;
            recs.extend(paired_walls(w, &ours, &[100.0; 5]));
        }
        goal(&host_heap_goals(&results(recs)), WFSPAN).checks[PROGRAMS_WALL_CHECK].clone()
    };
    // Steady runs: 0.9 whatever is resampled, met.
    let steady = check(1.0);
    assert_eq!(steady.verdict, Verdict::Pass, "{}", steady.line);
    assert!(
        steady
            .line
            .contains("0.900 (4 workloads; 0.900–0.900 in 90% of the runs resampled)"),
        "{}",
        steady.line
    );
    // One run in five at 1.3x on every program: the medians still say 0.9, but a run of the
    // suite that drew those runs twice reads above 0.95.
    let noisy = check(1.3 / 0.9);
    assert_eq!(noisy.verdict, Verdict::NotHere, "{}", noisy.line);
    assert!(
        noisy.line.contains("not decided by this run: 0.900"),
        "{}",
        noisy.line
    );
    assert!(
        noisy.line.contains("on both sides of 0.95"),
        "{}",
        noisy.line
    );
    // Steady runs above the limit: missed.
    let mut recs = Vec::new();
    for w in ["lua", "perl", "sqlite"] {
        recs.extend(paired_walls(w, &[99.0, 100.0, 101.0], &[100.0; 3]));
    }
    let slow = goal(&host_heap_goals(&results(recs)), WFSPAN).checks[PROGRAMS_WALL_CHECK].clone();
    assert_eq!(slow.verdict, Verdict::Fail, "{}", slow.line);
}

#[test]
fn a_program_whose_resampled_runs_reach_both_sides_of_the_limit_is_undecided() {
    let worst = |ours: [f64; 5]| {
        let mut recs = paired_walls("lua", &[100.0; 5], &[100.0; 5]);
        recs.extend(paired_walls("c-glibc-simple", &ours, &[100.0; 5]));
        goal(&host_heap_goals(&results(recs)), WFSPAN).checks[PROGRAMS_WORST_CHECK].clone()
    };
    // Runs 1.10–1.43 of libmimalloc's, median 1.28: above 1.25, but not in most draws.
    let straddles = worst([110.0, 118.0, 128.0, 131.0, 143.0]);
    assert_eq!(straddles.verdict, Verdict::NotHere, "{}", straddles.line);
    assert!(
        straddles
            .line
            .contains("both sides of 1.25 on c-glibc-simple 1.28 (resampled"),
        "{}",
        straddles.line
    );
    // Every run above: missed, naming the program.
    let above = worst([130.0, 135.0, 140.0, 145.0, 150.0]);
    assert_eq!(above.verdict, Verdict::Fail, "{}", above.line);
    assert!(
        above.line.contains("above on c-glibc-simple 1.40"),
        "{}",
        above.line
    );
    // One program above and another undecided: missed, naming both.
    let mut recs = paired_walls("lua", &[130.0, 135.0, 140.0, 145.0, 150.0], &[100.0; 5]);
    recs.extend(paired_walls(
        "c-glibc-simple",
        &[110.0, 118.0, 128.0, 131.0, 143.0],
        &[100.0; 5],
    ));
    let both = goal(&host_heap_goals(&results(recs)), WFSPAN).checks[PROGRAMS_WORST_CHECK].clone();
    assert_eq!(both.verdict, Verdict::Fail, "{}", both.line);
    assert!(
        both.line.contains("above on lua 1.40")
            && both
                .line
                .contains("; not decided on c-glibc-simple 1.28 (resampled"),
        "{}",
        both.line
    );
    // Every run well below: met, the highest named.
    let below = worst([105.0, 110.0, 113.0, 115.0, 120.0]);
    assert_eq!(below.verdict, Verdict::Pass, "{}", below.line);
    assert!(
        below.line.contains("highest 1.13 (c-glibc-simple)"),
        "{}",
        below.line
    );
}

#[test]
fn the_resampled_interval_is_reproducible_and_holds_the_mean() {
    let paired = |ratio: f64, runs: &[f64]| Paired {
        workload: "w".into(),
        threads: 1,
        ratio,
        runs: runs.to_vec(),
    };
    let a = paired(1.0, &[0.8, 0.9, 1.0, 1.1, 1.2]);
    let b = paired(1.0, &[0.95, 1.0, 1.05]);
    let first = mean_interval(&[&a, &b]).unwrap();
    assert_eq!(
        mean_interval(&[&a, &b]),
        Some(first),
        "the same runs give the same interval"
    );
    assert!(first.0 < 1.0 && 1.0 < first.1, "{first:?}");
    assert!(first.0 >= 0.8 * 0.95 && first.1 <= 1.2 * 1.05, "{first:?}");
    // A workload with too few runs stays at its ratio in every draw: it moves the range
    // (by the geometric mean of 2 and the other's draws) but does not make it vanish.
    let short = paired(2.0, &[1.9, 2.1]);
    let with_short = mean_interval(&[&a, &short]).unwrap();
    assert!(
        (with_short.0 - (first_alone(&a).0 * 2.0).sqrt()).abs() < 1e-9,
        "{with_short:?}"
    );
    // No workload with enough runs: no interval.
    assert_eq!(mean_interval(&[&short]), None);
    assert_eq!(mean_interval(&[]), None);
}

/// The interval of one workload alone.
fn first_alone(p: &Paired) -> (f64, f64) {
    mean_interval(&[p]).unwrap()
}

#[test]
fn a_workload_without_paired_runs_does_not_turn_an_undecided_mean_into_a_verdict() {
    // As in the undecided case below the limit, but one program lost a run (its runs no
    // longer pair): the others' runs still decide, and still say they cannot.
    let mut recs = Vec::new();
    for (i, w) in ["lua", "perl", "sqlite", "cc"].into_iter().enumerate() {
        let mut ours = vec![90.0; 5];
        ours[i] *= 1.3 / 0.9;
        recs.extend(paired_walls(w, &ours, &[100.0; 5]));
    }
    recs.extend(paired_walls("redis", &[90.0; 4], &[100.0; 5]));
    let check = goal(&host_heap_goals(&results(recs)), WFSPAN).checks[PROGRAMS_WALL_CHECK].clone();
    assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
    assert!(check.line.contains("0.900 (5 workloads;"), "{}", check.line);
}

#[test]
fn security_checks_cover_every_size_and_every_misuse_case() {
    let mut recs = vec![
        record(
            SECURITY,
            "entropy",
            RANDOMIZED,
            1,
            "entropy_steady_64",
            14.0,
        ),
        record(
            SECURITY,
            "entropy",
            RANDOMIZED,
            1,
            "entropy_steady_1024",
            7.5,
        ),
        // Above 1 KiB: not covered.
        record(
            SECURITY,
            "entropy",
            RANDOMIZED,
            1,
            "entropy_steady_4096",
            2.0,
        ),
        record(SECURITY, "reuse", RANDOMIZED, 1, "reuse_same_64", 0.0),
        record(
            SECURITY,
            "reuse",
            RANDOMIZED,
            1,
            "reuse_same_1024",
            1.0 / 256.0,
        ),
        record(
            SECURITY,
            "misuse",
            RANDOMIZED,
            1,
            "double_free_immediate",
            1.0,
        ),
        record(SECURITY, "misuse", RANDOMIZED, 1, "invalid_free_stack", 1.0),
        // Not a double or invalid free: covered by alloclab's check only.
        record(
            SECURITY,
            "misuse",
            RANDOMIZED,
            1,
            "overwrite_neighbour",
            0.0,
        ),
        // The same case through the C ABI, caught there.
        record(
            SECURITY,
            "misuse-c",
            RANDOMIZED,
            1,
            "overwrite_neighbour",
            1.0,
        ),
    ];
    let goals = host_heap_goals(&results(recs.clone()));
    let checks = goal(&goals, RANDOMIZED).checks;
    assert_eq!(checks[0].verdict, Verdict::Fail);
    assert!(
        checks[0].line.contains("7.50 bits (1024 B"),
        "{}",
        checks[0].line
    );
    assert_eq!(checks[1].verdict, Verdict::Pass, "{}", checks[1].line);
    // The paper's check covers the double and invalid frees; alloclab's every case.
    let find = |checks: &[Check], words: &str| {
        checks
            .iter()
            .find(|c| c.line.contains(words))
            .cloned()
            .unwrap_or_else(|| panic!("no check says {words:?}"))
    };
    let paper = find(&checks, "every double-free and invalid-free case");
    assert_eq!(paper.verdict, Verdict::Pass, "{}", paper.line);
    assert!(
        paper.line.contains("2 of 2 in `misuse` caught"),
        "{}",
        paper.line
    );
    let every = find(&checks, "catches every misuse case");
    assert_eq!(every.verdict, Verdict::Fail, "{}", every.line);
    assert!(
        every.line.contains(
            "2 of 3 in `misuse`, 1 of 1 in `misuse-c` caught in every run; not: \
                 overwrite_neighbour (`misuse`)"
        ),
        "{}",
        every.line
    );

    // A case that crashed in one run (score 0.5) is not caught.
    recs[6].min = 0.5;
    let goals = host_heap_goals(&results(recs));
    let misuse = &find(
        &goal(&goals, RANDOMIZED).checks,
        "every double-free and invalid-free case",
    );
    assert_eq!(misuse.verdict, Verdict::Fail);
    assert!(
        misuse.line.contains("not: invalid_free_stack"),
        "{}",
        misuse.line
    );
}

#[test]
fn too_few_trials_or_a_smoke_test_scale_decide_nothing() {
    let recs = vec![
        record(SECURITY, "entropy", RANDOMIZED, 1, "entropy_steady_64", 4.0),
        record(SECURITY, "entropy", RANDOMIZED, 1, "entropy_ceiling", 4.0),
        record(SECURITY, "reuse", RANDOMIZED, 1, "reuse_same_64", 0.5),
    ];
    let goals = host_heap_goals(&results(recs.clone()));
    let checks = goal(&goals, RANDOMIZED).checks;
    assert_eq!(checks[0].verdict, Verdict::NotHere, "{}", checks[0].line);
    assert!(
        checks[0].line.contains("at most 4.00 bits"),
        "{}",
        checks[0].line
    );
    assert_eq!(checks[1].verdict, Verdict::Fail, "{}", checks[1].line);

    let mut tiny = results(recs);
    tiny.header.parameters.scale = "tiny".into();
    let goals = host_heap_goals(&tiny);
    let reuse = &goal(&goals, RANDOMIZED).checks[1];
    assert_eq!(reuse.verdict, Verdict::NotHere);
    assert!(
        reuse
            .line
            .ends_with("(not decided at scale tiny, a smoke test)"),
        "{}",
        reuse.line
    );
}

#[test]
fn a_run_without_host_heap_suites_has_no_goals() {
    let recs = vec![record(
        "storage",
        "inp-d",
        "alloclab-pmem",
        1,
        "ops_per_s",
        1.0,
    )];
    assert!(host_heap_goals(&results(recs.clone())).is_empty());
    let mut out = String::new();
    crate::targets::markdown(&mut out, &results(recs), "##");
    assert!(out.is_empty());
}

#[test]
fn randomized_footprint_is_a_ratio_above_a_mebibyte_and_a_margin_below() {
    let check = |rows: &[(&str, &str, f64, f64)]| {
        let goals = host_heap_goals(&results(cpu(rows)));
        goal(&goals, RANDOMIZED)
            .checks
            .into_iter()
            .find(|c| c.line.contains("peak footprint <= 1.5x glibc's"))
            .expect("the cpu footprint check")
    };
    // 0.023 MiB against 0.078: 56 KiB above a small footprint, within the margin; 1.4x a
    // large one.
    let ok = check(&[
        ("cache-thrash", SYSTEM, 1.0, 0.023),
        ("cache-thrash", RANDOMIZED, 1.0, 0.078),
        ("mstress", SYSTEM, 1.0, 2.0),
        ("mstress", RANDOMIZED, 1.0, 2.8),
    ]);
    assert_eq!(ok.verdict, Verdict::Pass, "{}", ok.line);
    assert!(ok.line.contains("highest 1.40x (mstress)"), "{}", ok.line);
    assert!(ok.line.contains("+56 KiB (cache-thrash)"), "{}", ok.line);
    // 100 KiB above a small one, and 1.6x a large one: both named.
    let over = check(&[
        ("cache-thrash", SYSTEM, 1.0, 0.023),
        ("cache-thrash", RANDOMIZED, 1.0, 0.023 + 100.0 / 1024.0),
        ("mstress", SYSTEM, 1.0, 2.0),
        ("mstress", RANDOMIZED, 1.0, 3.2),
    ]);
    assert_eq!(over.verdict, Verdict::Fail, "{}", over.line);
    assert!(
        over.line.contains("mstress 1.60x") && over.line.contains("cache-thrash +100 KiB"),
        "{}",
        over.line
    );
}
