//! What machine, and what tree, a result was measured on.

use std::process::Command;
use std::time::Duration;

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

/// How long a cache line takes to go from one core to another and back, in ns: the median
/// over 5 batches of 2,000 round trips of a ping-pong between two threads of its own, pinned
/// to the first two CPUs this process may run on and run under the default time-sharing
/// policy whatever the caller's (the calling thread's CPU set and policy are not touched).
/// `None` where the process may run on fewer than two CPUs or cannot pin threads, and where
/// the ping-pong takes more than [`ROUND_TRIP_BUDGET`] (about 5 ms on an idle machine):
/// other threads were holding those CPUs, and a round trip timed then is a scheduler's time
/// slice. The budget holds inside a trip too: a return that never comes (the other CPU held
/// by a real-time thread) ends the measurement at the budget.
///
/// On a VM the figure depends on where the host runs the vCPUs, and moves with it: on the
/// 2-core AMD EPYC VM here it read 80–135 ns most of the time and 400–480 ns for stretches
/// of minutes, and every figure that waits for a line the other core wrote (a remote free,
/// a heap taking back its remote frees) moved with it.
pub fn line_round_trip_ns() -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        ping_pong::round_trip_ns(5, 2_000, ROUND_TRIP_BUDGET)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The longest [`line_round_trip_ns`] spends before it gives up.
pub const ROUND_TRIP_BUDGET: Duration = Duration::from_millis(250);

#[cfg(target_os = "linux")]
mod ping_pong {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// The value of the shared line that ends the ping-pong early: either side writes it
    /// when it gives up, the serving side past its budget, the helper where it cannot pin.
    const GIVEN_UP: u64 = u64::MAX;

    /// Spins between two looks at the clock while a return is awaited.
    const SPINS_PER_CLOCK_READ: u32 = 1 << 10;

    /// This thread's CPU set, if the OS tells.
    pub(super) fn affinity() -> Option<libc::cpu_set_t> {
        // SAFETY: a zeroed `cpu_set_t` is an empty set; the call writes at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            (libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
                .then_some(set)
        }
    }

    /// Pins this thread to CPU `cpu` alone; whether the OS allowed it.
    pub(super) fn pin(cpu: usize) -> bool {
        // SAFETY: a zeroed `cpu_set_t` is an empty set; `cpu` is below `CPU_SETSIZE`, and
        // the set passed is of the size passed.
        unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// Puts this thread under the default time-sharing policy (and the threads it spawns,
    /// which inherit it); lowering a policy needs no privilege. Two `SCHED_FIFO` ping-pongs
    /// at once deadlock: each one's serving side spins on one CPU and its helper on the
    /// other, and each waits for a thread that the other's spinner keeps off its CPU
    /// (real-time threads of one priority do not yield to each other). Time-shared threads
    /// take turns, and do not starve the machine's other threads while they measure.
    fn time_shared() {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid `sched_param`; pid 0 is the calling thread. A failure
        // leaves the policy as it was, which the budget still bounds.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    }

    /// The median over `batches` batches of `trips` round trips, in ns; `None` as
    /// [`line_round_trip_ns`](super::line_round_trip_ns) says, or past `budget`.
    pub(super) fn round_trip_ns(batches: usize, trips: u64, budget: Duration) -> Option<f64> {
        let mine = affinity()?;
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below `CPU_SETSIZE`.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &mine) })
            .take(2)
            .collect();
        let &[here, there] = cpus.as_slice() else {
            return None;
        };
        if batches == 0 {
            return None;
        }
        let server = std::thread::Builder::new()
            .spawn(move || serve(here, there, batches, trips, budget))
            .ok()?;
        let mut per_batch = server.join().ok()?;
        if per_batch.len() < batches {
            return None;
        }
        per_batch.sort_by(f64::total_cmp);
        Some(per_batch[batches / 2])
    }

    /// The serving side, on a thread of its own pinned to `here`, with a helper pinned to
    /// `there`: the ns per trip of each batch it completed within `budget`.
    fn serve(here: usize, there: usize, batches: usize, trips: u64, budget: Duration) -> Vec<f64> {
        time_shared();
        // The line both threads write, alone on its cache line: odd values are serves,
        // even ones returns; each side moves it on from the value it awaited with a
        // compare-and-swap, so a give-up is never written over.
        #[repr(align(128))]
        struct Line(AtomicU64);
        let line = Arc::new(Line(AtomicU64::new(0)));
        let total = batches as u64 * trips;
        let began = Instant::now();
        // Not joined: a helper that a real-time thread keeps off its CPU answers when it
        // runs again, sees the give-up and ends; the figure does not wait for it. All
        // batches done means it pinned and answered every serve.
        let helper_line = Arc::clone(&line);
        if std::thread::Builder::new()
            .spawn(move || help(&helper_line.0, there, total))
            .is_err()
        {
            return Vec::new();
        }
        let mut per_batch = Vec::with_capacity(batches);
        if pin(here) {
            'batches: for batch in 0..batches as u64 {
                let start = Instant::now();
                for i in batch * trips..(batch + 1) * trips {
                    line.0.store(2 * i + 1, Ordering::Release);
                    let mut spins = 0u32;
                    loop {
                        match line.0.load(Ordering::Acquire) {
                            v if v == 2 * i + 2 => break,
                            GIVEN_UP => break 'batches,
                            _ => core::hint::spin_loop(),
                        }
                        spins = spins.wrapping_add(1);
                        if spins.is_multiple_of(SPINS_PER_CLOCK_READ)
                            && began.elapsed() > budget
                            && line
                                .0
                                .compare_exchange(
                                    2 * i + 1,
                                    GIVEN_UP,
                                    Ordering::AcqRel,
                                    Ordering::Acquire,
                                )
                                .is_ok()
                        {
                            // The serve withdrawn before the helper answered it.
                            break 'batches;
                        }
                    }
                    if i % 64 == 63 && began.elapsed() > budget {
                        break 'batches;
                    }
                }
                per_batch.push(start.elapsed().as_nanos() as f64 / trips as f64);
            }
        }
        if per_batch.len() < batches {
            // Release a helper still waiting for a serve (a repeated give-up is harmless:
            // the helper writes only over the serve it awaits).
            line.0.store(GIVEN_UP, Ordering::Release);
        }
        per_batch
    }

    /// The returning side, pinned to `there`: answers serves `1, 3, 5, …` with `2, 4, 6, …`
    /// until `total` are answered or the line says [`GIVEN_UP`].
    fn help(line: &AtomicU64, there: usize, total: u64) {
        if !pin(there) {
            line.store(GIVEN_UP, Ordering::Release);
            return;
        }
        for i in 0..total {
            loop {
                match line.load(Ordering::Acquire) {
                    v if v == 2 * i + 1 => break,
                    GIVEN_UP => return,
                    _ => core::hint::spin_loop(),
                }
            }
            if line
                .compare_exchange(2 * i + 1, 2 * i + 2, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // The serving side gave up while this serve was awaited.
                return;
            }
        }
    }
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

    #[test]
    fn a_line_round_trip_is_measured_where_two_cpus_are_allowed_and_the_cpu_set_is_kept() {
        // The calling thread's CPU set, as Linux lists it.
        let cpus_allowed = || {
            std::fs::read_to_string("/proc/thread-self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("Cpus_allowed_list:"))
                        .map(str::to_owned)
                })
        };
        let before = cpus_allowed();
        // CPUs this thread may run on (not `logical_cores`, which a CPU quota lowers).
        #[cfg(target_os = "linux")]
        // SAFETY: a zeroed `cpu_set_t` is an empty set; the call writes at most its size.
        let allowed = unsafe {
            let mut set: libc::cpu_set_t = core::mem::zeroed();
            libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set);
            libc::CPU_COUNT(&set)
        };
        #[cfg(not(target_os = "linux"))]
        let allowed = 0;
        #[cfg(target_os = "linux")]
        {
            // Few trips and a budget no busy test machine reaches: a figure is measured
            // wherever two CPUs are allowed.
            let trip = ping_pong::round_trip_ns(3, 200, Duration::from_secs(30));
            if allowed >= 2 {
                let ns = trip.expect("two CPUs allowed: a round trip is measured");
                assert!(ns.is_finite() && ns > 0.0, "round trip {ns} ns");
            } else {
                assert_eq!(trip, None);
            }
            // Out of budget at once: it gives up, and releases its helper (or this hangs).
            assert_eq!(ping_pong::round_trip_ns(3, 200, Duration::ZERO), None);
        }
        if allowed < 2 {
            assert_eq!(line_round_trip_ns(), None);
        }
        let after = cpus_allowed();
        assert_eq!(before, after, "the calling thread's CPU set is kept");
    }

    /// The failure this guards against: worker processes under `SCHED_FIFO` timing the
    /// round trip side by side hung, each one's spinning thread holding the CPU the
    /// other's helper waited on. Two real-time callers at once: both figures come back.
    #[cfg(target_os = "linux")]
    #[test]
    fn two_real_time_callers_at_once_both_get_the_round_trip_back() {
        use crate::workloads::realtime::Sched;
        let (done, results) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let done = done.clone();
            // Not scoped: a caller that hangs must not hang the test.
            std::thread::spawn(move || {
                let trip = Sched::Fifo
                    .enter()
                    .ok()
                    .map(|()| ping_pong::round_trip_ns(5, 2_000, ROUND_TRIP_BUDGET));
                let _ = done.send(trip);
            });
        }
        for _ in 0..2 {
            match results.recv_timeout(Duration::from_secs(20)) {
                Ok(None) => {
                    crate::testing::skipped(
                        "two_real_time_callers_at_once_both_get_the_round_trip_back",
                        "SCHED_FIFO is not permitted here",
                    );
                    return;
                }
                Ok(Some(trip)) => {
                    if let Some(ns) = trip {
                        assert!(ns.is_finite() && ns > 0.0, "round trip {ns} ns");
                    }
                }
                Err(_) => panic!("a real-time caller's round trip never came back"),
            }
        }
    }
}
