//! The heaps a program can be run on: the shared library each puts in front of the C library
//! with `LD_PRELOAD`, or nothing for the C library's own malloc.
//!
//! - alloclab's heaps come as the preload libraries of `allocators/preload`
//!   (`liballoclab_preload_wfspan.so`, ...), built with the `preload` profile (`release`
//!   with aborting panics, which lets wfspan's leave the standard library out). They are
//!   looked for in `ALLOCLAB_PRELOAD_DIR` when it is set, else in `target/preload/` beside
//!   the running `alloclab` executable's `target/<profile>/`, where [`ensure_built`] brings
//!   them up to date with cargo when the workspace is there to build from.
//! - The peers come as the shared libraries their maintainers ship, from the distribution:
//!   `libmimalloc.so.2`, `libjemalloc.so.2`, `libtcmalloc_minimal.so.4`, found through the
//!   dynamic linker's cache (`ldconfig -p`) or the usual library directories.
//! - A peer its maintainers ship as source only (hardened_malloc, `libhardened`) comes as the
//!   library the user built from it, at the path an environment variable names
//!   (`ALLOCLAB_LIBHARDENED`); without it, the peer is left out of a suite with a one-line
//!   hint, like a distribution library that is not installed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{AllocatorInfo, Implementation};

/// Where a heap's preload library comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing is preloaded: the program's own malloc (the C library's, or what the program
    /// is linked with).
    Nothing,
    /// One of alloclab's preload libraries, built from this workspace.
    Alloclab {
        /// The cargo package that builds it.
        package: &'static str,
        /// The file it builds.
        file: &'static str,
    },
    /// A shared library from the distribution.
    Distribution {
        /// Its soname.
        soname: &'static str,
        /// The Debian package that ships it.
        package: &'static str,
    },
    /// A shared library the user built from its maintainers' source.
    UserBuilt {
        /// The file its build makes.
        file: &'static str,
        /// The environment variable that holds the file's path.
        env: &'static str,
        /// Where its source is and how it is built, in a few words.
        build: &'static str,
    },
}

/// The environment variable that names the directory of alloclab's preload libraries.
pub const PRELOAD_DIR_ENV: &str = "ALLOCLAB_PRELOAD_DIR";

/// How `allocator` is preloaded, if it can be: what its registry entry says.
pub fn source(allocator: &str) -> Option<Source> {
    source_of(super::find(allocator)?)
}

/// How the registry entry `info` is preloaded, if it can be.
fn source_of(info: &AllocatorInfo) -> Option<Source> {
    match info.imp {
        Implementation::Host(heap) => heap.preload(),
        Implementation::SharedLibrary { soname, package } => {
            Some(Source::Distribution { soname, package })
        }
        Implementation::UserBuiltLibrary { file, env, build } => {
            Some(Source::UserBuilt { file, env, build })
        }
        _ => None,
    }
}

/// Every allocator a program can be run on, in the registry's order, with its source.
pub fn preloadable() -> impl Iterator<Item = (&'static str, Source)> {
    super::ALLOCATORS
        .iter()
        .filter_map(|a| Some((a.name, source_of(a)?)))
}

/// The one command that installs every distribution library that is missing here, if any.
pub fn install_line_for_missing() -> Option<String> {
    let missing: Vec<&str> = preloadable()
        .filter_map(|(_, s)| match s {
            Source::Distribution { soname, package } if find_shared_library(soname).is_none() => {
                Some(package)
            }
            _ => None,
        })
        .collect();
    (!missing.is_empty()).then(|| format!("apt-get install -y {}", missing.join(" ")))
}

/// Why `allocator`'s library cannot be loaded here, as one line with the install command;
/// `None` when it can (alloclab's are built on demand, so only a distribution library or a
/// user-built one can be missing).
pub fn unavailable(allocator: &str) -> Option<String> {
    match source(allocator)? {
        Source::Distribution { soname, package } if find_shared_library(soname).is_none() => {
            Some(format!("{soname} not found: apt-get install -y {package}"))
        }
        Source::UserBuilt { file, env, build } => {
            user_built(file, env, build, std::env::var_os(env)).err()
        }
        _ => None,
    }
}

/// The user-built library `file` at the path `given` (the value of `env`, if set): its
/// absolute path, so that a program that changes directory still loads it.
///
/// # Errors
///
/// One line: `env` is not set (or empty), or names no file, with how the library is built.
fn user_built(
    file: &str,
    env: &str,
    build: &str,
    given: Option<OsString>,
) -> Result<PathBuf, String> {
    let how = format!("{build}, then set {env} to the path of its {file}");
    let path = match given {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => return Err(format!("{env} not set: {how}")),
    };
    match std::fs::canonicalize(&path) {
        Ok(found) if found.is_file() => Ok(found),
        _ => Err(format!("{env}={} is not a file: {how}", path.display())),
    }
}

/// The cargo profile alloclab's preload libraries are built with: `release` with aborting
/// panics, so that the wfspan library leaves the standard library out (the workspace's
/// `Cargo.toml`).
pub const PRELOAD_PROFILE: &str = "preload";

/// The directory alloclab's preload libraries are looked for in: [`PRELOAD_DIR_ENV`] when
/// set; for an executable in a cargo profile directory (`target/release`, `target/debug`),
/// the [`PRELOAD_PROFILE`]'s beside it (`target/preload`); else the executable's own.
pub fn alloclab_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(PRELOAD_DIR_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| "the executable has no directory".to_owned())?;
    Ok(preload_dir_for(dir))
}

/// Where the preload libraries of an executable in `exe_dir` are.
fn preload_dir_for(exe_dir: &Path) -> PathBuf {
    let profile = exe_dir.file_name().and_then(|n| n.to_str());
    match (profile, exe_dir.parent()) {
        (Some("release" | "debug"), Some(target)) => target.join(PRELOAD_PROFILE),
        _ => exe_dir.to_owned(),
    }
}

/// The command that builds `package`'s preload library.
pub fn build_command_line(package: &str) -> String {
    format!("cargo build --profile {PRELOAD_PROFILE} -p {package}")
}

/// The library to preload for `allocator`: `Ok(None)` for the C library's own malloc.
///
/// # Errors
///
/// One line: the allocator has no preload library (with the ones that do), or its library is
/// not there (with what installs or builds it).
pub fn resolve(allocator: &str) -> Result<Option<PathBuf>, String> {
    match source(allocator) {
        None => Err(not_preloadable(allocator)),
        Some(Source::Nothing) => Ok(None),
        Some(Source::Distribution { soname, package }) => find_shared_library(soname)
            .map(Some)
            .ok_or_else(|| format!("{soname} not found: apt-get install -y {package}")),
        Some(Source::UserBuilt { file, env, build }) => {
            user_built(file, env, build, std::env::var_os(env)).map(Some)
        }
        Some(Source::Alloclab { package, file }) => {
            let path = alloclab_dir()?.join(file);
            if path.is_file() {
                Ok(Some(path))
            } else {
                Err(format!(
                    "{} not found (build it with: {})",
                    path.display(),
                    build_command_line(package)
                ))
            }
        }
    }
}

/// The message for an allocator that cannot be put in front of a program.
pub fn not_preloadable(allocator: &str) -> String {
    let names: Vec<&str> = preloadable().map(|(n, _)| n).collect();
    let hint = match allocator {
        "mimalloc" | "jemalloc" => {
            format!("; '{allocator}' is the in-process crate, 'lib{allocator}' its shared library")
        }
        "tcmalloc" => "; did you mean 'libtcmalloc'?".to_owned(),
        _ => String::new(),
    };
    format!(
        "allocator '{allocator}' cannot be preloaded into a program (those that can: {}){hint}",
        names.join(", ")
    )
}

/// Brings alloclab's preload libraries among `allocators` up to date with cargo (a second or
/// so when nothing changed), when the workspace they come from is there, so that a program
/// never runs on a library older than its sources; says so when one had to be built from
/// scratch. With [`PRELOAD_DIR_ENV`] set, nothing is built: the directory is the user's.
///
/// # Errors
///
/// If a library is needed, cannot be found, and cannot be built (with cargo's last line).
pub fn ensure_built(allocators: &[&str]) -> Result<(), String> {
    let packages: Vec<(&str, &str)> = allocators
        .iter()
        .filter_map(|a| match source(a)? {
            Source::Alloclab { package, file } => Some((package, file)),
            _ => None,
        })
        .collect();
    if packages.is_empty() || std::env::var_os(PRELOAD_DIR_ENV).is_some() {
        return Ok(());
    }
    let dir = alloclab_dir()?;
    let missing: Vec<&str> = packages
        .iter()
        .filter(|(_, file)| !dir.join(file).is_file())
        .map(|&(_, file)| file)
        .collect();
    // The workspace this executable was built from, and the target directory it sits in.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned);
    let target_dir = dir
        .parent()
        .filter(|_| dir.file_name().and_then(|n| n.to_str()) == Some(PRELOAD_PROFILE));
    let buildable = workspace
        .as_ref()
        .is_some_and(|w| w.join("Cargo.toml").is_file())
        && target_dir.is_some();
    if !buildable {
        // Nothing to build from: the libraries there are used as they are.
        return match packages.iter().find(|(_, file)| !dir.join(file).is_file()) {
            Some((package, file)) => Err(format!(
                "{} not found (build it with: {})",
                dir.join(file).display(),
                build_command_line(package)
            )),
            None => Ok(()),
        };
    }
    if !missing.is_empty() {
        eprintln!("note: building {} with cargo", missing.join(" and "));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // One package per build: cargo unifies the features of the packages it builds together,
    // and randomized's library needs the standard library, which wfspan's leaves out.
    for (package, file) in &packages {
        let output = Command::new(&cargo)
            .args([
                "build",
                "--quiet",
                "--profile",
                PRELOAD_PROFILE,
                "-p",
                package,
            ])
            .arg("--target-dir")
            .arg(target_dir.expect("checked above"))
            .current_dir(workspace.as_ref().expect("checked above"))
            .output()
            .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "building {file} failed: {}",
                stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no message")
            ));
        }
    }
    Ok(())
}

/// Where the shared library `soname` is: from the dynamic linker's cache, or the usual
/// library directories.
pub fn find_shared_library(soname: &str) -> Option<PathBuf> {
    let from_cache = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|ldconfig| Command::new(ldconfig).arg("-p").output().ok())
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|line| {
                    // "\tlibjemalloc.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libjemalloc.so.2"
                    let (name, rest) = line.trim().split_once(' ')?;
                    let path = rest.split_once("=> ")?.1.trim();
                    (name == soname && native_abi(rest)).then(|| PathBuf::from(path))
                })
        })
        .filter(|p| p.is_file());
    from_cache.or_else(|| {
        [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/lib64",
            "/usr/lib",
            "/usr/local/lib",
        ]
        .iter()
        .map(|d| Path::new(d).join(soname))
        .find(|p| p.is_file())
    })
}

/// Whether an `ldconfig -p` entry's ABI tag, `(libc6,x86-64)`, is this process's.
fn native_abi(entry: &str) -> bool {
    if cfg!(target_arch = "x86_64") {
        entry.contains("x86-64")
    } else if cfg!(target_arch = "aarch64") {
        entry.contains("AArch64")
    } else {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_allocators_that_claim_to_run_programs_have_a_preload_source() {
        let names: Vec<&str> = preloadable().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "wfspan",
                "randomized",
                "system",
                "libmimalloc",
                "libjemalloc",
                "libtcmalloc",
                "libhardened"
            ]
        );
        for a in crate::peers::ALLOCATORS {
            assert_eq!(
                a.fits(crate::peers::Capability::Program),
                source(a.name).is_some(),
                "{}",
                a.name
            );
        }
    }

    #[test]
    fn a_cargo_built_executable_finds_the_libraries_of_the_preload_profile_beside_its_own() {
        assert_eq!(
            preload_dir_for(Path::new("/w/target/release")),
            Path::new("/w/target/preload")
        );
        assert_eq!(
            preload_dir_for(Path::new("/w/target/debug")),
            Path::new("/w/target/preload")
        );
        // Installed elsewhere: the libraries are beside it.
        assert_eq!(
            preload_dir_for(Path::new("/usr/local/bin")),
            Path::new("/usr/local/bin")
        );
        assert_eq!(
            build_command_line("alloclab-preload-wfspan"),
            "cargo build --profile preload -p alloclab-preload-wfspan"
        );
    }

    #[test]
    fn the_c_library_preloads_nothing_and_in_process_crates_are_pointed_to_their_library() {
        assert_eq!(resolve("system"), Ok(None));
        let e = resolve("mimalloc").unwrap_err();
        assert!(e.contains("'libmimalloc' its shared library"), "{e}");
        let e = resolve("rlsf").unwrap_err();
        assert!(e.starts_with("allocator 'rlsf' cannot be preloaded"), "{e}");
    }

    #[test]
    fn a_user_built_library_is_found_only_at_the_file_its_variable_names() {
        let (file, env, build) = ("libx.so", "ALLOCLAB_LIBX", "build x with `make`");
        let e = user_built(file, env, build, None).unwrap_err();
        assert_eq!(
            e,
            "ALLOCLAB_LIBX not set: build x with `make`, then set ALLOCLAB_LIBX to the path of \
             its libx.so"
        );
        let e = user_built(file, env, build, Some(OsString::new())).unwrap_err();
        assert!(e.starts_with("ALLOCLAB_LIBX not set: "), "{e}");
        let dir = std::env::temp_dir().join(format!("alloclab-userbuilt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = user_built(file, env, build, Some(dir.clone().into_os_string())).unwrap_err();
        assert!(
            e.starts_with(&format!("ALLOCLAB_LIBX={} is not a file: ", dir.display())),
            "{e}"
        );
        let missing = dir.join("no-such.so");
        assert!(user_built(file, env, build, Some(missing.into_os_string())).is_err());
        let lib = dir.join("libx.so");
        std::fs::write(&lib, b"").unwrap();
        // Found by a roundabout path, it comes back plain and absolute.
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let roundabout = dir.join("sub").join("..").join("libx.so");
        assert_eq!(
            user_built(file, env, build, Some(roundabout.into_os_string())),
            Ok(lib.canonicalize().unwrap())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_library_that_is_not_installed_is_not_found() {
        assert_eq!(
            find_shared_library("liballoclab-no-such-library.so.9"),
            None
        );
        // The C library itself is always there.
        assert!(find_shared_library("libc.so.6").is_some());
    }
}
