//! The CUDA side: every kernel of `kernels/` compiles with NVRTC (needs libnvrtc, not a
//! GPU), and, where a device is present, every design runs and leaves a pool that passes the
//! host checks. Parts whose library or device is missing print that they skipped and why.
//!
//! With `ALLOCLAB_REQUIRE_GPU` set (the GPU check script sets it), a missing device fails the
//! device tests instead of skipping them.
//!
//! NVRTC without the CUDA toolkit: `pip install nvidia-cuda-nvrtc-cu12`; the test finds that
//! wheel's `libnvrtc.so.12` through `python3`, or takes a path from `ALLOCLAB_NVRTC`.
#![cfg(all(feature = "cuda", not(loom)))]

use std::path::PathBuf;
use std::process::Command;

use alloclab_gpu::device::{
    self, DeviceDesign, DeviceError, Gpu, KERNEL_SOURCES, MallocDesign, PageKernel,
};

/// The pip wheel's libnvrtc, if `python3` knows it.
fn pip_nvrtc() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvrtc as m, glob; print(sorted(glob.glob(m.__path__[0] + '/lib/libnvrtc.so.*'))[0])",
        ])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_file()).then_some(path)
}

fn load_nvrtc() -> Result<(i32, i32), DeviceError> {
    if std::env::var_os("ALLOCLAB_NVRTC").is_none()
        && let Some(path) = pip_nvrtc()
    {
        device::preload_nvrtc(&path)?;
    }
    device::nvrtc_version()
}

/// Says on the process's stderr (past the test harness's capture, which hides what passing
/// tests print) that `test` could not run here, in the form `cargo xtask test` counts.
fn skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

#[test]
fn every_kernel_compiles_to_ptx_with_nvrtc() {
    let version = match load_nvrtc() {
        Ok(v) => v,
        Err(e) => {
            skipped("every_kernel_compiles_to_ptx_with_nvrtc", &e.to_string());
            return;
        }
    };
    // sm_90 (H100/H200) is what the GPU checks run on; sm_75 is the oldest that CUDA 13's
    // NVRTC still targets, and has the independent thread scheduling (sm_70 and up) that the
    // queue's slot wait relies on.
    for arch in ["compute_75", "compute_90"] {
        let ptx = device::compile_kernels(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(ptx.len(), KERNEL_SOURCES.len());
        for ((file, text), src) in ptx.iter().zip(KERNEL_SOURCES) {
            assert_eq!(*file, src.file);
            for kernel in src.kernels {
                assert!(
                    text.contains(&format!(".entry {kernel}(")),
                    "{file} for {arch}: no entry {kernel} in the PTX"
                );
            }
        }
    }
    println!("compiled with NVRTC {}.{}", version.0, version.1);
}

#[test]
fn a_compile_error_is_reported_with_the_file_and_nvrtc_s_message() {
    if let Err(e) = load_nvrtc() {
        skipped(
            "a_compile_error_is_reported_with_the_file_and_nvrtc_s_message",
            &e.to_string(),
        );
        return;
    }
    // A wrong architecture name is refused by NVRTC itself: the error names the file.
    let e = device::compile_kernels("compute_1").unwrap_err();
    let line = e.to_string();
    assert!(matches!(e, DeviceError::Compile { .. }), "{line}");
    assert!(
        line.contains("page_alloc.cu") && !line.contains('\n'),
        "{line}"
    );
}

fn gpu() -> Option<Gpu> {
    let _ = load_nvrtc();
    match Gpu::open() {
        Ok(g) => Some(g),
        Err(DeviceError::Unavailable(reason)) => {
            // On a GPU machine (scripts/gpu-check.sh sets this) a skip would hide a failure.
            assert!(
                std::env::var_os("ALLOCLAB_REQUIRE_GPU").is_none(),
                "ALLOCLAB_REQUIRE_GPU is set but there is no usable device: {reason}"
            );
            // libtest names each test's thread after the test.
            let test = std::thread::current()
                .name()
                .unwrap_or("a device test")
                .to_owned();
            skipped(&test, &format!("no CUDA device: {reason}"));
            None
        }
        Err(e) => panic!("a device is present but unusable: {e}"),
    }
}

#[test]
fn every_page_design_hands_out_distinct_free_pages_and_frees_them_all_on_the_device() {
    let Some(gpu) = gpu() else { return };
    println!("device: {}", gpu.info().describe());
    for design in DeviceDesign::ALL {
        for (free_pages, requesters) in [(6554, 5000), (1 << 16, 1 << 15), (100, 33)] {
            let k = PageKernel {
                total_pages: 1 << 16,
                free_pages,
                requesters,
                pages_per_request: 1,
                seed: 7,
            };
            let run = gpu
                .page_kernel(design, &k)
                .unwrap_or_else(|e| panic!("{}: {e}", design.name()));
            assert_eq!(run.failures, 0, "{run:?}");
            let tas = run.tas.unwrap();
            assert!(tas >= 1.0 && run.was.unwrap() >= tas, "{run:?}");
        }
    }
}

#[test]
fn multi_page_requests_take_whole_runs_on_the_device() {
    let Some(gpu) = gpu() else { return };
    for pages in [2, 5, 32] {
        let k = PageKernel {
            total_pages: 1 << 18,
            free_pages: 1 << 18,
            requesters: 4096,
            pages_per_request: pages,
            seed: 3,
        };
        let run = gpu.page_kernel(DeviceDesign::RwBm, &k).unwrap();
        assert_eq!(run.failures, 0, "{run:?}");
    }
}

#[test]
fn warp_malloc_and_cuda_malloc_give_disjoint_blocks_of_4_bytes_to_8_kib() {
    let Some(gpu) = gpu() else { return };
    let sizes: Vec<u32> = (0..10_000u32).map(|i| 4 << (i % 12)).collect();
    for design in [MallocDesign::WarpMalloc, MallocDesign::CudaMalloc] {
        let run = gpu
            .malloc_kernel(design, &sizes, 512, 11)
            .unwrap_or_else(|e| panic!("{}: {e}", design.name()));
        assert_eq!(run.failures, 0, "{run:?}");
    }
}

#[test]
fn bad_requests_are_refused_before_anything_runs() {
    let Some(gpu) = gpu() else { return };
    let too_many = PageKernel {
        total_pages: 1 << 10,
        free_pages: 10,
        requesters: 11,
        pages_per_request: 1,
        seed: 1,
    };
    assert!(matches!(
        gpu.page_kernel(DeviceDesign::CoRw, &too_many),
        Err(DeviceError::BadRequest(_))
    ));
    assert!(matches!(
        gpu.malloc_kernel(MallocDesign::CudaMalloc, &[0], 512, 1),
        Err(DeviceError::BadRequest(_))
    ));
}
