//! wfspan under a limit on address space (`ulimit -v`, as containers and batch schedulers
//! set it): the span region is reserved at 64 GiB by default and halved until the OS
//! agrees, so the heap still starts where 64 GiB cannot be had.
//!
//! The limit is set in a forked child, which reports back through its exit code: it would
//! hold for every test of this process otherwise.

use core::alloc::Layout;

use alloclab_core::Allocator;
use alloclab_wfspan::WfSpan;

/// This process's mapped address space, in bytes (`VmSize`).
fn mapped_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize");
    kib * 1024
}

#[test]
fn a_heap_starts_under_an_address_space_limit_below_its_default_region() {
    let heap = WfSpan::new();
    let layout = Layout::from_size_align(64, 16).unwrap();
    // What the child may map beyond what is mapped now: far below the default 64 GiB
    // region, and above the 1 GiB floor of the halving.
    let limit = mapped_bytes() + (8 << 30);
    // SAFETY: the child only sets a limit, runs the heap and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let rlimit = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: a plain system call on this (child) process.
        let code = if unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlimit) } != 0 {
            2
        } else {
            match heap.allocate(layout) {
                Ok(p) => {
                    // SAFETY: live, allocated with `layout`, freed once.
                    unsafe { heap.deallocate(p, layout) };
                    0
                }
                Err(_) => 1,
            }
        };
        // SAFETY: leaving the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status),
        "the child ended by a signal: {status:#x}"
    );
    match libc::WEXITSTATUS(status) {
        0 => {}
        1 => panic!("no block under an address-space limit of {limit} bytes"),
        code => panic!("the child could not set the limit (exit {code})"),
    }
}
