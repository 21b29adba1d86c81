//! The shared preload tests (`alloclab_preload::driver`) against the randomized heap's `.so`:
//! a multi-threaded C program checking every rule of the C API and forking, `python3`, and
//! `sqlite3`, each under `LD_PRELOAD`; and every misuse case of the `security` suite, as a C
//! program commits it, and the C++ delete mismatches. The shared tests run once for the
//! library `cargo test` builds (with the standard library), once for the one the harness
//! runs programs on (the `preload` profile, without it).

alloclab_preload::preload_tests!(lib: "alloclab_preload_randomized", heap: "randomized");

/// The library of the `preload` profile: `no_std`, its own panic handler, C++'s throwing
/// `operator new` through assembly.
mod built_without_std {
    alloclab_preload::preload_tests!(
        lib: "alloclab_preload_randomized",
        heap: "randomized",
        profile: "preload",
        package: "alloclab-preload-randomized",
    );
}

use std::path::{Path, PathBuf};

use alloclab_preload::driver::{self, MisuseEnd};

/// The library `cargo test` built (with the standard library).
fn library_of_the_test_build() -> PathBuf {
    driver::cdylib_beside_test_executable("alloclab_preload_randomized")
}

/// The library of the `preload` profile, which programs get (without it); `None`, saying
/// so, when it has not been built.
fn library_of_the_preload_profile() -> Option<PathBuf> {
    driver::cdylib_of_profile(
        "alloclab_preload_randomized",
        "alloclab-preload-randomized",
        "preload",
    )
    .ok()
}

/// Every misuse case of the `security` suite, as a C program commits it through the C API,
/// under `so`: each one aborts with the heap's message, or faults at the bad access itself.
fn every_misuse_case_is_caught_under(so: &Path) {
    let Ok(ends) = driver::misuse_under_preload(so) else {
        return;
    };
    let missed: Vec<String> = ends
        .iter()
        .filter(|(_, end)| !end.caught())
        .map(|(case, end)| format!("{case}: {end:?}"))
        .collect();
    assert!(missed.is_empty(), "not caught: {missed:#?}");
    for (case, end) in &ends {
        if let MisuseEnd::Aborted(message) = end {
            assert!(
                message.starts_with("alloclab-randomized: "),
                "{case} aborted, but not by the heap: {message:?}"
            );
        }
    }
    let aborted = |case: &str| {
        ends.iter().find(|(c, _)| *c == case).is_some_and(
            |(_, end)| matches!(end, MisuseEnd::Aborted(m) if m.contains("write after free")),
        )
    };
    assert!(
        aborted("write_after_free") && aborted("realloc_write_after_move"),
        "{ends:#?}"
    );
    for case in [
        "zero_size_write",
        "zero_size_read",
        "overflow_large",
        "write_after_free_large",
    ] {
        assert!(
            ends.contains(&(case, MisuseEnd::FaultedAtAccess)),
            "{case}: {ends:#?}"
        );
    }
}

/// C++'s mismatched deletes (`delete` of a block from `new[]` and the reverse) and a sized
/// delete with the wrong size, through the `operator delete` of the library at `so`: each
/// aborts with the heap's message.
fn every_cxx_delete_mismatch_is_caught_under(so: &Path) {
    let Ok(ends) = driver::cxx_misuse_under_preload(so) else {
        return;
    };
    for (case, end) in &ends {
        assert!(
            matches!(end, MisuseEnd::Aborted(m) if m.starts_with("alloclab-randomized: operator delete")),
            "{case}: {end:?}"
        );
    }
}

#[test]
fn every_misuse_case_is_caught_through_the_c_api() {
    every_misuse_case_is_caught_under(&library_of_the_test_build());
}

#[test]
fn every_cxx_delete_mismatch_is_caught() {
    every_cxx_delete_mismatch_is_caught_under(&library_of_the_test_build());
}

#[test]
fn every_misuse_case_is_caught_through_the_c_api_of_the_library_without_std() {
    if let Some(so) = library_of_the_preload_profile() {
        every_misuse_case_is_caught_under(&so);
    }
}

#[test]
fn every_cxx_delete_mismatch_is_caught_by_the_library_without_std() {
    if let Some(so) = library_of_the_preload_profile() {
        every_cxx_delete_mismatch_is_caught_under(&so);
    }
}

/// The C program's threads (eight, with cross-thread frees, resizes and forks) on one
/// arena, and on two, through `ALLOCLAB_RANDOMIZED_ARENAS`: every rule holds, and nothing
/// is reported; a value that is not an arena count is reported once, naming the variable,
/// and the program runs as with all sixteen.
#[test]
fn the_c_program_runs_on_fewer_arenas_and_a_bad_arena_count_is_reported() {
    let so = library_of_the_test_build();
    for arenas in ["1", "2"] {
        let Ok(stderr) = driver::c_program_under_preload_with_env(
            &so,
            "randomized",
            &[("ALLOCLAB_RANDOMIZED_ARENAS", arenas)],
        ) else {
            return;
        };
        assert!(
            !stderr.contains("ALLOCLAB_RANDOMIZED_ARENAS"),
            "{arenas} arenas: {stderr}"
        );
    }
    let Ok(stderr) = driver::c_program_under_preload_with_env(
        &so,
        "randomized",
        &[("ALLOCLAB_RANDOMIZED_ARENAS", "17")],
    ) else {
        return;
    };
    let warnings = stderr
        .lines()
        .filter(|l| {
            l.starts_with("alloclab-randomized: ALLOCLAB_RANDOMIZED_ARENAS is not a number")
        })
        .count();
    // Once per process that builds a heap: the program, not its forked children,
    // which inherit the heap built.
    assert_eq!(warnings, 1, "{stderr}");
}
