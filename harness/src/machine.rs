//! What machine, and what tree, a result was measured on.

use std::process::Command;

use crate::results::Machine;

/// Describes this machine. Fields the OS does not tell are `"unknown"` or 0.
pub fn describe() -> Machine {
    Machine {
        cpu_model: cpu_model().unwrap_or_else(|| "unknown".to_owned()),
        cores: logical_cores(),
        memory_bytes: memory_bytes().unwrap_or(0),
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned()),
    }
}

/// Logical cores this process may run on (at least 1).
pub fn logical_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| {
            l.starts_with("model name") || l.starts_with("Model") || l.starts_with("CPU part")
        })
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

fn memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The commit of the working tree the process was started in, and whether it has
/// uncommitted changes; `("unknown", false)` outside a git checkout.
pub fn commit() -> (String, bool) {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            (hash, dirty)
        }
        _ => ("unknown".to_owned(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_described_with_cores_and_memory() {
        let m = describe();
        assert!(m.cores >= 1);
        assert_eq!(m.cores, logical_cores());
        if cfg!(target_os = "linux") {
            assert!(m.memory_bytes > 0, "MemTotal not read from /proc/meminfo");
            assert_ne!(m.kernel, "unknown");
        }
    }
}
