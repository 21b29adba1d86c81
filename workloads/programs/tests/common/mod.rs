//! What the programs crate's test files share.

use std::path::PathBuf;

/// A fresh scratch directory for test `test` of the test file `file`.
pub fn scratch(file: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "alloclab-programs-{file}-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}
