//! The programs of the `programs` suite: what each runs, what it needs installed, and how one
//! run of it under a heap is measured.
//!
//! Every program's result is its standard output (for redis, the data read back from the
//! server; for git, the names of the objects in the pack it wrote), reduced to a [`digest`](crate::process::digest): under a correct heap it is the
//! same as under the C library's malloc. Figures are taken from outside, by `wait4`: wall
//! time, user + system CPU time and peak RSS; the C versions of the classic benchmarks also
//! report the time of their measured phase, timed as the in-process versions time theirs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::classic::{self, ClassicProgram};
use crate::git;
use crate::process::{self, Exit, Spec};
use crate::redis;
use crate::scripts::{self, Script};

/// A program the suite runs, and how.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A C version of a classic allocator benchmark, compiled with `cc`.
    Classic(&'static ClassicProgram),
    /// A script for an interpreter (python3, lua, perl).
    Script(&'static Script),
    /// The sqlite3 shell on a bulk load, an index, joins and aggregates.
    Sqlite,
    /// The C compiler on a generated translation unit.
    Compiler,
    /// redis-server loaded by redis-benchmark.
    Redis,
    /// git packing a generated history with two threads of its own.
    Git,
}

/// A program of the suite.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    /// Name on the command line and in reports.
    pub name: &'static str,
    /// One line: what it does.
    pub description: &'static str,
    /// How it runs.
    pub kind: Kind,
    /// The executables it needs, each with the Debian package that brings it.
    pub needs: &'static [Need],
}

/// An executable a program needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// Its name in `PATH`.
    pub executable: &'static str,
    /// The Debian package that installs it.
    pub package: &'static str,
}

const CC: Need = Need {
    executable: "cc",
    package: "gcc",
};

/// What one run is asked to do.
#[derive(Clone, Debug)]
pub struct Context {
    /// The heap to preload; `None`: the program's own (the C library's malloc, or what the
    /// program is linked with).
    pub preload: Option<PathBuf>,
    /// Threads, for the classic benchmarks (the other programs have their own).
    pub threads: usize,
    /// `tiny`, `small`, `medium` or `large`.
    pub scale: &'static str,
    /// Work relative to `small`: 1/64, 1, 4 or 16.
    pub factor: f64,
    /// Seed of the classic benchmarks' generators.
    pub seed: u64,
    /// A directory the run may write to (inputs, generated sources, compiled benchmarks).
    pub scratch: PathBuf,
    /// How long the program may run.
    pub timeout: Duration,
}

impl Context {
    /// `small` scaled to this run's scale, at least 1.
    pub fn scaled(&self, small: u64) -> u64 {
        ((small as f64 * self.factor) as u64).max(1)
    }
}

/// A figure one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Metric name (`wall`, `cpu`, `peak_rss`, `time`, `set_rps`, ...).
    pub metric: String,
    /// Its unit.
    pub unit: &'static str,
    /// Its value.
    pub value: f64,
    /// Whether a lower value is better.
    pub lower_is_better: bool,
}

/// What one run measured, and its result.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The figures.
    pub figures: Vec<Figure>,
    /// Digest of the program's result (standard output, or the data read back).
    pub digest: u64,
}

/// Every program of the suite: the real programs first, then the C versions of the classic
/// benchmarks (named `c-<workload>`).
pub fn all() -> &'static [Program] {
    static ALL: std::sync::LazyLock<Vec<Program>> = std::sync::LazyLock::new(|| {
        let mut all = vec![
            Program {
                name: "redis",
                description: "redis-server under redis-benchmark on 127.0.0.1: SET, GET, LPUSH, LPOP, SADD, HSET at -P 8, 256 B values over 100k keys; data read back",
                kind: Kind::Redis,
                needs: &[
                    Need {
                        executable: "redis-server",
                        package: "redis-server",
                    },
                    Need {
                        executable: "redis-benchmark",
                        package: "redis-tools",
                    },
                ],
            },
            Program {
                name: "sqlite",
                description: "the sqlite3 shell: bulk load of rows with an index, joins, aggregates, updates, deletes, an integrity check",
                kind: Kind::Sqlite,
                needs: &[Need {
                    executable: "sqlite3",
                    package: "sqlite3",
                }],
            },
        ];
        for script in scripts::SCRIPTS {
            all.push(Program {
                name: script.name,
                description: script_description(script.name),
                kind: Kind::Script(script),
                needs: interpreter_needs(script.interpreter),
            });
        }
        all.push(Program {
            name: "cc",
            description: "gcc -O2 -c on a generated C translation unit (structs, switches, loops, many functions)",
            kind: Kind::Compiler,
            needs: &[CC],
        });
        all.push(Program {
            name: "git",
            description: "git pack-objects of a generated history (300 files, 61 commits), every object compressed and delta-searched again by two threads git starts; the pack read back",
            kind: Kind::Git,
            needs: &[Need {
                executable: "git",
                package: "git",
            }],
        });
        for c in classic::CLASSIC {
            let (name, description) = CLASSIC_NAMES
                .iter()
                .find(|(_, _, workload)| *workload == c.name)
                .map(|&(name, description, _)| (name, description))
                .unwrap_or(("c-unknown", "a classic benchmark without a registry entry"));
            all.push(Program {
                name,
                description,
                kind: Kind::Classic(c),
                needs: &[CC],
            });
        }
        all
    });
    &ALL
}

/// The C versions of the classic benchmarks: program name, description, the in-process
/// workload it re-creates.
pub const CLASSIC_NAMES: &[(&str, &str, &str)] = &[
    (
        "c-larson",
        "larson in C: server simulation, blocks freed by the thread that inherits them",
        "larson",
    ),
    (
        "c-xmalloc-test",
        "xmalloc-test in C: each thread allocates batches that its neighbour frees",
        "xmalloc-test",
    ),
    (
        "c-cache-scratch",
        "cache-scratch in C: passive false sharing",
        "cache-scratch",
    ),
    (
        "c-cache-thrash",
        "cache-thrash in C: active false sharing",
        "cache-thrash",
    ),
    (
        "c-glibc-simple",
        "glibc-simple in C: one thread, tight malloc/free of 16-256 B in batches",
        "glibc-simple",
    ),
    (
        "c-glibc-thread",
        "glibc-thread in C: random 16 B-4 KiB malloc/free over a private working set",
        "glibc-thread",
    ),
    (
        "c-mstress",
        "mstress in C: mixed sizes, long-lived blocks, blocks swapped between threads",
        "mstress",
    ),
    (
        "c-rptest",
        "rptest in C: random 16 B-16 KiB sizes, half of each batch freed by another thread",
        "rptest",
    ),
];

/// The in-process workload a program re-creates in C, if it is one of [`CLASSIC_NAMES`].
pub fn in_process_workload(program: &str) -> Option<&'static str> {
    CLASSIC_NAMES
        .iter()
        .find(|(name, _, _)| *name == program)
        .map(|&(_, _, workload)| workload)
}

fn script_description(name: &str) -> &'static str {
    match name {
        "python-json" => "python3: a large nested document through json.dumps and json.loads",
        "python-dict" => "python3: dict and list churn over a working set that grows and shrinks",
        "python-tree" => "python3: a tree of small objects built, walked and dropped, gc on",
        "lua" => "lua5.4: table and string churn, closures",
        "perl" => "perl: hashes, arrays, string operations and regular expressions",
        _ => "a script",
    }
}

fn interpreter_needs(interpreter: &str) -> &'static [Need] {
    match interpreter {
        "python3" => &[Need {
            executable: "python3",
            package: "python3",
        }],
        "lua5.4" => &[Need {
            executable: "lua5.4",
            package: "lua5.4",
        }],
        "perl" => &[Need {
            executable: "perl",
            package: "perl",
        }],
        _ => &[Need {
            executable: "sh",
            package: "dash",
        }],
    }
}

/// Looks a program up by name.
pub fn find(name: &str) -> Option<&'static Program> {
    all().iter().find(|p| p.name == name)
}

impl Program {
    /// What is missing to run it here, as one line with the command that installs it:
    /// `redis-server not found: apt-get install -y redis-server redis-tools`.
    pub fn missing(&self) -> Option<String> {
        let missing: Vec<&Need> = self
            .needs
            .iter()
            .filter(|n| process::find_program(n.executable).is_none())
            .collect();
        if missing.is_empty() {
            return None;
        }
        let mut packages: Vec<&str> = self.needs.iter().map(|n| n.package).collect();
        packages.dedup();
        Some(format!(
            "{} not found: apt-get install -y {}",
            missing
                .iter()
                .map(|n| n.executable)
                .collect::<Vec<_>>()
                .join(" and "),
            packages.join(" ")
        ))
    }

    /// Whether `--threads` means something to it (the classic benchmarks only).
    pub fn takes_threads(&self) -> bool {
        matches!(self.kind, Kind::Classic(_))
    }

    /// Runs it once under `ctx.preload` and measures it.
    ///
    /// # Errors
    ///
    /// A one-line message: a missing program, a failed compile, a timeout, a non-zero exit
    /// (with the program's last line of standard error), unreadable output or wrong data.
    pub fn run(&self, ctx: &Context) -> Result<Measured, String> {
        if let Some(missing) = self.missing() {
            return Err(missing);
        }
        match self.kind {
            Kind::Classic(c) => run_classic(c, ctx),
            Kind::Script(s) => {
                let extension = match s.interpreter {
                    "python3" => "py",
                    "perl" => "pl",
                    _ => "lua",
                };
                let path = write_input(&ctx.scratch, &format!("{}.{extension}", s.name), s.text)?;
                let mut spec = Spec::new(
                    s.interpreter,
                    [
                        path.into_os_string(),
                        ctx.scaled(s.small_size).to_string().into(),
                    ],
                );
                // Python's dict and set iteration order must not depend on a random seed.
                spec.env.push(("PYTHONHASHSEED".into(), "0".into()));
                let exit = measured(spec, ctx)?;
                Ok(whole_program(&exit, exit_digest(&exit)))
            }
            Kind::Sqlite => {
                let mut spec = Spec::new("sqlite3", ["-batch", ":memory:"]);
                spec.stdin = Some(
                    scripts::sqlite_script(ctx.scaled(scripts::SQLITE_SMALL_ROWS)).into_bytes(),
                );
                let exit = measured(spec, ctx)?;
                let out = String::from_utf8_lossy(&exit.stdout);
                if out.lines().last().map(str::trim) != Some("ok") {
                    return Err(format!(
                        "sqlite3's integrity check did not end with 'ok': {}",
                        out.lines().last().unwrap_or("(no output)")
                    ));
                }
                Ok(whole_program(&exit, exit_digest(&exit)))
            }
            Kind::Compiler => {
                let functions = ctx.scaled(crate::gen_c::SMALL_FUNCTIONS as u64) as usize;
                let source = write_input(
                    &ctx.scratch,
                    "generated.c",
                    &crate::gen_c::generated_c_source(functions, 1),
                )?;
                let object = ctx.scratch.join("generated.o");
                let spec = Spec::new(
                    "cc",
                    [
                        "-O2".into(),
                        "-std=c11".into(),
                        "-c".into(),
                        source.into_os_string(),
                        "-o".into(),
                        object.clone().into_os_string(),
                    ],
                );
                let exit = measured(spec, ctx)?;
                // The compiler's result is its object file, the same bytes under every heap
                // (the source's name, the one other thing it records, never changes).
                let code = std::fs::read(&object)
                    .map_err(|e| format!("cannot read {}: {e}", object.display()))?;
                Ok(whole_program(&exit, process::digest(&code)))
            }
            Kind::Git => {
                let repo = git::repository(ctx.scaled(git::SMALL_COMMITS), ctx.timeout)?;
                let exit = measured(git::pack_spec(&repo), ctx)?;
                let digest = git::pack_digest(&exit, &repo, &ctx.scratch, ctx.timeout)?;
                Ok(whole_program(&exit, digest))
            }
            Kind::Redis => {
                let programs = redis::Programs::find()?;
                let load = redis::Load {
                    requests: ctx
                        .scaled(redis::Load::SMALL.requests)
                        .max(redis::MIN_REQUESTS),
                    ..redis::Load::SMALL
                };
                let out = redis::run(&programs, ctx.preload.as_deref(), &load, ctx.timeout)
                    .map_err(|e| e.to_string())?;
                let mut figures = vec![
                    figure("wall", "ms", out.wall.as_secs_f64() * 1e3, true),
                    figure("cpu", "ms", out.server_cpu.as_secs_f64() * 1e3, true),
                    figure("peak_rss", "MiB", mib(out.server_peak_rss_bytes), true),
                    // 1 where the server maps libjemalloc.so itself (see
                    // `redis::Outcome::maps_libjemalloc`): its `system` figures are then a
                    // control for the `libjemalloc` peer's.
                    figure(
                        redis::MAPS_LIBJEMALLOC,
                        "bool",
                        f64::from(u8::from(out.maps_libjemalloc)),
                        false,
                    ),
                ];
                for (command, rps) in &out.requests_per_s {
                    figures.push(Figure {
                        metric: format!("{command}_rps"),
                        unit: "req/s",
                        value: *rps,
                        lower_is_better: false,
                    });
                }
                Ok(Measured {
                    figures,
                    digest: out.digest,
                })
            }
        }
    }
}

fn figure(metric: &str, unit: &'static str, value: f64, lower_is_better: bool) -> Figure {
    Figure {
        metric: metric.to_owned(),
        unit,
        value,
        lower_is_better,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Wall time, CPU time and peak RSS of a whole-program run.
fn whole_program(exit: &Exit, digest: u64) -> Measured {
    Measured {
        figures: vec![
            figure("wall", "ms", exit.wall.as_secs_f64() * 1e3, true),
            figure("cpu", "ms", exit.cpu().as_secs_f64() * 1e3, true),
            figure("peak_rss", "MiB", mib(exit.peak_rss_bytes), true),
        ],
        digest,
    }
}

fn exit_digest(exit: &Exit) -> u64 {
    process::digest(&exit.stdout)
}

/// Runs `spec` under the context's heap and timeout; a non-zero exit is an error.
fn measured(mut spec: Spec, ctx: &Context) -> Result<Exit, String> {
    spec.preload.clone_from(&ctx.preload);
    spec.timeout = ctx.timeout;
    spec.dir = Some(ctx.scratch.clone());
    let exit = process::run(&spec).map_err(|e| e.to_string())?;
    if !exit.status.success() {
        return Err(format!(
            "{} ended with {}{}",
            spec.program.to_string_lossy(),
            exit.status_text(),
            exit.last_stderr_line()
                .map_or(String::new(), |l| format!(": {l}"))
        ));
    }
    Ok(exit)
}

fn write_input(dir: &Path, name: &str, text: &str) -> Result<PathBuf, String> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

fn run_classic(c: &ClassicProgram, ctx: &Context) -> Result<Measured, String> {
    let dir = classic_dir();
    let binaries = classic::compile(&dir, "cc".as_ref()).map_err(|e| e.to_string())?;
    let binary = binaries
        .iter()
        .find(|b| b.file_name().is_some_and(|n| n == c.name))
        .ok_or_else(|| format!("{} was not compiled", c.name))?;
    let spec = Spec::new(
        binary,
        [
            ctx.threads.to_string(),
            ctx.scale.to_owned(),
            ctx.seed.to_string(),
        ],
    );
    let exit = measured(spec, ctx)?;
    let out = classic::parse_output(
        &String::from_utf8_lossy(&exit.stdout),
        &String::from_utf8_lossy(&exit.stderr),
    )?;
    let mut m = whole_program(&exit, exit_digest(&exit));
    m.figures
        .insert(0, figure("time", "ms", out.time.as_secs_f64() * 1e3, true));
    Ok(m)
}

/// Where the classic benchmarks are compiled: one directory per version of their sources,
/// shared by every run (and kept between runs of the harness).
pub fn classic_dir() -> PathBuf {
    let mut all = classic::BENCH_H.as_bytes().to_vec();
    for c in classic::CLASSIC {
        all.extend_from_slice(c.source.as_bytes());
    }
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!(
        "alloclab-classic-{uid}-{:013x}",
        process::digest(&all)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_program_needs_something() {
        let mut names: Vec<&str> = all().iter().map(|p| p.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(all().iter().all(|p| !p.needs.is_empty()));
        assert!(find("redis").is_some() && find("c-larson").is_some());
    }

    #[test]
    fn a_missing_executable_is_named_with_its_install_line() {
        let p = Program {
            name: "x",
            description: "",
            kind: Kind::Sqlite,
            needs: &[
                Need {
                    executable: "alloclab-missing-a",
                    package: "pkg-a",
                },
                Need {
                    executable: "sh",
                    package: "dash",
                },
            ],
        };
        assert_eq!(
            p.missing().as_deref(),
            Some("alloclab-missing-a not found: apt-get install -y pkg-a dash")
        );
        assert!(p.run(&context(None)).unwrap_err().contains("not found"));
    }

    fn context(preload: Option<PathBuf>) -> Context {
        let scratch = std::env::temp_dir().join(format!("alloclab-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        Context {
            preload,
            threads: 2,
            scale: "tiny",
            factor: 1.0 / 64.0,
            seed: 42,
            scratch,
            timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn every_available_program_runs_at_tiny_scale_with_the_same_result_twice() {
        let ctx = context(None);
        for p in all() {
            if let Some(why) = p.missing() {
                println!("skipped {}: {why}", p.name);
                continue;
            }
            let a = p.run(&ctx).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let b = p.run(&ctx).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert_eq!(a.digest, b.digest, "{}", p.name);
            let metric = |m: &Measured, name: &str| {
                m.figures.iter().find(|f| f.metric == name).map(|f| f.value)
            };
            assert!(metric(&a, "wall").is_some_and(|v| v > 0.0), "{}", p.name);
            assert!(
                metric(&a, "peak_rss").is_some_and(|v| v > 0.5),
                "{}",
                p.name
            );
            if p.takes_threads() {
                assert!(metric(&a, "time").is_some_and(|v| v > 0.0), "{}", p.name);
            }
        }
        let _ = std::fs::remove_dir_all(&ctx.scratch);
    }
}
