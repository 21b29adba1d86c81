//! Bugs a mutation campaign injects (`cargo xtask mutants alloclab-pmem --patterns`), to
//! measure which tests, crash tests included, catch them. Each is compiled in only with
//! `--cfg alloclab_bug="NAME"`, which no build of the heap sets: without it every item here
//! is the correct value, and the code that uses it is the heap as it ships. The uses add no
//! operator for cargo-mutants to mutate, and `cargo xtask mutants` leaves this file out.

/// Whether `allocate_into` makes the pointer it published durable (not with
/// `publish-not-persisted`).
pub(crate) const PERSIST_PUBLISH: bool = !cfg!(alloclab_bug = "publish-not-persisted");
