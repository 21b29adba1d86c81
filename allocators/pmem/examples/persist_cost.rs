//! What one persist costs on each medium and flush method: a store of 8 bytes to a fresh
//! line, `flush` of that line, `fence`, repeated over a 64 MiB pool file.
//!
//! `cargo run --release -p alloclab-pmem --example persist_cost [DIR]` (DIR defaults to
//! /dev/shm when it exists, else the temporary directory). Reports, never judges.

use std::path::PathBuf;
use std::time::Instant;

use alloclab_pmem::persist::{FileMedium, NativeFlush, PmemFileMedium, SimMedium};
use alloclab_pmem::{Medium, MediumError};

const POOL_BYTES: usize = 64 << 20;
const LINE: usize = 64;

fn persist_loop(medium: &dyn Medium, iterations: usize) -> f64 {
    let lines = medium.len() / LINE;
    let start = Instant::now();
    for i in 0..iterations {
        // A stride of 4097 lines walks the pool without reusing a line soon.
        let offset = (i * 4097 % lines) * LINE;
        // SAFETY: in bounds and aligned; only this thread touches the pool.
        unsafe {
            medium
                .base()
                .add(offset)
                .cast::<u64>()
                .write_volatile(i as u64)
        };
        medium.persist(offset, 8);
    }
    start.elapsed().as_nanos() as f64 / iterations as f64
}

fn report(name: &str, medium: Result<Box<dyn Medium>, MediumError>, iterations: usize) {
    match medium {
        Ok(medium) => {
            persist_loop(&*medium, iterations / 10); // warm the page tables
            let ns = persist_loop(&*medium, iterations);
            println!(
                "{name:<34} {ns:>10.1} ns per store+flush+fence   ({:?})",
                medium.kind()
            );
        }
        Err(e) => println!("{name:<34} skipped: {e}"),
    }
}

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let shm = PathBuf::from("/dev/shm");
            if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            }
        });
    let path = dir.join(format!("alloclab-persist-cost-{}", std::process::id()));
    let run =
        |name: &str, iterations: usize, make: &dyn Fn() -> Result<Box<dyn Medium>, MediumError>| {
            let _ = std::fs::remove_file(&path);
            report(name, make(), iterations);
            let _ = std::fs::remove_file(&path);
        };
    println!("pool: {} ({} MiB)", dir.display(), POOL_BYTES >> 20);
    for flush in [
        NativeFlush::Clwb,
        NativeFlush::ClflushOpt,
        NativeFlush::Clflush,
        NativeFlush::None,
        NativeFlush::Msync,
    ] {
        let iterations = if flush == NativeFlush::Msync {
            20_000
        } else {
            2_000_000
        };
        run(&format!("native {flush:?}"), iterations, &|| {
            FileMedium::create_with_flush(&path, POOL_BYTES, flush).map(|m| Box::new(m) as _)
        });
    }
    run("libpmem (as PMEM_* env says)", 200_000, &|| {
        PmemFileMedium::create(&path, POOL_BYTES).map(|m| Box::new(m) as _)
    });
    run("simulator", 200_000, &|| {
        Ok(Box::new(SimMedium::new(POOL_BYTES)))
    });
}
