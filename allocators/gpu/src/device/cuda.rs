//! The cudarc side of [`crate::device`] (feature `cuda`).
//!
//! cudarc (features `driver`, `nvrtc`, `dynamic-loading`) resolves every CUDA symbol from
//! `libcuda` / `libnvrtc` the first time it is used and panics if the library is missing.
//! Every entry point here therefore looks for the library first (`is_culib_present`, a
//! `dlopen`) and runs the cudarc calls inside `catch_unwind`, turning a panic into
//! [`DeviceError::Unavailable`] or [`DeviceError::Driver`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUlimit};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};

use super::{
    BLOCK_THREADS, CUDA_MALLOC_HEAP_BYTES, DeviceDesign, DeviceError, DeviceInfo, KERNEL_SOURCES,
    KernelRun, KernelSource, MallocDesign, NO_PAGE, PageKernel, tas_and_was, validate_sizes,
};
use crate::check::{
    self, bitmap_of_free_list, bitmap_of_page_words, check_claims, check_disjoint_addresses,
    check_restored, free_pages_of,
};
use crate::rng::SplitMix64;
use crate::sim::random_occupancy;

/// Probes before a requester gives up: far beyond what any run of the suite needs (the
/// paper's worst point, RW at 0.5 % free, averages 644), so a give-up means a broken pool,
/// not bad luck, and a broken kernel ends instead of hanging.
const MAX_PROBES: u32 = 1 << 22;

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    let text = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "unknown panic".to_owned());
    text.lines().next().unwrap_or("").to_owned()
}

/// Runs cudarc calls, turning a panic (a library or symbol cudarc could not load) into an
/// error.
fn guarded<T>(during: &str, f: impl FnOnce() -> Result<T, DeviceError>) -> Result<T, DeviceError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(DeviceError::Driver {
            during: during.to_owned(),
            message: panic_message(&*p),
        })
    })
}

fn driver(during: &str) -> impl FnOnce(DriverError) -> DeviceError + '_ {
    move |e| DeviceError::Driver {
        during: during.to_owned(),
        message: format!("{e:?}"),
    }
}

/// Opens `path` (a `libnvrtc.so.*` outside the loader's search path, such as the one of the
/// `nvidia-cuda-nvrtc-cu12` wheel) with `RTLD_GLOBAL`, so that cudarc's later `dlopen` by
/// name finds it already loaded (glibc matches loaded libraries by soname).
///
/// # Errors
///
/// [`DeviceError::Unavailable`] if it cannot be opened.
pub fn preload_nvrtc(path: &std::path::Path) -> Result<(), DeviceError> {
    // SAFETY: loading a library runs its initialisers; libnvrtc's only set up its own
    // state. The handle is leaked on purpose: the library must stay loaded for cudarc.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    }
    .map_err(|e| DeviceError::Unavailable(format!("cannot load {}: {e}", path.display())))?;
    std::mem::forget(lib);
    Ok(())
}

fn nvrtc_present() -> Result<(), DeviceError> {
    if let Ok(path) = std::env::var("ALLOCLAB_NVRTC") {
        preload_nvrtc(std::path::Path::new(&path))?;
    }
    // SAFETY: `is_culib_present` only tries to dlopen the candidate names; see
    // `preload_nvrtc` for what loading libnvrtc does.
    let present = catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() });
    if !matches!(present, Ok(true)) {
        return Err(DeviceError::Unavailable(
            "libnvrtc not found (install the CUDA toolkit's NVRTC, or pip's \
             nvidia-cuda-nvrtc-cu12 and set ALLOCLAB_NVRTC to its libnvrtc.so.12)"
                .into(),
        ));
    }
    Ok(())
}

/// NVRTC's version.
///
/// # Errors
///
/// [`DeviceError::Unavailable`] without libnvrtc.
pub fn nvrtc_version() -> Result<(i32, i32), DeviceError> {
    nvrtc_present()?;
    guarded("asking NVRTC its version", || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion writes two ints through the pointers, which are valid.
        let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        if status != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(DeviceError::Unavailable(format!(
                "nvrtcVersion failed: {status:?}"
            )));
        }
        Ok((major, minor))
    })
}

/// Compiles one source to PTX for `arch` (`compute_90`).
fn compile(src: &KernelSource, arch: &str) -> Result<Ptx, DeviceError> {
    let options = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()],
        name: Some(src.file.into()),
        ..Default::default()
    };
    compile_ptx_with_opts(src.source, options).map_err(|e| match e {
        CompileError::CompileError { log, .. } => DeviceError::Compile {
            file: src.file,
            log: log.to_string_lossy().into_owned(),
        },
        other => DeviceError::Compile {
            file: src.file,
            log: format!("{other:?}"),
        },
    })
}

/// Compiles every source of `kernels/` to PTX for the virtual architecture `arch`
/// (`compute_90`); needs libnvrtc, not a device. Returns (file, PTX text) pairs.
///
/// # Errors
///
/// [`DeviceError::Unavailable`] without libnvrtc, [`DeviceError::Compile`] with NVRTC's log.
pub fn compile_kernels(arch: &str) -> Result<Vec<(&'static str, String)>, DeviceError> {
    nvrtc_present()?;
    guarded("compiling the kernels", || {
        KERNEL_SOURCES
            .iter()
            .map(|src| Ok((src.file, compile(src, arch)?.to_src())))
            .collect()
    })
}

fn driver_present() -> Result<(), DeviceError> {
    // SAFETY: `is_culib_present` only tries to dlopen libcuda's candidate names; libcuda's
    // initialisers set up the driver's own state.
    let present = catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() });
    if !matches!(present, Ok(true)) {
        return Err(DeviceError::Unavailable(
            "libcuda.so not found (no NVIDIA driver on this machine)".into(),
        ));
    }
    Ok(())
}

fn open_context() -> Result<(Arc<CudaContext>, DeviceInfo), DeviceError> {
    let count = CudaContext::device_count().map_err(|e| {
        DeviceError::Unavailable(format!("the driver found no usable device ({e:?})"))
    })?;
    if count < 1 {
        return Err(DeviceError::Unavailable(
            "the driver reports no CUDA device".into(),
        ));
    }
    let ctx = CudaContext::new(0).map_err(driver("creating a context on device 0"))?;
    let name = ctx.name().map_err(driver("reading the device name"))?;
    let compute_capability = ctx
        .compute_capability()
        .map_err(driver("reading the compute capability"))?;
    let mut driver_version = 0;
    // SAFETY: cuDriverGetVersion writes one int through a valid pointer; cuInit has run
    // (device_count above).
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(driver("reading the driver version"))?;
    let nvrtc = nvrtc_version()?;
    Ok((
        ctx,
        DeviceInfo {
            name,
            compute_capability,
            driver_version,
            nvrtc_version: nvrtc,
        },
    ))
}

/// Finds device 0 and NVRTC without compiling anything.
///
/// # Errors
///
/// [`DeviceError::Unavailable`] with the reason (no libcuda, no libnvrtc, no device).
pub fn probe() -> Result<DeviceInfo, DeviceError> {
    driver_present()?;
    nvrtc_present()?;
    guarded("opening device 0", open_context).map(|(_, info)| info)
}

/// Device 0 with every kernel compiled and loaded.
pub struct Gpu {
    // Kept for the context's lifetime being obvious; the stream and modules hold it too.
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    functions: Vec<(&'static str, CudaFunction)>,
    _modules: Vec<Arc<CudaModule>>,
}

impl core::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish()
    }
}

fn grid(threads: usize) -> LaunchConfig {
    let blocks = threads.div_ceil(BLOCK_THREADS as usize).max(1) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A kernel timed by two CUDA events around its launch on `stream`.
fn timed(
    stream: &Arc<CudaStream>,
    what: &str,
    launch: impl FnOnce() -> Result<(), DriverError>,
) -> Result<f64, DeviceError> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = stream.record_event(flags).map_err(driver(what))?;
    launch().map_err(driver(what))?;
    let end = stream.record_event(flags).map_err(driver(what))?;
    let ms = start.elapsed_ms(&end).map_err(driver(what))?;
    stream.synchronize().map_err(driver(what))?;
    Ok(f64::from(ms))
}

impl Gpu {
    /// Opens device 0, raises CUDA's malloc heap to [`CUDA_MALLOC_HEAP_BYTES`] (before any
    /// kernel runs: the limit is fixed after the first launch that uses malloc), and compiles
    /// every kernel for the device's architecture.
    ///
    /// # Errors
    ///
    /// [`DeviceError::Unavailable`] without a device, [`DeviceError::Compile`] or
    /// [`DeviceError::Driver`] otherwise.
    pub fn open() -> Result<Gpu, DeviceError> {
        driver_present()?;
        nvrtc_present()?;
        guarded("opening device 0", || {
            let (ctx, info) = open_context()?;
            ctx.set_limit(CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, CUDA_MALLOC_HEAP_BYTES)
                .map_err(driver("raising CUDA's malloc heap"))?;
            let (major, minor) = info.compute_capability;
            let arch = format!("compute_{major}{minor}");
            let mut functions = Vec::new();
            let mut modules = Vec::new();
            for src in KERNEL_SOURCES {
                let module = ctx
                    .load_module(compile(src, &arch)?)
                    .map_err(driver("loading the PTX (is NVRTC newer than the driver?)"))?;
                for &k in src.kernels {
                    functions.push((k, module.load_function(k).map_err(driver(k))?));
                }
                modules.push(module);
            }
            let stream = ctx.default_stream();
            Ok(Gpu {
                _ctx: ctx,
                stream,
                info,
                functions,
                _modules: modules,
            })
        })
    }

    /// The device.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn function(&self, name: &str) -> &CudaFunction {
        &self
            .functions
            .iter()
            .find(|(n, _)| *n == name)
            .expect("every kernel of KERNEL_SOURCES is loaded")
            .1
    }

    fn upload(&self, what: &str, data: &[u32]) -> Result<CudaSlice<u32>, DeviceError> {
        self.stream.clone_htod(data).map_err(driver(what))
    }

    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, DeviceError> {
        self.stream
            .alloc_zeros(len.max(1))
            .map_err(driver("allocating device memory"))
    }

    fn download<T: cudarc::driver::DeviceRepr>(
        &self,
        what: &str,
        data: &CudaSlice<T>,
    ) -> Result<Vec<T>, DeviceError> {
        self.stream.clone_dtoh(data).map_err(driver(what))
    }

    /// Runs one allocation kernel of `design` and its free kernel, checking the pool after
    /// each (see the module docs of [`crate::device`]).
    ///
    /// # Errors
    ///
    /// [`DeviceError::BadRequest`] for parameters out of range, [`DeviceError::Check`] if the
    /// pool is wrong after a kernel, [`DeviceError::Driver`] if a call fails.
    pub fn page_kernel(
        &self,
        design: DeviceDesign,
        kernel: &PageKernel,
    ) -> Result<KernelRun, DeviceError> {
        kernel.validate(design)?;
        guarded("running a page kernel", || {
            self.page_kernel_unguarded(design, kernel)
        })
    }

    fn page_kernel_unguarded(
        &self,
        design: DeviceDesign,
        k: &PageKernel,
    ) -> Result<KernelRun, DeviceError> {
        let before = random_occupancy(k.total_pages, k.free_pages, k.seed)?;
        let n = k.requesters as u32;
        let total = k.total_pages as u32;
        let words = before.len() as u32;
        let ppr = k.pages_per_request;
        let seed = k.seed ^ 0x5eed_0fde_71ce;
        let cfg = grid(k.requesters);
        let s = &self.stream;
        let mut out_page = self.zeros::<u32>(k.requesters)?;
        let mut out_probes = self.zeros::<u32>(k.requesters)?;
        let fail = |after: &'static str| {
            move |error| DeviceError::Check {
                design: design.name(),
                after,
                error,
            }
        };
        let (alloc_ms, free_ms, pages);
        match design {
            DeviceDesign::Rw | DeviceDesign::Crw => {
                let page_words: Vec<u32> = (0..k.total_pages)
                    .map(|p| (before[p / 32] >> (p % 32)) & 1)
                    .collect();
                let mut pool = self.upload("uploading the pool", &page_words)?;
                let mut rng = SplitMix64::new(k.seed ^ 0xc1u64);
                let last: Vec<u32> = (0..k.requesters)
                    .map(|_| rng.below(k.total_pages) as u32)
                    .collect();
                let mut last = self.upload("uploading the last pages", &last)?;
                let f = self.function(if design == DeviceDesign::Rw {
                    "rw_alloc"
                } else {
                    "crw_alloc"
                });
                alloc_ms = timed(s, "the allocation kernel", || {
                    let mut b = s.launch_builder(f);
                    b.arg(&mut pool)
                        .arg(&total)
                        .arg(&n)
                        .arg(&seed)
                        .arg(&MAX_PROBES);
                    if design == DeviceDesign::Crw {
                        b.arg(&mut last);
                    }
                    b.arg(&mut out_page).arg(&mut out_probes);
                    // SAFETY: the arguments match rw_alloc/crw_alloc's parameters in type
                    // and order; every buffer holds the `n` (or T) elements the kernel
                    // indexes.
                    unsafe { b.launch(cfg) }.map(drop)
                })?;
                pages = self.download("reading the pages handed out", &out_page)?;
                let after = bitmap_of_page_words(&self.download("reading the pool", &pool)?);
                check_claims(&before, &after, held(&pages, 1)).map_err(fail("allocation"))?;
                let f = self.function("rw_free");
                free_ms = timed(s, "the free kernel", || {
                    let mut b = s.launch_builder(f);
                    b.arg(&mut pool).arg(&n).arg(&out_page);
                    // SAFETY: matches rw_free(u32*, u32, const u32*); out_page has n entries.
                    unsafe { b.launch(cfg) }.map(drop)
                })?;
                let after = bitmap_of_page_words(&self.download("reading the pool", &pool)?);
                check_restored(&before, &after).map_err(fail("free"))?;
            }
            DeviceDesign::RwBm | DeviceDesign::CoRw => {
                let mut pool = self.upload("uploading the pool", &before)?;
                alloc_ms = timed(s, "the allocation kernel", || {
                    let mut b;
                    if design == DeviceDesign::RwBm {
                        b = s.launch_builder(self.function("rwbm_alloc"));
                        b.arg(&mut pool).arg(&words).arg(&n).arg(&ppr).arg(&seed);
                    } else {
                        b = s.launch_builder(self.function("corw_alloc"));
                        b.arg(&mut pool).arg(&words).arg(&n).arg(&seed);
                    }
                    b.arg(&MAX_PROBES).arg(&mut out_page).arg(&mut out_probes);
                    // SAFETY: the arguments match rwbm_alloc / corw_alloc in type and
                    // order; the pool has `words` words and the outputs n entries (CoRW's
                    // lanes past n write nothing).
                    unsafe { b.launch(cfg) }.map(drop)
                })?;
                pages = self.download("reading the pages handed out", &out_page)?;
                let after = self.download("reading the pool", &pool)?;
                check_claims(&before, &after, held(&pages, ppr)).map_err(fail("allocation"))?;
                free_ms = timed(s, "the free kernel", || {
                    let mut b;
                    if design == DeviceDesign::RwBm {
                        b = s.launch_builder(self.function("rwbm_free"));
                        b.arg(&mut pool).arg(&n).arg(&ppr).arg(&out_page);
                    } else {
                        b = s.launch_builder(self.function("corw_free"));
                        b.arg(&mut pool).arg(&n).arg(&out_page);
                    }
                    // SAFETY: matches rwbm_free(u32*, u32, u32, const u32*) /
                    // corw_free(u32*, u32, const u32*); out_page has n entries (CoRW's lanes
                    // past n read nothing).
                    unsafe { b.launch(cfg) }.map(drop)
                })?;
                let after = self.download("reading the pool", &pool)?;
                check_restored(&before, &after).map_err(fail("free"))?;
            }
            DeviceDesign::Queue | DeviceDesign::QueueTicket => {
                let free_list = free_pages_of(&before);
                let capacity = free_list.len().next_power_of_two().max(32);
                let cap = capacity as u32;
                let count = free_list.len() as u32;
                let mut slots = self.zeros::<u32>(capacity)?;
                let mut ends = self.zeros::<u64>(2)?;
                let list = self.upload("uploading the free list", &free_list)?;
                let init = self.function("queue_init");
                let mut b = s.launch_builder(init);
                b.arg(&mut slots)
                    .arg(&mut ends)
                    .arg(&cap)
                    .arg(&list)
                    .arg(&count);
                // SAFETY: matches queue_init(u32*, u64*, u32, const u32*, u32); slots has
                // `capacity` entries, the list `count`, ends 2.
                unsafe { b.launch(grid(capacity)) }.map_err(driver("filling the queue"))?;
                let name = if design == DeviceDesign::Queue {
                    "queue_alloc_cas"
                } else {
                    "queue_alloc_ticket"
                };
                // The CAS queue's last requester needs about N attempts by itself.
                let max_probes = MAX_PROBES.max(n.saturating_mul(64));
                alloc_ms = timed(s, "the allocation kernel", || {
                    let mut b = s.launch_builder(self.function(name));
                    b.arg(&mut slots)
                        .arg(&mut ends)
                        .arg(&cap)
                        .arg(&n)
                        .arg(&max_probes);
                    b.arg(&mut out_page).arg(&mut out_probes);
                    // SAFETY: matches queue_alloc_cas / queue_alloc_ticket(u32*, u64*, u32,
                    // u32, u32, u32*, u32*).
                    unsafe { b.launch(cfg) }.map(drop)
                })?;
                pages = self.download("reading the pages handed out", &out_page)?;
                let queued = |slots: &[u32], ends: &[u64]| {
                    (ends[0]..ends[1].max(ends[0]))
                        .map(|t| slots[(t % capacity as u64) as usize])
                        .collect::<Vec<u32>>()
                };
                let after = bitmap_of_free_list(
                    k.total_pages,
                    queued(
                        &self.download("reading the queue", &slots)?,
                        &self.download("reading the queue", &ends)?,
                    ),
                )
                .map_err(fail("allocation"))?;
                check_claims(&before, &after, held(&pages, 1)).map_err(fail("allocation"))?;
                let f = self.function("queue_free");
                free_ms = timed(s, "the free kernel", || {
                    let mut b = s.launch_builder(f);
                    b.arg(&mut slots)
                        .arg(&mut ends)
                        .arg(&cap)
                        .arg(&n)
                        .arg(&out_page);
                    // SAFETY: matches queue_free(u32*, u64*, u32, u32, const u32*).
                    unsafe { b.launch(cfg) }.map(drop)
                })?;
                let after = bitmap_of_free_list(
                    k.total_pages,
                    queued(
                        &self.download("reading the queue", &slots)?,
                        &self.download("reading the queue", &ends)?,
                    ),
                )
                .map_err(fail("free"))?;
                check_restored(&before, &after).map_err(fail("free"))?;
            }
        }
        let probes = self.download("reading the probe counts", &out_probes)?;
        let (tas, was) = tas_and_was(&probes);
        Ok(KernelRun {
            design: design.name(),
            requesters: k.requesters,
            tas: Some(tas),
            was: Some(was),
            alloc_ms,
            free_ms,
            failures: pages.iter().filter(|&&p| p == NO_PAGE).count(),
        })
    }

    /// Runs one allocation kernel of byte-sized requests (`size_bytes[i]` for requester i)
    /// with `design`, then its free kernel, checking the blocks after each. The warp malloc
    /// runs on an empty pool of `page_bytes` pages large enough for every request twice over.
    ///
    /// # Errors
    ///
    /// As [`Gpu::page_kernel`]; sizes must be 1 ..= 32 pages' worth.
    pub fn malloc_kernel(
        &self,
        design: MallocDesign,
        size_bytes: &[u32],
        page_bytes: u32,
        seed: u64,
    ) -> Result<KernelRun, DeviceError> {
        validate_sizes(size_bytes, page_bytes)?;
        guarded("running a malloc kernel", || match design {
            MallocDesign::WarpMalloc => self.warp_malloc(size_bytes, page_bytes, seed),
            MallocDesign::CudaMalloc => self.cuda_malloc(size_bytes),
        })
    }

    fn warp_malloc(
        &self,
        size_bytes: &[u32],
        page_bytes: u32,
        seed: u64,
    ) -> Result<KernelRun, DeviceError> {
        let s = &self.stream;
        let n = size_bytes.len() as u32;
        let pages_needed: u64 = size_bytes
            .iter()
            .map(|&b| u64::from(b.div_ceil(page_bytes)))
            .sum();
        let total_pages = ((2 * pages_needed).max(1 << 15)).div_ceil(32) * 32;
        if total_pages > super::MAX_DEVICE_PAGES as u64 {
            return Err(DeviceError::BadRequest(format!(
                "{pages_needed} pages of {page_bytes} B: more than a device pool holds"
            )));
        }
        let before = vec![0u32; (total_pages / 32) as usize];
        let words = before.len() as u32;
        let mut pool = self.upload("uploading the pool", &before)?;
        let sizes = self.upload("uploading the sizes", size_bytes)?;
        let mut refs = self.zeros::<u32>(total_pages as usize)?;
        let mut run_pages = self.zeros::<u32>(total_pages as usize)?;
        let mut handles = self.zeros::<u64>(size_bytes.len())?;
        let mut out_probes = self.zeros::<u32>(size_bytes.len())?;
        let cfg = grid(size_bytes.len());
        let fail = |after: &'static str| {
            move |error| DeviceError::Check {
                design: MallocDesign::WarpMalloc.name(),
                after,
                error,
            }
        };
        let alloc_ms = timed(s, "the warp malloc kernel", || {
            let mut b = s.launch_builder(self.function("warp_malloc"));
            b.arg(&mut pool)
                .arg(&words)
                .arg(&n)
                .arg(&sizes)
                .arg(&page_bytes);
            b.arg(&seed)
                .arg(&MAX_PROBES)
                .arg(&mut refs)
                .arg(&mut run_pages);
            b.arg(&mut handles).arg(&mut out_probes);
            // SAFETY: matches warp_malloc(u32*, u32, u32, const u32*, u32, u64, u32, u32*,
            // u32*, u64*, u32*); refs and run_pages have one entry per page, the rest n.
            unsafe { b.launch(cfg) }.map(drop)
        })?;
        let got = self.download("reading the handles", &handles)?;
        let lengths = self.download("reading the run lengths", &run_pages)?;
        let after = self.download("reading the pool", &pool)?;
        // Each run once, and each lane's bytes inside its run and apart from the others'.
        let mut runs: Vec<(u64, u32)> = got
            .iter()
            .filter(|&&h| h != u64::MAX)
            .map(|&h| {
                let first = h >> 32;
                (first, lengths[first as usize])
            })
            .collect();
        runs.sort_unstable();
        runs.dedup();
        check_claims(&before, &after, runs.iter().copied()).map_err(fail("allocation"))?;
        let spans: Vec<(u64, u32)> = got
            .iter()
            .zip(size_bytes)
            .filter(|&(&h, _)| h != u64::MAX)
            .map(|(&h, &size)| {
                // One page added so that page 0's first byte is not mistaken for NULL.
                (
                    (h >> 32) * u64::from(page_bytes) + (h & 0xffff_ffff) + u64::from(page_bytes),
                    size,
                )
            })
            .collect();
        check_disjoint_addresses(&spans).map_err(fail("allocation"))?;
        for (&h, &size) in got.iter().zip(size_bytes) {
            if h == u64::MAX {
                continue;
            }
            let (first, offset) = (h >> 32, h & 0xffff_ffff);
            let run_bytes = u64::from(lengths[first as usize]) * u64::from(page_bytes);
            if offset + u64::from(size) > run_bytes {
                return Err(fail("allocation")(check::CheckError::OutOfRange {
                    first_page: first,
                    pages: lengths[first as usize],
                }));
            }
        }
        let free_ms = timed(s, "the warp free kernel", || {
            let mut b = s.launch_builder(self.function("warp_free"));
            b.arg(&mut pool)
                .arg(&n)
                .arg(&mut refs)
                .arg(&run_pages)
                .arg(&handles);
            // SAFETY: matches warp_free(u32*, u32, u32*, const u32*, const u64*).
            unsafe { b.launch(cfg) }.map(drop)
        })?;
        let after = self.download("reading the pool", &pool)?;
        check_restored(&before, &after).map_err(fail("free"))?;
        let probes = self.download("reading the probe counts", &out_probes)?;
        let (tas, was) = tas_and_was(&probes);
        Ok(KernelRun {
            design: MallocDesign::WarpMalloc.name(),
            requesters: size_bytes.len(),
            tas: Some(tas),
            was: Some(was),
            alloc_ms,
            free_ms,
            failures: got.iter().filter(|&&h| h == u64::MAX).count(),
        })
    }

    fn cuda_malloc(&self, size_bytes: &[u32]) -> Result<KernelRun, DeviceError> {
        let s = &self.stream;
        let n = size_bytes.len() as u32;
        let sizes = self.upload("uploading the sizes", size_bytes)?;
        let mut pointers = self.zeros::<u64>(size_bytes.len())?;
        let cfg = grid(size_bytes.len());
        let alloc_ms = timed(s, "CUDA's malloc kernel", || {
            let mut b = s.launch_builder(self.function("cuda_malloc_alloc"));
            b.arg(&n).arg(&sizes).arg(&mut pointers);
            // SAFETY: matches cuda_malloc_alloc(u32, const u32*, u64*); both arrays n long.
            unsafe { b.launch(cfg) }.map(drop)
        })?;
        let got = self.download("reading the pointers", &pointers)?;
        let blocks: Vec<(u64, u32)> = got
            .iter()
            .zip(size_bytes)
            .filter(|&(&p, _)| p != 0)
            .map(|(&p, &size)| (p, size))
            .collect();
        check_disjoint_addresses(&blocks).map_err(|error| DeviceError::Check {
            design: MallocDesign::CudaMalloc.name(),
            after: "allocation",
            error,
        })?;
        let free_ms = timed(s, "CUDA's free kernel", || {
            let mut b = s.launch_builder(self.function("cuda_malloc_free"));
            b.arg(&n).arg(&pointers);
            // SAFETY: matches cuda_malloc_free(u32, const u64*); every non-zero entry came
            // from malloc in the previous kernel and is freed once.
            unsafe { b.launch(cfg) }.map(drop)
        })?;
        Ok(KernelRun {
            design: MallocDesign::CudaMalloc.name(),
            requesters: size_bytes.len(),
            tas: None,
            was: None,
            alloc_ms,
            free_ms,
            failures: got.iter().filter(|&&p| p == 0).count(),
        })
    }
}

/// The (first page, pages) of every requester that got a block.
fn held(pages: &[u32], pages_per_request: u32) -> impl Iterator<Item = (u64, u32)> + '_ {
    pages
        .iter()
        .filter(|&&p| p != NO_PAGE)
        .map(move |&p| (u64::from(p), pages_per_request))
}
