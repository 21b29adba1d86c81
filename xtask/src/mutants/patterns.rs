//! The catalogue of allocator bug patterns: bugs of the kinds real memory managers have had,
//! which generic mutation does not produce (cargo-mutants changes operators and return
//! values, and leaves `unsafe fn` bodies alone: most of the heaps' alloc and free paths).
//! Each is written into the allocator's source behind `cfg(alloclab_bug = "NAME")`, which
//! no build of the allocators sets; `cargo xtask mutants <crate> --patterns` builds the
//! crate with each of its patterns in turn and runs the same oracle as for a mutant.

/// One injectable bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// The crate it is injected into.
    pub krate: &'static str,
    /// Its `alloclab_bug` value.
    pub name: &'static str,
    /// What the injected code does wrong.
    pub what: &'static str,
    /// The kind of real bug it stands for.
    pub kind: &'static str,
}

/// Every pattern, by crate.
pub const CATALOGUE: &[Pattern] = &[
    Pattern {
        krate: "alloclab-wfspan",
        name: "class-boundary-off-by-one",
        what: "a request that fills its size class exactly gets the class below",
        kind: "an off-by-one at a size-class boundary",
    },
    Pattern {
        krate: "alloclab-wfspan",
        name: "remote-free-counted-twice",
        what: "a remote free adds two to its discarded span's count",
        kind: "a remote free counted twice (a span reclaimed while blocks are out)",
    },
    Pattern {
        krate: "alloclab-wfspan",
        name: "span-reclaimed-before-last-remote-free",
        what: "the next-to-last remote free of a discarded span takes itself for the last and reclaims the span",
        kind: "a span reused while a remote free of it is in flight",
    },
    Pattern {
        krate: "alloclab-wfspan",
        name: "remote-push-relaxed",
        what: "the remote-free push swaps the head and writes the link with relaxed orderings",
        kind: "a relaxed ordering where Release / Acquire is needed",
    },
    Pattern {
        krate: "alloclab-randomized",
        name: "canary-not-checked",
        what: "a block's canary is never compared at free or realloc",
        kind: "a canary not checked",
    },
    Pattern {
        krate: "alloclab-randomized",
        name: "tag-not-checked",
        what: "a header's keyed tag is never compared",
        kind: "a header check left out",
    },
    Pattern {
        krate: "alloclab-randomized",
        name: "free-block-pushed-twice",
        what: "a freed region goes onto its free list twice",
        kind: "a block pushed twice onto a free list",
    },
    Pattern {
        krate: "alloclab-randomized",
        name: "header-size-miscounted",
        what: "a block's size counts 8 bytes of header instead of 16",
        kind: "a header size miscounted",
    },
    Pattern {
        krate: "alloclab-pmem",
        name: "publish-not-persisted",
        what: "allocate_into stores the new block's pointer in its destination without flushing it",
        kind: "a missing flush of a publish",
    },
];

/// The patterns of `krate`.
pub fn of(krate: &str) -> Vec<Pattern> {
    CATALOGUE
        .iter()
        .filter(|p| p.krate == krate)
        .copied()
        .collect()
}

/// The patterns of `krate` that `source` (its source files, concatenated) does not inject:
/// a catalogue entry without its code would read as caught by nothing, or worse.
pub fn missing_from(krate: &str, source: &str) -> Vec<&'static str> {
    of(krate)
        .into_iter()
        .filter(|p| !source.contains(&format!("alloclab_bug = \"{}\"", p.name)))
        .map(|p| p.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_allocator_crate_has_patterns() {
        let mut names: Vec<_> = CATALOGUE.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CATALOGUE.len());
        for krate in ["alloclab-wfspan", "alloclab-randomized", "alloclab-pmem"] {
            assert!(!of(krate).is_empty(), "{krate}");
        }
    }

    #[test]
    fn every_catalogued_pattern_is_injected_in_its_crate() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (krate, dir) in [
            ("alloclab-wfspan", "allocators/wfspan/src"),
            ("alloclab-randomized", "allocators/randomized/src"),
            ("alloclab-pmem", "allocators/pmem/src"),
        ] {
            let source = super::super::campaign::crate_source(&root.join(dir));
            assert_eq!(missing_from(krate, &source), Vec::<&str>::new(), "{krate}");
        }
        assert_eq!(
            missing_from("alloclab-pmem", "nothing here"),
            ["publish-not-persisted"]
        );
    }
}
