//! The detection classes a heap runs, and the environment variable that switches them off.
//!
//! Every class is on by default. `ALLOCLAB_RANDOMIZED_OFF` names the ones to switch off,
//! separated by commas: `zero-fill`, `guard-pages`, `zero-size`, `canaries`, `cxx-delete`,
//! or `all`. It is read once,
//! when the heap builds itself at its first allocation; an unknown name is reported on
//! standard error (one line) and ignored.
//!
//! The checks that keep the heap itself sound (the keyed header tags, the link checks
//! before every unlink, double and invalid frees) are not switches: without them a
//! corrupted heap would be trusted.

/// A set of detection classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Checks(u8);

impl Checks {
    /// Freed memory is zero-filled, and every block handed out is checked to read zero
    /// first: a write through a dangling pointer aborts the process when the memory it hit
    /// is handed out again (at the latest), and stale data never leaks into a new block.
    /// `calloc` then needs no memset.
    pub const ZERO_FILL: Checks = Checks(1);
    /// Every block with a mapping of its own (above 1 MiB) ends at, or within 15 bytes of,
    /// an inaccessible page: a linear overflow past it faults at once.
    pub const GUARD_PAGES: Checks = Checks(2);
    /// A zero-size request gets a unique pointer into an inaccessible region, so that
    /// reading or writing through it faults; freeing it works (and a second free of it is
    /// caught).
    pub const ZERO_SIZE: Checks = Checks(4);
    /// The bytes between the end of what a request asked for and the end of its block (the
    /// rounding to 16 bytes, and a slack too small to stand alone) are filled with a keyed
    /// byte and checked when the block is freed or reallocated: a linear overflow of even
    /// one byte past any request aborts then. The usable size is then exactly what was
    /// asked.
    pub const CANARIES: Checks = Checks(8);
    /// C++'s `delete` is checked against its `new`: a `delete` of a block from `new[]` (or
    /// `delete[]` of one from `new`) aborts, and so does a sized delete told a size the
    /// block was not allocated with. (How each block was asked for is recorded whatever
    /// this says: two bits of its header.)
    pub const CXX_DELETE: Checks = Checks(16);
    /// Every class.
    pub const ALL: Checks = Checks(31);
    /// No class.
    pub const NONE: Checks = Checks(0);

    /// The environment variable that switches classes off.
    pub const ENV: &'static str = "ALLOCLAB_RANDOMIZED_OFF";

    /// Each class with its name in [`ENV`](Self::ENV).
    pub const NAMED: [(&'static str, Checks); 5] = [
        ("zero-fill", Self::ZERO_FILL),
        ("guard-pages", Self::GUARD_PAGES),
        ("zero-size", Self::ZERO_SIZE),
        ("canaries", Self::CANARIES),
        ("cxx-delete", Self::CXX_DELETE),
    ];

    /// Whether every class of `other` is in `self`.
    pub const fn contains(self, other: Checks) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` without the classes of `other`.
    pub const fn without(self, other: Checks) -> Checks {
        Checks(self.0 & !other.0)
    }

    /// `self` with the classes of `other`.
    pub const fn with(self, other: Checks) -> Checks {
        Checks(self.0 | other.0)
    }

    pub(crate) const fn bits(self) -> u8 {
        self.0
    }

    pub(crate) const fn from_bits(bits: u8) -> Checks {
        Checks(bits & Self::ALL.0)
    }

    /// Every class except those `off` names (the syntax of [`ENV`](Self::ENV)), and the
    /// names it did not know.
    pub fn parse_off(off: &str) -> (Checks, impl Iterator<Item = &str>) {
        let mut checks = Self::ALL;
        for name in off.split(',').map(str::trim) {
            if name == "all" {
                checks = Self::NONE;
            } else if let Some((_, class)) = Self::NAMED.iter().find(|(n, _)| *n == name) {
                checks = checks.without(*class);
            }
        }
        let unknown = off
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "all" && !Self::NAMED.iter().any(|(k, _)| k == n));
        (checks, unknown)
    }

    /// The classes the environment leaves on. Reads the variable with `getenv`, which does
    /// not allocate, so this runs inside `malloc`.
    pub(crate) fn from_env() -> Checks {
        // SAFETY: `getenv` with a NUL-terminated name; the result, if not null, is a
        // NUL-terminated string that stays valid while the environment is not changed,
        // and it is read at once.
        let value = unsafe { libc::getenv(c"ALLOCLAB_RANDOMIZED_OFF".as_ptr()) };
        if value.is_null() {
            return Self::ALL;
        }
        // SAFETY: as above.
        let bytes = unsafe { core::ffi::CStr::from_ptr(value) }.to_bytes();
        let Ok(text) = core::str::from_utf8(bytes) else {
            crate::os::warn("ALLOCLAB_RANDOMIZED_OFF is not UTF-8; every check stays on");
            return Self::ALL;
        };
        let (checks, unknown) = Self::parse_off(text);
        for name in unknown {
            crate::os::warn_with(
                "ALLOCLAB_RANDOMIZED_OFF names an unknown check (known: zero-fill, guard-pages, zero-size, canaries, cxx-delete, all): ",
                name,
            );
        }
        checks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_switch_their_class_off_and_unknown_names_are_returned() {
        let (checks, unknown) = Checks::parse_off("zero-fill, guard-pages,bogus");
        assert_eq!(
            checks,
            Checks::ZERO_SIZE
                .with(Checks::CANARIES)
                .with(Checks::CXX_DELETE)
        );
        assert_eq!(unknown.collect::<Vec<_>>(), ["bogus"]);
        assert_eq!(Checks::parse_off("all").0, Checks::NONE);
        assert_eq!(Checks::parse_off("").0, Checks::ALL);
        assert!(Checks::ALL.contains(Checks::ZERO_FILL.with(Checks::ZERO_SIZE)));
        assert!(
            !Checks::ALL
                .without(Checks::GUARD_PAGES)
                .contains(Checks::GUARD_PAGES)
        );
    }

    #[test]
    fn adding_a_class_already_on_keeps_it_on() {
        for bits in 0..=Checks::ALL.bits() {
            let checks = Checks(bits);
            assert_eq!(checks.with(checks), checks);
            assert_eq!(Checks::ALL.with(checks), Checks::ALL);
            assert_eq!(checks.with(Checks::NONE), checks);
        }
    }
}
