//! `PmemFileMedium` and `create_best`/`open_best`. Tests that need libpmem say that they
//! skipped, and why, when `libpmem.so.1` is not installed.

mod common;

use alloclab_pmem::persist::{
    FileMedium, Libpmem, MediumError, PmemFileMedium, create_best, open_best,
};
use alloclab_pmem::{Medium, MediumKind, PersistStats};
use common::{TempPath, check_pattern, env_flag, write_pattern};

const MIB: usize = 1 << 20;

/// Says on the process's stderr (past the test harness's capture, which hides what passing
/// tests print) that `test` could not run here, in the form `cargo xtask test` counts.
fn skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// The library, or `None` after saying on stderr that the calling test skipped.
fn libpmem_or_skip(test: &str) -> Option<&'static Libpmem> {
    match Libpmem::load() {
        Ok(lib) => Some(lib),
        Err(e) => {
            skipped(test, &format!("libpmem is not available: {e}"));
            None
        }
    }
}

#[test]
fn a_missing_library_is_a_clear_error_and_creates_nothing() {
    let path = TempPath::new("no-lib");
    match Libpmem::load() {
        Ok(_) => {
            // Installed: the missing case cannot be observed in this process.
            skipped(
                "a_missing_library_is_a_clear_error_and_creates_nothing",
                "libpmem is installed, so its absence cannot be observed",
            );
        }
        Err(e) => {
            assert!(matches!(e, MediumError::LibpmemMissing { .. }), "{e}");
            assert!(
                e.to_string()
                    .starts_with("libpmem.so.1 not found: install libpmem-dev / libpmem1"),
                "{e}"
            );
            let err = PmemFileMedium::create(path.path(), MIB).unwrap_err();
            assert!(matches!(err, MediumError::LibpmemMissing { .. }), "{err}");
            assert!(!path.path().exists());
            // The same answer every time (the load is cached), never a panic.
            assert!(Libpmem::load().is_err());
        }
    }
}

#[test]
fn create_best_uses_libpmem_when_it_loads_and_the_native_medium_otherwise() {
    let path = TempPath::new("best");
    let medium = create_best(path.path(), MIB).unwrap();
    match (Libpmem::load(), medium.kind()) {
        (Ok(_), MediumKind::Libpmem { .. }) | (Err(_), MediumKind::Native { .. }) => {}
        (lib, kind) => panic!("library loaded: {}, medium: {kind:?}", lib.is_ok()),
    }
    write_pattern(&*medium, 0xBE57);
    drop(medium);
    let reopened = open_best(path.path()).unwrap();
    assert_eq!(reopened.len(), MIB);
    check_pattern(&*reopened, 0xBE57);
    let err = open_best(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::Locked { .. }), "{err}");
}

#[test]
fn libpmem_stores_persist_across_reopening() {
    let Some(_) = libpmem_or_skip("libpmem_stores_persist_across_reopening") else {
        return;
    };
    let path = TempPath::new("pmem-roundtrip");
    let medium = PmemFileMedium::create(path.path(), 2 * MIB + 4096).unwrap();
    assert_eq!(medium.len(), 2 * MIB + 4096);
    assert_eq!(medium.path(), path.path());
    write_pattern(&medium, 0x1DB);
    drop(medium);
    let reopened = PmemFileMedium::open(path.path()).unwrap();
    assert_eq!(reopened.len(), 2 * MIB + 4096);
    check_pattern(&reopened, 0x1DB);
    assert_eq!(reopened.sync_failures(), 0);
    // The file is as libpmem left it, also for the native medium.
    drop(reopened);
    check_pattern(&FileMedium::open(path.path()).unwrap(), 0x1DB);
}

#[test]
fn libpmem_says_pmem_exactly_when_forced_on_a_file_that_is_not() {
    let Some(_) = libpmem_or_skip("libpmem_says_pmem_exactly_when_forced_on_a_file_that_is_not")
    else {
        return;
    };
    let path = TempPath::new("pmem-kind");
    let medium = PmemFileMedium::create(path.path(), MIB).unwrap();
    // The temporary directory is not persistent memory here, so only the variable decides.
    let forced = env_flag("PMEM_IS_PMEM_FORCE") == Some(true);
    assert_eq!(medium.is_pmem(), forced);
    assert_eq!(medium.kind(), MediumKind::Libpmem { is_pmem: forced });
    eprintln!("libpmem is_pmem = {forced}");
}

#[test]
fn libpmem_counters_count_flushes_lines_bytes_and_fences() {
    let Some(_) = libpmem_or_skip("libpmem_counters_count_flushes_lines_bytes_and_fences") else {
        return;
    };
    let path = TempPath::new("pmem-counters");
    let medium = PmemFileMedium::create(path.path(), 64 * 1024).unwrap();
    medium.flush(60, 8);
    medium.flush(128, 64);
    medium.flush(0, 0);
    medium.fence();
    medium.persist(64 * 1024 - 96, 96);
    assert_eq!(
        medium.stats(),
        PersistStats {
            lines_flushed: 5,
            flushes: 4,
            fences: 2,
            bytes_flushed: 8 + 64 + 96,
        }
    );
}

#[test]
fn libpmem_and_native_media_honour_each_others_lock() {
    let Some(_) = libpmem_or_skip("libpmem_and_native_media_honour_each_others_lock") else {
        return;
    };
    let path = TempPath::new("pmem-lock");
    let pmem = PmemFileMedium::create(path.path(), MIB).unwrap();
    let err = FileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::Locked { .. }), "{err}");
    let err = PmemFileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::Locked { .. }), "{err}");
    drop(pmem);
    let native = FileMedium::open(path.path()).unwrap();
    let err = PmemFileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::Locked { .. }), "{err}");
    drop(native);
    PmemFileMedium::open(path.path()).unwrap();
}

#[test]
fn libpmem_refuses_what_the_native_medium_refuses() {
    let Some(_) = libpmem_or_skip("libpmem_refuses_what_the_native_medium_refuses") else {
        return;
    };
    let path = TempPath::new("pmem-refusals");
    let err = PmemFileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::NotFound { .. }), "{err}");
    let err = PmemFileMedium::create(path.path(), 0).unwrap_err();
    assert!(matches!(err, MediumError::ZeroSize { .. }), "{err}");
    assert!(!path.path().exists());
    std::fs::write(path.path(), b"keep me").unwrap();
    let err = PmemFileMedium::create(path.path(), MIB).unwrap_err();
    assert!(matches!(err, MediumError::Exists { .. }), "{err}");
    assert_eq!(std::fs::read(path.path()).unwrap(), b"keep me");
}
