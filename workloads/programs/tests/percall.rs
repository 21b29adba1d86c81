//! The per-call driver compiled with the system's C++ compiler and run: every op prints the
//! line its parser reads, every timed function calls what its op names (the compiler
//! elided nothing), bad arguments exit 2 and a failed allocation exits 1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use alloclab_programs::classic::CompileError;
use alloclab_programs::percall::{self, FLOOR, OPS};

/// The driver, compiled once for all tests; `None` if there is no C++ compiler.
fn driver() -> Option<&'static Path> {
    static DRIVER: OnceLock<Option<PathBuf>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // Kept between runs (a second compile of a fresh binary is two stats).
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("percall");
            match percall::compile(&dir, "c++".as_ref()) {
                Ok(binary) => Some(binary),
                Err(e) if e.is_missing_toolchain() => None,
                Err(e) => panic!("{e}"),
            }
        })
        .as_deref()
}

macro_rules! driver_or_skip {
    () => {
        match driver() {
            Some(d) => d,
            None => {
                println!("skipped: no C++ compiler ({})", percall::CXX_INSTALL_HINT);
                return;
            }
        }
    };
}

fn run(driver: &Path, args: &[&str]) -> Output {
    Command::new(driver)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("the driver runs")
}

#[test]
fn every_op_prints_its_line() {
    let driver = driver_or_skip!();
    for op in OPS.iter().chain([&FLOOR]) {
        // 2,500 calls: two full batches and a half one.
        for size in ["1", "64", "5000"] {
            let out = run(driver, &[op, size, "2500"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{op} {size}: {stderr}");
            let line = percall::parse_output(&String::from_utf8_lossy(&out.stdout))
                .unwrap_or_else(|e| panic!("{op} {size}: {e}"));
            assert_eq!(line.op, *op);
            assert_eq!(line.size.to_string(), size);
            assert_eq!(line.calls, 2500);
            assert_eq!(
                line.moved.is_some(),
                op.starts_with("realloc"),
                "{op}: {line:?}"
            );
            if *op == "realloc-grow" && size == "64" {
                // Growing a block among a batch of neighbours moves nearly all of them.
                assert!(line.moved.unwrap() > 1250, "{line:?}");
            }
        }
    }
}

#[test]
fn every_timed_function_calls_what_its_op_names() {
    let driver = driver_or_skip!();
    if !cfg!(target_arch = "x86_64") {
        println!("skipped: the check reads x86-64 call instructions");
        return;
    }
    let Ok(out) = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(driver)
        .output()
    else {
        println!("skipped: no objdump (apt-get install -y binutils)");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let callee = |op: &str| match op {
        "malloc" => "malloc@plt",
        "free" => "free@plt",
        "calloc" => "calloc@plt",
        "realloc-same" | "realloc-grow" => "realloc@plt",
        "posix-memalign" => "posix_memalign@plt",
        "usable-size" => "malloc_usable_size@plt",
        "new" => "_Znwm@plt",
        "delete" => "_ZdlPv@plt",
        "delete-sized" => "_ZdlPvm@plt",
        "new-aligned" => "_ZnwmSt11align_val_t@plt",
        "new-nothrow" => "_ZnwmRKSt9nothrow_t@plt",
        _ => "percall_empty",
    };
    for op in OPS.iter().chain([&FLOOR]) {
        let name = percall::timed_function(op);
        let start = text
            .find(&format!("<{name}>:\n"))
            .unwrap_or_else(|| panic!("no function {name} in the driver"));
        let body = &text[start..];
        let body = &body[..body.find("\n\n").unwrap_or(body.len())];
        let calls: Vec<&str> = body.lines().filter(|l| l.contains("\tcall ")).collect();
        assert_eq!(calls.len(), 1, "{name} makes other calls: {calls:?}");
        assert!(
            calls[0].contains(&format!("<{}>", callee(op))),
            "{name} calls {calls:?}, not {}",
            callee(op)
        );
    }
}

#[test]
fn bad_arguments_exit_2_with_the_usage() {
    let driver = driver_or_skip!();
    for args in [
        &[][..],
        &["malloc", "64"],
        &["malloc", "64", "10", "x"],
        &["mallok", "64", "10"],
        &["malloc", "0", "10"],
        &["malloc", "1073741825", "10"],
        &["malloc", "-1", "10"],
        &["malloc", "64", "0"],
        &["malloc", "64", "1x"],
        &["malloc", "64", "99999999999999999999999"],
    ] {
        let out = run(driver, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("usage: percall OP SIZE ITERATIONS"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_failed_allocation_exits_1_naming_the_op_and_size() {
    let driver = driver_or_skip!();
    // In an address space of 512 MiB: a 1 GiB block fails at once, in the measured call or
    // in the setup of `free`'s batch; a 300 MiB block can be made but not grown to 600 MiB.
    for (op, size, shown) in [
        ("malloc", "1073741824", "1073741824"),
        ("new", "1073741824", "1073741824"),
        ("free", "1073741824", "1073741824"),
        ("realloc-grow", "314572800", "629145616"),
    ] {
        let out = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 524288 && exec \"$0\" \"$@\"")
            .arg(driver)
            .args([op, size, "1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{op}: {stderr}");
        assert!(
            stderr.contains(&format!("percall: {op} of {shown} bytes failed")),
            "{op}: {stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_compiler_that_fails_is_reported_with_its_message() {
    // `false` as the compiler: it runs, and fails.
    let dir = std::env::temp_dir().join(format!("alloclab-percall-false-{}", std::process::id()));
    let result = percall::compile(&dir, "false".as_ref());
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(e @ CompileError::Failed { .. }) => {
            assert!(
                e.to_string()
                    .contains("the C++ compiler failed on percall.cc"),
                "{e}"
            );
        }
        Err(CompileError::NoCompiler { .. }) => println!("skipped: no `false` to run"),
        other => panic!("expected a failed compile, got {other:?}"),
    }
}
