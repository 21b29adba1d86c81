//! Runs a program in a fresh process and measures it from outside: wall time, user and
//! system CPU time and peak resident set, from the `rusage` that `wait4` returns for the
//! child (and the descendants it waited for: a compiler driver's `cc1`, say).
//!
//! The peak resident set is the program's own only if the process that execs it starts
//! small: `posix_spawn` (how `std` starts a program) runs the child in the harness's memory
//! until exec, and exec keeps that memory's high-water mark in the process's `ru_maxrss`, so
//! a program peaking below the harness's resident set read as the harness (`true` started by
//! a harness holding 128 MiB: 131 MiB). Programs therefore start through a launcher
//! (`c/launch.c`, compiled with `cc` on first use): it forks a copy of itself, a few pages,
//! which execs the program, and reports that child's `ru_maxrss`. Where no C compiler is
//! found, programs start directly and their peak includes the harness's resident set
//! ([`launcher`] says which).
//!
//! The child starts in a process group of its own, so that a timeout kills everything it
//! started. Its standard output and error go to unlinked temporary files, read back after it
//! exits: no pipe can fill up and stall it, and nothing of the harness reads while it runs.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

/// What to run: a program, its arguments and environment, and the heap to preload.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The program (a path, or a name looked up in `PATH`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables added to (or replacing) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// The shared library to put in front of the C library (`LD_PRELOAD`); `None` runs the
    /// program with the C library's own malloc. Any `LD_PRELOAD` the harness itself inherited
    /// is removed either way.
    pub preload: Option<PathBuf>,
    /// What the program reads on standard input (nothing: `/dev/null`).
    pub stdin: Option<Vec<u8>>,
    /// The working directory (the harness's own when `None`).
    pub dir: Option<PathBuf>,
    /// How long it may run before it (and its process group) is killed.
    pub timeout: Duration,
}

impl Spec {
    /// A spec for `program` with `args`, nothing preloaded, a 60 s timeout.
    pub fn new<S: AsRef<OsStr>>(
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            env: Vec::new(),
            preload: None,
            stdin: None,
            dir: None,
            timeout: Duration::from_secs(60),
        }
    }

    /// The command line as a person would type it, for messages.
    pub fn command_line(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The program ready to [`spawn`]: the launcher built (compiled with `cc` the first time
    /// a process asks), the program found in `PATH`, the command made. Whoever times a run
    /// prepares it before reading the clock: compiling the launcher took 60-70 ms on a
    /// 2-core VM, and every run of the `programs` suite is the first of a fresh worker.
    pub fn prepare(&self) -> Prepared {
        let launch = launcher().zip(self.program.to_str().and_then(find_program));
        let (mut command, report) = match launch {
            Some((launcher, program)) => {
                let report = scratch_path("rusage");
                let mut command = Command::new(launcher);
                command.arg(&report).arg(program);
                (command, Some(report))
            }
            None => (Command::new(&self.program), None),
        };
        command
            .args(&self.args)
            .env_remove("LD_PRELOAD")
            .env_remove(LAUNCH_PRELOAD);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        if let Some(lib) = &self.preload {
            // Through the launcher, only the program gets the heap, not the launcher.
            let variable = if report.is_some() {
                LAUNCH_PRELOAD
            } else {
                "LD_PRELOAD"
            };
            command.env(variable, lib);
        }
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        // A group of its own: a timeout kills the program and whatever it started.
        command.process_group(0);
        Prepared {
            command,
            report,
            stdin: self.stdin.clone(),
            program: self.program.clone(),
        }
    }
}

/// A [`Spec`] made ready to start ([`Spec::prepare`]): nothing is left to build or look up
/// between the clock's first reading and the program's start.
#[derive(Debug)]
pub struct Prepared {
    /// The `std` command (standard streams not set yet).
    command: Command,
    /// The file the launcher will report the peak resident set in, where it starts the
    /// program (see the module documentation).
    report: Option<PathBuf>,
    /// What the program reads on standard input.
    stdin: Option<Vec<u8>>,
    /// The program, for messages.
    program: OsString,
}

/// The variable the launcher passes on to the program as `LD_PRELOAD`.
const LAUNCH_PRELOAD: &str = "ALLOCLAB_LAUNCH_PRELOAD";

/// The launcher's C source (see the module documentation).
const LAUNCHER_SOURCE: &str = include_str!("../c/launch.c");

/// The launcher that programs start through: built with `cc` by the first process that
/// needs it, in a directory of this user's own named after the launcher's source
/// (`alloclab-launch-UID-DIGEST` in the temporary directory, mode 0700), and found there by
/// every later process (the `programs` suite starts a fresh worker per run, and each
/// compiled it again: 60-70 ms of a 2-core VM, 30 s of a default suite). Where that
/// directory exists but is not this user's alone, the launcher is built in a directory of
/// this process's own, removed when it exits. `None` where no C compiler is found or the
/// build fails: programs then start directly, and a program's peak resident set includes
/// the harness's (see the module documentation).
pub fn launcher() -> Option<&'static Path> {
    static LAUNCHER: OnceLock<Option<PathBuf>> = OnceLock::new();
    LAUNCHER.get_or_init(build_launcher).as_deref()
}

/// The launcher's directory where it is this process's own, for [`remove_launcher`] at
/// exit.
static LAUNCHER_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The executable's name in the launcher's directory.
const LAUNCHER_EXE: &str = "alloclab-launch";

fn build_launcher() -> Option<PathBuf> {
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let shared = std::env::temp_dir().join(format!(
        "alloclab-launch-{uid}-{:013x}",
        digest(LAUNCHER_SOURCE.as_bytes())
    ));
    let exe = shared.join(LAUNCHER_EXE);
    let mine = make_private_dir(&shared);
    if mine && exe.is_file() {
        return Some(exe);
    }
    let cc = find_program("cc")?;
    if mine {
        return compile_launcher(&cc, &shared);
    }
    let own = scratch_path("launch");
    if !make_private_dir(&own) {
        return None;
    }
    if LAUNCHER_DIR.set(own.clone()).is_ok() {
        // SAFETY: `remove_launcher` is an `extern "C" fn()` that does not unwind.
        unsafe { libc::atexit(remove_launcher) };
    }
    compile_launcher(&cc, &own)
}

/// Whether `dir` is a directory that only this user can write (created so if it does not
/// exist): nobody else can swap a binary in it.
fn make_private_dir(dir: &Path) -> bool {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// Compiles the launcher into `dir` (to a temporary name, renamed into place, so that two
/// processes building it at once each leave a whole executable).
fn compile_launcher(cc: &Path, dir: &Path) -> Option<PathBuf> {
    // Names no other build, in this process or another, uses at the same time.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let unique = format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let source = dir.join(format!("launch-{unique}.c"));
    let tmp = dir.join(format!(".{LAUNCHER_EXE}-{unique}"));
    let exe = dir.join(LAUNCHER_EXE);
    std::fs::write(&source, LAUNCHER_SOURCE).ok()?;
    let built = Command::new(cc)
        .args(["-O2", "-o"])
        .arg(&tmp)
        .arg(&source)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(&source);
    if built && std::fs::rename(&tmp, &exe).is_ok() {
        return Some(exe);
    }
    let _ = std::fs::remove_file(&tmp);
    None
}

/// Removes the launcher's directory, where it is this process's own (at exit).
extern "C" fn remove_launcher() {
    if let Some(dir) = LAUNCHER_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A path in the temporary directory that no other call, in this process or another, gets.
fn scratch_path(what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(".alloclab-{what}-{}-{n}", std::process::id()))
}

/// How a measured program ended, and what it cost.
#[derive(Clone, Debug)]
pub struct Exit {
    /// Its exit status.
    pub status: ExitStatus,
    /// From start to exit, as the harness saw it.
    pub wall: Duration,
    /// CPU time in user mode (the program and the descendants it waited for).
    pub user: Duration,
    /// CPU time in the kernel on its behalf.
    pub sys: Duration,
    /// The largest resident set of the program or any descendant it waited for, in bytes
    /// (`ru_maxrss`; without a [`launcher`], at least the harness's own resident set).
    pub peak_rss_bytes: u64,
    /// Everything it wrote to standard output.
    pub stdout: Vec<u8>,
    /// Everything it wrote to standard error.
    pub stderr: Vec<u8>,
}

impl Exit {
    /// User plus system CPU time.
    pub fn cpu(&self) -> Duration {
        self.user + self.sys
    }

    /// The status in words: `exit 0`, `exit 3`, `killed by signal 11 (SIGSEGV)`.
    pub fn status_text(&self) -> String {
        status_text(self.status)
    }

    /// The last non-empty line of standard error, for a one-line failure message.
    pub fn last_stderr_line(&self) -> Option<String> {
        String::from_utf8_lossy(&self.stderr)
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    }
}

/// An exit status in words.
pub fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
        (None, None) => status.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGTERM => "SIGTERM",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

/// Why a program could not be measured.
#[derive(Debug)]
pub enum RunError {
    /// The program does not exist or cannot be executed.
    NotFound {
        /// The program as given.
        program: String,
        /// The cause.
        source: io::Error,
    },
    /// It ran past its timeout; it and its process group were killed.
    TimedOut {
        /// The command line.
        command: String,
        /// The timeout.
        after: Duration,
    },
    /// Anything else the OS refused (temporary files, `wait4`).
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: io::Error,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { program, source } => match source.kind() {
                io::ErrorKind::NotFound => write!(f, "command '{program}' not found"),
                io::ErrorKind::PermissionDenied => {
                    write!(
                        f,
                        "command '{program}' cannot be executed: permission denied"
                    )
                }
                _ => write!(f, "cannot start '{program}': {source}"),
            },
            Self::TimedOut { command, after } => write!(
                f,
                "'{command}' did not finish within {} s and was killed",
                fmt_secs(*after)
            ),
            Self::Io { what, source } => write!(f, "cannot {what}: {source}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotFound { source, .. } | Self::Io { source, .. } => Some(source),
            Self::TimedOut { .. } => None,
        }
    }
}

fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// An unlinked temporary file for a child's output stream.
fn scratch_file() -> io::Result<File> {
    let path = scratch_path("output");
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

fn read_back(mut file: File) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut out)?;
    Ok(out)
}

/// A program started by [`spawn`]: its process (the launcher's, where there is one, which
/// ends as the program does and passes termination signals on to it; see the module
/// documentation), and the file where its peak resident set will be.
#[derive(Debug)]
pub struct Launched {
    child: Child,
    report: Option<PathBuf>,
}

impl std::ops::Deref for Launched {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Launched {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if let Some(report) = &self.report {
            let _ = std::fs::remove_file(report);
        }
    }
}

/// Starts a prepared program with its standard output and error going to `stdout` and
/// `stderr`, standard input from `/dev/null` or a pipe (fed by a thread).
///
/// # Errors
///
/// [`RunError::NotFound`] if the program cannot be started.
pub fn spawn(prepared: Prepared, stdout: Stdio, stderr: Stdio) -> Result<Launched, RunError> {
    let Prepared {
        mut command,
        report,
        stdin,
        program,
    } = prepared;
    command.stdout(stdout).stderr(stderr);
    command.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = command.spawn().map_err(|source| RunError::NotFound {
        program: program.to_string_lossy().into_owned(),
        source,
    })?;
    register_group(child.id() as libc::pid_t);
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        std::thread::spawn(move || {
            use std::io::Write as _;
            // A program that exits without reading everything closes the pipe. The write
            // then fails with EPIPE, which is fine; the SIGPIPE that comes with it would end
            // the whole process where its disposition is the default (the `alloclab` binary
            // sets it so), so this thread blocks it: a blocked signal a write raises stays
            // pending on this thread and is dropped when it ends.
            // SAFETY: `set` is a valid, initialised signal set, and changing this thread's
            // own mask has no effect on any other thread.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPIPE);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            let _ = pipe.write_all(&input);
        });
    }
    Ok(Launched { child, report })
}

/// The process groups of the programs running now (0: a free slot), for
/// [`kill_programs_on_interrupt`]'s handler, which may only read atomics.
static RUNNING_GROUPS: [AtomicI32; 8] = [const { AtomicI32::new(0) }; 8];

/// Records a running program's process group (its pid: each starts a group of its own).
fn register_group(pgid: libc::pid_t) {
    for slot in &RUNNING_GROUPS {
        if slot
            .compare_exchange(0, pgid, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
    // More than eight programs at once: the rest are not killed on an interrupt, which is
    // all that is lost.
}

/// Forgets a program's process group once it has been reaped.
pub fn unregister_group(pgid: libc::pid_t) {
    for slot in &RUNNING_GROUPS {
        let _ = slot.compare_exchange(pgid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

extern "C" fn kill_groups_and_reraise(signal: libc::c_int) {
    for slot in &RUNNING_GROUPS {
        let pgid = slot.load(Ordering::Acquire);
        if pgid > 0 {
            // SAFETY: kill is async-signal-safe; the group is one we created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    // SAFETY: signal and raise are async-signal-safe; with the default disposition back,
    // the process ends by the signal it got, as it would have without this handler.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP kill every program this process is running (and what
/// they started) before the process itself ends by the signal. Each program runs in a
/// process group of its own, so a Ctrl-C at the terminal reaches only the harness: without
/// this, an interrupted harness would leave its program running.
pub fn kill_programs_on_interrupt() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only reads atomics and calls async-signal-safe functions;
        // `action` is fully initialised before it is installed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int) = kill_groups_and_reraise;
            action.sa_sigaction = handler as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// What `wait4` returned for a child.
#[derive(Clone, Copy, Debug)]
pub struct Reaped {
    /// Its exit status.
    pub status: ExitStatus,
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub sys: Duration,
    /// `ru_maxrss`, in bytes.
    pub peak_rss_bytes: u64,
    /// When `wait4` returned.
    pub at: Instant,
}

/// Waits for `child` with `wait4` (which reaps it: do not call `Child::wait` afterwards),
/// killing its process group if it runs past `timeout` after `started`. The peak resident
/// set is the launcher's report where there is one.
///
/// Returns `Ok(None)` on a timeout (the child was killed and reaped).
///
/// # Errors
///
/// If `wait4` fails.
pub fn wait_measured(
    child: &Launched,
    started: Instant,
    timeout: Duration,
) -> Result<Option<Reaped>, RunError> {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    // The blocking wait4 runs on a thread of its own, so that its return is timed to the
    // scheduler's resolution rather than to a polling interval.
    let waiter = std::thread::spawn(move || {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `pid` is our unreaped child; `status` and `usage` are valid for writes.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            if r == pid {
                let at = Instant::now();
                let _ = tx.send(Ok(Reaped {
                    status: ExitStatus::from_raw(status),
                    user: timeval(usage.ru_utime),
                    sys: timeval(usage.ru_stime),
                    // Linux reports ru_maxrss in KiB.
                    peak_rss_bytes: (usage.ru_maxrss.max(0) as u64) * 1024,
                    at,
                }));
                return;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                let _ = tx.send(Err(e));
                return;
            }
        }
    });
    let left = timeout.saturating_sub(started.elapsed());
    let got = match rx.recv_timeout(left) {
        Ok(got) => Some(got),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            // SAFETY: killing a process group we created; the child is not reaped yet (the
            // waiter has not returned), so its pid, which is the group's id, is still ours.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = rx.recv();
            None
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(RunError::Io {
                what: "wait for the program",
                source: io::Error::other("the waiting thread ended without an answer"),
            });
        }
    };
    let _ = waiter.join();
    unregister_group(pid);
    match got {
        Some(Ok(mut reaped)) => {
            // The launcher writes its report before it ends; one that ended otherwise (it
            // could not start the program, say) leaves wait4's figure.
            if let Some(kib) = child
                .report
                .as_ref()
                .and_then(|r| std::fs::read_to_string(r).ok())
                .and_then(|r| r.trim().parse::<u64>().ok())
            {
                reaped.peak_rss_bytes = kib * 1024;
            }
            Ok(Some(reaped))
        }
        Some(Err(source)) => Err(RunError::Io {
            what: "wait for the program",
            source,
        }),
        None => Ok(None),
    }
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
}

/// Runs `spec` to completion and measures it. A non-zero exit is not an error: it is in
/// [`Exit::status`], for the caller to judge.
///
/// # Errors
///
/// [`RunError::NotFound`] if the program cannot be started, [`RunError::TimedOut`] if it
/// ran past `spec.timeout`, [`RunError::Io`] if no temporary file could be made.
pub fn run(spec: &Spec) -> Result<Exit, RunError> {
    let io = |what| move |source| RunError::Io { what, source };
    let out = scratch_file().map_err(io("create a temporary file"))?;
    let err = scratch_file().map_err(io("create a temporary file"))?;
    let prepared = spec.prepare();
    let started = Instant::now();
    let child = spawn(
        prepared,
        Stdio::from(out.try_clone().map_err(io("duplicate a file"))?),
        Stdio::from(err.try_clone().map_err(io("duplicate a file"))?),
    )?;
    let reaped = wait_measured(&child, started, spec.timeout)?;
    // `child` was reaped by wait4: dropping it neither waits nor kills.
    drop(child);
    let Some(reaped) = reaped else {
        return Err(RunError::TimedOut {
            command: spec.command_line(),
            after: spec.timeout,
        });
    };
    Ok(Exit {
        status: reaped.status,
        wall: reaped.at - started,
        user: reaped.user,
        sys: reaped.sys,
        peak_rss_bytes: reaped.peak_rss_bytes,
        stdout: read_back(out).map_err(io("read the program's output"))?,
        stderr: read_back(err).map_err(io("read the program's output"))?,
    })
}

/// Where `program` is: itself if it names a path, else the first executable of that name in
/// `PATH`.
pub fn find_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| executable(p))
    })
}

/// A 64-bit FNV-1a hash of `bytes`, cut to 52 bits so that it survives a trip through an
/// `f64` (results carry every figure as one): equal outputs, equal digests.
pub fn digest(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Fold the high bits in before cutting, so that no input byte's effect is lost.
    (h ^ (h >> 52)) & ((1 << 52) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_program_and_keeps_its_output() {
        let exit = run(&Spec::new("sh", ["-c", "echo out; echo err >&2; exit 3"])).unwrap();
        assert_eq!(exit.status.code(), Some(3));
        assert_eq!(exit.stdout, b"out\n");
        assert_eq!(exit.last_stderr_line().as_deref(), Some("err"));
        assert_eq!(exit.status_text(), "exit 3");
        assert!(exit.wall > Duration::ZERO);
    }

    #[test]
    fn peak_rss_follows_what_the_program_touched() {
        // 64 MiB touched in the child: its ru_maxrss must be at least that.
        let spec = Spec::new(
            "python3",
            [
                "-c",
                "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1",
            ],
        );
        if find_program("python3").is_none() {
            println!("skipped: python3 not found");
            return;
        }
        let exit = run(&spec).unwrap();
        assert!(exit.status.success());
        assert!(exit.peak_rss_bytes >= 64 << 20, "{}", exit.peak_rss_bytes);
    }

    /// The launcher, or why a test that needs it cannot run.
    fn launcher_or_skip() -> bool {
        let found = launcher().is_some();
        if !found {
            println!("skipped: no launcher (no C compiler `cc` in PATH)");
        }
        found
    }

    #[test]
    fn a_small_programs_peak_rss_is_its_own_not_the_harnesss() {
        if !launcher_or_skip() {
            return;
        }
        // The harness holding 128 MiB when it starts a program of about a megabyte.
        let mut held = vec![0u8; 128 << 20];
        for i in (0..held.len()).step_by(4096) {
            held[i] = 1;
        }
        std::hint::black_box(&held);
        let exit = run(&Spec::new("true", [""; 0])).unwrap();
        assert!(exit.status.success());
        assert!(
            exit.peak_rss_bytes < 16 << 20,
            "`true` peaked at {} bytes",
            exit.peak_rss_bytes
        );
        drop(held);
    }

    #[test]
    fn exit_codes_and_signals_come_back_through_the_launcher() {
        if !launcher_or_skip() {
            return;
        }
        let exit = run(&Spec::new("sh", ["-c", "exit 3"])).unwrap();
        assert_eq!(exit.status.code(), Some(3));
        let exit = run(&Spec::new("sh", ["-c", "kill -TERM $$"])).unwrap();
        assert_eq!(
            exit.status.signal(),
            Some(libc::SIGTERM),
            "{}",
            exit.status_text()
        );
    }

    /// Starting a prepared program compiles nothing: the launcher is built by `prepare`,
    /// which runs before a run's clock starts (`run`, redis's server), so that a program's
    /// wall time is the program's (it read 60-70 ms more on a 2-core VM, every run of the
    /// `programs` suite being the first of a fresh worker).
    #[test]
    fn preparing_a_program_builds_the_launcher_it_starts_through() {
        if !launcher_or_skip() {
            return;
        }
        let prepared = Spec::new("true", Vec::<&str>::new()).prepare();
        assert_eq!(
            prepared.command.get_program(),
            launcher().expect("built").as_os_str()
        );
        assert!(prepared.report.is_some());
        let exit = run(&Spec::new("true", Vec::<&str>::new())).unwrap();
        assert!(exit.status.success());
    }

    /// A process finds the launcher an earlier one built, in a directory only this user
    /// can write, and does not compile it again.
    #[test]
    fn the_launcher_is_built_once_and_found_by_later_processes() {
        use std::os::unix::fs::MetadataExt as _;
        if !launcher_or_skip() {
            return;
        }
        // What a later process's first call does (`launcher` keeps this process's answer).
        let first = build_launcher().expect("built");
        let built = std::fs::metadata(&first).unwrap().modified().unwrap();
        let again = build_launcher().expect("found");
        assert_eq!(first, again);
        assert_eq!(
            std::fs::metadata(&again).unwrap().modified().unwrap(),
            built
        );
        let dir = std::fs::metadata(first.parent().unwrap()).unwrap();
        assert_eq!(
            dir.mode() & 0o077,
            0,
            "the launcher's directory is this user's alone"
        );
    }

    /// A directory of the launcher's name that others may write is not used: a private
    /// one is made instead.
    #[test]
    fn a_directory_others_may_write_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = scratch_path("open-dir");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!make_private_dir(&dir));
        std::fs::remove_dir(&dir).unwrap();
        assert!(make_private_dir(&dir));
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_termination_signal_to_the_launcher_reaches_the_program() {
        if !launcher_or_skip() {
            return;
        }
        let started = Instant::now();
        let child = spawn(
            Spec::new("sleep", ["30"]).prepare(),
            Stdio::null(),
            Stdio::null(),
        )
        .unwrap();
        // Let the launcher start the program, so that the signal is passed on rather than
        // ending a launcher with no child yet (which would end the same way).
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: our child, not reaped yet.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let reaped = wait_measured(&child, started, Duration::from_secs(20))
            .unwrap()
            .expect("ended by the signal, not by the limit");
        // `sleep` ended by SIGTERM, not by finishing its 30 s (which would be exit 0).
        assert_eq!(reaped.status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_hung_program_and_its_children_are_killed_at_the_timeout() {
        let mut spec = Spec::new("sh", ["-c", "sleep 30 & sleep 30"]);
        spec.timeout = Duration::from_millis(200);
        let started = Instant::now();
        let err = run(&spec).unwrap_err();
        assert!(matches!(err, RunError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            err.to_string().contains("did not finish within 0.2 s"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_program_is_named() {
        let err = run(&Spec::new("alloclab-no-such-program", [""; 0])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "command 'alloclab-no-such-program' not found"
        );
    }

    #[test]
    fn the_preload_is_set_only_when_asked() {
        let mut spec = Spec::new("sh", ["-c", "printf %s \"$LD_PRELOAD\""]);
        let exit = run(&spec).unwrap();
        assert_eq!(exit.stdout, b"");
        spec.preload = Some(PathBuf::from("/nonexistent/lib.so"));
        let exit = run(&spec).unwrap();
        assert_eq!(exit.stdout, b"/nonexistent/lib.so");
    }

    #[test]
    fn standard_input_is_fed() {
        let mut spec = Spec::new("wc", ["-c"]);
        spec.stdin = Some(vec![b'x'; 100_000]);
        let exit = run(&spec).unwrap();
        assert_eq!(String::from_utf8_lossy(&exit.stdout).trim(), "100000");
    }

    #[test]
    fn digests_fit_an_f64_and_tell_outputs_apart() {
        let a = digest(b"hello\n");
        let b = digest(b"hellp\n");
        assert_ne!(a, b);
        assert_eq!(a, digest(b"hello\n"));
        assert!(a < 1 << 52 && b < 1 << 52);
        assert_eq!((a as f64) as u64, a);
    }

    #[test]
    fn programs_are_found_in_path_or_by_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("alloclab-no-such-program").is_none());
        assert!(find_program("/nonexistent/sh").is_none());
    }
}
