//! What the non-DNN trace workloads ([`crate::uav`], [`crate::switch`]) share: their error
//! type, a seeded generator, and a check that a run is balanced.

use core::fmt;
use std::collections::HashMap;

use alloclab_training::trace::RunTrace;

/// A bad parameter of a workload, named with what it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadError {
    /// The parameter (`tile_m`, `ports`, ...).
    pub name: &'static str,
    /// The value given, as text.
    pub value: String,
    /// What is accepted.
    pub expected: &'static str,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad workload parameter {} = {}: expected {}",
            self.name, self.value, self.expected
        )
    }
}

impl std::error::Error for WorkloadError {}

/// The most allocator calls a generated run may hold (2^26, 1.5 GiB of 24-byte events): a run that
/// would pass it is refused with a [`WorkloadError`] naming `name` instead of exhausting memory.
pub const MAX_EVENTS: usize = 1 << 26;

/// The error for a run that passed [`MAX_EVENTS`].
pub(crate) fn too_long(name: &'static str, value: u32) -> WorkloadError {
    WorkloadError {
        name,
        value: value.to_string(),
        expected: "a run of at most 2^26 allocator calls (fewer steps or ticks, or a smaller configuration)",
    }
}

/// `Ok(())` if `ok`, else the error naming `name`, `value` and `expected`.
pub(crate) fn check(
    ok: bool,
    name: &'static str,
    value: impl fmt::Debug,
    expected: &'static str,
) -> Result<(), WorkloadError> {
    if ok {
        Ok(())
    } else {
        Err(WorkloadError {
            name,
            value: format!("{value:?}"),
            expected,
        })
    }
}

/// The workspace's SplitMix64 (`alloclab_core::rng`): small, seedable, the same stream on
/// every platform.
pub(crate) type Rng = alloclab_core::rng::SplitMix64;

/// How a run's blocks were used: the check every workload's tests make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Balance {
    /// Blocks allocated.
    pub allocations: u64,
    /// The most bytes live at once.
    pub peak_live_bytes: u64,
}

/// Checks that every block of `run` is allocated once, then freed once with the same size,
/// and that nothing is live at the end.
///
/// # Errors
///
/// A description of the first violation.
pub fn check_balanced(run: &RunTrace) -> Result<Balance, String> {
    // id -> Some(size) while live, None once freed.
    let mut state: HashMap<u64, Option<u64>> = HashMap::new();
    let mut bytes = 0u64;
    let mut peak = 0u64;
    let mut allocations = 0;
    for (i, e) in run.events.iter().enumerate() {
        if e.alloc {
            if state.insert(e.id, Some(e.size_bytes)).is_some() {
                return Err(format!("event {i}: block {} allocated twice", e.id));
            }
            allocations += 1;
            bytes += e.size_bytes;
            peak = peak.max(bytes);
        } else {
            match state.get_mut(&e.id) {
                Some(s @ Some(_)) if *s == Some(e.size_bytes) => *s = None,
                Some(Some(size)) => {
                    return Err(format!(
                        "event {i}: block {} allocated with {size} B, freed with {} B",
                        e.id, e.size_bytes
                    ));
                }
                Some(None) => return Err(format!("event {i}: block {} freed twice", e.id)),
                None => return Err(format!("event {i}: block {} freed, never allocated", e.id)),
            }
            bytes -= e.size_bytes;
        }
    }
    if let Some((id, _)) = state.iter().find(|(_, s)| s.is_some()) {
        return Err(format!("block {id} is never freed"));
    }
    Ok(Balance {
        allocations,
        peak_live_bytes: peak,
    })
}
