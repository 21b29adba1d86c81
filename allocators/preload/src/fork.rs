//! Fork safety: hooks a heap with locks runs around `fork`, registered once with
//! `pthread_atfork`.
//!
//! After `fork` the child has one thread, a copy of the one that forked. A lock some other
//! thread held at that moment is held forever in the child, and the next `malloc` there
//! deadlocks. The classic cure (glibc's own malloc does it) is to take every heap lock
//! before the fork and release them on both sides after it: [`ForkHooks`].
//!
//! [`AtFork`] registers the hooks with `pthread_atfork` on the first allocation rather than
//! in a constructor, so that it happens on the first thread that uses the heap, after libc
//! is up, and early: `fork` runs `prepare` handlers in reverse order of registration and
//! child handlers in order, so a heap registered first locks last (after other libraries'
//! `prepare` handlers, which may still allocate) and is unlocked first in the child (before
//! their child handlers, which may allocate too).
//!
//! A wait-free or lock-free heap needs no hooks; see the crate documentation for what it
//! must still guarantee.
//!
//! The registration's atomics come from the workspace's sync shim, so that its loom model
//! (two threads registering at once, one of them re-entering from inside the registration,
//! as `pthread_atfork` may through `malloc`) checks the code that ships.

use alloclab_core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

pub use alloclab_core::ForkHooks;

const UNREGISTERED: u8 = 0;
const REGISTERING: u8 = 1;
const REGISTERED: u8 = 2;

/// A once-only `pthread_atfork` registration that is safe to attempt from inside `malloc`.
///
/// `std::sync::Once` would not do: `pthread_atfork` may itself call `malloc` (glibc keeps
/// the first 48 handlers in a static array, then allocates), and a `Once` entered again
/// from its own initialiser deadlocks or panics. Here a nested call from the registering
/// thread goes straight on; other threads wait for the registration (a few hundred
/// nanoseconds, once), so no thread can fork between "heap in use" and "hooks registered"
/// except the registering one, which is inside `pthread_atfork`.
#[derive(Debug)]
pub struct AtFork {
    state: AtomicU8,
    /// `pthread_self()` of the thread registering, while `state == REGISTERING`.
    registering_thread: AtomicUsize,
}

impl AtFork {
    /// Not yet registered.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            state: AtomicU8::new(UNREGISTERED),
            registering_thread: AtomicUsize::new(0),
        }
    }

    /// Not yet registered (loom's atomics cannot be built in a `const`).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            state: AtomicU8::new(UNREGISTERED),
            registering_thread: AtomicUsize::new(0),
        }
    }

    /// Registers `prepare`, `parent` and `child` with `pthread_atfork` unless that was done
    /// already; cheap (one load) after the first call. If `pthread_atfork` fails (it can
    /// only fail for lack of memory) the next call tries again.
    #[inline]
    pub fn ensure_registered(
        &self,
        prepare: unsafe extern "C" fn(),
        parent: unsafe extern "C" fn(),
        child: unsafe extern "C" fn(),
    ) {
        if self.state.load(Ordering::Acquire) != REGISTERED {
            self.register_slow(|| {
                // SAFETY: the three are `extern "C"` functions without arguments that live
                // as long as the library (its `__dso_handle` unregisters them if it is
                // unloaded). `pthread_atfork` has no other precondition.
                unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
            });
        }
    }

    /// Whether the hooks are registered.
    pub fn is_registered(&self) -> bool {
        self.state.load(Ordering::Acquire) == REGISTERED
    }

    /// Runs `register` (which says whether it succeeded) unless another call did or is doing
    /// so: a call from the registering thread itself (from inside `register`) returns at
    /// once, a call from another thread waits until the registration is over.
    #[cold]
    fn register_slow(&self, register: impl FnOnce() -> bool) {
        let me = current_thread();
        match self.state.compare_exchange(
            UNREGISTERED,
            REGISTERING,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                self.registering_thread.store(me, Ordering::Relaxed);
                let ok = register();
                self.registering_thread.store(0, Ordering::Relaxed);
                let next = if ok { REGISTERED } else { UNREGISTERED };
                self.state.store(next, Ordering::Release);
            }
            Err(_) => {
                // Registered meanwhile, or being registered: by this thread (a nested call
                // from inside `pthread_atfork`: go on) or by another (wait for it).
                while self.state.load(Ordering::Acquire) == REGISTERING
                    && self.registering_thread.load(Ordering::Relaxed) != me
                {
                    alloclab_core::sync::spin_loop();
                    #[cfg(not(loom))]
                    // SAFETY: `sched_yield` has no preconditions.
                    unsafe {
                        libc::sched_yield()
                    };
                }
            }
        }
    }
}

#[cfg(not(loom))]
impl Default for AtFork {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(loom)]
fn current_thread() -> usize {
    // loom runs its threads on one OS thread: tell them apart by loom's own id.
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    loom::thread::current().id().hash(&mut hasher);
    // Never 0, which means "nobody is registering".
    (hasher.finish() as usize) | 1
}

#[cfg(not(loom))]
fn current_thread() -> usize {
    // SAFETY: `pthread_self` has no preconditions and never fails.
    let id = unsafe { libc::pthread_self() };
    // `pthread_t` is an address-sized integer on Linux; only equality matters here.
    id as usize
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use alloclab_core::sync::{Arc, thread};

    /// Two threads register at once, and the one that registers re-enters from inside the
    /// registration: the registration runs exactly once, the nested call returns without
    /// waiting for itself, and both threads see the hooks registered when they return.
    #[test]
    fn loom_registration_runs_once_and_a_nested_call_goes_on() {
        loom::model(|| {
            let at_fork = Arc::new(AtFork::new());
            let runs = Arc::new(AtomicUsize::new(0));
            let worker = |at_fork: Arc<AtFork>, runs: Arc<AtomicUsize>| {
                move || {
                    let nested = at_fork.clone();
                    at_fork.register_slow(|| {
                        runs.fetch_add(1, Ordering::Relaxed);
                        // As pthread_atfork may, through malloc.
                        nested.register_slow(|| unreachable!("registered twice"));
                        true
                    });
                    assert!(at_fork.is_registered());
                }
            };
            let other = thread::spawn(worker(at_fork.clone(), runs.clone()));
            worker(at_fork.clone(), runs.clone())();
            other.join().unwrap();
            assert_eq!(runs.load(Ordering::Relaxed), 1);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static PREPARED: AtomicU32 = AtomicU32::new(0);
    static IN_PARENT: AtomicU32 = AtomicU32::new(0);

    unsafe extern "C" fn prepare() {
        PREPARED.fetch_add(1, Ordering::SeqCst);
    }
    unsafe extern "C" fn parent() {
        IN_PARENT.fetch_add(1, Ordering::SeqCst);
    }
    unsafe extern "C" fn child() {}

    /// Waits for the child `pid` for at most `limit`, and returns its wait status; a child
    /// still running then (a handler that deadlocked, say) is killed and the test fails,
    /// instead of hanging the test run.
    fn wait_bounded(pid: libc::pid_t, limit: std::time::Duration) -> i32 {
        let start = std::time::Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: `pid` is our child; `status` is writable.
            let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            assert!(
                rc >= 0,
                "waitpid failed: {}",
                std::io::Error::last_os_error()
            );
            if rc == pid {
                return status;
            }
            if start.elapsed() > limit {
                // SAFETY: `pid` is our child, still running; reaping it after the kill.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child did not exit within {limit:?}: a fork handler hangs");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn hooks_are_registered_once_and_run_around_fork() {
        static AT_FORK: AtFork = AtFork::new();
        assert!(!AT_FORK.is_registered());
        AT_FORK.ensure_registered(prepare, parent, child);
        AT_FORK.ensure_registered(prepare, parent, child);
        assert!(AT_FORK.is_registered());

        // SAFETY: the child only calls `_exit`, which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: ends the child at once, without running the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        let status = wait_bounded(pid, std::time::Duration::from_secs(10));
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child did not exit cleanly (wait status {status:#x})"
        );
        // Registered once: each handler ran exactly once for this one fork.
        assert_eq!(PREPARED.load(Ordering::SeqCst), 1);
        assert_eq!(IN_PARENT.load(Ordering::SeqCst), 1);
    }
}
