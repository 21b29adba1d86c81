//! The names of the metrics that more than one part of the harness reads: the measurement's
//! own (timer overhead, clock read, scheduling policy, a program's output digest), the order
//! the report lists metrics in, and the headline metrics its charts show. A suite's other
//! metrics are named where the suite records them.

/// The metric that measures the share of a timed sample spent reading the clock, in %.
pub const TIMER_OVERHEAD_METRIC: &str = "timer_overhead";
/// The metric that reports the cost of one clock read, in ns, for workloads that time each
/// operation on its own: every figure of theirs contains about one, not subtracted.
pub const CLOCK_READ_METRIC: &str = "clock_read";
/// The metric of the `programs` suite that fingerprints a program's output (its digest as a
/// number): every heap must produce the baseline's.
pub const RESULT_DIGEST_METRIC: &str = "result_digest";
/// The metric of the `realtime` suite that says which share of a run's threads ran under
/// `SCHED_FIFO` (1: all, 0: none; see `workloads::realtime::Sched`).
pub const SCHED_FIFO_METRIC: &str = "sched_fifo";
/// The metric of the `realtime` suite's latency workloads that says how long a cache line
/// took to go between two cores and back just before the run, in ns (see
/// `machine::line_round_trip_ns`): the machine's, not the allocator's.
pub const LINE_ROUND_TRIP_METRIC: &str = "line_round_trip";
/// Metrics that describe the measurement rather than the allocator: no comparison column,
/// chart panel or mean, but notes of their own.
pub const QUALIFIER_METRICS: &[&str] = &[
    TIMER_OVERHEAD_METRIC,
    CLOCK_READ_METRIC,
    SCHED_FIFO_METRIC,
    RESULT_DIGEST_METRIC,
    LINE_ROUND_TRIP_METRIC,
];
/// Metrics listed first, in this order (percentiles ascending, so that a row reads from the
/// median to the worst case); any other metric follows, sorted by name.
pub const METRIC_ORDER: &[&str] = &[
    "time",
    "alloc_p50",
    "alloc_p99",
    "alloc_p99.9",
    "alloc_p99.99",
    "alloc_p99.999",
    "alloc_max",
    "alloc_max_steps",
    "free_p50",
    "free_p99",
    "free_p99.9",
    "free_p99.99",
    "free_p99.999",
    "free_max",
    "free_max_steps",
    "remote_free_p99",
    "remote_free_p99.9",
    "remote_free_p99.99",
    "remote_free_p99.999",
    "remote_free_max",
    "floor_p50",
    "floor_p99",
    "floor_p99.9",
    "floor_p99.99",
    "floor_p99.999",
    "floor_max",
    "freezes",
    "blocked_freezes",
    "blocked_fraction",
    "others_max_during_freeze",
    "others_max_outside_freeze",
    "others_throughput_during_freeze",
    "signals_per_freeze",
    "peak_footprint",
    "failures_total",
    "failures_capacity",
    "failures_fragmentation",
    "failures_rate",
    "heap_reference",
    "heap_zero_failures",
    "cycles_alloc",
    "cycles_free",
    "cycles_defrag_mean",
    "cycles_defrag_max",
    "kernels_per_mcycle",
    "ops_per_s",
    "flushes_per_op",
    "fences_per_op",
    "recovery_ms",
    "recovery_first_alloc_ms",
    CLOCK_READ_METRIC,
    TIMER_OVERHEAD_METRIC,
    SCHED_FIFO_METRIC,
];
/// The metrics a chart (and the README's summary) shows first, in this order, when there are
/// more than [`MAX_CHART_PANELS`](crate::report::MAX_CHART_PANELS); any other metric follows in [`METRIC_ORDER`].
pub const HEADLINE_METRICS: &[&str] = &[
    "time",
    "alloc_p99.999",
    "alloc_max",
    "free_p99.999",
    "free_max",
    "blocked_fraction",
    "others_max_during_freeze",
    "others_throughput_during_freeze",
    "peak_footprint",
    "failures_total",
    "failures_fragmentation",
    "heap_zero_failures",
    "kernels_per_mcycle",
    "ops_per_s",
    "alloc_p99.9",
    "flushes_per_op",
    "recovery_ms",
];

/// What separates a sweep metric's base name from its parameter (`failures_total@8064`).
pub const SWEEP_SEPARATOR: char = '@';

/// The (base metric, parameter) of a sweep point such as `failures_total@8064`; `None` for
/// any other metric.
pub fn sweep_point(metric: &str) -> Option<(&str, f64)> {
    let (base, x) = metric.split_once(SWEEP_SEPARATOR)?;
    x.parse().ok().map(|x| (base, x))
}
