//! The shared preload tests (`alloclab_preload::driver`) against the randomized heap's `.so`:
//! a multi-threaded C program checking every rule of the C API and forking, `python3`, and
//! `sqlite3`, each under `LD_PRELOAD`; and every misuse case of the `security` suite, as a C
//! program commits it, and the C++ delete mismatches.

alloclab_preload::preload_tests!(lib: "alloclab_preload_randomized", heap: "randomized");

/// Every misuse case of the `security` suite, as a C program commits it through the C API:
/// each one aborts with the heap's message, or faults at the bad access itself.
#[test]
fn every_misuse_case_is_caught_through_the_c_api() {
    use alloclab_preload::driver::{self, MisuseEnd};
    let so = driver::cdylib_beside_test_executable("alloclab_preload_randomized");
    let Ok(ends) = driver::misuse_under_preload(&so) else {
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
/// delete with the wrong size, through the preload library's `operator delete`: each aborts
/// with the heap's message.
#[test]
fn every_cxx_delete_mismatch_is_caught() {
    use alloclab_preload::driver::{self, MisuseEnd};
    let so = driver::cdylib_beside_test_executable("alloclab_preload_randomized");
    let Ok(ends) = driver::cxx_misuse_under_preload(&so) else {
        return;
    };
    for (case, end) in &ends {
        assert!(
            matches!(end, MisuseEnd::Aborted(m) if m.starts_with("alloclab-randomized: operator delete")),
            "{case}: {end:?}"
        );
    }
}
