//! git packing a generated history under the heap being measured.
//!
//! The history is generated once per size and kept (like the compiled classic benchmarks):
//! [`FILES`] text files in eight directories, then commits that each rewrite a few lines of
//! [`TOUCHED_PER_COMMIT`] files, all with fixed names and dates, imported with
//! `git fast-import` under the C library's malloc. One run is then
//!
//! ```text
//! git -c pack.threads=2 pack-objects --all --revs --stdout --window=50 \
//!     --no-reuse-delta --no-reuse-object
//! ```
//!
//! under the heap: every object of the history compressed again and searched for deltas
//! against its 50 neighbours, by two threads that git starts itself (threads the preloaded
//! heap never saw start), with the delta index and window buffers allocated and freed per
//! object. Its result is checked outside the measurement, under the C library's malloc:
//! `git index-pack` reads the pack back (which verifies every object's hash) and the sorted
//! list of the object names it holds is the run's digest, the same under every correct heap.
//! The pack's own bytes are not: git's threads share out the delta search as they finish,
//! so which deltas it finds may depend on timing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use alloclab_core::rng::SplitMix64;

use crate::process::{self, Exit, Spec};

/// Files in the generated tree.
pub const FILES: usize = 300;
/// Commits after the first at the small scale.
pub const SMALL_COMMITS: u64 = 60;
/// Files each commit after the first rewrites a few lines of.
pub const TOUCHED_PER_COMMIT: usize = 15;
/// The threads `pack-objects` searches for deltas with.
pub const PACK_THREADS: usize = 2;
/// How many neighbours each object is compared with for a delta.
pub const WINDOW: usize = 50;

/// Words the generated text is made of.
const WORDS: [&str; 16] = [
    "alpha", "beta", "gamma", "delta", "malloc", "free", "span", "arena", "block", "page", "slab",
    "cache", "lock", "thread", "heap", "chunk",
];

/// A number in `lo..=hi`.
fn range(rng: &mut SplitMix64, lo: usize, hi: usize) -> usize {
    rng.range_inclusive(lo as u64, hi as u64) as usize
}

/// A line of 3 to 12 words.
fn line(rng: &mut SplitMix64) -> String {
    let words = range(rng, 3, 12);
    let mut line = String::new();
    for i in 0..words {
        if i > 0 {
            line.push(' ');
        }
        line.push_str(WORDS[rng.below(WORDS.len())]);
    }
    line
}

/// The `git fast-import` stream of the whole history: a first commit of [`FILES`] files,
/// then `commits` commits, each rewriting a few lines of [`TOUCHED_PER_COMMIT`] files.
pub fn fast_import_stream(commits: u64) -> Vec<u8> {
    // The history must be the same on every machine and every run.
    let mut rng = SplitMix64::new(0x0a11_0c1a_b617);
    let mut files: Vec<Vec<String>> = (0..FILES)
        .map(|_| {
            let lines = range(&mut rng, 20, 200);
            (0..lines).map(|_| line(&mut rng)).collect()
        })
        .collect();
    let mut out = Vec::new();
    let base_time: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z
    for commit in 0..=commits {
        let touched: Vec<usize> = if commit == 0 {
            (0..FILES).collect()
        } else {
            let mut picked = Vec::with_capacity(TOUCHED_PER_COMMIT);
            while picked.len() < TOUCHED_PER_COMMIT {
                let f = range(&mut rng, 0, FILES - 1);
                if !picked.contains(&f) {
                    picked.push(f);
                }
            }
            for &f in &picked {
                let lines = &mut files[f];
                let at = range(&mut rng, 0, lines.len() - 1);
                let end = (at + range(&mut rng, 0, 3)).min(lines.len());
                let new: Vec<String> = (0..range(&mut rng, 1, 4)).map(|_| line(&mut rng)).collect();
                lines.splice(at..end, new);
            }
            picked
        };
        let time = base_time + commit * 60;
        let message = format!("commit {commit}\n");
        let from = if commit > 0 {
            format!("from :{commit}\n")
        } else {
            String::new()
        };
        out.extend_from_slice(
            format!(
                "commit refs/heads/main\nmark :{}\nauthor alloclab <alloclab@example.com> {time} +0000\ncommitter alloclab <alloclab@example.com> {time} +0000\ndata {}\n{message}{from}",
                commit + 1,
                message.len()
            )
            .as_bytes(),
        );
        for f in touched {
            let mut text = files[f].join("\n");
            text.push('\n');
            out.extend_from_slice(
                format!("M 100644 inline d{}/f{f}.txt\ndata {}\n", f % 8, text.len()).as_bytes(),
            );
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
        }
    }
    out
}

/// The generated repository of `commits` commits, made once and kept in the temporary
/// directory (under the C library's malloc); its path.
///
/// # Errors
///
/// A one-line message: git failed, or the directory could not be written.
pub fn repository(commits: u64, timeout: Duration) -> Result<PathBuf, String> {
    let stream = fast_import_stream(commits);
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!(
        "alloclab-git-{uid}-{:013x}",
        process::digest(&stream)
    ));
    let ready = dir.join("alloclab-ready");
    if ready.is_file() {
        return Ok(dir);
    }
    // Built beside its final place and renamed into it: a repository that is there is whole.
    // Named for this process and call: two threads of one harness may build it at once.
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let build = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let building = dir.with_extension(format!("building-{}-{build}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building)
        .map_err(|e| format!("cannot create {}: {e}", building.display()))?;
    git(&building, &["init", "-q", "-b", "main"], None, timeout)?;
    git(
        &building,
        &["fast-import", "--quiet"],
        Some(stream),
        timeout,
    )?;
    std::fs::write(building.join("alloclab-ready"), b"")
        .map_err(|e| format!("cannot write in {}: {e}", building.display()))?;
    match std::fs::rename(&building, &dir) {
        Ok(()) => Ok(dir),
        // Another harness made it meanwhile: use theirs.
        Err(_) if ready.is_file() => {
            let _ = std::fs::remove_dir_all(&building);
            Ok(dir)
        }
        Err(e) => Err(format!("cannot rename {}: {e}", building.display())),
    }
}

/// Runs `git -C dir ARGS` under the C library's malloc, standard input `stdin`; its
/// standard output, or a one-line error.
fn git(
    dir: &Path,
    args: &[&str],
    stdin: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut spec = Spec::new("git", ["-C".as_ref(), dir.as_os_str()]);
    spec.args.extend(args.iter().map(Into::into));
    spec.stdin = stdin;
    spec.timeout = timeout;
    let exit = process::run(&spec).map_err(|e| e.to_string())?;
    if !exit.status.success() {
        return Err(format!(
            "git {} ended with {}{}",
            args.join(" "),
            exit.status_text(),
            exit.last_stderr_line()
                .map_or(String::new(), |l| format!(": {l}"))
        ));
    }
    Ok(exit.stdout)
}

/// The measured command: `pack-objects` of the whole history of `repo`, to standard
/// output.
pub fn pack_spec(repo: &Path) -> Spec {
    let threads = format!("pack.threads={PACK_THREADS}");
    let window = format!("--window={WINDOW}");
    let mut spec = Spec::new(
        "git",
        [
            "-C".as_ref(),
            repo.as_os_str(),
            "-c".as_ref(),
            threads.as_ref(),
            "pack-objects".as_ref(),
            "--all".as_ref(),
            "--revs".as_ref(),
            "--stdout".as_ref(),
            "-q".as_ref(),
            window.as_ref(),
            "--no-reuse-delta".as_ref(),
            "--no-reuse-object".as_ref(),
        ],
    );
    // `--revs` reads revisions from standard input: none beyond `--all`.
    spec.stdin = Some(Vec::new());
    spec
}

/// Checks the pack a measured run wrote (`exit`'s standard output) with `git index-pack`
/// in `scratch`, under the C library's malloc, and returns the digest of the sorted names
/// of the objects it holds.
///
/// # Errors
///
/// A one-line message: an empty or corrupt pack (index-pack verifies every object).
pub fn pack_digest(
    exit: &Exit,
    repo: &Path,
    scratch: &Path,
    timeout: Duration,
) -> Result<u64, String> {
    if exit.stdout.is_empty() {
        return Err("git pack-objects wrote no pack".into());
    }
    let pack = scratch.join("git-run.pack");
    std::fs::write(&pack, &exit.stdout)
        .map_err(|e| format!("cannot write {}: {e}", pack.display()))?;
    let index = scratch.join("git-run.idx");
    let pack_arg = pack.to_string_lossy().into_owned();
    let index_arg = index.to_string_lossy().into_owned();
    git(
        repo,
        &["index-pack", "-o", &index_arg, &pack_arg],
        None,
        timeout,
    )?;
    let listing = std::fs::read(&index)
        .map_err(|e| format!("cannot read {}: {e}", index.display()))
        .and_then(|idx| git(repo, &["show-index"], Some(idx), timeout))?;
    let mut names: Vec<&str> = std::str::from_utf8(&listing)
        .map_err(|_| "git show-index wrote something other than text".to_owned())?
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .collect();
    names.sort_unstable();
    let _ = std::fs::remove_file(&pack);
    let _ = std::fs::remove_file(&index);
    Ok(process::digest(names.join("\n").as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_is_the_same_every_time_and_grows_with_its_commits() {
        assert_eq!(fast_import_stream(3), fast_import_stream(3));
        let short = fast_import_stream(2);
        let long = fast_import_stream(5);
        assert!(long.len() > short.len());
        let text = String::from_utf8(long).unwrap();
        assert_eq!(text.matches("commit refs/heads/main").count(), 6);
        // The first commit holds every file; each later one rewrites a few.
        assert_eq!(
            text.matches("M 100644 inline").count(),
            FILES + 5 * TOUCHED_PER_COMMIT
        );
        assert_eq!(text.matches("from :").count(), 5);
    }
}
