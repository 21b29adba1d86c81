//! The scheduling policy of the `realtime` suite's threads: the default time-sharing policy,
//! or `SCHED_FIFO` (see the `latency` workload's documentation for what each measures).

use core::time::Duration;

/// The scheduling policy the suite's worker processes run their threads under; see the
/// module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sched {
    /// `SCHED_FIFO` at priority 1, where the process may use it; else the default policy.
    #[default]
    Fifo,
    /// The default time-sharing policy (`SCHED_OTHER`).
    Other,
}

impl Sched {
    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Other => "other",
        }
    }

    /// Puts the calling thread (and the threads it spawns from now on, which inherit its
    /// policy) under this policy. `Other` changes nothing.
    ///
    /// # Errors
    ///
    /// The OS error if the process may not use `SCHED_FIFO` (`EPERM` without
    /// `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at least 1); the thread's policy is then
    /// unchanged.
    pub fn enter(self) -> std::io::Result<()> {
        if self == Self::Other {
            return Ok(());
        }
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: `param` is a valid `sched_param`; pid 0 is the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Whether the calling thread runs under `SCHED_FIFO`.
    pub fn current_is_fifo() -> bool {
        // SAFETY: no preconditions; pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_FIFO }
    }

    /// How long to wait after a `SCHED_FIFO` run that took `run` (wall time) before the next
    /// one, so that it does not start with the kernel's real-time budget already spent: the
    /// budget is `sched_rt_runtime_us` of every `sched_rt_period_us`, a core's real-time use
    /// beyond it is paid back one budget a period, and a run used at most `run` of each core.
    /// So `period × (1 + ⌊run / runtime⌋)`; nothing where real-time threads are not limited
    /// (`sched_rt_runtime_us` of -1). Where the files cannot be read, Linux's defaults
    /// (0.95 s of every 1 s).
    pub fn rt_pause(run: Duration) -> Duration {
        let read = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        let period = read("sched_rt_period_us").unwrap_or(1_000_000);
        let runtime = read("sched_rt_runtime_us").unwrap_or(950_000);
        rt_pause_for(run, period, runtime)
    }
}

/// [`Sched::rt_pause`] for a period and a budget in µs (a budget below 0: unlimited).
fn rt_pause_for(run: Duration, period_us: i64, runtime_us: i64) -> Duration {
    if runtime_us < 0 || period_us <= 0 {
        return Duration::ZERO;
    }
    let periods = 1 + run.as_micros() / u128::try_from(runtime_us.max(1)).unwrap_or(1);
    let pause_us = u128::try_from(period_us).unwrap_or(0) * periods;
    Duration::from_micros(u64::try_from(pause_us).unwrap_or(u64::MAX))
}

impl core::fmt::Display for Sched {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::str::FromStr for Sched {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(Self::Fifo),
            "other" => Ok(Self::Other),
            _ => Err(format!(
                "unknown scheduling policy '{s}': expected fifo or other"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_policies_parse_and_other_changes_nothing() {
        for sched in [Sched::Fifo, Sched::Other] {
            assert_eq!(sched.as_str().parse::<Sched>(), Ok(sched));
        }
        let err = "rr".parse::<Sched>().unwrap_err();
        assert!(err.contains("fifo or other"), "{err}");
        std::thread::spawn(|| {
            Sched::Other.enter().unwrap();
            assert!(!Sched::current_is_fifo());
        })
        .join()
        .unwrap();
        // A run within the budget waits one period; a longer one, a period more for each
        // budget it used; none where real-time threads are not limited.
        let ms = Duration::from_millis;
        assert_eq!(rt_pause_for(ms(700), 1_000_000, 950_000), ms(1000));
        assert_eq!(rt_pause_for(ms(2000), 1_000_000, 950_000), ms(3000));
        assert_eq!(rt_pause_for(ms(2000), 1_000_000, -1), Duration::ZERO);
        assert!(Sched::rt_pause(ms(1)) <= Sched::rt_pause(ms(5000)));
    }
}
