//! Helpers shared by the file-medium tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use alloclab_pmem::Medium;

/// A unique path under the temporary directory, removed (if it exists) on drop.
pub struct TempPath(PathBuf);

impl TempPath {
    /// A path no other test or process uses; nothing is created.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!(
            "alloclab-pmem-test-{}-{n}-{name}",
            std::process::id()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes `value` at `offset` (aligned, in bounds) of `medium`.
pub fn store_u64(medium: &dyn Medium, offset: usize, value: u64) {
    assert!(offset.is_multiple_of(8) && offset + 8 <= medium.len());
    // SAFETY: aligned, in bounds, and no other thread touches these bytes.
    unsafe { medium.base().add(offset).cast::<u64>().write(value) };
}

/// Reads the u64 at `offset` (aligned, in bounds) of `medium`.
pub fn load_u64(medium: &dyn Medium, offset: usize) -> u64 {
    assert!(offset.is_multiple_of(8) && offset + 8 <= medium.len());
    // SAFETY: as for `store_u64`.
    unsafe { medium.base().add(offset).cast::<u64>().read() }
}

/// `Some(true)` when the variable is "1", `Some(false)` when "0".
pub fn env_flag(name: &str) -> Option<bool> {
    match std::env::var(name).as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// Writes a pattern over `medium`, persists it, and returns the pattern's seed.
pub fn write_pattern(medium: &dyn Medium, seed: u64) {
    for offset in (0..medium.len() - 7).step_by(4096 + 8) {
        store_u64(medium, offset, seed ^ offset as u64);
        medium.persist(offset, 8);
    }
}

/// Asserts the pattern of `write_pattern(_, seed)` is in `medium`.
pub fn check_pattern(medium: &dyn Medium, seed: u64) {
    for offset in (0..medium.len() - 7).step_by(4096 + 8) {
        assert_eq!(
            load_u64(medium, offset),
            seed ^ offset as u64,
            "at {offset}"
        );
    }
}
