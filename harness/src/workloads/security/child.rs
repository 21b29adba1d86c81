//! Forked children: run a closure in a copy of this process, collect what it writes to a
//! pipe (and, if asked, its stderr), and how it ended.
//!
//! The worker's stdout carries its one JSON line to the runner, so a child must never
//! print to stdout or flush anything buffered there: it writes only to its pipes with
//! `write(2)` and ends with `_exit(2)`, which runs no destructor, `atexit` handler or
//! stdio flush. A panic in the child prints its message to stderr and aborts (as a panic
//! inside a global allocator would).
//!
//! `fork` copies only the calling thread, so a child of a multi-threaded process could
//! find a lock held forever by a thread that does not exist in it. The workloads that
//! fork check first that the worker is single-threaded ([`ensure_single_threaded`]); the
//! worker process is, since every workload of the suite runs on its main thread.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// How a child ended.
#[derive(Clone, Debug)]
pub struct Ended {
    /// The status `waitpid` reported.
    pub status: i32,
    /// Whether it ran past its time and was killed (then `status` says `SIGKILL`).
    pub timed_out: bool,
    /// What it wrote to its data pipe.
    pub data: Vec<u8>,
    /// What it wrote to stderr, if stderr was captured.
    pub stderr: Vec<u8>,
}

impl Ended {
    /// Whether it exited normally with status 0.
    pub fn succeeded(&self) -> bool {
        !self.timed_out && libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0
    }

    /// The first non-empty line of its stderr, trimmed (empty if none); for a Rust panic,
    /// whose first line only says where, the message on the next line is appended.
    pub fn first_stderr_line(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr);
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().unwrap_or("").to_owned();
        if first.contains(" panicked at ")
            && let Some(message) = lines.next()
        {
            return format!("{first} {message}");
        }
        first
    }

    /// How it ended, in a few words: `exit 0`, `signal 6 (SIGABRT)`, `killed after 1s`.
    pub fn describe(&self, timeout: Duration) -> String {
        if self.timed_out {
            format!("killed after {:.1}s", timeout.as_secs_f64())
        } else if libc::WIFSIGNALED(self.status) {
            let sig = libc::WTERMSIG(self.status);
            format!("signal {sig} ({})", signal_name(sig))
        } else {
            format!("exit {}", libc::WEXITSTATUS(self.status))
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGKILL => "SIGKILL",
        _ => "other",
    }
}

/// The channel a child writes its results to.
#[derive(Debug)]
pub struct DataPipe {
    fd: OwnedFd,
}

impl DataPipe {
    /// Writes all of `bytes` with `write(2)` (no buffering, so nothing is left for an exit
    /// to flush).
    pub fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            // SAFETY: `bytes` is a live slice of `bytes.len()` bytes; the fd is ours.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            bytes = &bytes[n as usize..];
        }
        Ok(())
    }
}

/// The number of threads of this process, as `/proc/self/status` tells.
pub fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Threads:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Panics unless this process has exactly one thread: forking is only safe then (see the
/// module documentation).
pub fn ensure_single_threaded(workload: &str) {
    let threads = thread_count();
    assert!(
        threads == Some(1),
        "the {workload} workload forks, so it must run in a single-threaded process \
         (a worker); this one has {threads:?} threads"
    );
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `pipe2` succeeded, so both are open descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs `body` in a forked child and waits for it, at most `timeout` (then the child is
/// killed). The child gets a [`DataPipe`] whose contents come back in [`Ended::data`];
/// with `capture_stderr` its stderr (fd 2) goes to another pipe, returned in
/// [`Ended::stderr`], else it shares the worker's. Core dumps are off in the child, so a
/// misuse that aborts costs no core file.
///
/// The child ends with `_exit(0)` after `body` returns, or aborts if it panics: it never
/// returns into the caller's code, runs no destructor and flushes no stdio buffer.
///
/// # Errors
///
/// If a pipe cannot be made or the fork fails.
///
/// # Safety
///
/// The process must be single-threaded ([`ensure_single_threaded`]), and `body` must not
/// write to stdout.
pub unsafe fn run_child(
    timeout: Duration,
    capture_stderr: bool,
    body: impl FnOnce(&mut DataPipe),
) -> io::Result<Ended> {
    let (data_r, data_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // SAFETY: the caller promises a single-threaded process; the child below only runs
    // `body` and ends with `_exit` or `abort`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        child_main(data_r, data_w, err_r, err_w, capture_stderr, body);
    }
    drop(data_w);
    drop(err_w);
    let deadline = Instant::now() + timeout;
    let mut data = Vec::new();
    let mut stderr = Vec::new();
    let mut open = [Some(data_r), Some(err_r)];
    let mut timed_out = false;
    while open.iter().any(Option::is_some) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .flatten()
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structures.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        for pfd in fds.iter().filter(|p| p.revents != 0) {
            let slot = open
                .iter_mut()
                .position(|fd| fd.as_ref().is_some_and(|fd| fd.as_raw_fd() == pfd.fd))
                .expect("polled descriptors are open");
            let sink = if slot == 0 { &mut data } else { &mut stderr };
            let mut buf = [0u8; 4096];
            // SAFETY: `buf` is a live buffer of `buf.len()` bytes; the fd is open.
            let n = unsafe { libc::read(pfd.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                sink.extend_from_slice(&buf[..n as usize]);
            } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                open[slot] = None;
            }
        }
    }
    if timed_out {
        // SAFETY: `pid` is our child, not yet reaped, so the id cannot have been reused.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live i32; `pid` is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(Ended {
        status,
        timed_out,
        data,
        stderr,
    })
}

/// The child's side of [`run_child`]; never returns.
fn child_main(
    data_r: OwnedFd,
    data_w: OwnedFd,
    err_r: OwnedFd,
    err_w: OwnedFd,
    capture_stderr: bool,
    body: impl FnOnce(&mut DataPipe),
) -> ! {
    drop(data_r);
    drop(err_r);
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `no_core` is a valid rlimit; lowering a limit always may be done.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    if capture_stderr {
        // SAFETY: both are open descriptors; dup2 replaces fd 2 atomically.
        unsafe { libc::dup2(err_w.as_raw_fd(), libc::STDERR_FILENO) };
    }
    drop(err_w);
    let mut pipe = DataPipe { fd: data_w };
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| body(&mut pipe)));
    if outcome.is_err() {
        // The panic hook has printed the message to stderr.
        // SAFETY: abort is always safe to call; it ends the process.
        unsafe { libc::abort() };
    }
    // SAFETY: `_exit` ends the process at once, without destructors or stdio flushes, so
    // nothing of the parent's buffered output is written twice.
    unsafe { libc::_exit(0) }
}

#[cfg(test)]
mod tests {
    // The test harness runs tests on several threads, so these children do only what is
    // safe after forking a multi-threaded process: system calls, no allocation, no locks.
    use super::*;
    use crate::workloads::security::analysis::Verdict;

    const LONG: Duration = Duration::from_secs(10);

    fn raw_stderr(message: &[u8]) {
        // SAFETY: `message` is a live slice; fd 2 is open.
        unsafe { libc::write(libc::STDERR_FILENO, message.as_ptr().cast(), message.len()) };
    }

    #[test]
    fn a_child_hands_back_its_data_and_stderr_and_exits_cleanly() {
        // SAFETY: the child only writes to its pipes (see the module note above).
        let ended = unsafe {
            run_child(LONG, true, |pipe| {
                pipe.write_all(b"hello").unwrap();
                raw_stderr(b"\n  first line  \nsecond\n");
            })
        }
        .unwrap();
        assert!(ended.succeeded(), "{}", ended.describe(LONG));
        assert_eq!(ended.data, b"hello");
        assert_eq!(ended.first_stderr_line(), "first line");
        assert_eq!(ended.describe(LONG), "exit 0");
        assert_eq!(
            Verdict::from_wait_status(ended.status, ended.timed_out),
            Verdict::Silent
        );
    }

    #[test]
    fn an_aborting_child_is_caught_and_a_crashing_one_crashed() {
        // SAFETY: as above; abort and raise are async-signal-safe.
        let aborted = unsafe { run_child(LONG, true, |_| libc::abort()) }.unwrap();
        assert!(!aborted.succeeded());
        assert_eq!(aborted.describe(LONG), "signal 6 (SIGABRT)");
        assert_eq!(
            Verdict::from_wait_status(aborted.status, aborted.timed_out),
            Verdict::Caught
        );
        // SAFETY: as above.
        let crashed = unsafe {
            run_child(LONG, true, |_| {
                // Not SIGSEGV: std's handler for it returns when the fault was no real one.
                libc::raise(libc::SIGILL);
            })
        }
        .unwrap();
        assert_eq!(
            Verdict::from_wait_status(crashed.status, crashed.timed_out),
            Verdict::Crashed
        );
    }

    #[test]
    fn a_child_that_hangs_is_killed_after_its_timeout() {
        let timeout = Duration::from_millis(200);
        // SAFETY: as above; the child only sleeps.
        let ended = unsafe {
            run_child(timeout, false, |_| {
                loop {
                    libc::sleep(100);
                }
            })
        }
        .unwrap();
        assert!(ended.timed_out);
        // Killed by the parent, not waited for: the child would have slept 100 s.
        assert!(
            libc::WIFSIGNALED(ended.status) && libc::WTERMSIG(ended.status) == libc::SIGKILL,
            "{}",
            ended.describe(timeout)
        );
        assert_eq!(
            Verdict::from_wait_status(ended.status, ended.timed_out),
            Verdict::Hung
        );
    }

    #[test]
    fn a_panic_message_is_kept_with_its_location() {
        let ended = Ended {
            status: libc::SIGABRT,
            timed_out: false,
            data: Vec::new(),
            stderr: b"thread 'main' (7) panicked at src/x.rs:1:2:\nbad free\nnote: ...\n".to_vec(),
        };
        assert_eq!(
            ended.first_stderr_line(),
            "thread 'main' (7) panicked at src/x.rs:1:2: bad free"
        );
    }

    #[test]
    fn this_test_process_is_not_single_threaded_but_has_a_thread_count() {
        assert!(thread_count().is_some_and(|n| n >= 1));
    }
}
