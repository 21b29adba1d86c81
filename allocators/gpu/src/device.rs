//! The device side: the CUDA kernels of `kernels/`, compiled at run time with NVRTC for
//! the device's architecture and launched through cudarc, with every kernel's result checked
//! on the host ([`crate::check`]).
//!
//! Nothing here is needed to build: with the `cuda` feature (on by default) cudarc loads
//! `libcuda` and `libnvrtc` when they are first used, and [`probe`] / [`Gpu::open`] look for
//! them first (by `dlopen`, inside `catch_unwind`, because cudarc's loader panics on a missing
//! library), so a machine without a driver gets [`DeviceError::Unavailable`] with a one-line
//! reason, never a panic. Without the feature the same functions say so.
//!
//! **Runs.** [`Gpu::page_kernel`] starts a pool of T pages with A free (the same seeded free
//! subset as the CPU model, [`crate::sim::random_occupancy`]), launches one allocation
//! kernel of N requesters, checks the pool ([`crate::check::check_claims`]), launches the
//! free kernel and checks that the pool is back where it started. It reports TAS and WAS
//! from the per-thread probe counts the kernel wrote, and the kernel times measured with CUDA
//! events. [`Gpu::malloc_kernel`] does the same for request sizes in bytes, with the
//! warp-aggregated malloc or CUDA's in-kernel malloc (whose blocks are checked for overlap).

use crate::check::CheckError;
use crate::sim::{SimError, WARP_LANES};

/// A CUDA C file of `kernels/` and the kernels it defines.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// The file name under `kernels/`.
    pub file: &'static str,
    /// Its text (embedded at build time; compiled at run time).
    pub source: &'static str,
    /// The `extern "C"` kernels it defines.
    pub kernels: &'static [&'static str],
}

/// Every kernel source, embedded.
pub const KERNEL_SOURCES: &[KernelSource] = &[
    KernelSource {
        file: "page_alloc.cu",
        source: include_str!("../kernels/page_alloc.cu"),
        kernels: &[
            "rw_alloc",
            "crw_alloc",
            "rw_free",
            "rwbm_alloc",
            "rwbm_free",
            "corw_alloc",
            "corw_free",
            "warp_malloc",
            "warp_free",
        ],
    },
    KernelSource {
        file: "queue.cu",
        source: include_str!("../kernels/queue.cu"),
        kernels: &[
            "queue_init",
            "queue_alloc_cas",
            "queue_alloc_ticket",
            "queue_free",
        ],
    },
    KernelSource {
        file: "cuda_malloc.cu",
        source: include_str!("../kernels/cuda_malloc.cu"),
        kernels: &["cuda_malloc_alloc", "cuda_malloc_free"],
    },
];

/// What a kernel writes for a requester that gave up.
pub const NO_PAGE: u32 = u32::MAX;
/// Threads per block of every launch (a multiple of the 32 lanes of a warp).
pub const BLOCK_THREADS: u32 = 256;
/// The most requesters one kernel takes (2^24; the paper's largest run is 2^20).
pub const MAX_REQUESTERS: usize = 1 << 24;
/// The most pages a device pool has (page numbers are `u32`, [`NO_PAGE`] excluded).
pub const MAX_DEVICE_PAGES: usize = 1 << 31;
/// The device heap given to CUDA's in-kernel malloc (its default is 8 MB): enough for 2^20
/// requests of 2 KiB, or 100 K of 8 KiB with its own overhead.
pub const CUDA_MALLOC_HEAP_BYTES: usize = 4 << 30;

/// The page designs the device runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceDesign {
    /// The paper's queue: a CAS retry loop on the head (probes = CAS attempts).
    Queue,
    /// A stronger queue: one `atomicAdd` ticket per dequeue.
    QueueTicket,
    /// One word per page, random pages.
    Rw,
    /// One bit per page, random words; runs of 1..=32 pages.
    RwBm,
    /// The page after the last one first, then as RW.
    Crw,
    /// A warp probes 32 consecutive words per step and shares what it found.
    CoRw,
}

impl DeviceDesign {
    /// Every design, baselines first.
    pub const ALL: [DeviceDesign; 6] = [
        DeviceDesign::Queue,
        DeviceDesign::QueueTicket,
        DeviceDesign::Rw,
        DeviceDesign::RwBm,
        DeviceDesign::Crw,
        DeviceDesign::CoRw,
    ];

    /// The paper's name (`queue-ticket` for the stronger queue).
    pub fn name(self) -> &'static str {
        match self {
            DeviceDesign::Queue => "queue",
            DeviceDesign::QueueTicket => "queue-ticket",
            DeviceDesign::Rw => "RW",
            DeviceDesign::RwBm => "RW-BM",
            DeviceDesign::Crw => "CRW",
            DeviceDesign::CoRw => "CoRW",
        }
    }
}

/// The byte-sized allocators the device runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MallocDesign {
    /// The warp-aggregated malloc over the RW-BM bitmap (`warp_malloc`).
    WarpMalloc,
    /// CUDA's in-kernel `malloc`/`free`.
    CudaMalloc,
}

impl MallocDesign {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            MallocDesign::WarpMalloc => "warp-malloc",
            MallocDesign::CudaMalloc => "cuda-malloc",
        }
    }
}

/// One page kernel: N requesters of `pages_per_request` pages against T pages, A free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageKernel {
    /// T (a multiple of 32, at most [`MAX_DEVICE_PAGES`]).
    pub total_pages: usize,
    /// A.
    pub free_pages: usize,
    /// N (1 ..= [`MAX_REQUESTERS`]).
    pub requesters: usize,
    /// Pages per request: 1, or up to 32 for RW-BM.
    pub pages_per_request: u32,
    /// Fixes the free subset and every random probe.
    pub seed: u64,
}

impl PageKernel {
    /// Whether `design` can run this kernel.
    ///
    /// # Errors
    ///
    /// [`DeviceError::BadRequest`] saying what is out of range.
    pub fn validate(&self, design: DeviceDesign) -> Result<(), DeviceError> {
        let bad = |m: String| Err(DeviceError::BadRequest(m));
        if self.total_pages == 0
            || !self.total_pages.is_multiple_of(crate::sim::WORD_PAGES)
            || self.total_pages > MAX_DEVICE_PAGES
        {
            return bad(format!(
                "{} pages: a device pool has a positive multiple of 32 pages, at most 2^31",
                self.total_pages
            ));
        }
        if self.requesters == 0 || self.requesters > MAX_REQUESTERS {
            return bad(format!(
                "{} requesters: a kernel takes 1 to 2^24",
                self.requesters
            ));
        }
        let multi_ok = design == DeviceDesign::RwBm;
        if self.pages_per_request == 0
            || self.pages_per_request > 32
            || (!multi_ok && self.pages_per_request != 1)
        {
            return bad(format!(
                "{} pages per request: {} takes 1{}",
                self.pages_per_request,
                design.name(),
                if multi_ok { " to 32" } else { "" }
            ));
        }
        let needed = self.requesters * self.pages_per_request as usize;
        if self.free_pages > self.total_pages || needed > self.free_pages {
            return bad(format!(
                "{} requesters x {} pages need at least that many of the {} free pages (of {})",
                self.requesters, self.pages_per_request, self.free_pages, self.total_pages
            ));
        }
        Ok(())
    }
}

/// What one device kernel pair (allocate, then free) measured.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRun {
    /// The design's name.
    pub design: &'static str,
    /// N.
    pub requesters: usize,
    /// Mean probes per requester (`None` for CUDA's malloc, which does not say).
    pub tas: Option<f64>,
    /// Mean over warps of the largest probe count (`None` for CUDA's malloc).
    pub was: Option<f64>,
    /// The allocation kernel's time, from CUDA events.
    pub alloc_ms: f64,
    /// The free kernel's time.
    pub free_ms: f64,
    /// Requesters that gave up (or got NULL from CUDA's malloc).
    pub failures: usize,
}

/// The device as [`probe`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability (9, 0 for an H100/H200).
    pub compute_capability: (i32, i32),
    /// The driver's CUDA version, as `cuDriverGetVersion` gives it (13000 for 13.0).
    pub driver_version: i32,
    /// NVRTC's version.
    pub nvrtc_version: (i32, i32),
}

impl DeviceInfo {
    /// `NVIDIA H200 (sm_90, driver CUDA 13.0, NVRTC 13.0)`.
    pub fn describe(&self) -> String {
        format!(
            "{} (sm_{}{}, driver CUDA {}.{}, NVRTC {}.{})",
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.driver_version / 1000,
            self.driver_version % 1000 / 10,
            self.nvrtc_version.0,
            self.nvrtc_version.1
        )
    }
}

/// Why a device run could not be done, on one line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// No usable device: no driver library, no NVRTC, no device, or built without `cuda`.
    Unavailable(String),
    /// NVRTC refused a kernel source.
    Compile {
        /// The file under `kernels/`.
        file: &'static str,
        /// NVRTC's log (may span lines; [`Display`](core::fmt::Display) keeps the first).
        log: String,
    },
    /// A driver call failed.
    Driver {
        /// What was being done.
        during: String,
        /// The driver's error.
        message: String,
    },
    /// The host check after a kernel failed: the allocator is wrong.
    Check {
        /// The design.
        design: &'static str,
        /// After which kernel.
        after: &'static str,
        /// What was wrong.
        error: CheckError,
    },
    /// The parameters are out of range.
    BadRequest(String),
}

impl core::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DeviceError::Unavailable(reason) => write!(f, "no CUDA device: {reason}"),
            DeviceError::Compile { file, log } => {
                let first = log
                    .lines()
                    .find(|l| l.contains("error"))
                    .or_else(|| log.lines().next())
                    .unwrap_or("");
                write!(f, "NVRTC could not compile kernels/{file}: {first}")
            }
            DeviceError::Driver { during, message } => {
                write!(f, "CUDA driver error while {during}: {message}")
            }
            DeviceError::Check {
                design,
                after,
                error,
            } => write!(f, "{design}: pool check after the {after} kernel: {error}"),
            DeviceError::BadRequest(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DeviceError {}

impl From<SimError> for DeviceError {
    fn from(e: SimError) -> Self {
        DeviceError::BadRequest(e.to_string())
    }
}

/// TAS and WAS of per-requester probe counts, requesters in warps of 32 in order.
pub fn tas_and_was(probes: &[u32]) -> (f64, f64) {
    if probes.is_empty() {
        return (0.0, 0.0);
    }
    let tas = probes.iter().map(|&p| f64::from(p)).sum::<f64>() / probes.len() as f64;
    let warps = probes.chunks(WARP_LANES);
    let count = warps.len() as f64;
    let was = warps
        .map(|w| f64::from(w.iter().copied().max().unwrap_or(0)))
        .sum::<f64>()
        / count;
    (tas, was)
}

/// Checks request sizes for [`Gpu::malloc_kernel`]: each 1 ..= 32 pages' worth of bytes
/// (16 KiB with 512 B pages).
///
/// # Errors
///
/// [`DeviceError::BadRequest`] naming the first bad size.
pub fn validate_sizes(sizes: &[u32], page_bytes: u32) -> Result<(), DeviceError> {
    if sizes.is_empty() || sizes.len() > MAX_REQUESTERS {
        return Err(DeviceError::BadRequest(format!(
            "{} requests: a kernel takes 1 to 2^24",
            sizes.len()
        )));
    }
    if !page_bytes.is_power_of_two() || page_bytes < 16 {
        return Err(DeviceError::BadRequest(format!(
            "page size {page_bytes}: a power of two of at least 16 bytes"
        )));
    }
    let max = u64::from(page_bytes) * 32;
    if let Some((i, &s)) = sizes
        .iter()
        .enumerate()
        .find(|&(_, &s)| s == 0 || u64::from(s) > max)
    {
        return Err(DeviceError::BadRequest(format!(
            "request {i} asks for {s} bytes: sizes are 1 to {max} (32 pages)"
        )));
    }
    Ok(())
}

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub use cuda::{Gpu, compile_kernels, nvrtc_version, preload_nvrtc, probe};

#[cfg(not(feature = "cuda"))]
mod no_cuda {
    use super::{DeviceError, DeviceInfo};

    const REASON: &str = "alloclab-gpu was built without its `cuda` feature";

    /// Always [`DeviceError::Unavailable`]: built without the `cuda` feature.
    ///
    /// # Errors
    ///
    /// Always.
    pub fn probe() -> Result<DeviceInfo, DeviceError> {
        Err(DeviceError::Unavailable(REASON.into()))
    }

    /// Always [`DeviceError::Unavailable`]: built without the `cuda` feature.
    ///
    /// # Errors
    ///
    /// Always.
    pub fn nvrtc_version() -> Result<(i32, i32), DeviceError> {
        Err(DeviceError::Unavailable(REASON.into()))
    }
}
#[cfg(not(feature = "cuda"))]
pub use no_cuda::{nvrtc_version, probe};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_named_is_defined_extern_c_in_its_source() {
        for src in KERNEL_SOURCES {
            for k in src.kernels {
                assert!(
                    src.source
                        .contains(&format!("extern \"C\" __global__ void {k}(")),
                    "{} lacks {k}",
                    src.file
                );
            }
            assert!(!src.source.contains("#include"), "{} includes", src.file);
        }
    }

    #[test]
    fn tas_is_the_mean_and_was_the_mean_of_warp_maxima() {
        let mut probes = vec![1u32; 64];
        probes[5] = 9;
        let (tas, was) = tas_and_was(&probes);
        assert!((tas - 72.0 / 64.0).abs() < 1e-12);
        assert!((was - 5.0).abs() < 1e-12);
    }

    #[test]
    fn out_of_range_kernels_and_sizes_are_refused_with_a_reason() {
        let ok = PageKernel {
            total_pages: 1 << 10,
            free_pages: 100,
            requesters: 50,
            pages_per_request: 1,
            seed: 1,
        };
        assert_eq!(ok.validate(DeviceDesign::CoRw), Ok(()));
        for (k, d) in [
            (
                PageKernel {
                    total_pages: 1000,
                    ..ok
                },
                DeviceDesign::Rw,
            ),
            (
                PageKernel {
                    requesters: 0,
                    ..ok
                },
                DeviceDesign::Rw,
            ),
            (
                PageKernel {
                    requesters: 101,
                    ..ok
                },
                DeviceDesign::Rw,
            ),
            (
                PageKernel {
                    pages_per_request: 2,
                    ..ok
                },
                DeviceDesign::CoRw,
            ),
            (
                PageKernel {
                    pages_per_request: 33,
                    ..ok
                },
                DeviceDesign::RwBm,
            ),
            (
                PageKernel {
                    pages_per_request: 3,
                    ..ok
                },
                DeviceDesign::RwBm,
            ),
        ] {
            let e = k.validate(d).unwrap_err();
            assert!(matches!(e, DeviceError::BadRequest(_)), "{k:?}");
            assert!(!e.to_string().contains('\n'));
        }
        assert_eq!(validate_sizes(&[4, 8192, 16384], 512), Ok(()));
        assert!(validate_sizes(&[4, 0], 512).is_err());
        assert!(validate_sizes(&[16385], 512).is_err());
        assert!(validate_sizes(&[], 512).is_err());
        assert!(validate_sizes(&[4], 500).is_err());
    }

    #[test]
    fn probing_without_a_usable_device_is_an_error_not_a_panic() {
        // On a GPU machine this finds the device; anywhere else it must say why, on one line.
        match probe() {
            Ok(info) => {
                assert!(!info.name.is_empty());
                assert!(info.compute_capability.0 >= 3, "{info:?}");
                println!("device: {}", info.describe());
            }
            Err(e) => {
                let line = e.to_string();
                assert!(matches!(e, DeviceError::Unavailable(_)), "{line}");
                assert!(!line.contains('\n') && line.len() > 20, "{line}");
                println!("skipped the device part: {line}");
            }
        }
    }
}
