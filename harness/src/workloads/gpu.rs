//! The `gpu` suite: the random-search page allocator of Pham et al. (`alloclab-gpu`) on its
//! three experiments. The CPU model always runs; the CUDA kernels run too when a device is
//! present (`alloclab_gpu::device`), and their figures carry a `cuda_` prefix. Without a
//! device, the report's note for the suite says why ([`device_note`]).
//!
//! Every figure is a sweep point `<metric>@<x>` (see [`crate::report`]), so each workload gets
//! a table with one row per `x` and a line chart.
//!
//! | workload | x | CPU model | CUDA |
//! |---|---|---|---|
//! | `gpu-free-fraction` | A/T in % (10 → 0.5) | `tas`, `was` (round-synchronous simulator, mean of the seeds) beside `tas_form`, `was_form` (the paper's closed forms) and `tas_error` (%, measured − form); headline `tas_at_0.5%`, `tas_error_max` (largest \|error\|) | `cuda_tas`, `cuda_was`, `cuda_alloc_ms`, `cuda_free_ms`; headline `cuda_tas_at_0.5%`, `cuda_alloc_ms_at_0.5%` |
//! | `gpu-sizes` | request size in B (4 → 8192) | `cpu_ns_per_request_10k`, `_100k` (the concurrent `PagePool` on the host's cores, one run per request, claim all then free all); headline `cpu_ns_per_request` (geometric mean) | `cuda_alloc_ms_10k`, `cuda_free_ms_10k`, `_100k` likewise; headline `cuda_total_ms` (sum) |
//! | `gpu-threads` | requesting threads (2^0 → 2^20) | `tas`, `was` (simulator, empty pool of max(4N, 4096) pages); headline `tas_at_max_threads` | `cuda_alloc_ms`, `cuda_free_ms`, `cuda_total_ms`; headline `cuda_total_ms_at_max_threads` (2^20: the papers' headline figure) |
//!
//! A device requester that gives up (after 2^22 probes) means a broken pool: the
//! measurement fails. CUDA's malloc returning NULL is its own behaviour: counted in
//! `cuda_failures`, shown only when non-zero.
//!
//! `gpu-free-fraction` is the paper's main experiment: T = 2^20 pages of 512 B, N = 5000.
//! `gpu-sizes` runs at 10 K and 100 K requesting threads (in the metric names; the harness's
//! "threads" column is 1 for the whole suite), the sizes of Winter et al.'s benchmark; `gpu-threads` allocates and frees one 512 B page per thread.
//!
//! Scales: `tiny` runs T = 2^16 with N = 312 and thread counts up to 2^14 (CI smoke test);
//! `small` (the default) the paper's sizes with 4 seeds, `medium` 16, `large` 64.
//! The paper's CAS queue costs about N · concurrency atomics on the device, so on the device
//! it runs up to [`CAS_QUEUE_MAX_THREADS`] threads; `gpu-queue-ticket` (one `atomicAdd` per
//! dequeue) is the queue baseline beyond that.
//!
//! Setting `ALLOCLAB_NO_CUDA=1` skips the device even where there is one.

use std::time::Instant;

use alloclab_gpu::device::{self, DeviceDesign, DeviceError, Gpu, MallocDesign, PageKernel};
use alloclab_gpu::rng::SplitMix64;
use alloclab_gpu::sim::{self, Design, SimConfig, SweepConfig};
use alloclab_gpu::{DEFAULT_PAGE_SIZE, PagePool};

use crate::peers::{Capability, gpu_allocator};
use crate::report::SWEEP_SEPARATOR;
use crate::results::Sample;
use crate::workloads::{Params, Scale, WorkloadInfo};

/// The paper's page size.
pub const PAGE_BYTES: u32 = DEFAULT_PAGE_SIZE as u32;
/// The free fractions of the main sweep, in %.
pub const FREE_PERCENTS: [f64; 5] = [10.0, 5.0, 2.0, 1.0, 0.5];
/// Request sizes of `gpu-sizes`, in bytes.
pub const SIZES: [u32; 12] = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192];
/// The largest thread count the device runs the CAS queue at.
pub const CAS_QUEUE_MAX_THREADS: usize = 1 << 16;
/// The largest thread count of `gpu-threads` (2^20, the papers' headline point).
pub const MAX_THREADS_LOG2: u32 = 20;

/// The workloads of the `gpu` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        suite: "gpu",
        name: "gpu-free-fraction",
        description: "page requests of N = 5000 threads against 2^20 pages, free fraction 10% -> 0.5%: TAS, WAS against the closed forms (CPU model; CUDA when present)",
        requires: Capability::GpuPagePool,
        default_threads: one,
    },
    WorkloadInfo {
        suite: "gpu",
        name: "gpu-sizes",
        description: "allocate + free of 4 B .. 8 KiB by 10 K and 100 K threads (CPU page pool; CUDA when present)",
        requires: Capability::GpuMalloc,
        default_threads: one,
    },
    WorkloadInfo {
        suite: "gpu",
        name: "gpu-threads",
        description: "allocate + free of one 512 B page by 2^0 .. 2^20 threads (CPU model; CUDA when present)",
        requires: Capability::GpuThreads,
        default_threads: one,
    },
];

/// The sweeps run inside the workload: one "thread" count.
fn one(_cores: usize) -> Vec<usize> {
    vec![1]
}

/// The requesting (device) threads of `gpu-sizes` at `scale`.
fn sizes_requesters(scale: Scale) -> [usize; 2] {
    match scale {
        Scale::Tiny => [1_000, 2_000],
        _ => [10_000, 100_000],
    }
}

fn plain(metric: &str, unit: &str, value: f64) -> Sample {
    Sample {
        metric: metric.to_owned(),
        unit: unit.to_owned(),
        value,
        lower_is_better: true,
    }
}

/// A kernel in which a requester gave up (after millions of probes) found a broken pool.
fn no_give_ups(run: device::KernelRun) -> Result<device::KernelRun, DeviceError> {
    if run.failures > 0 && run.design != MallocDesign::CudaMalloc.name() {
        return Err(DeviceError::BadRequest(format!(
            "{}: {} of {} requesters gave up: the pool had no free page for them",
            run.design, run.failures, run.requesters
        )));
    }
    Ok(run)
}

/// Whether `name` is a workload of this suite.
pub fn is_gpu_workload(name: &str) -> bool {
    WORKLOADS.iter().any(|w| w.name == name)
}

/// What an allocator of this suite is (its registry entry's implementation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuAllocator {
    /// A page design: its CPU model (if it has one) and its device kernel.
    Pages(Option<Design>, DeviceDesign),
    /// The warp-aggregated malloc (CPU: the concurrent page pool).
    WarpMalloc,
    /// CUDA's in-kernel malloc (device only).
    CudaMalloc,
}

fn sample(metric: &str, x: impl core::fmt::Display, unit: &str, value: f64) -> Sample {
    Sample {
        metric: format!("{metric}{SWEEP_SEPARATOR}{x}"),
        unit: unit.to_owned(),
        value,
        lower_is_better: true,
    }
}

/// The device, if there is one and it is wanted; `Err` only for a device that is present
/// but unusable (a compile or driver error): that is a failure to report, not a skip.
fn open_device() -> Result<Option<Gpu>, String> {
    if std::env::var_os("ALLOCLAB_NO_CUDA").is_some_and(|v| v != "0") {
        return Ok(None);
    }
    match Gpu::open() {
        Ok(gpu) => Ok(Some(gpu)),
        Err(DeviceError::Unavailable(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// One line for the report: whether the CUDA kernels ran, and why not.
pub fn device_note() -> String {
    if std::env::var_os("ALLOCLAB_NO_CUDA").is_some_and(|v| v != "0") {
        return "CUDA: not run (ALLOCLAB_NO_CUDA is set); every figure is the CPU model's.".into();
    }
    match device::probe() {
        Ok(info) => format!(
            "CUDA: the kernels ran on {} (figures `cuda_*`, kernel times from CUDA events, \
             each after one warm-up run; the pool was checked after every kernel); the \
             other figures are the CPU model's.",
            info.describe()
        ),
        Err(e) => format!("CUDA: not run ({e}); every figure is the CPU model's."),
    }
}

/// The seeds of one measurement, from the run's seed.
fn seeds(params: &Params) -> Vec<u64> {
    let count = match params.scale {
        Scale::Tiny => 2,
        Scale::Small => 4,
        Scale::Medium => 16,
        Scale::Large => 64,
    };
    let mut rng = SplitMix64::new(params.seed);
    (0..count).map(|_| rng.next_u64()).collect()
}

/// Runs `workload` for `allocator`.
///
/// # Errors
///
/// A one-line message for an unknown name, a simulator or pool error, or a device that is
/// present but fails (a kernel that does not compile, a pool check that fails).
pub fn run(workload: &str, allocator: &str, params: &Params) -> Result<Vec<Sample>, String> {
    let alloc = gpu_allocator(allocator)
        .ok_or_else(|| format!("allocator '{allocator}' is not a gpu design"))?;
    let gpu = open_device()?;
    let gpu = gpu.as_ref();
    let device_err = |e: DeviceError| format!("{workload} on {allocator}: {e}");
    match (workload, alloc) {
        ("gpu-free-fraction", GpuAllocator::Pages(model, design)) => {
            free_fraction(model, design, gpu, params).map_err(device_err)
        }
        ("gpu-sizes", GpuAllocator::WarpMalloc | GpuAllocator::CudaMalloc) => {
            sizes(alloc, gpu, params).map_err(device_err)
        }
        ("gpu-threads", _) => threads(alloc, gpu, params).map_err(device_err),
        _ if is_gpu_workload(workload) => Err(format!(
            "allocator '{allocator}' does not run workload '{workload}'"
        )),
        _ => Err(format!("'{workload}' is not a gpu workload")),
    }
}

/// T and N of the free-fraction sweep at `scale`.
fn sweep_shape(scale: Scale) -> (usize, usize) {
    match scale {
        Scale::Tiny => (1 << 16, 312),
        _ => (1 << 20, 5000),
    }
}

fn free_fraction(
    model: Option<Design>,
    design: DeviceDesign,
    gpu: Option<&Gpu>,
    params: &Params,
) -> Result<Vec<Sample>, DeviceError> {
    let (total_pages, requesters) = sweep_shape(params.scale);
    let seeds = seeds(params);
    let mut samples = Vec::new();
    if let Some(model) = model {
        let config = SweepConfig {
            total_pages,
            requesters,
            free_fractions: FREE_PERCENTS.iter().map(|p| p / 100.0).collect(),
            seeds: seeds.clone(),
            designs: vec![model],
        };
        let mut worst_error: Option<f64> = None;
        for p in sim::sweep(&config)? {
            let x = p.free_fraction * 100.0;
            samples.push(sample("tas", x, "probes", p.tas.mean));
            samples.push(sample("was", x, "probes", p.was.mean));
            if let Some(form) = p.tas_closed_form {
                let error = 100.0 * (p.tas.mean - form) / form;
                samples.push(sample("tas_form", x, "probes", form));
                samples.push(sample("tas_error", x, "%", error));
                worst_error = Some(worst_error.unwrap_or(0.0).max(error.abs()));
            }
            if let Some(form) = p.was_closed_form {
                samples.push(sample("was_form", x, "probes", form));
            }
            if x == FREE_PERCENTS[FREE_PERCENTS.len() - 1] {
                samples.push(plain("tas_at_0.5%", "probes", p.tas.mean));
            }
        }
        if let Some(e) = worst_error {
            samples.push(plain("tas_error_max", "%", e));
        }
    }
    if let Some(gpu) = gpu {
        for percent in FREE_PERCENTS {
            let free_pages = (percent / 100.0 * total_pages as f64).round() as usize;
            let mut runs = Vec::new();
            for &seed in &seeds {
                let k = PageKernel {
                    total_pages,
                    free_pages,
                    requesters,
                    pages_per_request: 1,
                    seed,
                };
                runs.push(warm(|| gpu.page_kernel(design, &k))?);
            }
            let mean = |f: &dyn Fn(&device::KernelRun) -> f64| {
                runs.iter().map(f).sum::<f64>() / runs.len() as f64
            };
            let tas = mean(&|r| r.tas.unwrap_or(f64::NAN));
            let alloc_ms = mean(&|r| r.alloc_ms);
            samples.push(sample("cuda_tas", percent, "probes", tas));
            samples.push(sample(
                "cuda_was",
                percent,
                "probes",
                mean(&|r| r.was.unwrap_or(f64::NAN)),
            ));
            samples.push(sample("cuda_alloc_ms", percent, "ms", alloc_ms));
            samples.push(sample("cuda_free_ms", percent, "ms", mean(&|r| r.free_ms)));
            if percent == FREE_PERCENTS[FREE_PERCENTS.len() - 1] {
                samples.push(plain("cuda_tas_at_0.5%", "probes", tas));
                samples.push(plain("cuda_alloc_ms_at_0.5%", "ms", alloc_ms));
            }
        }
    }
    Ok(samples)
}

/// Runs a device kernel twice and keeps the second: the first launch of a kernel in a
/// process pays for loading it.
fn warm(
    mut f: impl FnMut() -> Result<device::KernelRun, DeviceError>,
) -> Result<device::KernelRun, DeviceError> {
    no_give_ups(f()?)?;
    no_give_ups(f()?)
}

/// `count` requests of `size` bytes.
fn sized(count: usize, size: u32) -> Vec<u32> {
    vec![size; count]
}

fn sizes(
    alloc: GpuAllocator,
    gpu: Option<&Gpu>,
    params: &Params,
) -> Result<Vec<Sample>, DeviceError> {
    let mut samples = Vec::new();
    let mut cpu_ns = Vec::new();
    let mut cuda_ms = 0.0;
    for requests in sizes_requesters(params.scale) {
        let label = format!("{}k", requests / 1000);
        for size in SIZES {
            if alloc == GpuAllocator::WarpMalloc {
                let ns = page_pool_ns_per_request(requests, size, params.seed)
                    .map_err(DeviceError::BadRequest)?;
                samples.push(sample(
                    &format!("cpu_ns_per_request_{label}"),
                    size,
                    "ns",
                    ns,
                ));
                cpu_ns.push(ns);
            }
            if let Some(gpu) = gpu {
                let design = match alloc {
                    GpuAllocator::CudaMalloc => MallocDesign::CudaMalloc,
                    _ => MallocDesign::WarpMalloc,
                };
                let r = warm(|| {
                    gpu.malloc_kernel(design, &sized(requests, size), PAGE_BYTES, params.seed)
                })?;
                samples.push(sample(
                    &format!("cuda_alloc_ms_{label}"),
                    size,
                    "ms",
                    r.alloc_ms,
                ));
                samples.push(sample(
                    &format!("cuda_free_ms_{label}"),
                    size,
                    "ms",
                    r.free_ms,
                ));
                if r.failures > 0 {
                    samples.push(sample(
                        &format!("cuda_failures_{label}"),
                        size,
                        "requests",
                        r.failures as f64,
                    ));
                }
                cuda_ms += r.alloc_ms + r.free_ms;
            }
        }
    }
    if !cpu_ns.is_empty() {
        let log_mean = cpu_ns.iter().map(|v| v.ln()).sum::<f64>() / cpu_ns.len() as f64;
        samples.push(plain("cpu_ns_per_request", "ns", log_mean.exp()));
    }
    if gpu.is_some() {
        samples.push(plain("cuda_total_ms", "ms", cuda_ms));
    }
    Ok(samples)
}

/// The concurrent CPU page pool: every core's thread claims its share of `requests` runs
/// of ceil(size / 512) pages, then frees them; returns wall ns per request (claim + free).
///
/// # Errors
///
/// A message if a claim fails or the pool is not empty afterwards (the pool is wrong).
fn page_pool_ns_per_request(requests: usize, size: u32, seed: u64) -> Result<f64, String> {
    let pages_each = size.div_ceil(PAGE_BYTES) as usize;
    let total = (4 * requests * pages_each).max(1 << 12).div_ceil(32) * 32;
    let pool = PagePool::with_default_page_size(total).map_err(|e| e.to_string())?;
    let workers = crate::machine::logical_cores().clamp(1, 8);
    let started = Instant::now();
    let failed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let pool = &pool;
                s.spawn(move || {
                    let mut rng = SplitMix64::new(seed ^ (w as u64).wrapping_mul(0x9e37_79b9));
                    let share = requests / workers + usize::from(w < requests % workers);
                    let mut held = Vec::with_capacity(share);
                    for _ in 0..share {
                        match pool.claim(pages_each, &mut rng) {
                            Some(first) => held.push(first),
                            None => return true,
                        }
                    }
                    held.into_iter()
                        .any(|first| pool.release(first, pages_each).is_err())
                })
            })
            .collect();
        handles.into_iter().any(|h| h.join().unwrap_or(true))
    });
    let elapsed = started.elapsed();
    if failed || pool.pages_in_use() != 0 {
        return Err(format!(
            "the CPU page pool lost track of {size} B requests ({} pages still in use)",
            pool.pages_in_use()
        ));
    }
    Ok(elapsed.as_nanos() as f64 / requests.max(1) as f64)
}

fn threads(
    alloc: GpuAllocator,
    gpu: Option<&Gpu>,
    params: &Params,
) -> Result<Vec<Sample>, DeviceError> {
    let max_log2 = match params.scale {
        Scale::Tiny => 14,
        _ => MAX_THREADS_LOG2,
    };
    let mut samples = Vec::new();
    for log2 in 0..=max_log2 {
        let n = 1usize << log2;
        let total_pages = (4 * n).max(1 << 12);
        if let GpuAllocator::Pages(Some(model), _) = alloc {
            let seeds = seeds(params);
            let (mut tas, mut was) = (0.0, 0.0);
            for &seed in &seeds {
                let r = sim::simulate(
                    model,
                    &SimConfig {
                        total_pages,
                        free_pages: total_pages,
                        requesters: n,
                        seed,
                    },
                )?;
                tas += r.tas / seeds.len() as f64;
                was += r.was / seeds.len() as f64;
            }
            samples.push(sample("tas", n, "probes", tas));
            samples.push(sample("was", n, "probes", was));
            if log2 == max_log2 {
                samples.push(plain("tas_at_max_threads", "probes", tas));
            }
        }
        let Some(gpu) = gpu else { continue };
        let run = match alloc {
            GpuAllocator::Pages(_, DeviceDesign::Queue) if n > CAS_QUEUE_MAX_THREADS => continue,
            GpuAllocator::Pages(_, design) => {
                let k = PageKernel {
                    total_pages,
                    free_pages: total_pages,
                    requesters: n,
                    pages_per_request: 1,
                    seed: params.seed,
                };
                warm(|| gpu.page_kernel(design, &k))?
            }
            GpuAllocator::WarpMalloc => warm(|| {
                gpu.malloc_kernel(
                    MallocDesign::WarpMalloc,
                    &sized(n, PAGE_BYTES),
                    PAGE_BYTES,
                    params.seed,
                )
            })?,
            GpuAllocator::CudaMalloc => warm(|| {
                gpu.malloc_kernel(
                    MallocDesign::CudaMalloc,
                    &sized(n, PAGE_BYTES),
                    PAGE_BYTES,
                    params.seed,
                )
            })?,
        };
        samples.push(sample("cuda_alloc_ms", n, "ms", run.alloc_ms));
        samples.push(sample("cuda_free_ms", n, "ms", run.free_ms));
        samples.push(sample("cuda_total_ms", n, "ms", run.alloc_ms + run.free_ms));
        if run.failures > 0 {
            samples.push(sample("cuda_failures", n, "requests", run.failures as f64));
        }
        if log2 == max_log2 {
            samples.push(plain(
                "cuda_total_ms_at_max_threads",
                "ms",
                run.alloc_ms + run.free_ms,
            ));
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sweep_point;

    fn params(threads: usize) -> Params {
        Params {
            threads,
            scale: Scale::Tiny,
            seed: 9,
        }
    }

    fn value(samples: &[Sample], metric: &str) -> f64 {
        samples
            .iter()
            .find(|s| s.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} in {samples:?}"))
            .value
    }

    #[test]
    fn the_free_fraction_sweep_reports_every_point_beside_its_closed_form() {
        let s = run("gpu-free-fraction", "gpu-rw", &params(1)).unwrap();
        for p in FREE_PERCENTS {
            let tas = value(&s, &format!("tas@{p}"));
            let form = value(&s, &format!("tas_form@{p}"));
            assert!(
                tas >= 1.0 && (tas - form).abs() / form < 0.15,
                "{p}: {tas} vs {form}"
            );
            assert!(value(&s, &format!("was@{p}")) >= tas);
        }
        assert!(
            s.iter()
                .filter(|x| x.metric.contains(SWEEP_SEPARATOR))
                .all(|x| sweep_point(&x.metric).is_some())
        );
        assert!(value(&s, "tas_error_max") < 15.0);
        assert_eq!(value(&s, "tas_at_0.5%"), value(&s, "tas@0.5"));
        // Fewer free pages cost more probes.
        assert!(value(&s, "tas@0.5") > value(&s, "tas@10"));
    }

    #[test]
    fn the_queue_waits_its_turn_and_corw_barely_probes() {
        let q = run("gpu-threads", "gpu-queue", &params(1)).unwrap();
        let c = run("gpu-threads", "gpu-corw", &params(1)).unwrap();
        let n = 1 << 14;
        assert_eq!(value(&q, &format!("tas@{n}")), (n as f64 + 1.0) / 2.0);
        assert!(value(&c, &format!("tas@{n}")) < 2.0);
        assert!(value(&c, "tas@1") == 1.0);
    }

    #[test]
    fn the_cpu_page_pool_serves_every_size_and_ends_empty() {
        let s = run("gpu-sizes", "gpu-warp-malloc", &params(1)).unwrap();
        for size in SIZES {
            assert!(value(&s, &format!("cpu_ns_per_request_1k@{size}")) > 0.0);
            assert!(value(&s, &format!("cpu_ns_per_request_2k@{size}")) > 0.0);
        }
    }

    #[test]
    fn names_outside_the_suite_are_refused_with_a_message() {
        assert!(run("gpu-sizes", "gpu-rw", &params(1)).is_err());
        assert!(run("gpu-threads", "system", &params(1)).is_err());
        assert!(run("larson", "gpu-rw", &params(1)).is_err());
    }

    #[test]
    fn the_device_note_is_one_line_that_says_whether_cuda_ran() {
        let note = device_note();
        assert!(note.starts_with("CUDA: ") && !note.contains('\n'), "{note}");
    }
}
