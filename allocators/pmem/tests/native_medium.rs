//! `FileMedium`: creating, opening, locking, flushing and refusing pool files.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use alloclab_pmem::persist::{FileMedium, MediumError, NativeFlush};
use alloclab_pmem::{Medium, MediumKind, PersistStats};
use common::{TempPath, check_pattern, env_flag, load_u64, store_u64, write_pattern};

const MIB: usize = 1 << 20;

const ALL_METHODS: [NativeFlush; 5] = [
    NativeFlush::Clwb,
    NativeFlush::ClflushOpt,
    NativeFlush::Clflush,
    NativeFlush::Msync,
    NativeFlush::None,
];

#[test]
fn create_maps_a_zeroed_file_of_the_asked_length() {
    let path = TempPath::new("create");
    let medium = FileMedium::create(path.path(), MIB + 64).unwrap();
    assert_eq!(medium.len(), MIB + 64);
    assert_eq!(
        std::fs::metadata(path.path()).unwrap().len(),
        (MIB + 64) as u64
    );
    assert_eq!(medium.base() as usize % 4096, 0);
    for offset in (0..MIB).step_by(4096) {
        assert_eq!(load_u64(&medium, offset), 0);
    }
    assert_eq!(medium.path(), path.path());
    assert_eq!(medium.stats(), PersistStats::default());
}

#[test]
fn the_flush_method_follows_the_environment() {
    let path = TempPath::new("env");
    let medium = FileMedium::create(path.path(), MIB).unwrap();
    // A temporary directory is not DAX here; if it were, MAP_SYNC would say so.
    let pmem = env_flag("PMEM_IS_PMEM_FORCE").unwrap_or(medium.is_dax());
    let expected = if env_flag("PMEM_NO_FLUSH") == Some(true) {
        NativeFlush::None
    } else if pmem {
        NativeFlush::best_instruction().unwrap()
    } else {
        NativeFlush::Msync
    };
    assert_eq!(medium.flush_method(), expected);
    assert_eq!(medium.kind(), MediumKind::Native { flush: expected });
    eprintln!(
        "flush method {expected:?} (PMEM_IS_PMEM_FORCE={:?}, PMEM_NO_FLUSH={:?}, dax={})",
        std::env::var("PMEM_IS_PMEM_FORCE").ok(),
        std::env::var("PMEM_NO_FLUSH").ok(),
        medium.is_dax()
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn cpuid_offers_at_least_clflush_on_x86_64() {
    assert!(NativeFlush::Clflush.is_supported());
    let best = NativeFlush::best_instruction().unwrap();
    assert!(best.is_supported());
    if NativeFlush::Clwb.is_supported() {
        assert_eq!(best, NativeFlush::Clwb);
    }
}

#[test]
fn stores_persisted_with_every_supported_method_are_there_after_reopening() {
    for (i, method) in ALL_METHODS.into_iter().enumerate() {
        let path = TempPath::new("methods");
        match FileMedium::create_with_flush(path.path(), 2 * MIB, method) {
            Ok(medium) => {
                assert_eq!(medium.kind(), MediumKind::Native { flush: method });
                write_pattern(&medium, i as u64 * 0x1111);
                drop(medium);
                let reopened = FileMedium::open_with_flush(path.path(), method).unwrap();
                assert_eq!(reopened.len(), 2 * MIB);
                check_pattern(&reopened, i as u64 * 0x1111);
                assert_eq!(reopened.sync_failures(), 0);
                assert!(reopened.last_sync_error().is_none());
            }
            Err(MediumError::FlushUnsupported { flush }) => {
                assert_eq!(flush, method);
                assert!(!method.is_supported());
                assert!(!path.path().exists(), "refused before creating the file");
                eprintln!("{method:?}: not supported on this CPU, skipped");
            }
            Err(e) => panic!("{method:?}: {e}"),
        }
    }
}

#[test]
fn counters_count_flushes_lines_bytes_and_fences_with_every_method() {
    for method in ALL_METHODS.into_iter().filter(|m| m.is_supported()) {
        let path = TempPath::new("counters");
        let medium = FileMedium::create_with_flush(path.path(), 64 * 1024, method).unwrap();
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
            },
            "{method:?}"
        );
    }
}

#[test]
fn counters_are_exact_after_threads_flush_concurrently() {
    let path = TempPath::new("threads");
    let medium = FileMedium::create_with_flush(path.path(), MIB, NativeFlush::None).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let medium = &medium;
            s.spawn(move || {
                for i in 0..1000 {
                    let offset = (t * 1000 + i) * 64;
                    store_u64(medium, offset, 1);
                    medium.persist(offset, 64);
                }
            });
        }
    });
    assert_eq!(
        medium.stats(),
        PersistStats {
            lines_flushed: 4000,
            flushes: 4000,
            fences: 4000,
            bytes_flushed: 4000 * 64,
        }
    );
}

#[test]
#[should_panic(expected = "outside a medium")]
fn a_flush_past_the_end_is_a_bug() {
    let path = TempPath::new("past-end");
    let medium = FileMedium::create(path.path(), 4096).unwrap();
    medium.flush(4096, 1);
}

#[test]
fn create_refuses_an_existing_file_and_leaves_it_untouched() {
    let path = TempPath::new("exists");
    std::fs::write(path.path(), b"not a pool").unwrap();
    let err = FileMedium::create(path.path(), MIB).unwrap_err();
    assert!(matches!(err, MediumError::Exists { .. }), "{err}");
    assert_eq!(err.path(), Some(path.path()));
    assert!(err.to_string().contains("file exists"), "{err}");
    assert_eq!(std::fs::read(path.path()).unwrap(), b"not a pool");
}

#[test]
fn open_of_a_missing_file_and_create_in_a_missing_directory_say_not_found() {
    let path = TempPath::new("missing");
    let err = FileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::NotFound { .. }), "{err}");
    assert!(std::error::Error::source(&err).is_some());
    let in_missing_dir = path.path().join("pool");
    let err = FileMedium::create(&in_missing_dir, MIB).unwrap_err();
    assert!(matches!(err, MediumError::NotFound { .. }), "{err}");
}

#[test]
fn a_zero_size_is_refused_and_leaves_no_file() {
    let path = TempPath::new("zero");
    let err = FileMedium::create(path.path(), 0).unwrap_err();
    assert!(matches!(err, MediumError::ZeroSize { .. }), "{err}");
    assert!(!path.path().exists());
    std::fs::write(path.path(), b"").unwrap();
    let err = FileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::ZeroSize { .. }), "{err}");
    assert!(err.to_string().contains("size is zero"), "{err}");
}

#[test]
fn a_size_too_large_is_refused_and_leaves_no_file() {
    let path = TempPath::new("huge");
    let err = FileMedium::create(path.path(), usize::MAX).unwrap_err();
    assert!(matches!(err, MediumError::TooLarge { .. }), "{err}");
    assert!(!path.path().exists());
    // Larger than any file system here: refused by the file system, and cleaned up.
    let err = FileMedium::create(path.path(), 1 << 62).unwrap_err();
    assert!(
        matches!(
            err,
            MediumError::TooLarge { .. } | MediumError::NoSpace { .. }
        ),
        "{err}"
    );
    assert!(!path.path().exists());
}

#[test]
fn open_of_a_directory_is_an_error() {
    let err = FileMedium::open(std::env::temp_dir()).unwrap_err();
    assert!(matches!(err, MediumError::Io { .. }), "{err}");
}

#[test]
fn a_read_only_file_is_refused_for_want_of_permission() {
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: a_read_only_file_is_refused_for_want_of_permission: running as root, which \
             bypasses file permissions"
        );
        return;
    }
    let path = TempPath::new("read-only");
    std::fs::write(path.path(), [0u8; 4096]).unwrap();
    std::fs::set_permissions(path.path(), std::fs::Permissions::from_mode(0o400)).unwrap();
    let err = FileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::PermissionDenied { .. }), "{err}");
}

#[test]
fn a_second_open_in_this_process_is_refused_until_the_first_is_dropped() {
    let path = TempPath::new("lock");
    let first = FileMedium::create(path.path(), MIB).unwrap();
    let err = FileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::Locked { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("pool already open by another process"),
        "{err}"
    );
    drop(first);
    let second = FileMedium::open(path.path()).unwrap();
    assert_eq!(second.len(), MIB);
}

/// Environment variable naming the pool the child opens and holds.
const CHILD_POOL: &str = "ALLOCLAB_PMEM_TEST_CHILD_POOL";

/// Run by `a_pool_held_by_another_process_is_refused_and_freed_when_it_dies` as its child.
#[test]
#[ignore = "the child of a_pool_held_by_another_process_is_refused_and_freed_when_it_dies"]
fn child_holds_the_pool_open() {
    let Ok(path) = std::env::var(CHILD_POOL) else {
        return;
    };
    let medium = FileMedium::open(&path).unwrap();
    store_u64(&medium, 0, 0xC0FFEE);
    medium.persist(0, 8);
    println!("CHILD-HOLDS-POOL");
    std::io::stdout().flush().unwrap();
    // Hold the pool until the parent kills this process (or closes stdin).
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn a_pool_held_by_another_process_is_refused_and_freed_when_it_dies() {
    let path = TempPath::new("cross-process");
    drop(FileMedium::create(path.path(), MIB).unwrap());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holds_the_pool_open",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_POOL, path.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut holds = false;
    for line in stdout.lines() {
        if line.unwrap().contains("CHILD-HOLDS-POOL") {
            holds = true;
            break;
        }
    }
    assert!(holds, "the child never opened the pool");
    let err = FileMedium::open(path.path()).unwrap_err();
    assert!(matches!(err, MediumError::Locked { .. }), "{err}");
    // A process killed while holding the pool leaves no stale lock.
    child.kill().unwrap();
    child.wait().unwrap();
    let medium = FileMedium::open(path.path()).unwrap();
    assert_eq!(load_u64(&medium, 0), 0xC0FFEE);
}
