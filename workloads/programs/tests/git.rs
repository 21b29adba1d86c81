//! The git program: the generated history imports into a repository whose log has every
//! commit, its pack reads back to the same digest run after run, and a damaged pack is
//! refused with a message rather than digested.
//!
//! Without git the tests skip with a printed line. The history is three commits, so the
//! file takes well under a second.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use alloclab_programs::git::{FILES, pack_digest, pack_spec, repository};
use alloclab_programs::process;

const TIMEOUT: Duration = Duration::from_secs(60);

fn have_git() -> bool {
    if process::find_program("git").is_some() {
        return true;
    }
    println!("skipped: git not found (apt-get install -y git)");
    false
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    common::scratch("git", test)
}

#[test]
fn the_history_packs_and_reads_back_to_the_same_digest_every_run() {
    if !have_git() {
        return;
    }
    let repo = repository(3, TIMEOUT).expect("the repository");
    // Made once: asked again, the same directory comes back.
    assert_eq!(repository(3, TIMEOUT).unwrap(), repo);
    let log = std::process::Command::new("git")
        .args([
            "-C".as_ref(),
            repo.as_os_str(),
            "log".as_ref(),
            "--oneline".as_ref(),
        ])
        .output()
        .expect("git log");
    assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 4);
    let dir = scratch("digest");
    let digests: Vec<u64> = (0..2)
        .map(|_| {
            let mut spec = pack_spec(&repo);
            spec.timeout = TIMEOUT;
            let exit = process::run(&spec).expect("pack-objects runs");
            assert!(exit.status.success(), "{}", exit.status_text());
            // The pack holds at least every file of the first commit.
            assert!(
                exit.stdout.len() > FILES * 100,
                "{} bytes",
                exit.stdout.len()
            );
            pack_digest(&exit, &repo, &dir, TIMEOUT).expect("the pack reads back")
        })
        .collect();
    assert_eq!(digests[0], digests[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_pack_is_refused_with_a_message() {
    if !have_git() {
        return;
    }
    let repo = repository(3, TIMEOUT).expect("the repository");
    let dir = scratch("damaged");
    let mut spec = pack_spec(&repo);
    spec.timeout = TIMEOUT;
    let mut exit = process::run(&spec).expect("pack-objects runs");
    // One byte of compressed data flipped, past the pack's 12-byte header.
    let middle = exit.stdout.len() / 2;
    exit.stdout[middle] ^= 0x55;
    let why = pack_digest(&exit, &repo, &dir, TIMEOUT).expect_err("a damaged pack");
    assert!(why.starts_with("git index-pack"), "{why}");
    exit.stdout.clear();
    let why = pack_digest(&exit, &repo, &dir, TIMEOUT).expect_err("no pack");
    assert!(why.contains("no pack"), "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}
