//! Real programs as allocator workloads.
//!
//! Everything here runs a program that alloclab did not compile into itself: a C program
//! built with the system's `cc`, or an unmodified program from the distribution (python3,
//! sqlite3, redis-server, ...). The allocator under test reaches the program through
//! `LD_PRELOAD`, as it would in production; the C library's malloc is the baseline with
//! nothing preloaded.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod catalog;
pub mod classic;
pub mod gen_c;
pub mod git;
pub mod misuse;
pub mod percall;
pub mod process;
pub mod redis;
pub mod scripts;
